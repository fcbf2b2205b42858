#!/usr/bin/env bash
# Creates target/venv-openai (git-ignored, under target/) with the official `openai`
# Python client and its dependencies, pinned in scripts/openai-requirements.txt, for the
# serve crate's openai_client test. Does nothing when the venv exists, imports, and was
# built from the current requirements (a stamp inside the venv holds their hash).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/target/venv-openai"
req="$root/scripts/openai-requirements.txt"
stamp="$venv/.requirements.sha256"
python="${PYTHON:-python3}"

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] &&
    "$venv/bin/python" -c 'import openai' 2>/dev/null; then
    echo "openai_venv: $venv is up to date"
    exit 0
fi

echo "openai_venv: building $venv"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: --no-deps -r "$req"
"$venv/bin/python" -m pip check
"$venv/bin/python" -c 'import openai'
echo "$want" >"$stamp"
echo "openai_venv: done"
