#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium for serve's chat page test
# (serve/tests/page.rs), installing Debian's `chromium` package first when none is found.
# A no-op when it is installed. $TL_CHROMIUM names another binary to use instead.
# Needs root (apt-get) only the first time, as CI's fresh Debian image has.
set -euo pipefail

find_chromium() {
    if [[ -n "${TL_CHROMIUM:-}" && -x "$TL_CHROMIUM" ]]; then
        echo "$TL_CHROMIUM"
        return 0
    fi
    command -v chromium || command -v chromium-browser
}

if ! path="$(find_chromium)"; then
    echo "chromium: installing Debian's chromium package" >&2
    sudo=""
    [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >&2
    $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
    path="$(find_chromium)"
fi
"$path" --version >&2
echo "$path"
