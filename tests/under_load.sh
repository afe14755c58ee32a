#!/usr/bin/env bash
# The suite under doubled load: runs the README's test command (`cargo
# test`, plus any arguments given after the count) N times in a row
# (default 10) while a second copy of the same suite runs alongside, over
# and over, until the N runs are done. Both copies share the checkout and
# its target directory, as two developers' runs on one machine would; the
# second copy starts only once the first has built everything, so that
# both run tests, not cargo's build lock.
#
#   tests/under_load.sh            # 10 runs
#   tests/under_load.sh 3          # 3 runs
#   tests/under_load.sh 10 --features emulated-kqueue
#
# Every log is kept under $UNDER_LOAD_LOGS (default: a new temporary
# directory, printed at the start); a failed run's failures are printed.
# Exits 0 only if every run of both copies passed. The last line says
# "under load: N passed, M failed" (runs of the counted copy), then the
# same for the copy alongside.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-10}
shift || true
logs=${UNDER_LOAD_LOGS:-$(mktemp -d -t evloop-under-load.XXXXXX)}
mkdir -p "$logs"
echo "under load: $runs runs of 'cargo test $*' with a second copy alongside; logs in $logs"

# Built once, before either copy starts.
if ! cargo test --no-run "$@" >"$logs/build.log" 2>&1; then
    tail -30 "$logs/build.log"
    echo "under load: the build failed"
    exit 1
fi

show_failures() {
    grep -E '^(test .* FAILED|failures:|---- |thread .* panicked|error: test failed)' "$1" | head -40
}

# The second copy: runs until the first copy is done, then finishes the
# run it is in (a run cut short proves nothing either way).
rm -f "$logs/stop"
(
    i=0
    while [ ! -e "$logs/stop" ]; do
        i=$((i + 1))
        if cargo test "$@" >"$logs/alongside-$i.log" 2>&1; then
            echo pass >>"$logs/alongside.results"
        else
            echo "fail $i" >>"$logs/alongside.results"
        fi
    done
) &
alongside=$!

passed=0
failed=0
for i in $(seq 1 "$runs"); do
    start=$(date +%s)
    if cargo test "$@" >"$logs/run-$i.log" 2>&1; then
        passed=$((passed + 1))
        echo "run $i: passed in $(($(date +%s) - start)) s (load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?))"
    else
        failed=$((failed + 1))
        echo "run $i: FAILED after $(($(date +%s) - start)) s ($logs/run-$i.log):"
        show_failures "$logs/run-$i.log"
    fi
done

touch "$logs/stop"
wait "$alongside"
a_passed=$(grep -c '^pass' "$logs/alongside.results" 2>/dev/null || true)
a_failed=$(grep -c '^fail' "$logs/alongside.results" 2>/dev/null || true)
for n in $(grep '^fail' "$logs/alongside.results" 2>/dev/null | cut -d' ' -f2); do
    echo "alongside run $n: FAILED ($logs/alongside-$n.log):"
    show_failures "$logs/alongside-$n.log"
done

echo "alongside: ${a_passed:-0} passed, ${a_failed:-0} failed"
echo "under load: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "${a_failed:-0}" = 0 ]
