#!/usr/bin/env bash
# Load run: start `serve` on SmolLM2 (or MODEL=path), then N concurrent streaming
# clients for SECONDS each at concurrency 1, 4, 16 and 64; one summary line per level
# (answered/refused/failed, output tok/s, TTFT and inter-token latency p50/p99, KV blocks
# in use at the end). PROFILE=dev (default: its hot kernels are optimised as in release) or release. The machine is shared: keep it short.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${MODEL:-$HOME/.cache/tl/SmolLM2-135M-Instruct.Q4_1.gguf}"
seconds="${SECONDS_PER_LEVEL:-15}"
levels="${LEVELS:-1 4 16 64}"
profile="${PROFILE:-dev}"
name="$(basename "$model" .gguf)"
flag=(); [[ "$profile" == release ]] && flag=(--release)
dir=debug; [[ "$profile" == release ]] && dir=release
cargo build -q "${flag[@]}" -p tl-serve --bins
out="$(mktemp)"
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
"target/$dir/serve" --model "$model" --port 0 --threads "${THREADS:-2}" --max-seqs 64 --max-queue 256 \
    --max-batch-tokens "${MAX_BATCH_TOKENS:-512}" >"$out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.2; done
addr="$(grep -o 'http://[0-9.:]*' "$out" | head -1 | sed 's#http://##')"
head -1 "$out"
status=0
for c in $levels; do
    "target/$dir/load" --addr "$addr" --model "$name" --concurrency "$c" --seconds "$seconds" \
        --max-tokens "${MAX_TOKENS:-32}" || status=$?
done
kill -TERM "$pid"; wait "$pid" || status=$?
exit "$status"
