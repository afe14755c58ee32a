#!/usr/bin/env bash
# Wall time of the libevent/libev "bench.c" workload on every peer (libev,
# libevent, libuv, mio, polling, tokio, the no-loop baseline and evloop on
# each backend of the machine), in interleaved rounds: every round runs
# every configuration on every peer, one process per run, the peer order
# rotated each round. Prints, per configuration, each peer's median with
# its min..max over the rounds, and the load average before and after.
#
#   benches/peers/run.sh                        full sweep (about 10 minutes on 2 cores)
#   QUICK=1 benches/peers/run.sh                smoke test: 1 round, P=100 and 1000, small W
#   PS="100 1000" AS=100 TIMERS=0 benches/peers/run.sh     a subset of configurations
#   ONLY='baseline|libev epoll|evloop' benches/peers/run.sh  a subset of peers
#   EXTRA_PEERS="mylib epoll|rust/target/release/bench_mylib -b epoll" benches/peers/run.sh
#
# Installs the missing Debian packages (libev-dev libevent-dev libuv1-dev)
# as root, builds the peers into ${CARGO_TARGET_DIR:-target}/peers, and
# writes to PEERS_RESULTS (default target/peers-results):
#   <date>.csv      medians: impl,backend,P,A,timers,setup_us_per_fd,run_us_per_event
#   <date>.raw.csv  every run: round,impl,backend,P,A,W,timers,setup_us_per_fd,run_us_per_event
#   <date>.txt      commit, machine, knobs, load average before and after
# (a second run the same day gets <date>-HHMMSS).
#
# Knobs: QUICK; ROUNDS (7); REPS (1: in-process repetitions, the peer
# prints their median); PS (100 1000 3000 10000 100000, each capped by
# RLIMIT_NOFILE); AS (100 1000; only A <= P); TIMERS (0 1); TARGET_US
# (400000: the run phase aimed at, sets W); W_MIN, W_MAX (5000, 100000);
# SELECT_MAX_P (500: select while its fds fit FD_SETSIZE); PIN_CPU (1: the
# CPU the peers are pinned to with taskset; empty: none); RUN_TIMEOUT (120
# s per run); ONLY, EXTRA_PEERS (commands relative to
# ${CARGO_TARGET_DIR:-target}/peers); PEERS_RESULTS. Exits 3 if a run
# failed (the others are still written).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=benches/peers/common.sh
. benches/peers/common.sh

if [[ -n ${QUICK:-} ]]; then
    ROUNDS=${ROUNDS:-1} PS=${PS:-"100 1000"} AS=${AS:-100}
    TARGET_US=${TARGET_US:-50000} W_MAX=${W_MAX:-20000} W_MIN=${W_MIN:-2000}
fi
ROUNDS=${ROUNDS:-7} REPS=${REPS:-1}
PS=${PS:-"100 1000 3000 10000 100000"} AS=${AS:-"100 1000"} TIMERS=${TIMERS:-"0 1"}
TARGET_US=${TARGET_US:-400000} W_MAX=${W_MAX:-100000} W_MIN=${W_MIN:-5000}
SELECT_MAX_P=${SELECT_MAX_P:-500} PIN_CPU=${PIN_CPU-1} RUN_TIMEOUT=${RUN_TIMEOUT:-120}

peers_prepare libev-dev libevent-dev libuv1-dev
root=$PWD
cd "$PEERS_BUILD"

# File descriptors: the soft limit as high as allowed; the peers raise the
# hard one themselves where they may (CAP_SYS_RESOURCE): the baseline
# tells, at the largest P asked for.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
[[ $nofile == unlimited ]] && nofile=1048576
p_max=$(((nofile - 32) / 2 / 100 * 100))
want_p=$(printf '%s\n' $PS | sort -n | tail -1)
if ((want_p > p_max)) && build/bench_baseline -n "$want_p" -a 1 -w 0 >/dev/null 2>&1; then
    p_max=$want_p
fi
ps=()
for p in $PS; do
    if ((p > p_max)); then
        peers_say "note: P=$p needs $((2 * p + 32)) fds but RLIMIT_NOFILE is $nofile and cannot be raised: P=$p_max instead"
        p=$p_max
    fi
    [[ " ${ps[*]:-} " == *" $p "* ]] || ps+=("$p")
done

pin=()
if [[ -n $PIN_CPU ]] && command -v taskset >/dev/null && (($(nproc) > 1)); then
    pin=(taskset -c "$PIN_CPU")
fi

# W per run, for about TARGET_US of run phase: scanning backends (poll,
# select) cost about 3 + 0.11 * P/A us per event, the others about 3.
choose_w() { # backend P A
    awk -v b="$1" -v p="$2" -v a="$3" -v t="$TARGET_US" -v lo="$W_MIN" -v hi="$W_MAX" 'BEGIN {
        est = 3.0; if (b ~ /^(poll|select)/) est += 0.11 * p / a
        w = int(t / est / 1000) * 1000; if (w > hi) w = hi; if (w < lo) w = lo; print w }'
}

stamp=$(date +%Y-%m-%d)
[[ -e $PEERS_RESULTS/$stamp.csv ]] && stamp=$(date +%Y-%m-%d-%H%M%S)
out=$PEERS_RESULTS/$stamp.csv raw=$PEERS_RESULTS/$stamp.raw.csv meta=$PEERS_RESULTS/$stamp.txt
echo "round,impl,backend,P,A,W,timers,setup_us_per_fd,run_us_per_event" >"$raw"
{
    echo "commit: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "date: $(date -u +'%Y-%m-%d %H:%M UTC'); cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "kernel: $(uname -sr); pinned: ${pin[*]:-no}"
    echo "sweep: ROUNDS=$ROUNDS REPS=$REPS PS=${ps[*]} AS=$AS TIMERS=$TIMERS TARGET_US=$TARGET_US W=$W_MIN..$W_MAX"
    echo "load before: $(peers_load)"
} >"$meta"

configs=()
for p in "${ps[@]}"; do
    for a in $AS; do
        ((a > p)) && continue
        for t in $TIMERS; do configs+=("$p $a $t"); done
    done
done

errf=$(mktemp)
trap 'rm -f "$errf"' EXIT
n=${#PEERS[@]} failed=0 start=$SECONDS
peers_say "sweep: P={${ps[*]}} A={$AS} timers={$TIMERS}, ${#configs[@]} configs x $n peers x $ROUNDS rounds; load $(peers_load)"
for ((r = 1; r <= ROUNDS; r++)); do
    for cfg in "${configs[@]}"; do
        read -r p a t <<<"$cfg"
        for ((k = 0; k < n; k++)); do
            pe=${PEERS[$(((k + r - 1) % n))]} # the order rotates every round
            label=${pe%%|*} cmd=${pe#*|} backend=${pe%%|*}
            backend=${backend#* }
            [[ $backend == select* ]] && ((p > SELECT_MAX_P)) && continue
            [[ $label == baseline* && $t == 1 ]] && continue # no timers there
            w=$(choose_w "$backend" "$p" "$a")
            targs=()
            [[ $t == 1 ]] && targs=(-t)
            # shellcheck disable=SC2086
            if line=$(timeout "$RUN_TIMEOUT" "${pin[@]}" $cmd -n "$p" -a "$a" -w "$w" -r "$REPS" "${targs[@]}" 2>"$errf"); then
                IFS=, read -r im be pp aa tt su ru <<<"$line"
                echo "$r,$im,$be,$pp,$aa,$w,$tt,$su,$ru" >>"$raw"
            else
                failed=$((failed + 1))
                peers_say "FAILED: $label P=$p A=$a timers=$t: $(tail -1 "$errf")"
            fi
        done
    done
    peers_say "round $r/$ROUNDS done ($((SECONDS - start)) s; load $(peers_load))"
done
echo "load after: $(peers_load)" >>"$meta"

# Medians over the rounds, in the CSV that benches/figures.sh keeps.
{
    echo "impl,backend,P,A,timers,setup_us_per_fd,run_us_per_event"
    tail -n +2 "$raw" | sort -t, -k2,2 -k3,3 -k4,4n -k5,5n -k7,7n | awk -F, '
        function med(s,   v, m, i, j, x) { # POSIX awk: no asort
            m = split(s, v, " ")
            for (i = 2; i <= m; i++) { x = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
            return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
        { key = $2 "," $3 "," $4 "," $5 "," $7
          if (!(key in su)) order[++nk] = key
          su[key] = su[key] " " $8; ru[key] = ru[key] " " $9 }
        END { for (i = 1; i <= nk; i++) { k = order[i]; printf "%s,%.4f,%.4f\n", k, med(su[k]), med(ru[k]) } }'
} >"$out"

# The table: per configuration, the peers fastest first, ns per event.
echo "== ns per event, median (min..max over $ROUNDS round(s)); setup us per fd (median); baseline = the syscall floor"
tail -n +2 "$raw" | awk -F, '
    { k = $4 "," $5 "," $7 "|" $2 " " $3; if (!(k in v)) keys[++n] = k; v[k] = v[k] " " $9 * 1000; s[k] = s[k] " " $8 }
    function sorted(str, a,   m, i, j, x) {
        m = split(str, a, " ")
        for (i = 2; i <= m; i++) { x = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
        return m }
    END { for (i = 1; i <= n; i++) { k = keys[i]; m = sorted(v[k], a); sorted(s[k], b)
        med = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
        smed = m % 2 ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2
        split(k, c, "|"); split(c[1], f, ",")
        printf "%d %d %d %012.1f|P=%-6d A=%-5d timers=%d  %-22s %7.0f  (%.0f..%.0f)  setup %.3f\n", f[1], f[2], f[3], med, f[1], f[2], f[3], c[2], med, a[1], a[m], smed } }' |
    sort -t' ' -k1,1n -k2,2n -k3,3n -k4,4 | cut -d'|' -f2-
before=$(sed -n 's/^load before: //p' "$meta")
echo "== load average: $before before, $(peers_load) after"
# Busy before, or after beyond the sweep's own process: say so.
if awk -v b="${before%% *}" -v a="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN { exit !(b > n / 2 || a > n / 2 + 1) }'; then
    echo "== warning: a load average that high on $(nproc) cores means other processes shared the CPUs: the wall times are noisy (compare min..max before ranking)"
fi
peers_say "results: $out (medians), $raw (every run), $meta ($((SECONDS - start)) s)"
if ((failed)); then
    peers_say "$failed run(s) FAILED (above)"
    exit 3
fi
