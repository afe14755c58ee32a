#!/usr/bin/env bash
# User-space instructions per event on the bench.c workload (1,000 socket
# pairs, 100 active chains), counted exactly by callgrind: two runs with
# different write counts, the difference divided by the difference in
# events, so setup and teardown cancel out.
#
# Usage: benches/callgrind.sh [backend] [timers]
#   benches/callgrind.sh epoll          # plain
#   benches/callgrind.sh epoll timers   # each callback also restarts a timer
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-epoll}
mode=${2:-}
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)"; exit 1; }
cargo build --release --example callgrind_chain >/dev/null 2>&1
bin=target/release/examples/callgrind_chain
out=$(mktemp -d)
count() { # writes -> "instructions events"
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$bin" "$backend" "$1" $mode \
        >"$out/stdout.$1" 2>"$out/stderr.$1"
    local ir events
    ir=$(grep -E '^summary:|^totals:' "$out/cg.$1" | head -n1 | awk '{print $2}')
    events=$(awk '/^events/ {print $2}' "$out/stdout.$1")
    echo "$ir $events"
}
read -r ir1 ev1 < <(count 20000)
read -r ir2 ev2 < <(count 120000)
per=$(( (ir2 - ir1) / (ev2 - ev1) ))
echo "backend=$backend ${mode:-plain}: $((ir2 - ir1)) instructions / $((ev2 - ev1)) events = $per instructions per event"
rm -rf "$out"
