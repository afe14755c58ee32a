#!/usr/bin/env bash
# Serves wrk with the mio test crate's binary (evloop's HTTP example, run on
# the mio backend: EVLOOP_BACKEND=mio) on a free port, and fails on any
# socket error, any non-2xx answer, a backend other than mio, or no request
# served. Installs wrk with apt-get where it is missing (as root, or with
# sudo). Usage: tests/mio_backend/wrk.sh PATH-TO-BINARY [WRK-ARGS...]
# (default wrk arguments: -t2 -c64 -d5s).
set -euo pipefail

bin=${1:?usage: $0 PATH-TO-BINARY [WRK-ARGS...]}
shift
[ "$#" -gt 0 ] || set -- -t2 -c64 -d5s

if ! command -v wrk >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "wrk is missing, and there is no apt-get here: install wrk by hand" >&2
        exit 1
    fi
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    echo "installing wrk" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq wrk >&2
fi

out=$(mktemp)
wrk_out=$(mktemp)
pid=
stop() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -f "$out" "$wrk_out"
}
trap stop EXIT

# Port 0: the server takes a free one and prints it:
# "http on 127.0.0.1:PORT (backend mio)".
EVLOOP_BACKEND=mio "$bin" 127.0.0.1:0 >"$out" &
pid=$!
for _ in $(seq 300); do
    grep -q '^http on ' "$out" && break
    kill -0 "$pid" 2>/dev/null || { echo "the server exited before listening" >&2; exit 1; }
    sleep 0.1
done
line=$(grep '^http on ' "$out" || true)
[ -n "$line" ] || { echo "the server did not listen within 30 s" >&2; exit 1; }
echo "$line"
case "$line" in
*"(backend mio)"*) ;;
*) echo "the server does not run on the mio backend: $line" >&2; exit 1 ;;
esac
addr=$(echo "$line" | sed 's/^http on \([^ ]*\) .*/\1/')

wrk "$@" "http://$addr/" | tee "$wrk_out"
kill -0 "$pid" 2>/dev/null || { echo "the server died under load" >&2; exit 1; }
if grep -q 'Socket errors' "$wrk_out"; then
    echo "wrk saw socket errors (above)" >&2
    exit 1
fi
if grep -q 'Non-2xx' "$wrk_out"; then
    echo "wrk saw answers other than 2xx (above)" >&2
    exit 1
fi
requests=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$wrk_out")
if [ -z "$requests" ] || [ "$requests" -eq 0 ]; then
    echo "wrk made no request (above)" >&2
    exit 1
fi
echo "mio backend: $requests requests, no socket error, every answer 2xx"
