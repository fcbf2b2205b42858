#!/usr/bin/env bash
# Speculative decoding benchmark: tl's `serve` with speculation off, n-gram and a draft
# model, beside llama-server without speculation, with its draft model and with its
# n-gram lookup, on the same GGUF files; copy-heavy chat prompts (rewrite code, extract
# quoted facts, continue a list) and free text; greedy; batch 1 and 4 concurrent clients.
# Modes: off and ngram on the Q4_1 file; f32 (no speculation) and draft on its F32 twin
# (the draft model is the Q4_1 file), so draft is read against f32.
# One JSON line per (server, mode, workload, concurrency): median decode tok/s per request,
# aggregate tok/s, and a hash of the output (tl's must be the same in every mode).
#
#   scripts/bench_speculate.sh            # SmolLM2 Q4_1 (n-gram), F32 twin (draft = Q4_1)
#   MODES="off ngram" REPEATS=5 LEVELS="1" scripts/bench_speculate.sh
#   # a real pair: the 1.5B target (mode f32 = no speculation) and the 0.5B as its draft
#   TARGET_F32=~/.cache/tl/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
#   DRAFT=~/.cache/tl/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf MODES="f32 draft" \
#   TL_ARGS="--activations q8" scripts/bench_speculate.sh
#
# DRAFT: the draft model (default the Q4_1 file); DRAFT_K: tokens drafted per step (4);
# TL_ARGS: more flags for tl's serve (the activation mode); WORKLOADS: spec_client.py's
# workloads (default all: code, quotes, list, free).
#
# Needs release builds (cargo; TL_BIN: a directory with serve already built, used as it is)
# and llama.cpp's server (scripts/build_llama_cpp.sh --serve).
# The machine is shared: the script prints the load average before each run.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${TL_CACHE:-$HOME/.cache/tl}"
q41="${MODEL:-$cache/SmolLM2-135M-Instruct.Q4_1.gguf}"
f32="${TARGET_F32:-$cache/SmolLM2-135M-Instruct.Q4_1.requant-F32.gguf}"
# llama.cpp's server and tools: LLAMA_BIN, else scripts/build_llama_cpp.sh --serve (which
# builds them once; LLAMA_CPP_NO_AMX=1 picks the AMX-free build, the one that runs in a VM
# whose CPUID reports AMX it does not enable).
llama="${LLAMA_BIN:-$(scripts/build_llama_cpp.sh --serve)}"
threads="${THREADS:-2}"
repeats="${REPEATS:-3}"
levels="${LEVELS:-1 4}"
modes="${MODES:-off ngram f32 draft}"
servers="${SERVERS:-tl llama}"
max_tokens="${MAX_TOKENS:-128}"
draft_model="${DRAFT:-$q41}"
draft_k="${DRAFT_K:-4}"
read -r -a tl_args <<<"${TL_ARGS:-}"
workloads=()
[[ -n "${WORKLOADS:-}" ]] && workloads=(--workloads "$WORKLOADS")
client="scripts/lib/spec_client.py"

# The F32 twin of the Q4_1 file (every weight widened exactly), the draft-model target.
if [[ ! -f "$f32" && -x "$llama/llama-quantize" ]]; then
    "$llama/llama-quantize" --allow-requantize "$q41" "$f32" F32 >/dev/null 2>&1
fi
if [[ -n "${TL_BIN:-}" ]]; then
    serve="$(cd "$TL_BIN" && pwd)/serve"
else
    cargo build -q --release -p tl-serve --bin serve
    serve=target/release/serve
fi

wait_up() { # $1 log file; prints host:port
    for _ in $(seq 900); do
        if grep -qE 'listening on http://|server is listening on' "$1"; then
            grep -oE 'http://[0-9.]+:[0-9]+' "$1" | head -1 | sed 's#http://##'
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break # it died (an error, or a crash)
        sleep 0.2
    done
    tail -3 "$1" >&2
    return 1
}

run_client() { # server mode model-name addr
    local who="$1" mode="$2" name="$3" addr="$4"
    for c in $levels; do
        echo "# $who $mode c=$c load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        python3 "$client" "$addr" "$name" --concurrency "$c" --repeats "$repeats" --max-tokens "$max_tokens" \
            "${workloads[@]}" | sed "s/^{/{\"server\": \"$who\", \"mode\": \"$mode\", /"
    done
}

log="$(mktemp)"
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
stop() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; }

for server in $servers; do
    for mode in $modes; do
        model="$q41"
        [[ "$mode" == draft || "$mode" == f32 ]] && model="$f32"
        [[ -f "$model" ]] || { echo "# skip $server $mode: $model missing" >&2; continue; }
        port=$((18000 + RANDOM % 1000))
        if [[ "$server" == tl ]]; then
            spec="$mode"
            [[ "$mode" == f32 ]] && spec=off
            [[ "$mode" == draft ]] && spec="draft:$draft_model:$draft_k"
            [[ "$mode" == ngram ]] && spec="ngram:${NGRAM_K:-4}"
            "$serve" --model "$model" --port "$port" --threads "$threads" --speculate "$spec" "${tl_args[@]}" \
                >"$log" 2>&1 &
        else
            [[ -x "$llama/llama-server" ]] || { echo "# skip llama-server: not built" >&2; continue; }
            extra=()
            [[ "$mode" == draft ]] && extra=(--model-draft "$draft_model" --spec-draft-n-max "$draft_k" --spec-draft-n-min 1)
            [[ "$mode" == ngram ]] && extra=(--spec-type ngram-simple --spec-ngram-simple-size-m "${NGRAM_K:-4}")
            "$llama/llama-server" --model "$model" --port "$port" --threads "$threads" -c 4096 -np 4 \
                "${extra[@]}" >"$log" 2>&1 &
        fi
        pid=$!
        if ! addr="$(wait_up "$log")"; then
            echo "# $server $mode failed to start" >&2
            stop
            continue
        fi
        [[ "$server" == llama ]] && addr="127.0.0.1:$port"
        run_client "$server" "$mode" "$(basename "$model" .gguf)" "$addr"
        stop
    done
done

# A/B on one tl server, batch 1: requests alternate between speculation off and on (the
# per-request `speculate` field), so both sides see the same machine load.
if [[ "${AB:-1}" == 1 && " $servers " == *" tl "* ]]; then
    for mode in ${AB_MODES:-ngram draft}; do
        model="$q41"; spec="ngram:${NGRAM_K:-4}"; ab=true
        if [[ "$mode" == draft ]]; then
            model="$f32"; spec="draft:$draft_model:$draft_k"; ab='{"kind": "draft"}'
        fi
        [[ -f "$model" ]] || continue
        port=$((19000 + RANDOM % 1000))
        "$serve" --model "$model" --port "$port" --threads "$threads" --speculate "$spec" "${tl_args[@]}" \
            >"$log" 2>&1 &
        pid=$!
        addr="$(wait_up "$log")" || { stop; continue; }
        echo "# tl A/B $mode load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        python3 "$client" "$addr" "$(basename "$model" .gguf)" --repeats "${AB_REPEATS:-5}" \
            --max-tokens "$max_tokens" --ab "$ab" "${workloads[@]}" | sed "s/^{/{\"server\": \"tl\", \"mode\": \"A\/B $mode\", /"
        stop
    done
fi
