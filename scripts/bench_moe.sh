#!/usr/bin/env bash
# The mixture-of-experts benchmark (issue 31): tl beside llama.cpp on one MoE file, one
# paired run. Never in CI (the model is ~7 GB in BF16; building it takes minutes).
#
#   scripts/bench_moe.sh
#
# The model: scripts/fixtures/make_moe_bench_shape.py, a scaled-down Qwen3-30B-A3B (hidden
# 2048, 16 layers, 64 experts of width 512, the top 8, 32/4 heads of 128: 3.73 B weights,
# 0.91 B active per token) with random weights and SmolLM2's tokenizer, converted by
# llama.cpp's convert_hf_to_gguf.py (BF16) and quantized by llama-quantize (no imatrix), all
# cached under ${TL_CACHE:-~/.cache/tl}/moe-bench-shape/.
#
# Rows (medians over ROUNDS rounds, each round llama.cpp then tl on the same file, ratios
# the median of each round's tl/llama.cpp):
#   prefill / decode: tl `bench` (PROMPT-token prompt, GEN decoded) beside `llama-bench`
#     (-p PROMPT -n GEN, flash attention on);
#   batched decode: tl `bench --batch B` beside `llama-batched-bench` (B sequences of a
#     32-token prompt, GEN steps);
#   RSS: tl's peak resident set during its run, beside the file size plus the KV pool.
#
# Knobs: CONFIGS (q4_k_m,q8_0), THREADS (2), PROMPT (128), GEN (64), BATCH (8), ROUNDS (2),
# REPEATS (2), ACTIVATIONS (exact; a comma list such as exact,q8: tl once per mode after each
# llama.cpp run), TL_BIN (a directory with bench and convert already built), TL_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
CONFIGS="${CONFIGS:-q4_k_m,q8_0}"
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-128}"
GEN="${GEN:-64}"
BATCH="${BATCH:-8}"
ROUNDS="${ROUNDS:-2}"
REPEATS="${REPEATS:-2}"
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
OUT="${OUT:-target/bench}"
log() { echo "bench_moe: $*" >&2; }

GGUF="$(scripts/fetch_model.sh)"
if [ -n "${TL_BIN:-}" ]; then
    TL_BIN="$(cd "$TL_BIN" && pwd)"
else
    log "building tl (release: bench, convert)"
    cargo build --release --quiet -p tl-examples --bin bench --bin convert >&2
    TL_BIN="$ROOT/target/release"
fi
LLAMA_BIN="$(scripts/build_llama_cpp.sh)"
scripts/fixtures/setup_venv.sh >&2
LLAMA_SRC="$(scripts/build_llama_cpp.sh --source)"
VENV_PY="$ROOT/scripts/fixtures/.venv/bin/python"

DIR="$CACHE/moe-bench-shape"
HF="$DIR/hf"
mkdir -p "$DIR"
if [ ! -s "$HF/model.safetensors" ]; then
    log "making $HF (random Qwen3-MoE, SmolLM2's tokenizer; a few minutes)"
    rm -rf "$HF.tmp" "$DIR/smollm2-tokenizer"
    "$VENV_PY" scripts/fixtures/make_moe_bench_shape.py "$GGUF" "$HF.tmp" >&2
    "$TL_BIN/convert" --gguf "$GGUF" --out "$DIR/smollm2-tokenizer" --dtype bf16 >&2
    cp "$DIR/smollm2-tokenizer/tokenizer.json" "$DIR/smollm2-tokenizer/tokenizer_config.json" "$HF.tmp/"
    rm -rf "$HF" "$DIR/smollm2-tokenizer"
    mv "$HF.tmp" "$HF"
fi
# shellcheck source=lib/extra_venv.sh
source scripts/lib/extra_venv.sh
CONVERT_PY="$(extra_venv)"
BF16="$DIR/moe-bench-shape.BF16.gguf"
if [ ! -s "$BF16" ]; then
    log "making $BF16 (convert_hf_to_gguf.py, --outtype bf16)"
    rm -f "$BF16.tmp"
    "$CONVERT_PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$HF" --outtype bf16 --outfile "$BF16.tmp" \
        >"$BF16.log" 2>&1 || { log "error: convert_hf_to_gguf.py failed, see $BF16.log"; exit 1; }
    mv "$BF16.tmp" "$BF16"
fi
FILES="$(mktemp "${TMPDIR:-/tmp}/moe-files.XXXXXX")"
echo "{" >"$FILES"
sep=""
for type in Q4_K_M Q8_0; do
    lower="$(echo "$type" | tr 'A-Z' 'a-z')"
    case ",$CONFIGS," in *,"$lower",*) ;; *) continue ;; esac
    out="$DIR/moe-bench-shape.$type.gguf"
    if [ ! -s "$out" ]; then
        log "making $out"
        rm -f "$out.tmp"
        "$LLAMA_BIN/llama-quantize" "$BF16" "$out.tmp" "$type" "$(nproc)" >"$out.log" 2>&1 ||
            { log "error: llama-quantize $type failed, see $out.log"; exit 1; }
        mv "$out.tmp" "$out"
    fi
    printf '%s"%s": "%s"' "$sep" "$lower" "$out" >>"$FILES"
    sep=","
done
echo "}" >>"$FILES"

mkdir -p "$OUT"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
[ -n "${TL_COMMIT:-}" ] || TL_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
export TL_BIN LLAMA_BIN THREADS PROMPT GEN BATCH ROUNDS REPEATS FILES TL_COMMIT
export RAW="$OUT/moe-$STAMP.jsonl" TABLE="$OUT/moe-$STAMP.md"
python3 scripts/lib/bench_moe.py
log "table: $TABLE"
cat "$TABLE"
