#!/usr/bin/env bash
# Timers at a million, evloop against libev (issue 12): the same phases on
# the same pseudo-random sequence, in C on libev (benches/timers_1m.c) and
# in Rust on evloop (benches/timers_1m.rs); docs/benchmarks.md has the
# numbers and what they mean.
#
# Usage:
#   benches/timers_1m.sh [ROUNDS]   # wall time, default 7 rounds (about 1 minute)
#   benches/timers_1m.sh callgrind  # instructions and simulated cache misses per
#                                   # operation (about 3 minutes; needs valgrind)
# Environment: N (armed timers, default 1000000), OPS (operations per phase,
# default N), CARGO_TARGET_DIR (default: target), CSV (where the wall-time
# mode writes its raw results, one line per round, program and phase:
# round,impl,phase,n,ops,value,unit; default
# $CARGO_TARGET_DIR/timers_1m/results.csv; benches/figures.sh draws them).
# Needs cc, libev (libev-dev) and python3.
#
# Wall time: each round runs the libev program, then the evloop one (each a
# fresh process doing every phase once), so that noise from other work on
# the machine hits both alike; per phase it prints min / median / max ns per
# operation over the rounds, the ratio of the medians (evloop / libev) and
# the range of the per-round ratios (each evloop run against the libev run
# just before it). Memory: the peak RSS while arming the N timers minus the
# RSS before, per timer, the user's storage included (libev's ev_timer
# array, evloop's Vec of handles). Before the table, it checks that both
# programs drew the same plan (a checksum of every index drawn).
#
# Callgrind: for restart, again, stop_start and mixed, two runs of that
# phase alone (after the arm) with OPS1 and OPS2 operations (defaults
# 100000 and 300000), counted only inside the phase's function
# (--toggle-collect); the difference divided by OPS2 - OPS1 cancels what
# does not scale with the operations. Arm and expire are counted once
# (their per-op figure is the phase's count divided by N). The cache
# columns are callgrind's simulation (D1 and I1 as the host's, LL set to
# this machine's 32 MiB L3, no prefetching): DLmr + DLmw are the accesses
# that would go to memory. Both programs are built with line tables
# (CARGO_PROFILE_RELEASE_DEBUG=line-tables-only, cc -g) into
# $CARGO_TARGET_DIR/timers_1m/, and the callgrind files are kept there for
# callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-7}
target=${CARGO_TARGET_DIR:-target}
n=${N:-1000000}
ops=${OPS:-$n}
out="$target/timers_1m"
mkdir -p "$out"

# Builds the evloop program in the release profile; prints its path.
build_rust() { # extra environment (name=value ...)
    local json="$out/build.json"
    if ! env "$@" cargo build --release --bench timers_1m --message-format=json >"$json" 2>"$out/build.err"; then
        cat "$out/build.err" >&2
        exit 1
    fi
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' "$json" | tail -n1
}

machine() {
    echo "nproc: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "kernel: $(uname -sr); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rustc: $(rustc --version); cc: $(cc --version | head -n1)"
    echo "libev: $(dpkg-query -W -f='${Version}' libev-dev 2>/dev/null || echo '?')"
    echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
}

if [ "$mode" = callgrind ]; then
    command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)"; exit 1; }
    ops1=${OPS1:-100000}
    ops2=${OPS2:-300000}
    cc -O2 -g -Wall -o "$out/timers_1m_libev_g" benches/timers_1m.c -lev
    rust=$(CARGO_TARGET_DIR="$target/timers_1m/lines" build_rust CARGO_PROFILE_RELEASE_DEBUG=line-tables-only)
    libev="$out/timers_1m_libev_g"
    machine
    echo "N=$n; phases restart, again, stop_start, mixed: ($ops2 ops - $ops1 ops) / $((ops2 - ops1)); arm, expire: one run / N"
    # One callgrind run: impl, phase, ops, phases to run -> the summary
    # line (Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw).
    count() {
        local impl=$1 phase=$2 k=$3 run=$4 bin file
        case $impl in libev) bin=$libev ;; *) bin=$rust ;; esac
        file="$out/callgrind.$impl.$phase.$k"
        valgrind --tool=callgrind --cache-sim=yes --LL=33554432,16,64 \
            --toggle-collect="*phase_${phase}*" --callgrind-out-file="$file" \
            "$bin" "$n" "$k" "$run" >"$file.stdout" 2>"$file.stderr" || {
            grep -v '^==' "$file.stderr" | tail -n3 >&2
            exit 1
        }
        grep -E '^(summary|totals):' "$file" | head -n1 | cut -d' ' -f2-
    }
    printf '%-10s %-7s %8s %6s %6s %6s %6s\n' phase impl Ir/op Dr/op Dw/op D1m/op LLm/op
    for phase in arm restart again stop_start mixed expire; do
        for impl in libev evloop; do
            case $phase in
                arm) read -r -a a <<<"$(count "$impl" arm "$ops1" arm)"; b=(0 0 0 0 0 0 0 0 0); div=$n ;;
                expire)
                    read -r -a a <<<"$(count "$impl" expire "$ops" all)"; b=(0 0 0 0 0 0 0 0 0); div=$n ;;
                *)
                    # The two sizes in parallel (two cores).
                    count "$impl" "$phase" "$ops1" "$phase" >"$out/cg.1" &
                    count "$impl" "$phase" "$ops2" "$phase" >"$out/cg.2"
                    wait
                    read -r -a b <<<"$(cat "$out/cg.1")"
                    read -r -a a <<<"$(cat "$out/cg.2")"
                    div=$((ops2 - ops1)) ;;
            esac
            awk -v p="$phase" -v i="$impl" -v d="$div" \
                -v ir=$((a[0] - b[0])) -v dr=$((a[1] - b[1])) -v dw=$((a[2] - b[2])) \
                -v d1=$((a[4] + a[5] - b[4] - b[5])) -v ll=$((a[7] + a[8] - b[7] - b[8])) \
                'BEGIN { printf "%-10s %-7s %8.1f %6.1f %6.1f %6.2f %6.2f\n", p, i, ir / d, dr / d, dw / d, d1 / d, ll / d }'
        done
    done
    echo "(callgrind files: $out/callgrind.*; e.g. callgrind_annotate --auto=yes $out/callgrind.evloop.restart.$ops2)"
    exit 0
fi

rounds=$mode
case $rounds in '' | *[!0-9]*) echo "usage: $0 [ROUNDS | callgrind]" >&2; exit 2 ;; esac
cc -O2 -Wall -o "$out/timers_1m_libev" benches/timers_1m.c -lev
rust=$(build_rust)
libev="$out/timers_1m_libev"
csv=${CSV:-$out/results.csv}
mkdir -p "$(dirname "$csv")"
echo "round,impl,phase,n,ops,value,unit" >"$csv"
echo "== machine"
machine
echo
echo "== timers at a million: N=$n, OPS=$ops, $rounds rounds (libev, evloop alternately); raw results: $csv"
for r in $(seq 1 "$rounds"); do
    for impl in libev evloop; do
        case $impl in libev) bin=$libev ;; *) bin=$rust ;; esac
        "$bin" "$n" "$ops" | tail -n +2 | sed "s/^/$r,/" >>"$csv"
    done
done
# The size of a registry entry, from N idle watchers (once).
"$rust" "$n" 0 idle_memory | tail -n +2 | sed "s/^/0,/" >>"$csv"
python3 - "$csv" <<'EOF'
import csv, statistics, sys

rows = list(csv.DictReader(open(sys.argv[1])))
sums = {r["impl"]: r["value"] for r in rows if r["phase"] == "plan_checksum"}
if len(set(sums.values())) != 1:
    sys.exit(f"the two programs drew different plans: {sums}")
val = {}
for r in rows:
    val.setdefault((r["phase"], r["impl"]), {})[int(r["round"])] = float(r["value"])
sizes = ("plan_checksum", "watcher_size", "handle_size", "mem_idle_peak")
phases = [p for p in dict.fromkeys(r["phase"] for r in rows) if p not in sizes]

def mmm(v):
    v = sorted(v.values())
    return v[0], statistics.median(v), v[-1]

print(f"{'phase':<11} {'libev min / median / max':>26} {'evloop min / median / max':>27}"
      f" {'evloop/libev':>13} {'per-round range':>16}")
for p in phases:
    a, b = val[(p, "libev")], val[(p, "evloop")]
    (amin, amed, amax), (bmin, bmed, bmax) = mmm(a), mmm(b)
    pair = sorted(b[k] / a[k] for k in a if k in b)
    unit = rows[[r["phase"] for r in rows].index(p)]["unit"]
    print(f"{p:<11} {amin:8.1f} {amed:8.1f} {amax:8.1f} {bmin:8.1f} {bmed:8.1f} {bmax:8.1f}  "
          f"{bmed / amed:11.2f}  {pair[0]:6.2f} - {pair[-1]:<6.2f}  {unit}")

# Where the bytes go (medians over the rounds).
one = lambda p, i: statistics.median(val[(p, i)].values())
lib_total, ev_total = one("mem_peak", "libev"), one("mem_peak", "evloop")
watcher, handle = one("watcher_size", "libev"), one("handle_size", "evloop")
entry = one("mem_idle_peak", "evloop") - handle
print(f"\nmemory per armed timer (peak RSS while arming, minus RSS before):")
print(f"  libev  {lib_total:6.1f} B = ev_timer {watcher:.0f} (the user's) + heap {lib_total - watcher:.1f}")
print(f"  evloop {ev_total:6.1f} B = handle {handle:.0f} (the user's) + registry entry {entry:.1f}"
      f" (an idle watcher's memory minus its handle) + timer heap {ev_total - handle - entry:.1f}")
print(f"  evloop / libev: {ev_total / lib_total:.2f}")
EOF
