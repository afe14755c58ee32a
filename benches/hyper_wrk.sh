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
# after, and the ratio of the CPU medians (evloop/tokio; against TARGET
# if set, e.g. TARGET=0.9), warning when their ranges overlap. Fails on
# any socket error or non-2xx answer. Shares benches/load_lib.sh with
# benches/completion.sh, which runs it for issue 37's hyper ratio.
#
# Usage: benches/hyper_wrk.sh [ROUNDS] [WRK-ARGS...]
#   (default: 7 rounds of wrk -t1 -c50 -d5s; BACKEND=epoll by default for
#   evloop: BACKEND=io_uring to measure another; PIN="S C" pins the servers
#   to CPU S and wrk to CPU C, as benches/completion.sh does; unpinned by
#   default)
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

. benches/load_lib.sh
LOAD_PIN=${PIN-}
load_init
load_start evloop "http on" "$target/release/examples/hyper_server" 0 "$backend"
load_start tokio "http on" "$target/release/examples/hyper_tokio" 0
for name in evloop tokio; do echo "$name: $(cat "$LOAD_TMP/$name.out")"; done

echo "machine: $(nproc) cores, $(uname -r), load before: $(load_avg)"
echo "wrk $* http://ADDR/, $rounds rounds (plus a warm-up), evloop on $backend, pinned (server CPU, wrk CPU): ${LOAD_PIN:-no}"
: >"$LOAD_TMP/results"
for round in $(seq 0 "$rounds"); do
    for name in evloop tokio; do
        load_begin "${LOAD_PID[$name]}"
        load_wrk "$LOAD_TMP/wrk" "$@" "http://${LOAD_ADDR[$name]}/"
        load_end "${LOAD_PID[$name]}" "$LOAD_REQUESTS"
        if [ "$round" = 0 ]; then
            echo "warm-up  $name: $LOAD_RPS req/s, $LOAD_CPU_US us CPU/request"
        else
            echo "round $round  $name: $LOAD_RPS req/s, $LOAD_CPU_US us CPU/request"
            echo "hyper $name $round $LOAD_RPS $LOAD_CPU_US $LOAD_CLIENT_US" >>"$LOAD_TMP/results"
        fi
    done
done
echo "load after: $(load_avg)"
load_summary "$LOAD_TMP/results" "evloop/tokio${TARGET:+<=$TARGET}"
