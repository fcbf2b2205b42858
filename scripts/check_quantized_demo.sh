#!/usr/bin/env bash
# The README's demo question through `chat` on SmolLM2-135M-Instruct files in K-quant
# formats made by llama-quantize, against transformers' GGUF loader on the same files.
# A developer check, not part of scripts/test.sh: it builds llama.cpp once
# (scripts/build_llama_cpp.sh) and needs the fixtures venv (scripts/fixtures/setup_venv.sh).
#
#   scripts/check_quantized_demo.sh [TYPE ...]     # default: Q4_K_M Q6_K
#
# The files: `llama-quantize --allow-requantize` of the Q4_1 file scripts/fetch_model.sh
# fetches, cached beside it as *.requant-<TYPE>.gguf (as scripts/bench_compare.sh derives
# its formats). llama-quantize dequantizes the Q4_1 blocks to f32 and quantizes those
# values, so the values are the same as going through `convert --dtype f32` and
# convert_hf_to_gguf.py first, and the file keeps the original's metadata (tokenizer, chat
# template) byte for byte: the one thing that differs from the demo file is the blocks.
# SmolLM2's rows of 576 are not a multiple of 256, so those tensors fall back to the
# formats llama-quantize picks for them (Q5_0, Q8_0, ...): the file prints its type mix.
#
# For each file: tl's `chat --temperature 0 --activations exact` (transformers' numbers)
# and scripts/fixtures/smollm2/hf_gguf_chat.py
# (transformers, float32, greedy, the file's chat template) answer the question, at most
# MAX_TOKENS (default 64) tokens, stopping at EOS. Prints both texts and PASS when they are
# the same string, FAIL otherwise; exits 1 when any file fails.
set -euo pipefail
cd "$(dirname "$0")/.."
QUESTION="${QUESTION:-What is the capital of France?}"
MAX_TOKENS="${MAX_TOKENS:-64}"
TYPES=("$@")
[ "${#TYPES[@]}" -gt 0 ] || TYPES=(Q4_K_M Q6_K)
log() { echo "check_quantized_demo: $*" >&2; }

scripts/fixtures/setup_venv.sh >&2
# transformers loads a GGUF file only with accelerate installed: the fixtures venv plus it.
# shellcheck source=lib/extra_venv.sh
source scripts/lib/extra_venv.sh
PY="$(extra_venv)"
GGUF="$(scripts/fetch_model.sh)"
LLAMA_BIN="$(scripts/build_llama_cpp.sh)"
# -p tl-examples, as bench_compare.sh builds: the same dependency features, so neither
# script rebuilds the dependencies the other built.
# TL_BIN: a directory with chat already built, used as it is.
if [ -n "${TL_BIN:-}" ]; then
    CHAT="$(cd "$TL_BIN" && pwd)/chat"
else
    cargo build --release --quiet -p tl-examples --bin chat >&2
    CHAT=target/release/chat
fi
STEM="${GGUF%.gguf}"

fail=0
for type in "${TYPES[@]}"; do
    file="$STEM.requant-$type.gguf"
    if [ ! -s "$file" ]; then
        log "making $file"
        "$LLAMA_BIN/llama-quantize" --allow-requantize "$GGUF" "$file.tmp" "$type" "$(nproc)" >"$file.log" 2>&1 ||
            { log "error: llama-quantize $type failed, see $file.log"; exit 1; }
        mv "$file.tmp" "$file"
    fi
    types="$("$PY" -c '
import sys
from collections import Counter
from gguf import GGUFReader
c = Counter(t.tensor_type.name for t in GGUFReader(sys.argv[1]).tensors)
print(", ".join(f"{k} x{v}" for k, v in c.most_common()))' "$file")"
    # chat prints "> " before reading each line, then the answer and a newline; the
    # second "> " (end of input) follows. Keep the text between.
    if tl_out="$(printf '%s\n' "$QUESTION" | "$CHAT" --model "$file" --temperature 0 \
        --activations exact --max-tokens "$MAX_TOKENS" 2>"$file.chat.err")"; then
        tl_text="$(printf '%s' "$tl_out" | "$PY" -c '
import sys
s = sys.stdin.read()
s = s[2:] if s.startswith("> ") else s
s = s[:-2] if s.endswith("\n> ") else s
print(s, end="")')"
    else
        tl_text="<tl error: $(tail -n1 "$file.chat.err")>"
    fi
    hf_json="$("$PY" scripts/fixtures/smollm2/hf_gguf_chat.py "$file" "$MAX_TOKENS" "$QUESTION" 2>"$file.hf.err")" ||
        { log "error: transformers failed on $file: $(tail -n1 "$file.hf.err")"; exit 1; }
    hf_text="$(printf '%s' "$hf_json" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["text"], end="")')"
    echo "$type ($(basename "$file"): $types)"
    echo "  tl:           $tl_text"
    echo "  transformers: $hf_text"
    if [ "$tl_text" = "$hf_text" ]; then
        echo "  PASS"
    else
        echo "  FAIL"
        fail=1
    fi
done
exit "$fail"
