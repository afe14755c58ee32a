#!/usr/bin/env bash
# Test environment for the Windows build: runs Windows executables built by
# `cargo --target x86_64-pc-windows-gnu` under Wine on Linux. Idempotent:
# installs what is missing (wine64, the mingw C compiler, util-linux's
# `script`), adds the Rust target, creates a dedicated Wine prefix, builds
# the ProcessPrng shim (bcryptprimitives.c, test environment only) into it,
# and writes an environment file to source:
#
#     tests/wine/setup.sh            # prints the env file's path on its last line
#     . target/wine-env.sh           # (under $CARGO_TARGET_DIR if that is set)
#     cargo test --target x86_64-pc-windows-gnu --test NAME
#
# Settings (all optional):
#   WINEPREFIX        the prefix to use (default: <target dir>/wine-prefix)
#   CARGO_TARGET_DIR  where the prefix and the env file go (default: ./target)
#   EVLOOP_WINE_NO_INSTALL=1  never run apt-get (fail if something is missing)
#   EVLOOP_WINE_ENV_FILE  the env file to write (default: <target dir>/wine-env.sh;
#                     "-": none)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { printf 'wine setup: %s\n' "$*" >&2; }

# --- packages -------------------------------------------------------------
# wine64 is the 64-bit loader (Debian puts it in /usr/lib/wine, off PATH);
# wine gives wineboot and wineserver; script (util-linux, or bsdutils on
# older Debian) runs an executable under a pseudo-terminal.
need=()
[ -x /usr/lib/wine/wine64 ] || command -v wine64 >/dev/null 2>&1 || need+=(wine64 wine)
command -v wineboot >/dev/null 2>&1 || need+=(wine)
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || need+=(gcc-mingw-w64-x86-64)
command -v script >/dev/null 2>&1 || need+=(bsdutils)
if [ "${#need[@]}" -gt 0 ]; then
    if [ "${EVLOOP_WINE_NO_INSTALL:-}" = 1 ]; then
        say "missing packages: ${need[*]} (EVLOOP_WINE_NO_INSTALL=1: not installing)"
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing: ${need[*]} (Debian package names), and there is no apt-get here; install them by hand"
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            say "missing packages: ${need[*]}; not root and no sudo"
            exit 1
        fi
    fi
    # Deduplicate (wine can be listed twice).
    mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
    say "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "${need[@]}" >&2
fi

# --- the Rust target ------------------------------------------------------
if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed | grep -qx x86_64-pc-windows-gnu; then
        say "adding the Rust target x86_64-pc-windows-gnu"
        rustup target add x86_64-pc-windows-gnu >&2
    fi
fi

# --- the settings, the loader ---------------------------------------------
# shellcheck source=tests/wine/common.sh
. "$here/common.sh"
if [ -z "$WINELOADER" ] || [ -z "$WINESERVER" ]; then
    say "no Wine loader or wineserver found (WINELOADER=$WINELOADER WINESERVER=$WINESERVER)"
    exit 1
fi
prefix="$WINEPREFIX"
env_file="${EVLOOP_WINE_ENV_FILE:-$evloop_wine_target_dir/wine-env.sh}"

# --- the prefix -----------------------------------------------------------
mkdir -p "$(dirname "$prefix")" "$evloop_wine_target_dir"
# Serialise concurrent setups of the same prefix.
exec 9>"$prefix.lock"
flock 9

if [ ! -f "$prefix/system.reg" ] || [ ! -d "$prefix/drive_c/windows/system32" ]; then
    say "creating the Wine prefix $prefix (some seconds, once)"
    start=$(date +%s)
    rc=0
    "$WINELOADER" wineboot -i </dev/null >"$prefix.wineboot.log" 2>&1 || rc=$?
    # wineboot returns before the registry is written out: wait for the
    # server to finish and exit.
    "$WINESERVER" -w
    say "prefix created in $(( $(date +%s) - start ))s"
    if [ "$rc" != 0 ] || [ ! -f "$prefix/system.reg" ] || [ ! -d "$prefix/drive_c/windows/system32" ]; then
        say "wineboot -i failed (exit $rc); its output, $prefix.wineboot.log:"
        cat "$prefix.wineboot.log" >&2
        exit 1
    fi
fi

# --- the ProcessPrng shim -------------------------------------------------
dll="$prefix/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$dll" ] || [ "$here/bcryptprimitives.c" -nt "$dll" ]; then
    say "building the ProcessPrng shim into $dll"
    tmp="$(mktemp -d)"
    x86_64-w64-mingw32-gcc -O2 -s -shared -static-libgcc \
        -o "$tmp/bcryptprimitives.dll" "$here/bcryptprimitives.c" -ladvapi32
    cp "$tmp/bcryptprimitives.dll" "$dll"
    rm -rf "$tmp"
fi

# --- the environment file -------------------------------------------------
if [ "$env_file" = - ]; then
    say "ready"
    exit 0
fi
q() { printf '%q' "$1"; }
cat >"$env_file.tmp" <<ENV
# Written by tests/wine/setup.sh: source it, then cargo --target x86_64-pc-windows-gnu
# runs the .exe files under Wine through tests/wine/run.sh.
export WINEPREFIX=$(q "$prefix")
export WINEDEBUG=$(q "$WINEDEBUG")
export WINEDLLOVERRIDES=$(q "$WINEDLLOVERRIDES")
export WINELOADER=$(q "$WINELOADER")
export WINESERVER=$(q "$WINESERVER")
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$(q "$here/run.sh")
ENV
mv "$env_file.tmp" "$env_file"
say "ready; source this file:"
echo "$env_file"
