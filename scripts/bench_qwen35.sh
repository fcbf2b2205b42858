#!/usr/bin/env bash
# The Qwen3.5 benchmark (issue 45): tl beside llama.cpp on a Qwen3.5-0.8B-shaped hybrid
# (18 Gated DeltaNet + 6 gated attention layers, scripts/fixtures/make_qwen3_5_bench_shape.py,
# random weights, no tokenizer), converted by the llama-cpp-python sdist's
# convert_hf_to_gguf.py (BF16; the vocabulary written as `none` with its size, which both
# runners read as dummy tokens) and quantized by llama-quantize to Q4_K_M and Q8_0, all
# cached under ${TL_CACHE:-~/.cache/tl}/qwen35-bench-shape/. Never in CI.
#
#   scripts/bench_qwen35.sh
#
# Rows as scripts/bench_moe.sh's (scripts/lib/bench_moe.py: each round llama.cpp then tl on
# the same file; medians over rounds, ratios the median of each round's), plus decode at a
# depth of DEPTH tokens (llama-bench -d; tl bench with a DEPTH-token prompt).
# Knobs: CONFIGS (q4_k_m,q8_0), THREADS (2), PROMPT (128), GEN (64), BATCH (8), DEPTH (2048),
# ROUNDS (2), REPEATS (2), TL_BIN, TL_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
CONFIGS="${CONFIGS:-q4_k_m,q8_0}"
export THREADS="${THREADS:-2}" PROMPT="${PROMPT:-128}" GEN="${GEN:-64}" BATCH="${BATCH:-8}"
export DEPTH="${DEPTH:-2048}" ROUNDS="${ROUNDS:-2}" REPEATS="${REPEATS:-2}"
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
OUT="${OUT:-target/bench}"
log() { echo "bench_qwen35: $*" >&2; }

if [ -n "${TL_BIN:-}" ]; then
    TL_BIN="$(cd "$TL_BIN" && pwd)"
else
    log "building tl (release: bench)"
    cargo build --release --quiet -p tl-examples --bin bench >&2
    TL_BIN="$ROOT/target/release"
fi
LLAMA_BIN="$(scripts/build_llama_cpp.sh)"
scripts/fixtures/setup_venv.sh >&2
LLAMA_SRC="$(scripts/build_llama_cpp.sh --source)"
VENV_PY="$ROOT/scripts/fixtures/.venv/bin/python"

DIR="$CACHE/qwen35-bench-shape"
HF="$DIR/hf"
mkdir -p "$DIR"
if [ ! -s "$HF/model.safetensors" ]; then
    log "making $HF (random Qwen3.5-0.8B shape)"
    rm -rf "$HF.tmp"
    "$VENV_PY" scripts/fixtures/make_qwen3_5_bench_shape.py "$HF.tmp" >&2
    mv "$HF.tmp" "$HF"
fi
# shellcheck source=lib/extra_venv.sh
source scripts/lib/extra_venv.sh
CONVERT_PY="$(extra_venv)"
BF16="$DIR/qwen35-bench-shape.BF16.gguf"
if [ ! -s "$BF16" ]; then
    log "making $BF16 (convert_hf_to_gguf.py, --outtype bf16, no MTP head, vocabulary 'none')"
    DRIVER="$(mktemp)"
    cat >"$DRIVER" <<'PY'
import sys

llama = sys.argv[1]
sys.path[:0] = [llama + "/gguf-py", llama]  # the sdist's gguf-py
import convert_hf_to_gguf  # noqa: E402
import conversion.qwen as qwen  # noqa: E402


def no_vocab(self):
    # Dummy tokens of the model's vocabulary size: llama.cpp's `none` vocabulary.
    self.gguf_writer.add_tokenizer_model("none")
    self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])


qwen.Qwen3_5TextModel.set_vocab = no_vocab
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
PY
    rm -f "$BF16.tmp"
    "$CONVERT_PY" "$DRIVER" "$LLAMA_SRC" "$HF" --no-mtp --outtype bf16 --outfile "$BF16.tmp" \
        >"$BF16.log" 2>&1 || { log "error: the converter failed, see $BF16.log"; rm -f "$DRIVER"; exit 1; }
    rm -f "$DRIVER"
    mv "$BF16.tmp" "$BF16"
fi
FILES="$(mktemp "${TMPDIR:-/tmp}/qwen35-files.XXXXXX")"
echo "{" >"$FILES"
sep=""
for type in Q4_K_M Q8_0; do
    lower="$(echo "$type" | tr 'A-Z' 'a-z')"
    case ",$CONFIGS," in *,"$lower",*) ;; *) continue ;; esac
    out="$DIR/qwen35-bench-shape.$type.gguf"
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
export TL_BIN LLAMA_BIN FILES TL_COMMIT
export TITLE="Qwen3.5-0.8B-shaped hybrid (scripts/bench_qwen35.sh)"
export RAW="$OUT/qwen35-$STAMP.jsonl" TABLE="$OUT/qwen35-$STAMP.md"
python3 scripts/lib/bench_moe.py
log "table: $TABLE"
cat "$TABLE"
