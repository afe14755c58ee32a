#!/usr/bin/env bash
# User-space instructions per event on the bench.c workload (1,000 socket
# pairs, 100 active chains), counted exactly by callgrind: two runs with
# different write counts, the difference divided by the difference in
# events, so setup and teardown cancel out. (Callgrind counts the
# process's own instructions only: the kernel's side of each syscall is
# not in the count, the user-space syscall wrappers are.)
#
# Usage: benches/callgrind.sh [backend] [timers]
#   benches/callgrind.sh epoll          # plain
#   benches/callgrind.sh epoll timers   # each callback also restarts a timer
#   benches/callgrind.sh epoll edge     # edge-triggered read watchers
#   benches/callgrind.sh epoll oneshot  # one-shot, re-armed by Loop::start in each callback
#   benches/callgrind.sh epoll record   # plain, with the loop recorded (evloop::replay)
#   benches/callgrind.sh epoll async    # plain, on a loop with an async watcher (an internal fd)
#   benches/callgrind.sh poll|select|sim [timers]
#   benches/callgrind.sh io_uring [timers|edge|oneshot]   # builds with --features io-uring
#   benches/callgrind.sh bare           # no loop: only the reads and writes
#   benches/callgrind.sh libc           # the same, libc::read/write called directly
#   benches/callgrind.sh fdio           # the same, evloop's fd_io::read/write (the callbacks' calls)
#   benches/callgrind.sh mio            # the same chains on mio 1.x
#   benches/callgrind.sh all            # every row of docs/backends.md's table
#
# Builds into $CARGO_TARGET_DIR (default: target), with the cargo features
# in $FEATURES (io_uring adds "io-uring" itself; FEATURES=io-uring measures
# the other backends from the same build). Exits 2 when the backend refuses
# the workload (select: fds beyond FD_SETSIZE; io_uring where the kernel
# refuses io_uring_setup).
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-epoll}
mode=${2:-}
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)"; exit 1; }
features=${FEATURES:-}
if [ "$backend" = io_uring ] && [[ ",$features," != *,io-uring,* ]]; then
    features=${features:+$features,}io-uring
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Builds a target in the release profile and prints its executable's path.
build() { # cargo target flags...
    if ! cargo build --release ${features:+--features "$features"} "$@" \
        --message-format=json >"$out/build.json" 2>"$out/build.err"; then
        cat "$out/build.err" >&2
        exit 1
    fi
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' "$out/build.json" | tail -n1
}
chain_bin=$(build --example callgrind_chain)
bare_bin=$(build --bench bare_chain)

# The socket types whose Read/Write impls count as "socket read+write" (and
# glibc's read and write, which the `libc` baseline calls directly).
io_types='std::os::unix::net::stream::UnixStream|evloop::backends::sim::SimSocket|mio::net::uds::stream::UnixStream'

# One callgrind run: backend, writes, mode -> "instructions events
# io-instructions"; fails (printing the program's error) if the program
# does.
count() {
    local b=$1 writes=$2 m=$3 cmd
    case $b in
        bare | libc | fdio | mio) cmd=("$bare_bin" "$b" "$writes") ;;
        *) cmd=("$chain_bin" "$b" "$writes" $m) ;;
    esac
    if ! valgrind --tool=callgrind --callgrind-out-file="$out/cg.$writes" "${cmd[@]}" \
        >"$out/stdout.$writes" 2>"$out/stderr.$writes"; then
        grep -v '^==' "$out/stderr.$writes" | tail -n3 >&2
        return 1
    fi
    local ir events io
    ir=$(grep -E '^summary:|^totals:' "$out/cg.$writes" | head -n1 | awk '{print $2}')
    events=$(awk '/^events/ {print $2}' "$out/stdout.$writes")
    # The socket reads and writes the callbacks make (Rust's std wrappers
    # and libc's recv/send, inclusive): the rest is the loop's own work plus
    # the callback's bookkeeping.
    io=$(callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$out/cg.$writes" 2>/dev/null |
        grep -E ":<($io_types) as std::io::(Read>::read|Write>::write) \[|/linux/(read|write)\.c:(read|write) \[" |
        awk '{gsub(",", "", $1); s += $1} END {print s + 0}')
    echo "$ir $events $io"
}

# Prints the per-event line for one backend and mode; 2 if refused.
measure() {
    local b=$1 m=$2 r1 r2 ir1 ev1 io1 ir2 ev2 io2 per io
    if ! r1=$(count "$b" 20000 "$m" 2>"$out/why"); then
        echo "backend=$b ${m:-plain}: refused: $(tr '\n' ' ' <"$out/why")"
        return 2
    fi
    r2=$(count "$b" 120000 "$m")
    read -r ir1 ev1 io1 <<<"$r1"
    read -r ir2 ev2 io2 <<<"$r2"
    per=$(((ir2 - ir1) / (ev2 - ev1)))
    io=$(((io2 - io1) / (ev2 - ev1)))
    echo "backend=$b ${m:-plain}: $((ir2 - ir1)) instructions / $((ev2 - ev1)) events" \
        "= $per instructions per event (socket read+write $io, the rest $((per - io)))"
}

if [ "$backend" = all ]; then
    for b in libc fdio bare mio epoll poll select sim; do
        measure "$b" "" || true
        case $b in libc | fdio | bare | mio) ;; *) measure "$b" timers || true ;; esac
    done
else
    measure "$backend" "$mode"
fi
