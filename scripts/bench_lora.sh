#!/usr/bin/env bash
# LoRA adapters' cost, beside llama-server --lora on the same files (issue 48's table in
# docs/benchmarks.md). Never in CI.
#
#   scripts/bench_lora.sh MODEL.gguf ADAPTER1 [ADAPTER2 ...]
#
# Each ADAPTER is a PEFT directory with a GGUF of it beside it (ADAPTER.gguf, made by
# llama.cpp's convert_lora_to_gguf.py); tl reads the PEFT directories, llama-server the
# first GGUF. Per round (ROUNDS, default 2), interleaved:
#   tl bench, batch 1 and 4: the base; the first adapter on every row; with 4 or more
#     adapters, batch 4 with a different adapter on each row (`--lora` repeated);
#   llama-server -t THREADS [--lora ADAPTER1.gguf]: `/completion` of a ~170-token prompt,
#     n_predict DECODE, ignore_eos, no prompt cache; its predicted_per_second, median of 3.
# Environment: TL_BIN (a directory with a release `tl`; default target/release), THREADS
# (2), PROMPT (128), DECODE (64), ROUNDS (2), PORT (8931), TL_ARGS (more `tl bench` flags,
# e.g. "--activations q8"). Prints one JSON line per
# measurement on stdout and a table at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "bench_lora: $*" >&2; }

[ $# -ge 2 ] || { log "usage: scripts/bench_lora.sh MODEL.gguf ADAPTER1 [ADAPTER2 ...]"; exit 1; }
MODEL="$1"
shift
ADAPTERS=("$@")
for a in "${ADAPTERS[@]}"; do
    [ -f "$a/adapter_config.json" ] || { log "error: $a: not a PEFT directory (no adapter_config.json)"; exit 1; }
done
[ -f "${ADAPTERS[0]}.gguf" ] || { log "error: ${ADAPTERS[0]}.gguf: no GGUF of the first adapter beside it"; exit 1; }
TL="${TL_BIN:-target/release}/tl"
[ -x "$TL" ] || { log "error: $TL: no release tl (cargo build --release -p tl-cli --bin tl, or TL_BIN=DIR)"; exit 1; }
THREADS="${THREADS:-2}" PROMPT="${PROMPT:-128}" DECODE="${DECODE:-64}" ROUNDS="${ROUNDS:-2}" PORT="${PORT:-8931}"
LLAMA_BIN="$(scripts/build_llama_cpp.sh --serve)"
OUT="$(mktemp -d)"
trap 'kill "${SERVER:-}" 2>/dev/null || true; rm -rf "$OUT"' EXIT

tl_bench() { # NAME BATCHES [--lora ...]: one JSON line per batch size, tagged with NAME
    local name="$1" batches="$2"
    shift 2
    "$TL" bench "$MODEL" --prompt-tokens "$PROMPT" --decode-tokens "$DECODE" --batch "$batches" --repeats 3 \
        --threads "$THREADS" --json-only ${TL_ARGS:-} "$@" |
        python3 -c 'import json,sys
for l in sys.stdin:
    j = json.loads(l); j["run"] = sys.argv[1]; print(json.dumps(j))' "$name"
}

TEXT="$(python3 -c 'print(" ".join(["The history of computing is a story of people, machines and ideas."] * 12))')"
server_rate() { # NAME [--lora FILE]: llama-server's decode tok/s, median of 3 requests
    local name="$1"
    shift
    "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" -c 2048 --port "$PORT" "$@" >"$OUT/server.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 600); do
        curl -sf "localhost:$PORT/health" >/dev/null 2>&1 && break
        sleep 0.2
    done
    curl -sf "localhost:$PORT/health" >/dev/null || { log "error: llama-server did not start"; tail "$OUT/server.log" >&2; exit 1; }
    for k in 1 2 3 4; do
        curl -s "localhost:$PORT/completion" -H 'Content-Type: application/json' -d "$(python3 -c '
import json, sys
print(json.dumps({"prompt": sys.argv[1], "n_predict": int(sys.argv[2]), "ignore_eos": True, "cache_prompt": False,
                  "temperature": 0}))' "$TEXT" "$DECODE")" >"$OUT/r$k.json"
    done
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
    # The first request warms up; the median of the other three.
    python3 - "$name" "$OUT"/r2.json "$OUT"/r3.json "$OUT"/r4.json <<'PY'
import json, statistics, sys
t = [json.load(open(p))["timings"] for p in sys.argv[2:]]
print(json.dumps({"tool": "llama-server", "run": sys.argv[1], "prompt_n": t[0]["prompt_n"],
                  "decode_tok_s": round(statistics.median(x["predicted_per_second"] for x in t), 2)}))
PY
}

LOG="$OUT/all.jsonl"
for round in $(seq "$ROUNDS"); do
    log "round $round"
    tl_bench base 1,4 | tee -a "$LOG"
    tl_bench adapter 1,4 --lora "${ADAPTERS[0]}" | tee -a "$LOG"
    if [ "${#ADAPTERS[@]}" -ge 4 ]; then
        tl_bench four-adapters 4 --lora "${ADAPTERS[0]}" --lora "${ADAPTERS[1]}" --lora "${ADAPTERS[2]}" \
            --lora "${ADAPTERS[3]}" | tee -a "$LOG"
    fi
    server_rate base | tee -a "$LOG"
    server_rate adapter --lora "${ADAPTERS[0]}.gguf" | tee -a "$LOG"
done

python3 - "$LOG" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    if r["tool"] == "tl":
        by[("tl", r["run"], r["batch"], "decode")].append(r["decode_tok_s"])
        if r["batch"] == 1 and r.get("prefill_tok_s"):
            by[("tl", r["run"], 1, "prefill")].append(r["prefill_tok_s"])
        if r.get("lora_load_ms"):
            by[("tl", r["run"], 0, "load_ms")].append(r["lora_load_ms"])
    else:
        by[("llama-server", r["run"], 1, "decode")].append(r["decode_tok_s"])
med = {k: statistics.median(v) for k, v in by.items()}
print("\n| measure | per round | median |\n|---|---|---:|")
for k, v in by.items():
    print(f"| {' '.join(map(str, k))} | {', '.join(f'{x:.1f}' for x in v)} | {med[k]:.1f} |")
def ratio(a, b, what):
    if a in med and b in med:
        print(f"{what}: {med[a] / med[b]:.2f}x")
print()
ratio(("tl", "adapter", 1, "decode"), ("tl", "base", 1, "decode"), "tl batch-1 decode, adapter / base")
ratio(("tl", "four-adapters", 4, "decode"), ("tl", "base", 4, "decode"), "tl 4 rows x 4 adapters / 4-row base")
ratio(("tl", "adapter", 4, "decode"), ("tl", "base", 4, "decode"), "tl 4 rows x 1 adapter / 4-row base")
ratio(("tl", "adapter", 1, "decode"), ("llama-server", "adapter", 1, "decode"), "tl / llama-server, with the adapter")
ratio(("tl", "base", 1, "decode"), ("llama-server", "base", 1, "decode"), "tl / llama-server, base")
PY
