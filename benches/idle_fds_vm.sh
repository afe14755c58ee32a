#!/usr/bin/env bash
# Runs benches/idle_fds.rs inside a QEMU guest (benches/guest.sh), as root
# of the guest, where RLIMIT_NOFILE can be raised past 100,000: this host's
# hard limit is 20,000, and raising it needs CAP_SYS_RESOURCE, which the
# host session lacks. Under the default ACCEL=tcg (see guest.sh) every time
# is several times the native one: compare the sizes of one row, not the
# guest's numbers with the host's.
#
# Usage: benches/idle_fds_vm.sh [criterion arguments ...]
#   benches/idle_fds_vm.sh                 # every backend and size
#   benches/idle_fds_vm.sh 'epoll|poll/'   # a filter, as for cargo bench
#
# Builds into $CARGO_TARGET_DIR (default: target).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cargo bench --manifest-path benches/criterion/Cargo.toml --bench idle_fds --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -x "$bin" ] || { echo "could not build the idle_fds bench"; exit 1; }
args=""
for a in "$@"; do args="$args '$a'"; done
exec benches/guest.sh "$(basename "$bin") --bench $args" "$bin"
