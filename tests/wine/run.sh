#!/usr/bin/env bash
# The cargo runner for x86_64-pc-windows-gnu: runs a Windows executable
# under Wine, with its arguments, and exits with its exit code.
#
#     export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$PWD/tests/wine/run.sh
#     cargo test --target x86_64-pc-windows-gnu --test NAME
#     tests/wine/run.sh path/to/program.exe ARGS...      # by hand
#
# (or source the env file tests/wine/setup.sh writes). It uses the prefix
# setup.sh made (WINEPREFIX, default <target dir>/wine-prefix) and makes
# it, without installing packages, if it is missing.
#
# Signals: without EVLOOP_WINE_PTY this process becomes the loader, and a
# SIGINT sent to it is a CTRL_C_EVENT for the program (its
# SetConsoleCtrlHandler handler runs), even with no terminal; SIGTERM ends
# it (exit 143). A program with no handler that Ctrl-C ends exits 0 under
# Wine 8 (on Windows: 0xC000013A).
#
# Settings (environment):
#   EVLOOP_WINE_PTY=1   run the program under a pseudo-terminal (util-linux
#                       `script`): Wine's GenerateConsoleCtrlEvent works only
#                       for a program whose console is a terminal (with none
#                       it fails with error 12). The program's stdout and
#                       stderr then arrive merged, on stdout, as the console
#                       drew them: tabs expanded, a ^C echoed; the filter
#                       here takes out CRs before line ends and the cursor
#                       on/off sequences Wine wraps each line in. Our stdin is
#                       copied to the terminal, but its end is not passed on;
#                       a SIGINT to this script is a ^C typed there
#                       (CTRL_C_EVENT), other signals go to the loader.
#   EVLOOP_WINE_PTY_RAW=1  with EVLOOP_WINE_PTY, no filter: the terminal's
#                       bytes as they are.
#   EVLOOP_WINE_WAIT=1  after the program, wait for the wineserver to exit
#                       (so for every other program of the prefix, and for
#                       the persistence below).
#   EVLOOP_WINE_DEBUGGER=1  let Wine start its debugger on a crash: it
#                       prints a backtrace, but the program then exits 0!
#                       (Without it, the default, a crash exits with the
#                       exception code's low byte, as below.)
#   EVLOOP_WINE_PERSIST=N  keep the wineserver this many seconds after its
#                       last program (default 10; Wine's own default is 3):
#                       a program on a cold prefix starts in 0.4 to 2 s, on
#                       a running server in about 0.05 s.
#   WINEPREFIX, WINEDEBUG, WINEDLLOVERRIDES, WINELOADER, WINESERVER: Wine's
#                       own; defaults in common.sh.
#
# Exit code: the program's low byte (a Unix exit status has 8 bits; Wine
# makes a nonzero code whose low byte is 0 a 1): 0xC0000005 (access
# violation) arrives as 5, 0xC00000FD (stack overflow) as 253, 0xC0000409
# (abort, __fastfail) as 9, 0xC0000135 (a DLL missing: the shim?) as 53, a
# Rust panic as 101.
# Concurrent invocations share the prefix's one wineserver; Wine serialises
# its start.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/wine/common.sh
. "$here/common.sh"

if [ "$#" -eq 0 ]; then
    echo "usage: $0 PROGRAM.exe [ARGS...]" >&2
    exit 2
fi
if [ -z "$WINELOADER" ] || [ -z "$WINESERVER" ]; then
    echo "run.sh: no Wine found; run tests/wine/setup.sh (installs wine64)" >&2
    exit 127
fi

if [ ! -f "$WINEPREFIX/system.reg" ] ||
    [ ! -f "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" ]; then
    echo "run.sh: no ready Wine prefix at $WINEPREFIX; making it (tests/wine/setup.sh)" >&2
    EVLOOP_WINE_NO_INSTALL=1 EVLOOP_WINE_ENV_FILE=- "$here/setup.sh" >&2 || exit 127
fi

# The debugger (see EVLOOP_WINE_DEBUGGER above): off unless asked for.
overrides=""
IFS=';' read -r -a entries <<<"$WINEDLLOVERRIDES"
for e in "${entries[@]}"; do
    [ -n "$e" ] && [ "$e" != winedbg.exe=d ] && overrides+="${overrides:+;}$e"
done
if [ "${EVLOOP_WINE_DEBUGGER:-0}" != 1 ]; then
    overrides+="${overrides:+;}winedbg.exe=d"
fi
export WINEDLLOVERRIDES="$overrides"

# No descriptor of ours but 0, 1 and 2 may reach Wine: the system programs
# the first program of a prefix starts (services.exe, winedevice.exe, ...)
# inherit the others and keep them open until the server exits, so a pipe
# among them would stay open that long (a caller reading to its end waits).
for fd in /proc/$$/fd/*; do
    fd="${fd##*/}"
    if [ "$fd" -gt 2 ] 2>/dev/null; then
        eval "exec $fd>&-" 2>/dev/null
    fi
done

# Start the prefix's server, with a longer persistence, if none runs (if one
# does, this fails at once and harmlessly); its output must not reach ours.
"$WINESERVER" -p"${EVLOOP_WINE_PERSIST:-10}" </dev/null >/dev/null 2>&1 || true

# SIGINT, which Wine turns into the program's CTRL_C_EVENT, back to its
# default disposition: a command a shell runs in the background starts with
# it ignored, and Wine then never sees it (coreutils 8.31 and later).
default_int=()
if env --default-signal=INT true 2>/dev/null; then
    default_int=(env --default-signal=INT)
fi

pty="${EVLOOP_WINE_PTY:-0}"
if [ "$pty" != 1 ] && [ "${EVLOOP_WINE_WAIT:-0}" != 1 ]; then
    # The common case: become the loader, so that signals sent to this
    # process reach Wine itself.
    exec "${default_int[@]}" "$WINELOADER" "$@"
fi

# The children of process $1, by /proc (no procps needed).
children_of() {
    local stat rest
    for stat in /proc/[0-9]*/stat; do
        read -r rest 2>/dev/null <"$stat" || continue
        rest="${rest##*) }" # the fields after "pid (comm) ": state, ppid, ...
        rest="${rest#* }"
        if [ "${rest%% *}" = "$1" ]; then
            stat="${stat#/proc/}"
            printf '%s\n' "${stat%/stat}"
        fi
    done
}

if [ "$pty" = 1 ]; then
    if ! script --help 2>/dev/null | grep -q -- '--return'; then
        echo "run.sh: EVLOOP_WINE_PTY=1 needs util-linux's script with -e/--return" >&2
        exit 127
    fi
    # script runs its command with $SHELL -c: bash, for printf %q quoting.
    # A wide terminal: Wine's console wraps lines at the terminal's width.
    cmd="stty cols 32000 rows 500 2>/dev/null; exec"
    for a in "${default_int[@]}" "$WINELOADER" "$@"; do
        cmd+=" $(printf '%q' "$a")"
    done
    # Wine's console writes each line between "cursor off" and "cursor on"
    # and ends it with CR CR LF: the filter takes those out (unless
    # EVLOOP_WINE_PTY_RAW=1).
    if [ "${EVLOOP_WINE_PTY_RAW:-0}" = 1 ]; then
        exec 3>&1
        filter_pid=
    else
        exec 3> >(sed -u -e 's/\x1b\[?25[hl]//g' -e 's/\x1b\[K//g' -e 's/\r*$//')
        filter_pid=$!
    fi
    # script's stdin, which it copies to the terminal, is a FIFO that this
    # script holds open to the end: a SIGINT to this script becomes a ^C
    # written there, which Wine's console reads as Ctrl-C (a SIGINT sent to
    # the loader under a terminal does nothing). Our own stdin is copied in
    # by cat, but its end is not passed on (the FIFO stays open).
    fifo_dir="$(mktemp -d "${TMPDIR:-/tmp}/evloop-wine.XXXXXX")"
    fifo="$fifo_dir/stdin"
    mkfifo "$fifo"
    # -q: no banner; -e: the command's exit code; -c: the command;
    # /dev/null: no typescript.
    SHELL=/bin/bash script -qec "$cmd" /dev/null <"$fifo" >&3 2>&1 3>&- &
    child=$!
    exec 3>&-
    exec 4>"$fifo"
    cat <&0 >&4 2>/dev/null &
    cat_pid=$!
else
    # EVLOOP_WINE_WAIT=1 without a terminal: in the foreground (a terminal's
    # Ctrl-C reaches the loader itself); a signal sent to this script alone
    # is not passed on (without EVLOOP_WINE_WAIT it is the loader).
    "${default_int[@]}" "$WINELOADER" "$@"
    rc=$?
    if [ "${EVLOOP_WINE_WAIT:-0}" = 1 ]; then
        "$WINESERVER" -w
    fi
    exit "$rc"
fi

# Signals to this script go to the program (script(1) itself would end the
# session and exit 0 on one): SIGINT as a ^C typed at its terminal, which
# Wine's console makes a CTRL_C_EVENT; others to the loader, script's child.
# The loader runs in script's own session: a terminal's Ctrl-C reaches it
# only this way, once.
forward() {
    local target
    if [ "$1" = INT ]; then
        printf '\003' >&4
        return
    fi
    target="$(children_of "$child" | head -n1)"
    if [ -n "$target" ]; then
        kill "-$1" "$target" 2>/dev/null
    fi
}
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward HUP' HUP

while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
done
# A last wait: the status of the reaped child (if a signal cut the loop's).
wait "$child" 2>/dev/null
rc2=$?
[ "$rc2" != 127 ] && rc=$rc2
exec 4>&-
kill "$cat_pid" 2>/dev/null
wait "$cat_pid" 2>/dev/null
rm -rf "$fifo_dir"
if [ -n "$filter_pid" ]; then
    wait "$filter_pid" 2>/dev/null
fi

if [ "${EVLOOP_WINE_WAIT:-0}" = 1 ]; then
    "$WINESERVER" -w
fi
exit "$rc"
