#!/bin/bash
# Syscalls per request of an evloop::net server under redis-benchmark
# (docs/benchmarks.md, "evloop::net syscalls per request"):
# benches/net_load's resp_server, traced with `strace -c -f -p` while
# redis-benchmark runs GETs on 50 connections, unpipelined (-P 1) and
# 16 to a batch (-P 16).
#
#   benches/net_syscalls.sh [SERVER_BINARY]
#
# Needs strace and redis-benchmark (apt-get install strace redis-tools).
# The server is built with `cargo build --release` in benches/net_load
# unless a binary is given (a build of an older evloop, say).
# benches/completion.sh counts the same way on every backend and tokio.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/load_lib.sh
. "$here/load_lib.sh" # load_strace
target=${CARGO_TARGET_DIR:-$here/net_load/target}
if [ $# -ge 1 ]; then
    server=$1
else
    (cd "$here/net_load" && CARGO_TARGET_DIR=$target cargo build --release --quiet)
    server=$target/release/resp_server
fi
port=${PORT:-6390}
out=$(mktemp -d)
"$server" "127.0.0.1:$port" > "$out/server.txt" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$out"' EXIT
until grep -q "resp_server on" "$out/server.txt" 2>/dev/null; do sleep 0.1; done
redis-benchmark -p "$port" -t set -n 1000 -c 1 -q > /dev/null # the key GET reads

measure() { # name, round trips (requests / pipeline depth), redis-benchmark arguments...
    local name=$1 trips=$2
    shift 2
    load_strace "$pid" "$out/$name.strace" timeout 300 redis-benchmark -p "$port" "$@" -q > /dev/null
    echo "== $name: $trips round trips (redis-benchmark $*)"
    cat "$out/$name.strace"
    awk -v trips="$trips" '
        $NF ~ /^(recvfrom|read|sendto|write|writev)$/ { io += $4 }
        $NF == "recvfrom" && NF == 6 { eagain = $5 }
        $NF == "total" { total = $4 }
        END {
            printf "per round trip: %.3f recv+send (%.3f EAGAIN), %.3f syscalls in all\n",
                io / trips, eagain / trips, total / trips
        }' "$out/$name.strace"
}
measure P1 20000 -t get -n 20000 -c 50 -P 1
measure P16 6250 -t get -n 100000 -c 50 -P 16
kill -TERM $pid
wait $pid
