#!/usr/bin/env bash
# User-space instructions per event of the "bench.c" workload on every
# peer, plain and with timers, counted by callgrind (exact, unlike wall
# time; the kernel's share is not counted). Differential: (instructions
# at W2 - instructions at W1) / (W2 - W1) forwarded writes, so that setup
# and teardown cancel out.
#
#   benches/peers/instr.sh [P] [A]                       default P=1000 A=100
#   ONLY='baseline|evloop' benches/peers/instr.sh 1000 100
#   EXTRA_PEERS="mylib epoll|rust/target/release/bench_mylib -b epoll" benches/peers/instr.sh
#
# Installs the missing Debian packages (libev-dev libevent-dev libuv1-dev
# valgrind) as root, builds the peers as run.sh does, prints the CSV
# impl,backend,P,A,timers,instr_per_event and writes it to
# PEERS_RESULTS/<date>.instr.csv (default target/peers-results).
# Knobs: W1, W2 (20000, 60000), SELECT_MAX_P (500: select backends only
# up to that P), ONLY, EXTRA_PEERS, PEERS_RESULTS. Exits 3 if a count
# failed ("failed" in its row).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=benches/peers/common.sh
. benches/peers/common.sh
P=${1:-1000} A=${2:-100} W1=${W1:-20000} W2=${W2:-60000} SELECT_MAX_P=${SELECT_MAX_P:-500}

peers_prepare libev-dev libevent-dev libuv1-dev valgrind
cd "$PEERS_BUILD"
stamp=$(date +%Y-%m-%d)
[[ -e $PEERS_RESULTS/$stamp.instr.csv ]] && stamp=$(date +%Y-%m-%d-%H%M%S)
out=$PEERS_RESULTS/$stamp.instr.csv

count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*Collected : //p'; }
failed=0
echo "impl,backend,P,A,timers,instr_per_event" | tee "$out"
for pe in "${PEERS[@]}"; do
    label=${pe%%|*} cmd=${pe#*|}
    [[ $label == *\ select* ]] && ((P > SELECT_MAX_P)) && continue
    for t in 0 1; do
        [[ $label == baseline* && $t == 1 ]] && continue # no timers there
        targs=()
        [[ $t == 1 ]] && targs=(-t)
        # (a peer that exits non-zero fails the count: valgrind passes its status on)
        # shellcheck disable=SC2086
        if lo=$(count $cmd -n "$P" -a "$A" -w "$W1" -r 1 "${targs[@]}") &&
            hi=$(count $cmd -n "$P" -a "$A" -w "$W2" -r 1 "${targs[@]}") && [[ -n $lo && -n $hi ]]; then
            row=$(((${hi//,/} - ${lo//,/}) / (W2 - W1)))
        else
            row=failed failed=$((failed + 1))
        fi
        echo "${label/ /,},$P,$A,$t,$row" | tee -a "$out"
    done
done
peers_say "results: $out"
if ((failed)); then
    peers_say "$failed count(s) failed"
    exit 3
fi
