#!/usr/bin/env bash
# What recording costs a server (issue 38): server CPU per request of an
# evloop::net server recording its run (`--record PATH`: Builder::record_to
# and a Recorded listener, so the loop's inputs and every byte read and
# written go to the trace) against the same server not recording, on two
# workloads:
#   http   examples/http_server under wrk -t1 -c50 -d$DURATION (keep-alive)
#   resp   benches/net_load's resp_server under
#          redis-benchmark -t set,get -c 50 -P 16 -n $RESP_REQUESTS
#          (pipelined; SET then GET, so 2 x RESP_REQUESTS requests a run)
# Both variants' servers are started once (the recording one writes its
# trace to a real file in a scratch dir, removed at the end), then a
# warm-up round (not counted) and ROUNDS rounds, each running every
# workload on both variants, their order swapped every round. Per run:
# the server's utime + stime (/proc/PID/stat, 10 ms ticks) per request,
# and for the recording server the trace's growth per request (the file's
# size, which lags by the one 64 KiB block the recorder buffers). Per
# workload and variant: the median and min..max; the ratio record/plain of
# the CPU medians against the issue's 1.30, and the median and min..max of
# the rounds' own ratios. The load average before and after. At the end
# the recording servers are stopped with SIGTERM and each trace must end
# with the End record (the recording never stopped on a write error).
#
# Usage: benches/replay_overhead.sh          (about 3 minutes on 2 cores)
#        QUICK=1 benches/replay_overhead.sh  smoke test: one round of 1 s,
#                                            no warm-up
# Knobs: ROUNDS (5), DURATION (5s, wrk's -d), RESP_REQUESTS (2000000),
# WORKLOADS ("http resp"), BACKEND (epoll: EVLOOP_BACKEND of both
# servers), PIN ("1 0": servers on CPU 1, wrk and redis-benchmark on CPU
# 0; benches/load_lib.sh says why; empty for none).
# Installs the missing Debian packages wrk and redis-tools as root
# (benches/peers/common.sh); release builds into
# ${CARGO_TARGET_DIR:-target} (the example with the io-uring feature, as
# benches/completion.sh builds it, and benches/net_load). Fails on a wrk
# socket error or non-2xx answer, a redis-benchmark error, a server that
# does not start, or a trace without its End record.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/peers/common.sh
. benches/load_lib.sh

if [ "${QUICK:-0}" = 1 ]; then
    rounds=${ROUNDS:-1} warmup=0 duration=${DURATION:-1s} resp_n=${RESP_REQUESTS:-200000}
else
    rounds=${ROUNDS:-5} warmup=1 duration=${DURATION:-5s} resp_n=${RESP_REQUESTS:-2000000}
fi
read -r -a workloads <<<"${WORKLOADS:-http resp}"
backend=${BACKEND:-epoll}
variants=(plain record)

peers_install_packages wrk redis-tools
ulimit -n "$(ulimit -Hn)"

target=$(realpath -m -- "${CARGO_TARGET_DIR:-target}")
echo "build: examples/http_server, benches/net_load (release)" >&2
cargo build --release --quiet --features io-uring --example http_server
(cd benches/net_load && CARGO_TARGET_DIR=$target cargo build --release --quiet)

LOAD_PIN=${PIN-1 0}
[ "$(nproc)" -ge 2 ] || LOAD_PIN=${PIN-}
load_init
for w in "${workloads[@]}"; do
    case $w in
    http) server=$target/release/examples/http_server pattern="http on" ;;
    resp) server=$target/release/resp_server pattern="resp_server on" ;;
    *) echo "unknown workload $w (http, resp)" >&2 && exit 2 ;;
    esac
    for v in "${variants[@]}"; do
        record=()
        [ "$v" = plain ] || record=(--record "$LOAD_TMP/$w.trace")
        load_start "$w.$v" "$pattern" env -u EVLOOP_IO_URING_COMPLETION EVLOOP_BACKEND="$backend" \
            "$server" "${record[@]}" 127.0.0.1:0
        line=$(head -n1 "$LOAD_TMP/$w.$v.out")
        echo "$w $v: $line"
        [[ $line == *"backend $backend"* ]] || { echo "$w $v: not on the $backend backend" >&2 && exit 1; }
    done
    [ -e "$LOAD_TMP/$w.trace" ] || { echo "$w: no trace at $LOAD_TMP/$w.trace" >&2 && exit 1; }
done

# run WORKLOAD VARIANT: one load run; sets LOAD_RPS and requests.
run() {
    local addr=${LOAD_ADDR[$1.$2]}
    case $1 in
    http)
        load_wrk "$LOAD_TMP/wrk" -t1 -c50 -d"$duration" "http://$addr/"
        requests=$LOAD_REQUESTS
        ;;
    resp)
        load_redis "$LOAD_TMP/redis" -h 127.0.0.1 -p "${addr##*:}" -t set,get -c 50 -P 16 -n "$resp_n"
        requests=$((2 * resp_n))
        # Both tests' rate: their requests over the sum of their times.
        LOAD_RPS=$(awk -F'"' -v n="$resp_n" 'NR > 1 && $4 > 0 { t += n / $4; k += n }
            END { printf "%.0f", k / t }' "$LOAD_TMP/redis")
        ;;
    esac
}

echo "== record/plain: server CPU per request, ${workloads[*]}"
load_header "backend $backend; wrk -t1 -c50 -d$duration; redis-benchmark -t set,get -c 50 -P 16 -n $resp_n;\
 $rounds rounds$([ "$warmup" = 1 ] && echo " after a warm-up round")"
: >"$LOAD_TMP/results"
: >"$LOAD_TMP/bytes"
for round in $(seq $((1 - warmup)) "$rounds"); do
    order=("${variants[@]}")
    [ $((round % 2)) = 1 ] || order=(record plain)
    label="round $round" && [ "$round" = 0 ] && label=warm-up
    for w in "${workloads[@]}"; do
        for v in "${order[@]}"; do
            pid=${LOAD_PID[$w.$v]}
            size0=$(stat -c %s "$LOAD_TMP/$w.trace")
            load_begin "$pid"
            run "$w" "$v"
            load_end "$pid" "$requests"
            grown=$(($(stat -c %s "$LOAD_TMP/$w.trace") - size0))
            trace=
            [ "$v" = plain ] ||
                trace=$(awk -v b="$grown" -v n="$requests" 'BEGIN { printf "  %.1f trace bytes/req", b / n }')
            printf '%-8s %-5s %-7s %10.0f req/s  %8s us server CPU/req%s\n' \
                "$label" "$w" "$v" "$LOAD_RPS" "$LOAD_CPU_US" "$trace"
            [ "$round" != 0 ] || continue
            echo "$w $v $round $LOAD_RPS $LOAD_CPU_US $LOAD_CLIENT_US" >>"$LOAD_TMP/results"
            [ "$v" = plain ] || echo "$w $grown $requests" >>"$LOAD_TMP/bytes"
        done
    done
done
echo "load after: $(load_avg)"
LOAD_VARIANTS="${variants[*]}" load_summary "$LOAD_TMP/results" "record/plain<=1.30"
python3 - "$LOAD_TMP/bytes" <<'PY'
import statistics, sys
per = {}
for w, grown, n in (l.split() for l in open(sys.argv[1]) if l.strip()):
    per.setdefault(w, []).append(int(grown) / int(n))
for w, xs in per.items():
    print(f"trace {w}: {statistics.median(xs):.1f} bytes per request, median ({min(xs):.1f}..{max(xs):.1f})")
PY

# Stopped with SIGTERM, each recording server completes its trace.
for w in "${workloads[@]}"; do
    pid=${LOAD_PID[$w.record]}
    kill -TERM "$pid"
    status=0
    wait "$pid" || status=$?
    [ "$status" = 0 ] || { echo "$w record: exit status $status" >&2 && exit 1; }
    end=$(tail -c 2 "$LOAD_TMP/$w.trace" | od -An -tx1 | tr -d ' ')
    [ "$end" = ff00 ] || { echo "$w: the trace does not end with the End record ($end)" >&2 && exit 1; }
    echo "trace $w: $(stat -c %s "$LOAD_TMP/$w.trace") bytes, complete (End record)"
done
