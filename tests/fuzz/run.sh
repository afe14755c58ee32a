#!/usr/bin/env bash
# The trace decoder's fuzz target (tests/fuzz/fuzz_targets/trace.rs), built
# and run for a bounded time.
#
#   tests/fuzz/run.sh [SECONDS]          # default 120
#
# Builds the target with the sanitizer-coverage flags that cargo-fuzz 0.13
# passes, so that no cargo-fuzz install is needed; they are stable codegen
# options (`-C`), so the toolchain at hand builds it (cargo-fuzz's
# AddressSanitizer, the one flag that needs nightly, is left out: the
# decoder and the replay are safe Rust). Then runs libFuzzer on one job
# for SECONDS, from the committed seeds (tests/fuzz/seeds/), the inputs
# that once failed (tests/fuzz/regressions/, run first as any corpus file
# is) and the corpus of earlier runs, with the format's dictionary
# (tests/fuzz/trace.dict). Fails, printing the input's path, on
# any crash: a panic (overflow checks are on), an input that runs longer
# than FUZZ_TIMEOUT seconds, or a replay holding more than the bound of
# tests/replay/program.rs (an assertion in the target). Prints libFuzzer's
# last status line (executions, coverage, corpus).
#
# Environment: CARGO_TARGET_DIR (default target/; the fuzz crate builds
# into $CARGO_TARGET_DIR/fuzz, where the corpus it grows, corpus/, and
# the failing inputs, artifacts/, are kept too); FUZZ_TIMEOUT (seconds
# one input may take, default 10); FUZZ_ARGS (more libFuzzer options);
# FUZZ_NICE (niceness of the run, default 0).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-120}
timeout=${FUZZ_TIMEOUT:-10}
out="${CARGO_TARGET_DIR:-target}/fuzz"
triple=$(rustc -vV | sed -n 's/^host: //p')

# --target: the flags reach the target's crates, not build scripts.
RUSTFLAGS="-Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cllvm-args=-sanitizer-coverage-stack-depth \
 -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
 -Ccodegen-units=1 --cfg fuzzing" \
    CARGO_TARGET_DIR="$out" \
    cargo build --release --manifest-path tests/fuzz/Cargo.toml --target "$triple" --bin trace

mkdir -p "$out/corpus" "$out/artifacts"
log="$out/trace.log"
status=0
# -rss_limit_mb: a replay holding far beyond the bound is stopped even
# where the allocation itself would never return (the target's own check
# runs when the replay ends).
# shellcheck disable=SC2086
nice -n "${FUZZ_NICE:-0}" "$out/$triple/release/trace" \
    -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=1024 \
    -dict=tests/fuzz/trace.dict -artifact_prefix="$out/artifacts/" \
    -print_final_stats=1 ${FUZZ_ARGS:-} \
    "$out/corpus" tests/fuzz/seeds tests/fuzz/regressions >"$log" 2>&1 || status=$?
grep -E '^#[0-9]+.*(DONE|pulse|NEW)' "$log" | tail -1 || true
grep -E '^stat::' "$log" || true
if [ "$status" != 0 ]; then
    # The panic or libFuzzer's report, and the input it wrote.
    grep -E -B2 -A20 "panicked|ERROR: libFuzzer|deadly signal|timeout after|out-of-memory" "$log" | head -60
    echo "the fuzz target failed (exit $status); full log: $log; inputs: $out/artifacts/"
    ls -l "$out/artifacts/"
    exit 1
fi
