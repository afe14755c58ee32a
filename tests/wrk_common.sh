# What tests/hyper_suite/wrk.sh and tests/mio_backend/wrk.sh share,
# sourced by both (under their `set -euo pipefail`): install wrk where it
# is missing, start a server that prints "http on ADDR (backend NAME)" and
# check its backend, load it with wrk, and fail on any socket error, any
# non-2xx answer, a server that died, or no request served.

. "$(dirname "${BASH_SOURCE[0]}")/install_missing.sh"

# Installs wrk with apt-get where it is missing (as root, or with sudo).
wrk_install() {
    install_missing wrk wrk
}

# The server's output, wrk's output, and the server's pid while it runs;
# the EXIT trap stops the server and removes both files.
wrk_server_out=$(mktemp)
wrk_out=$(mktemp)
wrk_pid=
wrk_stop_server() {
    if [ -n "$wrk_pid" ]; then
        kill "$wrk_pid" 2>/dev/null || true
        wait "$wrk_pid" 2>/dev/null || true
        wrk_pid=
    fi
}
trap 'wrk_stop_server; rm -f "$wrk_server_out" "$wrk_out"' EXIT

# wrk_start_server BACKEND WHERE COMMAND...: runs COMMAND in the
# background, waits up to 30 s for its "http on ADDR (backend NAME)" line,
# fails unless NAME is BACKEND, and sets wrk_addr to ADDR. WHERE (may be
# empty) names the run in error messages.
wrk_start_server() {
    local backend=$1 where=$2 line
    shift 2
    : >"$wrk_server_out"
    "$@" >"$wrk_server_out" &
    wrk_pid=$!
    for _ in $(seq 300); do
        grep -q '^http on ' "$wrk_server_out" && break
        kill -0 "$wrk_pid" 2>/dev/null || { echo "the server exited before listening${where:+ ($where)}" >&2; exit 1; }
        sleep 0.1
    done
    line=$(grep '^http on ' "$wrk_server_out" || true)
    [ -n "$line" ] || { echo "the server did not listen within 30 s${where:+ ($where)}" >&2; exit 1; }
    echo "$line"
    case "$line" in
    *"(backend $backend)"*) ;;
    *) echo "the server does not run on the $backend backend: $line" >&2; exit 1 ;;
    esac
    wrk_addr=$(echo "$line" | sed 's/^http on \([^ ]*\) .*/\1/')
}

# wrk_load WHERE WRK-ARGS...: runs wrk against the started server and
# fails if the server died, on any socket error or non-2xx answer, or if
# no request was made; sets wrk_requests to the number made.
wrk_load() {
    local where=$1
    shift
    wrk "$@" "http://$wrk_addr/" | tee "$wrk_out"
    kill -0 "$wrk_pid" 2>/dev/null || { echo "the server died under load${where:+ ($where)}" >&2; exit 1; }
    if grep -q 'Socket errors' "$wrk_out"; then
        echo "wrk saw socket errors (above${where:+, $where})" >&2
        exit 1
    fi
    if grep -q 'Non-2xx' "$wrk_out"; then
        echo "wrk saw answers other than 2xx (above${where:+, $where})" >&2
        exit 1
    fi
    wrk_requests=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$wrk_out")
    if [ -z "$wrk_requests" ] || [ "$wrk_requests" -eq 0 ]; then
        echo "wrk made no request (above${where:+, $where})" >&2
        exit 1
    fi
}
