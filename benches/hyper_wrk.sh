#!/usr/bin/env bash
# hyper's hello-world server on evloop's executor
# (tests/hyper_suite/examples/hyper_server.rs) against the same server on
# tokio's current_thread runtime (hyper_tokio.rs beside it; the hyper
# suite is a crate of its own, built in its own target dir under
# CARGO_TARGET_DIR), on this machine, in one run: both servers
# started once, then ROUNDS interleaved rounds (evloop, tokio, evloop,
# tokio, ...) of one fixed wrk run each, after one warm-up round that is
# not counted. Per round: requests/s (wrk's) and CPU per request (the
# server's utime + stime from /proc/PID/stat, before and after the wrk
# run, over the requests wrk made). Prints every round, then the median
# and the spread (min-max) per server, and the machine's load before and
# after. Fails on any socket error or non-2xx answer.
#
# Usage: benches/hyper_wrk.sh [ROUNDS] [WRK-ARGS...]
#   (default: 7 rounds of wrk -t1 -c50 -d5s; BACKEND=epoll by default for
#   evloop: BACKEND=io_uring to measure another)
# docs/benchmarks.md, "async: hyper on the executor", has the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-7}
shift || true
[ "$#" -gt 0 ] || set -- -t1 -c50 -d5s
backend=${BACKEND:-epoll}
target=${CARGO_TARGET_DIR:-target}/hyper_suite

features=
[ "$backend" = io_uring ] && features=io-uring
CARGO_TARGET_DIR="$target" cargo build -q --release --manifest-path tests/hyper_suite/Cargo.toml \
    --features "$features" --example hyper_server --example hyper_tokio
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install -y wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# start NAME COMMAND...: runs a server on a free port; sets its pid and address.
declare -A pid addr
start() {
    local name=$1
    shift
    : >"$tmp/$name.out"
    "$@" >"$tmp/$name.out" &
    pid[$name]=$!
    pids+=("$!")
    for _ in $(seq 300); do
        grep -q '^http on ' "$tmp/$name.out" && break
        sleep 0.1
    done
    addr[$name]=$(sed -n 's/^http on \([^ ]*\) .*/\1/p' "$tmp/$name.out")
    [ -n "${addr[$name]}" ] || { echo "$name did not listen" >&2; exit 1; }
    echo "$name: $(cat "$tmp/$name.out")"
}
start evloop "$target/release/examples/hyper_server" 0 "$backend"
start tokio "$target/release/examples/hyper_tokio" 0

ticks=$(getconf CLK_TCK)
# cpu_ticks PID: utime + stime (fields 14 and 15; the command name, field
# 2, is in parentheses and has no spaces here).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

echo "machine: $(nproc) cores, $(uname -r), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrk $* http://ADDR/, $rounds rounds (plus a warm-up), evloop on $backend"
echo "round server req/s cpu_us_per_req" >"$tmp/results"
for round in $(seq 0 "$rounds"); do
    for name in evloop tokio; do
        before=$(cpu_ticks "${pid[$name]}")
        wrk "$@" "http://${addr[$name]}/" >"$tmp/wrk"
        after=$(cpu_ticks "${pid[$name]}")
        if grep -q 'Socket errors\|Non-2xx' "$tmp/wrk"; then
            cat "$tmp/wrk"
            echo "$name: wrk saw errors (above)" >&2
            exit 1
        fi
        rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\)/\1/p' "$tmp/wrk")
        requests=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$tmp/wrk")
        cpu_us=$(awk -v t="$((after - before))" -v hz="$ticks" -v n="$requests" \
            'BEGIN { printf "%.3f", t / hz * 1e6 / n }')
        if [ "$round" = 0 ]; then
            echo "warm-up  $name: $rps req/s, $cpu_us us CPU/request"
        else
            echo "round $round  $name: $rps req/s, $cpu_us us CPU/request"
            echo "$round $name $rps $cpu_us" >>"$tmp/results"
        fi
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
print(f"{'server':8} {'req/s median':>13} {'min-max':>17} {'CPU us/req median':>18} {'min-max':>15}")
for name in ("evloop", "tokio"):
    rps = [float(r[2]) for r in rows if r[1] == name]
    cpu = [float(r[3]) for r in rows if r[1] == name]
    print(f"{name:8} {statistics.median(rps):13,.0f} {min(rps):8,.0f}-{max(rps):<8,.0f} "
          f"{statistics.median(cpu):18.2f} {min(cpu):7.2f}-{max(cpu):<7.2f}")
e = statistics.median(float(r[2]) for r in rows if r[1] == "evloop")
t = statistics.median(float(r[2]) for r in rows if r[1] == "tokio")
ec = statistics.median(float(r[3]) for r in rows if r[1] == "evloop")
tc = statistics.median(float(r[3]) for r in rows if r[1] == "tokio")
print(f"evloop/tokio: requests/s x{e / t:.3f}, CPU per request x{ec / tc:.3f}")
PY
