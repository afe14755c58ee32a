#!/usr/bin/env bash
# Serves wrk from tests/hyper_suite/examples/hyper_server.rs (hyper's http1 server on
# evloop's executor) on a free port, once per backend named, and fails on
# any socket error, any non-2xx answer, a server that died or listened on
# another backend, or no request served. Installs wrk with apt-get where
# it is missing (as root, or with sudo).
# Usage: tests/hyper_suite/wrk.sh PATH-TO-BINARY BACKEND[,BACKEND...] [WRK-ARGS...]
# (default wrk arguments: -t2 -c64 -d3s).
set -euo pipefail

bin=${1:?usage: $0 PATH-TO-BINARY BACKEND[,BACKEND...] [WRK-ARGS...]}
backends=${2:?usage: $0 PATH-TO-BINARY BACKEND[,BACKEND...] [WRK-ARGS...]}
shift 2
[ "$#" -gt 0 ] || set -- -t2 -c64 -d3s

. "$(dirname "${BASH_SOURCE[0]}")/../wrk_common.sh"
wrk_install

for backend in ${backends//,/ }; do
    # Port 0: the server takes a free one and prints it:
    # "http on 127.0.0.1:PORT (backend NAME)".
    wrk_start_server "$backend" "$backend" "$bin" 0 "$backend"
    wrk_load "$backend" "$@"
    wrk_stop_server
    echo "hyper on evloop's executor, $backend: $wrk_requests requests, no socket error, every answer 2xx"
done
