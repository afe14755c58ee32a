#!/usr/bin/env bash
# Issue 37's "Done when" numbers in one run: evloop::net servers on epoll,
# on io_uring (its completion path, the default where the kernel has it)
# and on io_uring's readiness path (EVLOOP_IO_URING_COMPLETION=0), against
# their tokio current_thread twins doing the same work
# (benches/peers/rust: http_tokio, resp_tokio), on three workloads:
#   http      examples/http_server under wrk -t1 -c50 -d$DURATION (keep-alive)
#   resp-P16  benches/net_load's resp_server under
#             redis-benchmark -t get -c 50 -P 16 -n $P16_REQUESTS
#   resp-P1   the same with -P 1 -n $P1_REQUESTS
# (a) CPU per request: every server started once, then a warm-up round (not
#     counted) and ROUNDS rounds, each running every workload on every
#     variant, the variants' order rotated each round. Per run: the
#     server's utime + stime (/proc/PID/stat, 10 ms ticks) and the load
#     generator's, per request. Per workload and variant: the median and
#     min..max; then the ratios of the server CPU medians: io_uring/tokio
#     and io_uring/epoll against issue 37's 0.8, io_uring/io_uring-ready
#     and epoll/tokio for reference, with a warning when two ranges overlap.
# (b) syscalls per request: one run per workload and variant under
#     `strace -c -f -p PID` (apart from the timed runs: strace slows the
#     server), the total per request and the top syscalls; io_uring's total
#     against issue 37's 0.3 for http and resp-P16 (resp-P16 per command and,
#     the stricter reading, per round trip of 16 commands).
# (c) hyper: benches/hyper_wrk.sh with BACKEND=io_uring (hyper on evloop's
#     executor against hyper on tokio), against issue 37's 0.9.
# The load average before and after; every ratio and target again at the
# end ("Done when"). Which path an io_uring server took is its own
# business: each server's first line is printed, nothing more is checked.
#
# Usage: benches/completion.sh           (8-12 minutes on 2 cores)
#        QUICK=1 benches/completion.sh   smoke test: one round of 1 s, no
#                                        warm-up, no strace, no hyper
# Knobs: ROUNDS (5), DURATION (5s, wrk's -d), P16_REQUESTS (8000000),
# P1_REQUESTS (500000), VARIANTS ("epoll io_uring io_uring-ready tokio"),
# WORKLOADS ("http resp-P16 resp-P1"), STRACE (1), STRACE_DURATION (3s:
# wrk's -d when traced), STRACE_SHARE (10: a traced redis-benchmark run
# makes 1/10 of the requests), HYPER (1), HYPER_ROUNDS (ROUNDS), PIN ("1 0":
# the servers on CPU 1, wrk and redis-benchmark on CPU 0, with taskset, so
# that every run has the same placement; "0 0" for one core; empty for
# none; benches/load_lib.sh says why).
# Installs the missing Debian packages wrk, redis-tools and strace as root
# (benches/peers/common.sh); release builds into ${CARGO_TARGET_DIR:-target}
# (the example with the io-uring feature, benches/net_load, the tokio twins
# under peers/rust, the hyper suite under hyper_suite). Fails on a wrk
# socket error or non-2xx answer, a redis-benchmark error, or a server that
# does not start, except that io_uring variants are left out, loudly, where
# the io_uring backend does not start.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/peers/common.sh
. benches/load_lib.sh

if [ "${QUICK:-0}" = 1 ]; then
    rounds=${ROUNDS:-1} warmup=0 duration=${DURATION:-1s}
    p16=${P16_REQUESTS:-400000} p1=${P1_REQUESTS:-50000}
    strace_on=${STRACE:-0} hyper_on=${HYPER:-0}
else
    rounds=${ROUNDS:-5} warmup=1 duration=${DURATION:-5s}
    p16=${P16_REQUESTS:-8000000} p1=${P1_REQUESTS:-500000}
    strace_on=${STRACE:-1} hyper_on=${HYPER:-1}
fi
read -r -a variants <<<"${VARIANTS:-epoll io_uring io_uring-ready tokio}"
read -r -a workloads <<<"${WORKLOADS:-http resp-P16 resp-P1}"
strace_duration=${STRACE_DURATION:-3s}
strace_share=${STRACE_SHARE:-10}

packages=(wrk redis-tools)
[ "$strace_on" = 0 ] || packages+=(strace)
peers_paths
peers_install_packages "${packages[@]}"
ulimit -n "$(ulimit -Hn)"

target=$(realpath -m -- "${CARGO_TARGET_DIR:-target}")
echo "build: examples/http_server, benches/net_load, http_tokio and resp_tokio (release)" >&2
cargo build --release --quiet --features io-uring --example http_server
(cd benches/net_load && CARGO_TARGET_DIR=$target cargo build --release --quiet)
peers_build_rust --bin http_tokio --bin resp_tokio
http_evloop=$target/release/examples/http_server
resp_evloop=$target/release/resp_server
twins=$PEERS_BUILD/rust/target/release

LOAD_PIN=${PIN-1 0}
[ "$(nproc)" -ge 2 ] || LOAD_PIN=${PIN-}
load_init
# The environment of a variant's server: an inherited EVLOOP_ variable
# must not pick another path.
variant_env() {
    case $1 in
    epoll) echo "EVLOOP_BACKEND=epoll" ;;
    io_uring) echo "EVLOOP_BACKEND=io_uring" ;;
    io_uring-ready) echo "EVLOOP_BACKEND=io_uring EVLOOP_IO_URING_COMPLETION=0" ;;
    *) echo "" ;;
    esac
}
kinds=()
for w in "${workloads[@]}"; do
    case $w in
    http) [[ " ${kinds[*]} " == *" http "* ]] || kinds+=(http) ;;
    resp-P16 | resp-P1) [[ " ${kinds[*]} " == *" resp "* ]] || kinds+=(resp) ;;
    *) echo "unknown workload $w (http, resp-P16, resp-P1)" >&2 && exit 2 ;;
    esac
done
kept=()
for v in "${variants[@]}"; do
    ok=1
    for k in "${kinds[@]}"; do
        pattern="http on" && [ "$k" = resp ] && pattern="resp_server on"
        case $v in
        tokio) cmd=("$twins/${k}_tokio" 127.0.0.1:0) ;;
        epoll | io_uring | io_uring-ready)
            server=$http_evloop && [ "$k" = resp ] && server=$resp_evloop
            read -r -a venv <<<"$(variant_env "$v")"
            cmd=(env -u EVLOOP_BACKEND -u EVLOOP_IO_URING_COMPLETION "${venv[@]}" "$server" 127.0.0.1:0)
            ;;
        *) echo "unknown variant $v (epoll, io_uring, io_uring-ready, tokio)" >&2 && exit 2 ;;
        esac
        if ! load_start "$v.$k" "$pattern" "${cmd[@]}"; then
            [[ $v == io_uring* ]] || exit 1
            echo "NOTE: $v left out: its io_uring server does not start here (above)" >&2
            ok=0
            break
        fi
        line=$(head -n1 "$LOAD_TMP/$v.$k.out")
        echo "$v $k: $line"
        if [ "$v" != tokio ] && [[ $line != *"backend ${v%-ready}"* ]]; then
            echo "$v $k: not on the ${v%-ready} backend" >&2
            exit 1
        fi
    done
    [ "$ok" = 0 ] || kept+=("$v")
done
variants=("${kept[@]}")
for v in "${variants[@]}"; do
    if [[ " ${kinds[*]} " == *" resp "* ]]; then # the key GET reads
        load_redis "$LOAD_TMP/set" -h 127.0.0.1 -p "${LOAD_ADDR[$v.resp]##*:}" -t set -n 1000 -c 1
    fi
done

# run WORKLOAD VARIANT [REQUEST SHARE] [WRK DURATION]: one load run on the
# variant's server; sets LOAD_RPS and requests.
run() {
    local w=$1 v=$2 share=${3:-1} d=${4:-$duration}
    case $w in
    http)
        load_wrk "$LOAD_TMP/wrk" -t1 -c50 -d"$d" "http://${LOAD_ADDR[$v.http]}/"
        requests=$LOAD_REQUESTS
        ;;
    resp-P16 | resp-P1)
        local depth=${w#resp-P} n=$p16
        [ "$depth" = 16 ] || n=$p1
        requests=$((n / share))
        load_redis "$LOAD_TMP/redis" -h 127.0.0.1 -p "${LOAD_ADDR[$v.resp]##*:}" \
            -t get -n "$requests" -c 50 -P "$depth"
        ;;
    esac
}
server_pid() { # WORKLOAD VARIANT
    if [ "$1" = http ]; then echo "${LOAD_PID[$2.http]}"; else echo "${LOAD_PID[$2.resp]}"; fi
}

echo "== (a) CPU per request: ${workloads[*]} on ${variants[*]}"
load_header "wrk -t1 -c50 -d$duration; redis-benchmark -t get -c 50 -P 16 -n $p16, -P 1 -n $p1;\
 $rounds rounds$([ "$warmup" = 1 ] && echo " after a warm-up round")"
: >"$LOAD_TMP/results"
n=${#variants[@]}
for round in $(seq $((1 - warmup)) "$rounds"); do
    k=$((round % n))
    order=("${variants[@]:k}" "${variants[@]:0:k}")
    for w in "${workloads[@]}"; do
        for v in "${order[@]}"; do
            pid=$(server_pid "$w" "$v")
            load_begin "$pid"
            run "$w" "$v"
            load_end "$pid" "$requests"
            label="round $round" && [ "$round" = 0 ] && label=warm-up
            printf '%-8s %-9s %-15s %10.0f req/s  %8s us server CPU/req  %8s us client\n' \
                "$label" "$w" "$v" "$LOAD_RPS" "$LOAD_CPU_US" "$LOAD_CLIENT_US"
            [ "$round" = 0 ] ||
                echo "$w $v $round $LOAD_RPS $LOAD_CPU_US $LOAD_CLIENT_US" >>"$LOAD_TMP/results"
        done
    done
done
echo "load after: $(load_avg)"
LOAD_VARIANTS="${variants[*]}" load_summary "$LOAD_TMP/results" "io_uring/tokio<=0.8" "io_uring/epoll<=0.8" \
    "io_uring/io_uring-ready" "epoll/tokio" "io_uring-ready/tokio" | tee "$LOAD_TMP/summary"
grep '^ratio' "$LOAD_TMP/summary" >"$LOAD_TMP/done" || true

if [ "$strace_on" = 1 ]; then
    echo "== (b) syscalls per request (strace -c -f -p PID; wrk -d$strace_duration, redis-benchmark 1/$strace_share of the requests)"
    echo "load before: $(load_avg)"
    for w in "${workloads[@]}"; do
        for v in "${variants[@]}"; do
            out=$LOAD_TMP/strace.$w.$v
            load_strace "$(server_pid "$w" "$v")" "$out" run "$w" "$v" "$strace_share" "$strace_duration"
            line=$(load_strace_top "$out" "$requests")
            total=${line%% *}
            if [ "$w" = resp-P16 ]; then # a round trip carries 16 commands
                line="$line; $(awk -v t="$total" 'BEGIN { printf "%.3f", t * 16 }') per round trip"
            fi
            echo "$w $v ($requests requests): $line"
            if [ "$v" = io_uring ] && [ "$w" != resp-P1 ]; then
                verdict=$(awk -v t="$total" 'BEGIN { print (t <= 0.3 ? "met" : "MISSED") }')
                per_trip=
                if [ "$w" = resp-P16 ]; then # the stricter reading of "per request"
                    trip=${line##*; }
                    trip=${trip%% *}
                    per_trip="; $trip per round trip (<= 0.3: $(awk -v t="$trip" 'BEGIN { print (t <= 0.3 ? "met" : "MISSED") }'))"
                fi
                echo "syscalls $w: io_uring $total per request (target <= 0.3: $verdict)$per_trip" >>"$LOAD_TMP/done"
            fi
        done
    done
    echo "load after: $(load_avg)"
fi

if [ "$hyper_on" = 1 ]; then
    echo "== (c) hyper on evloop's executor over io_uring against hyper on tokio (benches/hyper_wrk.sh)"
    env -u EVLOOP_IO_URING_COMPLETION BACKEND=io_uring TARGET=0.9 PIN="$LOAD_PIN" \
        benches/hyper_wrk.sh "${HYPER_ROUNDS:-$rounds}" -t1 -c50 -d"$duration" | tee "$LOAD_TMP/hyper"
    grep '^ratio' "$LOAD_TMP/hyper" >>"$LOAD_TMP/done" || true
fi

echo "== Done when (issue 37): CPU per request ratios of the medians, syscalls per request"
cat "$LOAD_TMP/done"
