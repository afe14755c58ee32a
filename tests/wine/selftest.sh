#!/usr/bin/env bash
# Checks the Wine test environment (tests/wine/setup.sh, run.sh): builds
# selftest.rs for x86_64-pc-windows-gnu with rustc and runs it through
# run.sh: std starts (the ProcessPrng shim) and its exit code arrives; a
# console Ctrl-C: GenerateConsoleCtrlEvent fails without a terminal (Wine)
# and works under EVLOOP_WINE_PTY=1, and a SIGINT to run.sh is a
# CTRL_C_EVENT; and a Linux client echoes bytes through a server under Wine
# over loopback. Exits nonzero on the first failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/wine/common.sh
. "$here/common.sh"
run="$here/run.sh"
exe="$evloop_wine_target_dir/wine-selftest.exe"
fail() { echo "wine selftest: FAIL: $*" >&2; exit 1; }
ok() { echo "wine selftest: ok: $*"; }

rustc --edition 2021 -O --target x86_64-pc-windows-gnu -o "$exe" "$here/selftest.rs"

out="$("$run" "$exe" exit 7 'a "b" c')" && rc=0 || rc=$?
[ "$rc" = 7 ] || fail "exit code $rc, not 7 (output: $out)"
case "$out" in *'["7", "a \"b\" c"]'*) ;; *) fail "arguments: $out" ;; esac
ok "std starts, arguments pass, exit code 7 arrives"

rc=0; out="$("$run" "$exe" ctrlc </dev/null)" || rc=$?
[ "$rc" = 2 ] || fail "headless GenerateConsoleCtrlEvent: exit $rc ($out); Wine fixed? (was error 12)"
ok "headless: GenerateConsoleCtrlEvent fails as Wine 8 does ($out)"
rc=0; out="$(EVLOOP_WINE_PTY=1 "$run" "$exe" ctrlc </dev/null)" || rc=$?
[ "$rc" = 0 ] || fail "under a terminal: exit $rc ($out)"
ok "under a terminal: $out"

# SIGINT to run.sh: a CTRL_C_EVENT, with a terminal and without.
for pty in 0 1; do
    exec 5< <(EVLOOP_WINE_PTY=$pty exec env --default-signal=INT "$run" "$exe" wait </dev/null)
    pid=$!
    read -r line <&5 || fail "the waiting program said nothing"
    kill -INT "$pid"
    rest="$(cat <&5)"
    exec 5<&-
    rc=0; wait "$pid" || rc=$?
    [ "$rc" = 0 ] || fail "SIGINT (EVLOOP_WINE_PTY=$pty): exit $rc ($line $rest)"
    ok "SIGINT to run.sh (EVLOOP_WINE_PTY=$pty): ${rest##*$'\n'}"
done

# A Linux client (bash's /dev/tcp) through the echo server under Wine.
exec 5< <(exec "$run" "$exe" echo </dev/null)
pid=$!
read -r line <&5 || fail "the echo server said nothing"
addr="${line##* }"
exec 6<>"/dev/tcp/${addr%:*}/${addr##*:}"
printf 'ping over loopback\n' >&6
read -r back <&6
exec 6>&-
[ "$back" = "ping over loopback" ] || fail "echo: got '$back'"
exec 5<&-
rc=0; wait "$pid" || rc=$?
[ "$rc" = 0 ] || fail "the echo server exited $rc"
ok "a Linux client echoes through a server under Wine at $addr"
