# shellcheck shell=bash
# Sourced (under the caller's `set -euo pipefail`) by tests/wrk_common.sh
# and .ci/run: install_missing COMMAND PACKAGE installs the Debian PACKAGE
# with apt-get (as root, or with sudo) where COMMAND is missing; fails
# where there is no apt-get.
install_missing() {
    local command=$1 package=$2
    command -v "$command" >/dev/null 2>&1 && return
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$command is missing, and there is no apt-get here: install $package by hand" >&2
        exit 1
    fi
    local sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    echo "installing $package (for $command)" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "$package" >&2
}
