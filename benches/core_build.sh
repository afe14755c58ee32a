#!/usr/bin/env bash
# What a dependent pays for evloop's core against mio's: two throwaway
# binary crates in a temporary directory, one depending on this checkout
# with `default-features = false` (the loop, its kinds, the OS backends,
# the simulator), one on mio 1 from crates.io with `os-poll` (Poll and
# its selector; no `net`); and, for scale, a third on evloop with exec,
# net and replay. For each: `cargo tree -e normal`, the lines of Rust its
# build compiles (the `.rs` files that rustc's dep-info lists for each
# library, so exactly what was compiled; evloop's own and all crates'),
# and `cargo build` from an empty target dir, debug and release, RUNS
# times each (the min, median and max are printed).
#
# Usage: benches/core_build.sh [RUNS]   (default 3; docs/benchmarks.md,
# "The core as a dependency", has a run). Uses the cargo registry cache
# (`--offline` first, then the network).
set -euo pipefail
runs=${1:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

make_crate() { # name, dependency line, main.rs body
    mkdir -p "$tmp/$1/src"
    cat >"$tmp/$1/Cargo.toml" <<EOF
[package]
name = "$1"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$2

[workspace]
EOF
    printf '%s\n' "$3" >"$tmp/$1/src/main.rs"
}

make_crate evloop_core "evloop = { path = \"$repo\", default-features = false }" '
use std::time::Duration;
fn main() {
    let mut lp: evloop::Loop = evloop::Loop::new().unwrap();
    lp.timer(Duration::from_millis(1), Duration::ZERO, |_, _, _| {}).unwrap();
    lp.run(evloop::RunMode::Default, &mut ()).unwrap();
}'
make_crate mio_os_poll 'mio = { version = "1", features = ["os-poll"] }' '
use std::time::Duration;
fn main() {
    let mut poll = mio::Poll::new().unwrap();
    let mut events = mio::Events::with_capacity(8);
    poll.poll(&mut events, Some(Duration::from_millis(1))).unwrap();
}'
make_crate evloop_products "evloop = { path = \"$repo\", features = [\"exec\", \"net\", \"replay\"] }" '
fn main() {
    let _: evloop::net::Conns<()> = evloop::net::Conns::new();
    let _ = evloop::replay::MemoryTrace::new();
}'

cargo_in() { # crate, args...
    local c=$1
    shift
    (cd "$tmp/$c" && CARGO_TARGET_DIR="$tmp/$c/target" cargo "$@")
}

# The lines of the `.rs` files rustc read for each library of the last
# build (dep-info), the crate's own (`$2`) and every crate's.
lines() { # crate, library name
    local d="$tmp/$1/target/debug/deps"
    local own all
    cd "$tmp/$1" # the crate's own paths are relative
    local ownf allf
    ownf=$(sed -n '1s/^[^:]*: //p' "$d"/"$2"-*.d | head -1 | tr ' ' '\n' | grep '\.rs$' | sort -u)
    allf=$(for f in "$d"/*.d; do sed -n '1s/^[^:]*: //p' "$f"; done | tr ' ' '\n' | grep '\.rs$' | sort -u)
    # Lines, and code lines (neither blank nor a comment line: `//`,
    # `///`, `//!`).
    own="$(echo "$ownf" | wc -l) files, $(echo "$ownf" | xargs cat | wc -l) lines, $(echo "$ownf" | xargs cat | grep -cvE '^[[:space:]]*(//|$)') code"
    all="$(echo "$allf" | wc -l) files, $(echo "$allf" | xargs cat | wc -l) lines, $(echo "$allf" | xargs cat | grep -cvE '^[[:space:]]*(//|$)') code"
    local products
    products=$(echo "$ownf" | grep -cE '/src/(exec|net|replay)/|/net_sys\.rs$' || true)
    echo "$own|$all|$products"
}

stats() { # numbers: min median max
    sort -n | awk '{a[NR]=$1} END {printf "min %.1f s, median %.1f s, max %.1f s", a[1], a[int((NR+1)/2)], a[NR]}'
}

for c in evloop_core mio_os_poll evloop_products; do
    cargo_in "$c" generate-lockfile --offline 2>/dev/null || cargo_in "$c" generate-lockfile
    cargo_in "$c" fetch -q
done

echo "machine: $(nproc) cores, $(uname -sr); $(rustc --version); runs: $runs"
for c in evloop_core mio_os_poll evloop_products; do
    lib=${c%%_*}
    echo
    echo "=== $c"
    cargo_in "$c" tree -e normal
    for profile in debug release; do
        flag=
        [ "$profile" = release ] && flag=--release
        times=()
        for _ in $(seq "$runs"); do
            rm -rf "$tmp/$c/target"
            start=$(date +%s.%N)
            cargo_in "$c" build -q --offline $flag
            times+=("$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')")
        done
        echo "cargo build $flag ($profile) from an empty target dir: $(printf '%s\n' "${times[@]}" | stats)"
        if [ "$profile" = debug ]; then
            cargo_in "$c" build -q --offline
            IFS='|' read -r own all products < <(lines "$c" "$lib")
            echo "Rust compiled: $lib's own $own; all crates $all"
            [ "$lib" = evloop ] && echo "evloop files of exec/, net/, replay/ or net_sys.rs among them: $products"
        fi
    done
done
