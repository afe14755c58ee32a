# shellcheck shell=bash disable=SC2034
# (SC2034: the LOAD_* results are read by the scripts that source this.)
# Sourced by benches/hyper_wrk.sh, benches/completion.sh,
# benches/net_syscalls.sh and benches/replay_overhead.sh: servers under a load generator (wrk,
# redis-benchmark), measured from outside. Needs bash 4, python3, and wrk,
# redis-benchmark or strace for the functions that run them.
#
#   load_init                         a scratch dir (LOAD_TMP); traps EXIT to end the
#                                     servers started and remove it
#   load_start NAME PATTERN CMD...    runs a server until it prints "PATTERN ADDR ...";
#                                     sets LOAD_PID[NAME], LOAD_ADDR[NAME] (returns 1,
#                                     its output shown, if it exits or takes 30 s)
#   load_begin PID / load_end PID N   around one load run: the server's CPU (utime +
#                                     stime, /proc/PID/stat) and the client's (this
#                                     shell's reaped children, `times`) per request,
#                                     in microseconds: LOAD_CPU_US, LOAD_CLIENT_US
#   load_wrk OUT ARGS...              wrk ARGS into OUT; fails on a socket error or a
#                                     non-2xx answer; sets LOAD_REQUESTS, LOAD_RPS
#   load_redis OUT ARGS...            redis-benchmark --csv ARGS into OUT; fails on an
#                                     error; sets LOAD_RPS
#   load_summary RESULTS [A/B[<=T]...]  per group, each variant's median and min..max
#                                     of req/s and CPU per request (server, client);
#                                     then each ratio A/B of the CPU medians (against
#                                     a target T if given) and the median and min..max
#                                     of the rounds' own ratios (A/B in each round),
#                                     warning when A's and B's ranges overlap. RESULTS has a line per run:
#                                     "GROUP VARIANT ROUND REQ/S CPU_US CLIENT_US";
#                                     LOAD_VARIANTS (names) orders the variants
#   load_strace PID OUT CMD...        CMD's status, while `strace -c -f -p PID -o OUT`
#                                     counts the server's syscalls
#   load_strace_top OUT N [TOP]       the total per request (N requests) and the TOP
#                                     (8) syscalls per request, errors included
#   load_avg                          the load average (1, 5, 15 minutes)
#
# LOAD_PIN="S C" (set by the caller before load_start) pins the servers to
# CPU S and the load generators to CPU C with taskset; empty: no pinning.
# Unpinned, the scheduler puts the two on one core in some runs (less CPU
# per request on both sides: no wake-up crosses cores) and on two in
# others, and the CPU per request of one server moved by 1.7x between
# rounds on the 2-core VM.

load_avg() { cut -d' ' -f1-3 /proc/loadavg; }

# A run's header: the machine, the commit and the pinning, then $1 (what
# loads it, how many rounds), the load before, and QUICK's warning.
load_header() {
    echo "machine: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)), $(uname -r)," \
        "commit $(git describe --always --dirty 2>/dev/null || echo unknown), pinned (server CPU, client CPU): ${LOAD_PIN:-no}"
    echo "$1"
    echo "load before: $(load_avg)"
    [ "${QUICK:-0}" != 1 ] ||
        echo "QUICK: a smoke test; at 10 ms ticks over runs this short, the ratios below mean nothing"
}

# The taskset prefix for a server (0) or a load generator (1), if pinned.
load_pinned() {
    local cpus
    read -r -a cpus <<<"${LOAD_PIN:-}"
    [ "${#cpus[@]}" = 0 ] || echo "taskset -c ${cpus[$1]}"
}

declare -A LOAD_PID LOAD_ADDR
LOAD_PIDS=()
LOAD_TMP=

load_cleanup() {
    local p
    for p in "${LOAD_PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    [ -z "$LOAD_TMP" ] || rm -rf "$LOAD_TMP"
}

load_init() {
    LOAD_TMP=$(mktemp -d)
    trap load_cleanup EXIT
}

load_start() {
    local name=$1 pattern=$2 out
    shift 2
    out=$LOAD_TMP/$name.out
    : >"$out" # there before the server writes to it
    # shellcheck disable=SC2046
    $(load_pinned 0) "$@" >"$out" 2>"$LOAD_TMP/$name.err" &
    LOAD_PID[$name]=$!
    LOAD_PIDS+=("$!")
    for _ in $(seq 300); do
        grep -q "^$pattern " "$out" && break
        kill -0 "${LOAD_PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    LOAD_ADDR[$name]=$(sed -n "s/^$pattern \\([^ ]*\\).*/\\1/p" "$out")
    if [ -z "${LOAD_ADDR[$name]}" ]; then
        echo "$name did not listen ($*):" >&2
        cat "$out" "$LOAD_TMP/$name.err" >&2
        return 1
    fi
}

# The CPU time of this shell's reaped children, in microseconds, from
# `times` run by the caller in this very shell (in a subshell, as under
# $(...), the children would start at zero).
load_times_us() {
    awk 'NR == 2 {
        t = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] }
        printf "%.0f", t * 1e6
    }' "$LOAD_TMP/times"
}

load_begin() {
    LOAD_TICKS0=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
    times >"$LOAD_TMP/times"
    LOAD_CHILD0=$(load_times_us)
}

load_end() {
    local ticks child
    ticks=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
    times >"$LOAD_TMP/times"
    child=$(load_times_us)
    LOAD_CPU_US=$(awk -v t="$((ticks - LOAD_TICKS0))" -v hz="$(getconf CLK_TCK)" -v n="$2" \
        'BEGIN { printf "%.3f", t / hz * 1e6 / n }')
    LOAD_CLIENT_US=$(awk -v c="$((child - LOAD_CHILD0))" -v n="$2" 'BEGIN { printf "%.3f", c / n }')
}

load_wrk() {
    local out=$1
    shift
    # shellcheck disable=SC2046
    $(load_pinned 1) wrk "$@" >"$out" || { cat "$out" >&2; echo "wrk $* failed" >&2; return 1; }
    if grep -q 'Socket errors\|Non-2xx' "$out"; then
        cat "$out" >&2
        echo "wrk $*: errors (above)" >&2
        return 1
    fi
    LOAD_RPS=$(sed -n 's/^Requests\/sec: *\([0-9.]*\)/\1/p' "$out")
    LOAD_REQUESTS=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$out")
}

load_redis() {
    local out=$1 status=0
    shift
    # shellcheck disable=SC2046
    $(load_pinned 1) redis-benchmark --csv "$@" >"$out" 2>"$out.err" || status=$?
    # The servers measured here answer CONFIG GET with +OK: that warning is expected.
    if [ "$status" != 0 ] || grep -v 'Could not fetch server CONFIG' "$out.err" | grep -q . ||
        grep -qi 'error' "$out"; then
        cat "$out" "$out.err" >&2
        echo "redis-benchmark $*: exit status $status, errors (above)" >&2
        return 1
    fi
    LOAD_RPS=$(awk -F'"' 'NR == 2 { print $4 }' "$out")
}

load_summary() {
    python3 - "$@" <<'PY'
import os, statistics, sys
from collections import OrderedDict
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
groups = OrderedDict()
# Variants in LOAD_VARIANTS's order (the runs' order rotates), then the others.
order = os.environ.get("LOAD_VARIANTS", "").split()
rows.sort(key=lambda r: order.index(r[1]) if r[1] in order else len(order))
for g, v, rnd, rps, cpu, client in rows:
    groups.setdefault(g, OrderedDict()).setdefault(v, []).append((float(rps), float(cpu), float(client), rnd))
def stats(xs):
    return statistics.median(xs), min(xs), max(xs)
for g, variants in groups.items():
    print(f"== {g}")
    print(f"  {'variant':16} {'req/s median':>12} {'min..max':>17}  {'server CPU us/req':>17} {'min..max':>13}  {'client us/req':>13}")
    for v, runs in variants.items():
        r, c, k = (stats([x[i] for x in runs]) for i in range(3))
        print(f"  {v:16} {r[0]:12,.0f} {r[1]:8,.0f}..{r[2]:<8,.0f} {c[0]:17.3f} {c[1]:6.3f}..{c[2]:<6.3f} {k[0]:13.3f}")
    for spec in sys.argv[2:]:
        pair, _, target = spec.partition("<=")
        a, b = pair.split("/")
        if a not in variants or b not in variants:
            continue
        ca, cb = ([x[1] for x in variants[v]] for v in (a, b))
        ratio = statistics.median(ca) / statistics.median(cb)
        line = f"ratio {g}: CPU per request {a}/{b} x{ratio:.3f}"
        if target:
            line += f" (target <= {target}: {'met' if ratio <= float(target) else 'MISSED'})"
        # Paired within each round (measured minutes apart at most), which
        # cancels the machine's slower drifts that the medians keep.
        pa, pb = ({x[3]: x[1] for x in variants[v]} for v in (a, b))
        paired = sorted(pa[r] / pb[r] for r in pa if r in pb and pb[r] > 0)
        if len(paired) > 1:
            line += (f"; per round x{statistics.median(paired):.3f}"
                     f" ({paired[0]:.3f}..{paired[-1]:.3f})")
        if min(ca) <= max(cb) and min(cb) <= max(ca):
            line += "; WARNING: the ranges overlap (within this run's noise)"
        print(line)
PY
}

load_strace() {
    local pid=$1 out=$2 st status=0
    shift 2
    strace -c -f -p "$pid" -o "$out" 2>"$out.attach" &
    st=$!
    until grep -q "attached" "$out.attach" 2>/dev/null; do
        kill -0 "$st" 2>/dev/null || { cat "$out.attach" >&2; return 1; }
        sleep 0.1
    done
    "$@" || status=$?
    kill -INT "$st"
    wait "$st" || true
    return "$status"
}

load_strace_top() {
    awk -v n="$2" -v top="${3:-8}" '
        /^-|^% time|^$/ { next }
        $NF == "total" { total = $4; next }
        { calls[$NF] = $4; errs[$NF] = (NF == 6 ? $5 : 0) }
        END {
            printf "%.3f syscalls per request:", total / n
            k = 0
            while (k < top) {
                best = ""
                for (s in calls) if (best == "" || calls[s] > calls[best]) best = s
                if (best == "") break
                printf " %s %.3f", best, calls[best] / n
                if (errs[best]) printf " (%.3f failed)", errs[best] / n
                delete calls[best]
                k++
            }
            printf "\n"
        }' "$1"
}
