#!/usr/bin/env bash
# Runs the unit and integration tests (not the doc tests, which need
# rustdoc) on another Linux kernel: Debian's, in a QEMU guest
# (benches/guest.sh), while the host runs its own. The OS backends lean on
# kernel behaviour (hang-up flags, EBADF/ENOENT/EEXIST answers, what a pipe
# reports when its other end closes), and this shows whether the suite's
# expectations hold on both.
#
# Usage: tests/other_kernel.sh [test binary arguments ...]
#   tests/other_kernel.sh                  # every test
#   tests/other_kernel.sh closed_fd        # a filter, as for cargo test
#
# Prints each test binary's summary line, then "other kernel: N binaries
# passed, M failed"; exits 1 if any failed. Builds into $CARGO_TARGET_DIR
# (default: target). ACCEL as for benches/guest.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# The test harness binaries (not the examples, which `cargo test` builds
# too: echo_server would serve forever).
mapfile -t bins < <(cargo test --no-run --message-format=json 2>/dev/null |
    grep '"test":true' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
[ ${#bins[@]} -gt 0 ] || { echo "could not build the tests"; exit 1; }
args=""
for a in "$@"; do args="$args '$a'"; done
script='pass=0; fail=0;'
for b in "${bins[@]}"; do
    name=$(basename "$b")
    script="$script if $name --test-threads=2 $args >out 2>&1; then pass=\$((pass+1)); grep -a 'test result' out;"
    script="$script else fail=\$((fail+1)); echo \"FAILED: $name\"; tail -n 40 out; fi;"
done
script="$script echo \"other kernel: \$pass binaries passed, \$fail failed\""
out=$(mktemp)
trap 'rm -f "$out"' EXIT
benches/guest.sh "$script" "${bins[@]}" | tee "$out"
grep -q "other kernel: [0-9]* binaries passed, 0 failed" "$out"
