# Sourced by setup.sh and run.sh (bash): the Wine settings both use.
#
# Exports WINEPREFIX (default: <target dir>/wine-prefix, the target dir being
# $CARGO_TARGET_DIR or the repository's target/), WINEDEBUG (default -all),
# WINEDLLOVERRIDES (default below), and WINELOADER and WINESERVER (Wine's
# own names: a value already set, if executable, wins). Debian's wine64
# package puts its loader in /usr/lib/wine, which is not on PATH; other
# distributions and Wine 9 and later have `wine64` or a single `wine` there.

evloop_wine_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
evloop_wine_target_dir="${CARGO_TARGET_DIR:-$evloop_wine_repo/target}"
case "$evloop_wine_target_dir" in
    /*) ;;
    *) evloop_wine_target_dir="$PWD/$evloop_wine_target_dir" ;;
esac

export WINEPREFIX="${WINEPREFIX:-$evloop_wine_target_dir/wine-prefix}"
export WINEDEBUG="${WINEDEBUG:--all}"
# mscoree, mshtml: no Mono and no Gecko (their install dialogs would wait
# for a click); winemenubuilder: no desktop menu entries; bcryptprimitives:
# ours (the ProcessPrng shim), native, before any builtin a later Wine has;
# winedbg: none, so that a crash ends the program with its exception code
# (Wine's debugger, started on an unhandled exception, prints a backtrace
# and then ends the program with exit code 0: a crashed test would pass).
export WINEDLLOVERRIDES="${WINEDLLOVERRIDES:-mscoree,mshtml=;winemenubuilder.exe=d;winedbg.exe=d;bcryptprimitives=n,b}"
# No window: Wine stays headless (a console program needs none).
unset DISPLAY WAYLAND_DISPLAY

evloop_wine_find() {
    local c
    for c in "$@"; do
        if [ -n "$c" ] && [ -x "$c" ] && [ ! -d "$c" ]; then
            printf '%s\n' "$c"
            return 0
        fi
    done
    return 1
}

if [ -z "${WINELOADER:-}" ] || [ ! -x "$WINELOADER" ]; then
    WINELOADER="$(evloop_wine_find \
        /usr/lib/wine/wine64 \
        "$(command -v wine64 2>/dev/null || true)" \
        "$(dpkg -L wine64 2>/dev/null | grep '/wine64$' | head -n1 || true)" \
        /usr/lib/x86_64-linux-gnu/wine/wine64 \
        /opt/wine-stable/bin/wine64 \
        /opt/wine-stable/bin/wine \
        "$(command -v wine 2>/dev/null || true)")" || WINELOADER=
fi
if [ -n "$WINELOADER" ] && { [ -z "${WINESERVER:-}" ] || [ ! -x "$WINESERVER" ]; }; then
    WINESERVER="$(evloop_wine_find \
        "$(dirname "$WINELOADER")/wineserver64" \
        "$(dirname "$WINELOADER")/wineserver" \
        /usr/lib/wine/wineserver64 \
        "$(command -v wineserver 2>/dev/null || true)")" || WINESERVER=
fi
export WINELOADER WINESERVER
unset -f evloop_wine_find
