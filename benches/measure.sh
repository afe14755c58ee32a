#!/usr/bin/env bash
# Every measurement of docs/backends.md in one command: the machine, the
# commit, the two criterion benches (idle fds, bench.c chains) with their
# tables, and the callgrind instruction counts per event.
#
# Usage: CARGO_TARGET_DIR=/tmp/target-bench benches/measure.sh
# (about 3 minutes on 2 cores; needs valgrind and python3). Pass `quick`
# to skip the criterion benches and only count instructions.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== machine"
echo "nproc: $(nproc)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "kernel: $(uname -sr)"
echo "RLIMIT_NOFILE: soft $(ulimit -Sn), hard $(ulimit -Hn)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rustc: $(rustc --version)"
echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"

if [ "${1:-}" != quick ]; then
    log=$(mktemp)
    echo
    echo "== cargo bench --manifest-path benches/criterion/Cargo.toml --bench idle_fds (log: $log)"
    cargo bench --manifest-path benches/criterion/Cargo.toml --bench idle_fds >"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
    grep SKIPPED "$log" || true
    echo
    echo "== cargo bench --manifest-path benches/criterion/Cargo.toml --bench chain"
    cargo bench --manifest-path benches/criterion/Cargo.toml --bench chain >>"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
    grep SKIPPED "$log" | grep chain || true
    echo
    python3 benches/report.py
fi

echo "== benches/callgrind.sh all (user-space instructions per event, 1,000 pairs / 100 chains)"
benches/callgrind.sh all
