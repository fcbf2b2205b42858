#!/usr/bin/env bash
# The int8-activation mode's perplexity beside the exact path's and llama.cpp's (whose CPU
# path quantizes activations to 8 bits too), on one file scored the same way: windows of
# CTX tokens from scratch, only the predictions from position CTX/2 on (llama-perplexity's
# rule; tl's `--score-from`), as many full windows as llama-perplexity takes. A measurement
# for docs/benchmarks.md, not a test.
#
#   scripts/q8_perplexity.sh            # SmolLM2-135M Q4_1 over docs/forward.md, CTX=512
#   MODEL=path.gguf TEXT=file CTX=1024 THREADS=2 TL_BIN=target/release scripts/q8_perplexity.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-$(scripts/fetch_model.sh)}"
TEXT="${TEXT:-docs/forward.md}"
CTX="${CTX:-512}"
THREADS="${THREADS:-2}"
TL_BIN="${TL_BIN:-target/release}"
[ -x "$TL_BIN/perplexity" ] || cargo build --release -p tl-examples --bin perplexity >&2
BIN="$(scripts/build_llama_cpp.sh --perplexity)"

llama="$("$BIN/llama-perplexity" -m "$MODEL" -f "$TEXT" -c "$CTX" -b "$CTX" -t "$THREADS" 2>&1)" ||
    { echo "$llama" >&2; exit 1; }
chunks="$(grep -o 'over [0-9]* chunks' <<<"$llama" | grep -o '[0-9]*' | head -n 1)"
ppl="$(grep -o 'Final estimate: PPL = [0-9.]* +/- [0-9.]*' <<<"$llama" | sed 's/Final estimate: PPL = //')"
echo "model $MODEL, text $TEXT, $chunks windows of $CTX, scored from $((CTX / 2))"
echo "llama.cpp ($(basename "$(dirname "$BIN")")): perplexity $ppl"
for act in exact q8; do
    out="$("$TL_BIN/perplexity" --model "$MODEL" --file "$TEXT" --window "$CTX" --score-from "$((CTX / 2))" \
        --max-windows "$chunks" --threads "$THREADS" --activations "$act")"
    echo "tl --activations $act: $out"
done
