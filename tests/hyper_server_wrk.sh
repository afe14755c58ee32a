#!/usr/bin/env bash
# Serves wrk from examples/hyper_server.rs (hyper's http1 server on
# evloop's executor) on a free port, once per backend named, and fails on
# any socket error, any non-2xx answer, a server that died or listened on
# another backend, or no request served. Installs wrk with apt-get where
# it is missing (as root, or with sudo).
# Usage: tests/hyper_server_wrk.sh PATH-TO-BINARY BACKEND[,BACKEND...] [WRK-ARGS...]
# (default wrk arguments: -t2 -c64 -d3s).
set -euo pipefail

bin=${1:?usage: $0 PATH-TO-BINARY BACKEND[,BACKEND...] [WRK-ARGS...]}
backends=${2:?usage: $0 PATH-TO-BINARY BACKEND[,BACKEND...] [WRK-ARGS...]}
shift 2
[ "$#" -gt 0 ] || set -- -t2 -c64 -d3s

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
        pid=
    fi
}
trap 'stop; rm -f "$out" "$wrk_out"' EXIT

for backend in ${backends//,/ }; do
    # Port 0: the server takes a free one and prints it:
    # "http on 127.0.0.1:PORT (backend NAME)".
    : >"$out"
    "$bin" 0 "$backend" >"$out" &
    pid=$!
    for _ in $(seq 300); do
        grep -q '^http on ' "$out" && break
        kill -0 "$pid" 2>/dev/null || { echo "the server exited before listening ($backend)" >&2; exit 1; }
        sleep 0.1
    done
    line=$(grep '^http on ' "$out" || true)
    [ -n "$line" ] || { echo "the server did not listen within 30 s ($backend)" >&2; exit 1; }
    echo "$line"
    case "$line" in
    *"(backend $backend)"*) ;;
    *) echo "the server does not run on the $backend backend: $line" >&2; exit 1 ;;
    esac
    addr=$(echo "$line" | sed 's/^http on \([^ ]*\) .*/\1/')

    wrk "$@" "http://$addr/" | tee "$wrk_out"
    kill -0 "$pid" 2>/dev/null || { echo "the server died under load ($backend)" >&2; exit 1; }
    if grep -q 'Socket errors' "$wrk_out"; then
        echo "wrk saw socket errors (above, $backend)" >&2
        exit 1
    fi
    if grep -q 'Non-2xx' "$wrk_out"; then
        echo "wrk saw answers other than 2xx (above, $backend)" >&2
        exit 1
    fi
    requests=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$wrk_out")
    if [ -z "$requests" ] || [ "$requests" -eq 0 ]; then
        echo "wrk made no request (above, $backend)" >&2
        exit 1
    fi
    stop
    echo "hyper on evloop's executor, $backend: $requests requests, no socket error, every answer 2xx"
done
