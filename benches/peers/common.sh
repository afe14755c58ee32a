# Sourced by benches/peers/run.sh, instr.sh, churn.sh, benches/setup_per_fd.sh
# and benches/completion.sh,
# from the repository root:
#
#   peers_prepare DEBIAN_PACKAGE...   installs the missing packages (as root),
#                                     builds every peer, lists them
#   (benches/peers/churn.sh uses its parts: peers_paths,
#   peers_install_packages, peers_build; benches/completion.sh
#   peers_paths, peers_install_packages, peers_build_rust)
#
# Builds all of benches/peers/c (make) into $PEERS_BUILD/build and the Rust
# crate benches/peers/rust (cargo build --release, every binary) with its
# target dir at $PEERS_BUILD/rust/target, where PEERS_BUILD is
# ${CARGO_TARGET_DIR:-target}/peers (absolute). Sets PEERS_RESULTS (default
# target/peers-results, absolute) and PEERS, the peers to run as
# "label|command": the label is "impl backend" as the binary prints them,
# the command is relative to PEERS_BUILD (the scripts run from there).
# io_uring peers are kept only where they start (a note says so otherwise).
# Knobs: ONLY (a regex on the label), EXTRA_PEERS ("label|command;...").
# Messages go to stderr, so that stdout carries only results.

peers_die() { echo "peers: error: $*" >&2; exit 1; }
peers_say() { echo "peers: $*" >&2; }
peers_load() { cut -d' ' -f1-3 /proc/loadavg; }

# The missing ones among the given Debian packages, installed with apt-get
# as root; otherwise the command to run is printed.
peers_install_packages() {
    local p missing=()
    if ! command -v dpkg-query >/dev/null; then
        peers_say "no dpkg-query (not Debian?): not checking for $*; install their equivalents if the build fails"
        return 0
    fi
    for p; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    [[ $(id -u) == 0 ]] ||
        peers_die "missing Debian packages: ${missing[*]}. Install them: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    peers_say "installing missing Debian packages: apt-get install -y ${missing[*]}"
    apt-get update -q >&2 || peers_die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
        peers_die "apt-get install -y ${missing[*]} failed"
}

peers_build() {
    local t missing=()
    for t in cc make cargo; do command -v "$t" >/dev/null || missing+=("$t"); done
    ((${#missing[@]} == 0)) || peers_die "not on PATH: ${missing[*]} (the peers need a C compiler, make and a Rust toolchain)"
    peers_say "build: make -C benches/peers/c, cargo build --release in benches/peers/rust (into $PEERS_BUILD)"
    make -s -C benches/peers/c BINDIR="$PEERS_BUILD/build" >&2 || peers_die "building the C peers failed"
    peers_build_rust --bins
}

# The Rust peers (cargo build --release ARGS...: --bins for every binary)
# into $PEERS_BUILD/rust/target; benches/completion.sh builds two.
peers_build_rust() {
    (unset CARGO_BUILD_TARGET
        CARGO_TARGET_DIR="$PEERS_BUILD/rust/target" cargo build --release --quiet \
            --manifest-path benches/peers/rust/Cargo.toml "$@") || peers_die "building the Rust peers failed"
}

# Every peer, in the order of the tables.
peers_all() {
    PEERS=(
        "baseline none|build/bench_baseline"
        "libev epoll|build/bench_libev -b epoll"
        "libev poll|build/bench_libev -b poll"
        "libev select|build/bench_libev -b select"
        "libev iouring|build/bench_libev -b iouring"
        "libevent epoll|build/bench_libevent -b epoll"
        "libevent poll|build/bench_libevent -b poll"
        "libuv epoll|build/bench_libuv -b epoll"
        "mio epoll|rust/target/release/bench_mio -b epoll"
        "polling epoll|rust/target/release/bench_polling -b epoll"
        "polling epoll-oneshot|rust/target/release/bench_polling -b epoll-oneshot"
        "tokio epoll|rust/target/release/bench_tokio -b epoll"
        "evloop epoll|rust/target/release/bench_evloop -b epoll"
        "evloop poll|rust/target/release/bench_evloop -b poll"
        "evloop select|rust/target/release/bench_evloop -b select"
        "evloop io_uring|rust/target/release/bench_evloop -b io_uring"
    )
    if [[ -n ${EXTRA_PEERS:-} ]]; then
        local extra
        IFS=';' read -r -a extra <<<"$EXTRA_PEERS"
        PEERS+=("${extra[@]}")
    fi
}

# PEERS filtered by ONLY, less the io_uring peers this kernel refuses.
peers_select() {
    local pe kept=() why
    for pe in "${PEERS[@]}"; do
        [[ -n $pe ]] || continue
        [[ -z ${ONLY:-} || ${pe%%|*} =~ $ONLY ]] || continue
        if [[ ${pe%%|*} == *\ *uring* ]]; then
            # shellcheck disable=SC2086
            if ! why=$(cd "$PEERS_BUILD" && ${pe#*|} -n 10 -a 1 -w 100 2>&1 >/dev/null); then
                peers_say "note: ${pe%%|*} left out: it does not start here (${why##*$'\n'})"
                continue
            fi
        fi
        kept+=("$pe")
    done
    ((${#kept[@]})) || peers_die "no peer to run (ONLY='${ONLY:-}')"
    PEERS=("${kept[@]}")
}

# Sets PEERS_BUILD and PEERS_RESULTS (absolute) and creates them.
peers_paths() {
    local target
    target=$(realpath -m -- "${CARGO_TARGET_DIR:-target}")
    PEERS_BUILD=$target/peers
    PEERS_RESULTS=$(realpath -m -- "${PEERS_RESULTS:-target/peers-results}")
    mkdir -p "$PEERS_BUILD" "$PEERS_RESULTS" || peers_die "cannot create $PEERS_BUILD or $PEERS_RESULTS"
}

peers_prepare() {
    peers_paths
    peers_say "evloop: $PWD (git $(git describe --always --dirty 2>/dev/null || echo unknown))"
    peers_install_packages "$@"
    peers_build
    peers_all
    peers_select
    export PEERS_BUILD PEERS_RESULTS
    peers_say "results go to: $PEERS_RESULTS"
}
