#!/bin/bash
# A thousand clients connecting at once to an evloop::net server on
# loopback (issue 34, item 14; docs/benchmarks.md, "A thousand clients
# connecting at once"): benches/net_load's resp_server and burst_client,
# each client timing its connect and its first reply, with the kernel's
# accept-queue counters (nstat) before and after; idle, then under a
# doubled load (two `yes > /dev/null` per core). Bounded: each client
# gives up after LIMIT seconds, each run is under `timeout`.
#
#   benches/accept_burst.sh [ROUNDS] [CLIENTS]       (default 3 1000)
#   BACKLOGS="128 1024" LIMIT=120 benches/accept_burst.sh
#
# BACKLOGS lists the listen backlogs to try ("default" is
# ListenOptions::new()'s). Needs nstat (iproute2). With redis-benchmark
# (redis-tools), each round then also runs the review's load, `-c 1000
# -t ping,set,get -n 100000`, and prints each test's req/s and worst
# latency, and the wall time.
set -euo pipefail
rounds=${1:-3}
clients=${2:-1000}
limit=${LIMIT:-120}
backlogs=${BACKLOGS:-default 128}
here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/net_load/target}
(cd "$here/net_load" && CARGO_TARGET_DIR=$target cargo build --release --quiet)
bin=$target/release
ulimit -n 20000
echo "somaxconn $(cat /proc/sys/net/core/somaxconn), tcp_max_syn_backlog $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog), syncookies $(cat /proc/sys/net/ipv4/tcp_syncookies), $(nproc) cores"
counters() {
    nstat -az TcpExtListenOverflows TcpExtListenDrops TcpExtTCPSynRetrans |
        awk '/^TcpExt/ { printf "%s=%s ", substr($1, 7), $2 }'
}
port=${PORT:-6391}
hogs=()
stop_hogs() { for h in "${hogs[@]:-}"; do [ -n "$h" ] && kill "$h" 2>/dev/null || true; done; hogs=(); }
trap stop_hogs EXIT
for load in idle doubled; do
    if [ $load = doubled ]; then
        for _ in $(seq $((2 * $(nproc)))); do yes > /dev/null & hogs+=($!); done
    fi
    for backlog in $backlogs; do
        for r in $(seq "$rounds"); do
            out=$(mktemp)
            if [ "$backlog" = default ]; then
                "$bin/resp_server" "127.0.0.1:$port" > "$out" &
            else
                BACKLOG=$backlog "$bin/resp_server" "127.0.0.1:$port" > "$out" &
            fi
            srv=$!
            until grep -q "resp_server on" "$out"; do sleep 0.05; done
            before=$(counters)
            result=$(timeout $((limit + 60)) "$bin/burst_client" "127.0.0.1:$port" "$clients" "$limit")
            if command -v redis-benchmark > /dev/null; then
                began=$(date +%s.%N)
                bench=$(timeout 600 redis-benchmark -p "$port" -c "$clients" -t ping,set,get -n 100000 2>&1 |
                    tr '\r' '\n' | awk '
                        /^====== / { test = $2 }
                        /requests per second/ { rps = $3 }
                        /latency summary/ { getline; getline; printf "%s %.0f/s max %s ms; ", test, rps, $6 }')
                result="$result
    redis-benchmark -c $clients: ${bench}wall $(echo "$(date +%s.%N) - $began" | bc) s"
            fi
            after=$(counters)
            kill -TERM $srv
            wait $srv || true
            echo "load $load, backlog $backlog, round $r: $result"
            echo "    nstat before: $before"
            echo "    nstat after:  $after"
            rm -f "$out"
        done
    done
    stop_hogs
done
