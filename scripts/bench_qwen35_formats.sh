#!/usr/bin/env bash
# Batch-1 decode of the Qwen3.5-0.8B-shaped hybrid in each GGUF format, tl's exact and q8
# activation modes beside llama.cpp (issue 45/46's per-format question: does q8 decode beat
# exact on every file?). The files are llama-quantize's from the BF16 file
# scripts/bench_qwen35.sh makes (run it first); missing formats are made here. Never in CI.
#
#   TL_BIN=target/release scripts/bench_qwen35_formats.sh
#
# Per file and round: `llama-bench -p 0 -n 32 -r 2` (decode from an empty context), then
# `tl bench --prompt-tokens 16 --decode-tokens 32 --batch 1 --repeats 2` in each mode; one
# line per file with decode tok/s. Knobs: FORMATS (Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0), ROUNDS (1),
# THREADS (2), TL_BIN (a directory holding `tl`), TL_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${TL_CACHE:-$HOME/.cache/tl}/qwen35-bench-shape"
LLAMA_BIN="$(scripts/build_llama_cpp.sh)"
TL="${TL_BIN:?set TL_BIN to a directory holding a release tl}/tl"
THREADS="${THREADS:-2}"
[ -s "$DIR/qwen35-bench-shape.BF16.gguf" ] || { echo "run scripts/bench_qwen35.sh first (it makes the BF16 file)" >&2; exit 1; }
json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(round(d[0]['avg_ts'] if isinstance(d, list) else d['decode_tok_s'], 2))"; }
for round in $(seq "${ROUNDS:-1}"); do
    for f in ${FORMATS:-Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0}; do
        m="$DIR/qwen35-bench-shape.$f.gguf"
        [ -s "$m" ] || "$LLAMA_BIN/llama-quantize" "$DIR/qwen35-bench-shape.BF16.gguf" "$m" "$f" "$(nproc)" >"$m.log" 2>&1
        llama=$("$LLAMA_BIN/llama-bench" -m "$m" -t "$THREADS" -p 0 -n 32 -r 2 -o json 2>/dev/null | tr -d '\n' | json)
        line="round $round $f: llama.cpp $llama"
        for mode in exact q8; do
            tl=$("$TL" bench "$m" --threads "$THREADS" --prompt-tokens 16 --decode-tokens 32 --batch 1 --repeats 2 \
                --activations "$mode" --json-only --no-prefill-warmup 2>/dev/null | json)
            line="$line, tl $mode $tl"
        done
        echo "$line tok/s"
    done
done
