#!/usr/bin/env bash
# Greedy answers under a LoRA adapter: tl serve = llama-server --lora, on the same GGUF
# model and GGUF adapter (issue 48's "greedy text = llama-server where both are exact
# enough to agree"). Never in CI (it builds llama-server; minutes).
#
#   scripts/check_lora_llama.sh ADAPTER.gguf [MODEL.gguf]
#
# MODEL defaults to SmolLM2-135M-Instruct's Q4_1 file widened to F32 by llama-quantize
# (made once beside it): both runners then multiply the same f32 values, so their
# log-probabilities agree to ~1e-3 and greedy choices part only at near-ties. For each
# prompt, both answer 48 greedy tokens with their top-2 log-probabilities; every token
# must be the same with its log-probability within LP (default 0.02), until the texts
# part at a position where either runner's top two are closer than TIE (default 0.01):
# there the comparison ends. Exit 0 when that holds for every prompt, 1 otherwise; the
# report says how many tokens each prompt shared and where it ended.
# ADAPTER is a GGUF adapter (convert_lora_to_gguf.py); tl reads the same file.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "check_lora_llama: $*" >&2; }

ADAPTER="${1:?usage: scripts/check_lora_llama.sh ADAPTER.gguf [MODEL.gguf]}"
[ -f "$ADAPTER" ] || { log "error: $ADAPTER: no such file"; exit 1; }
TL="${TL_BIN:-target/release}/tl"
[ -x "$TL" ] || { log "error: $TL: no release tl (cargo build --release -p tl-cli --bin tl, or TL_BIN=DIR)"; exit 1; }
LLAMA_BIN="$(scripts/build_llama_cpp.sh --serve)"
MODEL="${2:-}"
if [ -z "$MODEL" ]; then
    Q41="$(scripts/fetch_model.sh)"
    MODEL="${Q41%.Q4_1.gguf}.F32-of-Q4_1.gguf"
    if [ ! -s "$MODEL" ]; then
        log "making $MODEL (llama-quantize --allow-requantize ... F32)"
        "$LLAMA_BIN/llama-quantize" --allow-requantize "$Q41" "$MODEL.tmp" F32 >/dev/null 2>&1
        mv "$MODEL.tmp" "$MODEL"
    fi
fi
OUT="$(mktemp -d)"
trap 'kill ${PIDS:-} 2>/dev/null || true; rm -rf "$OUT"' EXIT
PIDS=""
up() { # PORT: wait for /health
    for _ in $(seq 600); do
        curl -sf "localhost:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    log "error: the server on port $1 did not start"
    exit 1
}
"$LLAMA_BIN/llama-server" -m "$MODEL" -t 2 -c 2048 --port 8946 --lora "$ADAPTER" >"$OUT/llama.log" 2>&1 &
PIDS="$!"
"$TL" serve "$MODEL" --port 8947 --threads 2 --lora "a=$ADAPTER" >"$OUT/tl.log" 2>&1 &
PIDS="$PIDS $!"
up 8946
up 8947

python3 - "${TIE:-0.01}" "${LP:-0.02}" <<'PY'
import json, sys, urllib.request
tie, lp_tol = float(sys.argv[1]), float(sys.argv[2])
prompts = ["The three most important ideas in computer science are",
           "Write a short poem about the sea:",
           "def fibonacci(n):"]
def post(port, path, body):
    req = urllib.request.Request(f"http://localhost:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))
ok = True
for p in prompts:
    ll = post(8946, "/completion", {"prompt": p, "n_predict": 48, "temperature": 0, "cache_prompt": False,
                                    "n_probs": 2})["completion_probabilities"]
    t = post(8947, "/v1/completions", {"model": "a", "prompt": p, "max_tokens": 48, "temperature": 0,
                                       "logprobs": 2})["choices"][0]["logprobs"]
    n, why = 0, "the end"
    for i, (a, tok) in enumerate(zip(ll, t["tokens"])):
        la = [x["logprob"] for x in a["top_logprobs"][:2]]
        lb = sorted(t["top_logprobs"][i].values(), reverse=True)[:2]
        d = abs(a["top_logprobs"][0]["logprob"] - t["token_logprobs"][i])
        if a["token"] == tok and d <= lp_tol:
            n += 1
            continue
        if a["token"] != tok and (la[0] - la[1] < tie or lb[0] - lb[1] < tie):
            why = (f"the texts part at a near-tie, token {i}: llama-server {a['token']!r}, tl {tok!r} "
                   f"(top-2 gaps {la[0] - la[1]:.4f} / {lb[0] - lb[1]:.4f})")
        else:
            ok = False
            why = f"DIFFERS at token {i}: llama-server {a['token']!r}, tl {tok!r}, logprob difference {d:.4f}"
        break
    print(f"{p!r}: {n} tokens the same; stopped at {why}")
sys.exit(0 if ok else 1)
PY
