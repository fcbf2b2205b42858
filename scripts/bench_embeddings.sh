#!/usr/bin/env bash
# The embeddings benchmark (issue 49): all-MiniLM-L6-v2's sentences per second in tl
# (`tl embed`, the sentence-transformers directory tl pulls: `tl pull all-minilm:l6-v2`),
# llama.cpp's llama-embedding (the same weights converted to an F32 GGUF by the
# llama-cpp-python sdist's convert_hf_to_gguf.py; tl reads the directory, or with
# TL_READS=gguf the very same F32 GGUF) and
# sentence-transformers (torch), at batch 1 and 32, on the sentences of
# arch-bert/tests/fixtures/minilm/sentences.json that sentence-transformers does not cut
# (at most 256 tokens). Never in CI.
#
#   scripts/bench_embeddings.sh
#
# Knobs: THREADS (2), ROUNDS (3), BATCHES (1,32), TL_READS (dir or gguf), TL_BIN (a directory holding `tl`;
# default: a release build), TL_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
export THREADS="${THREADS:-2}" ROUNDS="${ROUNDS:-3}" BATCHES="${BATCHES:-1,32}"
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
OUT="${OUT:-target/bench}"
log() { echo "bench_embeddings: $*" >&2; }

if [ -n "${TL_BIN:-}" ]; then
    TL_BIN="$(cd "$TL_BIN" && pwd)"
else
    log "building tl (release)"
    cargo build --release --quiet -p tl-cli --bin tl >&2
    TL_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
fi
LLAMA_BIN="$(scripts/build_llama_cpp.sh --embedding)"
scripts/fixtures/setup_venv.sh >&2
LLAMA_SRC="$(scripts/build_llama_cpp.sh --source)"
# shellcheck source=lib/extra_venv.sh
source scripts/lib/extra_venv.sh
CONVERT_PY="$(extra_venv)"
MODEL_DIR="$("$TL_BIN/tl" pull all-minilm:l6-v2 | tail -n 1 | awk -F'\t' '{print $NF}')"

DIR="$CACHE/minilm-bench"
mkdir -p "$DIR"
GGUF="$DIR/all-MiniLM-L6-v2.F32.gguf"
if [ ! -s "$GGUF" ]; then
    log "making $GGUF (convert_hf_to_gguf.py --outtype f32)"
    rm -f "$GGUF.tmp"
    "$CONVERT_PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$MODEL_DIR" --outtype f32 --outfile "$GGUF.tmp" \
        >"$GGUF.log" 2>&1 || { log "error: the converter failed, see $GGUF.log"; exit 1; }
    mv "$GGUF.tmp" "$GGUF"
fi
SENTENCES="$DIR/sentences.txt"
python3 - "$ROOT/arch-bert/tests/fixtures/minilm/sentences.json" "$SENTENCES" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
# sentences[i] was cut to ids[i] by sentence-transformers when untruncated_lengths[i] > 256.
keep = [t for t, n in zip(d["sentences"], d["untruncated_lengths"]) if n <= 256 and "\n" not in t]
open(sys.argv[2], "w").write("\n".join(keep) + "\n")
print(f"bench_embeddings: {len(keep)} sentences", file=sys.stderr)
PY

mkdir -p "$OUT"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
[ -n "${TL_COMMIT:-}" ] || TL_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
export TL_BIN LLAMA_BIN MODEL_DIR GGUF SENTENCES TL_COMMIT
export TL_READS="${TL_READS:-dir}"
export ST_PY="$ROOT/scripts/fixtures/.venv/bin/python"
export TABLE="$OUT/embeddings-$STAMP.md"
python3 scripts/lib/bench_embeddings.py | tee "$OUT/embeddings-$STAMP.jsonl"
log "table: $TABLE"
