#!/usr/bin/env bash
# The figures of docs/benchmarks.md, measured and drawn by one command:
#
#   benches/figures.sh               measure (about 25 minutes on 2 cores), then draw
#   QUICK=1 benches/figures.sh       a short sweep (fewer fds and rounds, about 8 minutes)
#   benches/figures.sh --draw-only   draw again from the CSVs in docs/figures/data/
#
# Measures with the shared peer harness (../shared/peers: run.sh for wall
# time, instr.sh for callgrind's instructions per event, at every P of the
# sweep) and with benches/timers_1m.sh (the million timers, against libev),
# copies their CSVs into docs/figures/data/ (committed, so that the figures
# can be redrawn without measuring again), writes the machine, the date and
# the load average before and after each sweep to docs/figures/data/machine.txt
# (and prints them), then draws docs/figures/*.svg with the figure tool
# (benches/figures/, a crate of its own: plotters' SVG backend):
#
#   cargo run --release --manifest-path benches/figures/Cargo.toml -- \
#       --time CSV --instr CSV --timers CSV --machine FILE --out DIR
#
# Environment: PEERS_DIR (the harness, default ../shared/peers), PEERS_WORK
# (its work copy, default ${TMPDIR:-/tmp}/evloop-peers), FIGURES_DATA
# (default docs/figures/data), FIGURES_OUT (default docs/figures),
# CARGO_TARGET_DIR; and the sweeps' knobs: ROUNDS (7; QUICK: 3), PS (the
# harness's default, 100 to 100000 capped by RLIMIT_NOFILE; QUICK: 100 1000
# 10000), AS (100 1000; QUICK: 100), TARGET_US (the harness's 400000;
# QUICK: 100000), INSTR_A (100: the A of the instruction counts), ROUNDS_1M
# (7; QUICK: 3), N (timers, 1000000). Needs what the harness and
# timers_1m.sh need (cc, make, libev/libevent/libuv dev packages, valgrind,
# python3; the harness installs the Debian packages as root).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "figures: error: $*" >&2; exit 1; }
say() { echo "figures: $*" >&2; }

data=${FIGURES_DATA:-docs/figures/data}
out=${FIGURES_OUT:-docs/figures}
mode=measure
case ${1:-} in
    '') ;;
    --draw-only) mode=draw ;;
    *) die "usage: $0 [--draw-only]" ;;
esac

draw() {
    say "drawing $out/*.svg from $data/"
    # Its own target dir (under the user's CARGO_TARGET_DIR, if set).
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/figures" \
        cargo run -q --release --manifest-path benches/figures/Cargo.toml -- \
        --time "$data/peers_time.raw.csv" --instr "$data/peers_instr.csv" \
        --timers "$data/timers_1m.csv" --machine "$data/machine.txt" --out "$out"
}

if [[ $mode == draw ]]; then
    [[ -f $data/machine.txt ]] && sed 's/^/  /' "$data/machine.txt" >&2
    draw
    exit 0
fi

peers=${PEERS_DIR:-../shared/peers}
[[ -x $peers/run.sh && -x $peers/instr.sh ]] ||
    die "the peer harness is not at $peers (no run.sh and instr.sh there): set PEERS_DIR to it"
peers=$(cd "$peers" && pwd -P)
export PEERS_WORK=${PEERS_WORK:-${TMPDIR:-/tmp}/evloop-peers}
target=${CARGO_TARGET_DIR:-target}
scratch=$target/figures/$(date +%Y%m%d-%H%M%S)
mkdir -p "$data" "$out" "$scratch"
scratch=$(cd "$scratch" && pwd -P)

if [[ -n ${QUICK:-} ]]; then
    ROUNDS=${ROUNDS:-3}; PS=${PS:-"100 1000 10000"}; AS=${AS:-100}
    TARGET_US=${TARGET_US:-100000}; ROUNDS_1M=${ROUNDS_1M:-3}
fi
ROUNDS=${ROUNDS:-7}; AS=${AS:-"100 1000"}; INSTR_A=${INSTR_A:-100}; ROUNDS_1M=${ROUNDS_1M:-7}
SELECT_MAX_P=${SELECT_MAX_P:-500}

load() { cut -d' ' -f1-3 /proc/loadavg; }
machine=$data/machine.txt
{
    echo "date: $(date -u +'%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "kernel: $(uname -sr); rustc: $(rustc --version | cut -d' ' -f2)"
    echo "sweep: ROUNDS=$ROUNDS PS=${PS:-default} AS=$AS TARGET_US=${TARGET_US:-default} INSTR_A=$INSTR_A ROUNDS_1M=$ROUNDS_1M${QUICK:+ (QUICK)}"
} >"$machine"
note_load() { echo "load $1: $(load)" | tee -a "$machine" >&2; }

# 1. Build the harness (a one-run sweep of the baseline), and see whether
#    libev's io_uring backend runs here (evloop's peer binary has no
#    io_uring: the harness builds evloop with its default features).
say "building the peer harness (work copy: $PEERS_WORK)"
# (QUICK is this script's: the harness has a QUICK of its own.)
env -u QUICK PEERS_RESULTS="$scratch/build" ONLY='^baseline' ROUNDS=1 PS=100 AS=100 TIMERS=0 \
    "$peers/run.sh" >"$scratch/build.log" 2>&1 || { tail -n 20 "$scratch/build.log" >&2; die "the harness did not build or run (log: $scratch/build.log)"; }
extra=
if "$PEERS_WORK/build/bench_libev" -b iouring -n 100 -a 10 -w 1000 >/dev/null 2>&1; then
    extra="libev iouring|build/bench_libev -b iouring"
    say "libev's io_uring backend runs here: measured too"
else
    say "libev's io_uring backend does not run here: left out"
fi

# 2. Wall time per event against P, every peer, timers off and on.
note_load "before the wall-time sweep"
env -u QUICK PEERS_RESULTS="$scratch/time" ROUNDS="$ROUNDS" AS="$AS" SELECT_MAX_P="$SELECT_MAX_P" \
    EXTRA_PEERS="$extra" ${PS:+"PS=$PS"} ${TARGET_US:+"TARGET_US=$TARGET_US"} \
    "$peers/run.sh" >"$scratch/time.log" 2>&1 || { tail -n 20 "$scratch/time.log" >&2; die "the wall-time sweep failed (log: $scratch/time.log)"; }
grep -E '^(note|FAILED)' "$scratch/time.log" >&2 || true
raw=$(ls "$scratch"/time/*.raw.csv) || die "the wall-time sweep wrote no raw CSV in $scratch/time"
cp "$raw" "$data/peers_time.raw.csv"
cp "${raw%.raw.csv}.csv" "$data/peers_time.csv"
note_load "after the wall-time sweep"

# 3. Instructions per event (callgrind) at every P the sweep ran, A=INSTR_A;
#    the peers instr.sh leaves out by default are added (select only while
#    its fds fit under FD_SETSIZE).
ps=$(tail -n +2 "$data/peers_time.csv" | cut -d, -f3 | sort -n -u | tr '\n' ' ')
echo "impl,backend,P,A,timers,instr_per_event" >"$scratch/instr.csv"
for p in $ps; do
    ((p >= INSTR_A)) || continue
    more="libev select|build/bench_libev -b select;evloop select|rust/target/release/bench_evloop -b select"
    ((p <= SELECT_MAX_P)) || more=
    more="libevent poll|build/bench_libevent -b poll;polling epoll-oneshot|rust/target/release/bench_polling -b epoll-oneshot${more:+;$more}${extra:+;$extra}"
    say "instructions per event at P=$p A=$INSTR_A (load $(load))"
    env -u QUICK PEERS_RESULTS="$scratch/instr-$p" EXTRA_PEERS="$more" "$peers/instr.sh" "$p" "$INSTR_A" \
        >"$scratch/instr-$p.log" 2>&1 || { tail -n 20 "$scratch/instr-$p.log" >&2; die "instr.sh $p $INSTR_A failed (log: $scratch/instr-$p.log)"; }
    grep -v '^impl,' "$scratch"/instr-"$p"/*.instr.csv >>"$scratch/instr.csv"
done
cp "$scratch/instr.csv" "$data/peers_instr.csv"
note_load "after the instruction counts"

# 4. The million timers, libev then evloop in each round.
note_load "before the 1M-timer rounds"
CSV=$scratch/timers_1m.csv benches/timers_1m.sh "$ROUNDS_1M" >"$scratch/timers_1m.txt" 2>&1 ||
    { tail -n 20 "$scratch/timers_1m.txt" >&2; die "benches/timers_1m.sh failed (log: $scratch/timers_1m.txt)"; }
cp "$scratch/timers_1m.csv" "$data/timers_1m.csv"
cp "$scratch/timers_1m.txt" "$data/timers_1m.txt"
note_load "after the 1M-timer rounds"

say "measured on:"
sed 's/^/  /' "$machine" >&2
say "CSVs: $data/ (logs: $scratch/)"
draw
