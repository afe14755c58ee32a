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

. "$(dirname "${BASH_SOURCE[0]}")/../wrk_common.sh"
wrk_install

# Port 0: the server takes a free one and prints it:
# "http on 127.0.0.1:PORT (backend mio)".
wrk_start_server mio "" env EVLOOP_BACKEND=mio "$bin" 127.0.0.1:0
wrk_load "" "$@"
echo "mio backend: $wrk_requests requests, no socket error, every answer 2xx"
