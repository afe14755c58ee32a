#!/usr/bin/env bash
# The figures of docs/benchmarks.md, measured and drawn by one command:
#
#   benches/figures.sh               measure (about 25 minutes on 2 cores), then draw
#   QUICK=1 benches/figures.sh       a short sweep (fewer fds and rounds, about 8 minutes)
#   benches/figures.sh --draw-only   draw again from the CSVs in docs/figures/data/
#
# Measures with the peer harness (benches/peers: run.sh for wall time,
# instr.sh for callgrind's instructions per event, at every P of the sweep)
# and with benches/timers_1m.sh (the million timers, against libev),
# copies their CSVs into docs/figures/data/ (committed, so that the figures
# can be redrawn without measuring again), writes the machine, the date and
# the load average before and after each sweep to docs/figures/data/machine.txt
# (and prints them), then draws docs/figures/*.svg with the figure tool
# (benches/figures/, a crate of its own: plotters' SVG backend):
#
#   cargo run --release --manifest-path benches/figures/Cargo.toml -- \
#       --time CSV --instr CSV --timers CSV --machine FILE --out DIR
#
# Environment: FIGURES_DATA
# (default docs/figures/data), FIGURES_OUT (default docs/figures),
# CARGO_TARGET_DIR; and the sweeps' knobs: ROUNDS (7; QUICK: 3), PS (the
# harness's default, 100 to 100000 capped by RLIMIT_NOFILE; QUICK: 100 1000
# 10000), AS (100 1000; QUICK: 100), TARGET_US (the harness's 400000;
# QUICK: 100000), INSTR_A (100: the A of the instruction counts), ROUNDS_1M
# (7; QUICK: 3), N (timers, 1000000). Needs what the harness and
# timers_1m.sh need (cc, make, libev/libevent/libuv dev packages, valgrind,
# python3; the harness installs the Debian packages as root). A peer run
# that fails is reported and left out of the CSVs, and the figures are
# drawn all the same.
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

# The harness's exit status: 0, or 3 when some runs failed (reported, the
# others kept); anything else stops here.
harness() { # LOG COMMAND...
    local log=$1 rc=0
    shift
    "$@" >"$log" 2>&1 || rc=$?
    grep -E '^peers: (note|FAILED)' "$log" >&2 || true
    ((rc == 0 || rc == 3)) || { tail -n 20 "$log" >&2; die "$* failed (log: $log)"; }
}

# 1. Wall time per event against P, every peer (the io_uring ones where
#    they start), timers off and on. (QUICK is this script's: the harness
#    has a QUICK of its own.)
note_load "before the wall-time sweep"
harness "$scratch/time.log" env -u QUICK PEERS_RESULTS="$scratch/time" ROUNDS="$ROUNDS" AS="$AS" \
    SELECT_MAX_P="$SELECT_MAX_P" ${PS:+"PS=$PS"} ${TARGET_US:+"TARGET_US=$TARGET_US"} benches/peers/run.sh
raw=$(ls "$scratch"/time/*.raw.csv) || die "the wall-time sweep wrote no raw CSV in $scratch/time"
cp "$raw" "$data/peers_time.raw.csv"
cp "${raw%.raw.csv}.csv" "$data/peers_time.csv"
note_load "after the wall-time sweep"

# 2. Instructions per event (callgrind) at every P the sweep ran, A=INSTR_A,
#    every peer (select only while its fds fit under FD_SETSIZE).
ps=$(tail -n +2 "$data/peers_time.csv" | cut -d, -f3 | sort -n -u | tr '\n' ' ')
echo "impl,backend,P,A,timers,instr_per_event" >"$scratch/instr.csv"
for p in $ps; do
    ((p >= INSTR_A)) || continue
    say "instructions per event at P=$p A=$INSTR_A (load $(load))"
    harness "$scratch/instr-$p.log" env PEERS_RESULTS="$scratch/instr-$p" SELECT_MAX_P="$SELECT_MAX_P" \
        benches/peers/instr.sh "$p" "$INSTR_A"
    grep -v '^impl,' "$scratch"/instr-"$p"/*.instr.csv | grep -v ',failed$' >>"$scratch/instr.csv" || true
done
cp "$scratch/instr.csv" "$data/peers_instr.csv"
note_load "after the instruction counts"

# 3. The million timers, libev then evloop in each round.
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
