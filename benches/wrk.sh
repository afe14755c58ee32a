#!/usr/bin/env bash
# examples/http_server under wrk, on epoll and on poll: requests per second
# and latency, min / median / max over several rounds. Fails if wrk reports
# a socket error or a non-2xx reply. The numbers go in docs/benchmarks.md.
#
# Usage: benches/wrk.sh [ROUNDS] [DURATION] [CONNECTIONS]
# (default 5 rounds of 10s with 1000 connections and 2 wrk threads; needs
# Debian's wrk: apt-get install -y wrk). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
duration=${2:-10s}
conns=${3:-1000}
port=${WRK_PORT:-18080}
backends=${WRK_BACKENDS:-epoll poll}

command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"

echo "== machine"
echo "nproc: $(nproc), cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "kernel: $(uname -sr), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
echo "wrk: -t2 -c$conns -d$duration, $rounds rounds per backend"

cargo build --release --example http_server 2>&1 | tail -n 1
server="${CARGO_TARGET_DIR:-target}/release/examples/http_server"
logs=$(mktemp -d)

summary() { # label, then numbers: prints min / median / max
    python3 - "$@" <<'PY'
import sys, statistics
label, xs = sys.argv[1], sorted(float(x) for x in sys.argv[2:])
print(f"{label}: min {xs[0]:.2f}  median {statistics.median(xs):.2f}  max {xs[-1]:.2f}")
PY
}

to_ms() { # wrk's "1.23ms" / "850.00us" / "1.02s" -> milliseconds
    python3 -c "
import sys; v=sys.argv[1]
for u,f in (('us',1e-3),('ms',1),('s',1e3)):
    if v.endswith(u): print(float(v[:-len(u)])*f); break" "$1"
}

status=0
for backend in $backends; do
    EVLOOP_BACKEND=$backend "$server" "127.0.0.1:$port" >"$logs/server-$backend.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        grep -qs "^http on" "$logs/server-$backend.log" && break
        sleep 0.1
    done
    grep "^http on" "$logs/server-$backend.log"
    wrk -t2 -c"$conns" -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
    rps=() avg=() p50=() p99=()
    for r in $(seq "$rounds"); do
        out="$logs/wrk-$backend-$r.txt"
        wrk -t2 -c"$conns" -d"$duration" --latency "http://127.0.0.1:$port/" >"$out"
        if grep -qE "Socket errors|Non-2xx" "$out"; then
            echo "!!! $backend round $r: wrk reports errors:"; grep -E "Socket errors|Non-2xx" "$out"
            status=1
        fi
        rps+=("$(awk '/^Requests\/sec:/ {print $2}' "$out")")
        avg+=("$(to_ms "$(awk '/^    Latency/ {print $2}' "$out")")")
        p50+=("$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")")")
        p99+=("$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")")
        echo "  round $r: ${rps[-1]} req/s, latency avg ${avg[-1]} ms, p50 ${p50[-1]} ms, p99 ${p99[-1]} ms"
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "== $backend ($rounds rounds)"
    summary "  requests/s" "${rps[@]}"
    summary "  latency avg (ms)" "${avg[@]}"
    summary "  latency p50 (ms)" "${p50[@]}"
    summary "  latency p99 (ms)" "${p99[@]}"
done
echo "wrk logs: $logs"
[ "$status" = 0 ] && echo "no socket errors" || { echo "SOCKET ERRORS (see above)"; exit 1; }
