#!/usr/bin/env bash
# Load run: start `serve` on SmolLM2 (or MODEL=path), then N concurrent streaming
# clients for SECONDS_PER_LEVEL each at concurrency 1, 4, 16 and 64 (LEVELS); one summary
# line per level (answered/refused/failed, output tok/s, TTFT and inter-token latency
# p50/p99, prompt tokens per request, KV blocks in use at the end), and for tl a line of
# where the first token waited (queue wait, step and forward time, prefill tokens per
# step, prefix-cache tokens per request: serve's /metrics over the level).
#
# SERVERS="tl llama-server" runs llama.cpp's llama-server beside it on the same model
# file, the same THREADS and the same `load` clients: llama-server with -np = concurrency
# slots, --cont-batching and LLAMA_SERVER_ARGS (default --no-repack: this machine's CPUID
# reports AMX, which llama.cpp's repacked paths cannot run in this VM; docs/benchmarks.md;
# with LLAMA_CPP_NO_AMX=1 the AMX-free build, repack on, no extra arguments).
# SERVERS may also name tl-blocks: the same serve with TL_PREFIX_REUSE=blocks (the prefix
# cache reuses whole blocks only, as before the partial-block reuse; a before/after in one run),
# and tl-q8: the same serve with `--activations q8` (both modes beside llama-server in one run).
# Every (round, level, server) gets a fresh server, so no run starts with another's cache.
# ROUNDS=3 repeats the whole set; the last lines are the medians over rounds per server
# and level. llama-server comes from LLAMA_SERVER or scripts/build_llama_cpp.sh --serve.
# PROFILE=dev (default: its hot kernels are optimised as in release) or release. TL_BIN: a
# directory with serve and load already built (used as they are, nothing is built). The
# machine is shared: keep it short.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${MODEL:-$HOME/.cache/tl/SmolLM2-135M-Instruct.Q4_1.gguf}"
seconds="${SECONDS_PER_LEVEL:-15}"
levels="${LEVELS:-1 4 16 64}"
profile="${PROFILE:-dev}"
servers="${SERVERS:-tl}"
rounds="${ROUNDS:-1}"
threads="${THREADS:-2}"
name="$(basename "$model" .gguf)"
flag=(); [[ "$profile" == release ]] && flag=(--release)
dir=debug; [[ "$profile" == release ]] && dir=release
if [[ -n "${TL_BIN:-}" ]]; then
    bin="$(cd "$TL_BIN" && pwd)"
else
    cargo build -q "${flag[@]}" -p tl-serve --bins
    bin="target/$dir"
fi
llama=""
# The native build needs --no-repack on a CPU whose CPUID reports AMX the VM does not
# enable; the AMX-free build (LLAMA_CPP_NO_AMX=1) runs as its users run it, repack on.
llama_default_args="--no-repack"
[[ "${LLAMA_CPP_NO_AMX:-0}" == 1 ]] && llama_default_args=""
if [[ " $servers " == *" llama-server "* ]]; then
    llama="${LLAMA_SERVER:-$(scripts/build_llama_cpp.sh --serve)/llama-server}"
    [[ -x "$llama" ]] || { echo "load.sh: no llama-server at $llama" >&2; exit 1; }
fi
out="$(mktemp)"
results="$(mktemp)"
pid=""
stop() { [[ -n "$pid" ]] && { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }; pid=""; }
trap 'stop; rm -f "$out" "$results"' EXIT

start_tl() { # $1: the serve binary, then extra flags
    local serve="$1"
    shift
    "$serve" --model "$model" --port 0 --threads "$threads" --max-seqs 64 --max-queue 256 \
        --max-batch-tokens "${MAX_BATCH_TOKENS:-512}" "$@" >"$out" 2>&1 &
    pid=$!
    # A 1B model on a busy machine takes a while to hash (the fingerprint) and load.
    for _ in $(seq 1500); do grep -q listening "$out" && break; sleep 0.2; done
    addr="$(grep -o 'http://[0-9.:]*' "$out" | head -1 | sed 's#http://##')"
    [[ -n "$addr" ]] || { echo "load.sh: serve did not start in 300 s" >&2; cat "$out" >&2; exit 1; }
}

start_llama() { # $1: slots
    local port=$((20000 + RANDOM % 20000))
    # shellcheck disable=SC2086 # LLAMA_SERVER_ARGS is a list of flags
    "$llama" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" -np "$1" --cont-batching \
        -c $(( $1 * ${CTX_PER_SLOT:-512} )) ${LLAMA_SERVER_ARGS-$llama_default_args} >"$out" 2>&1 &
    pid=$!
    addr="127.0.0.1:$port"
    for _ in $(seq 1500); do curl -sf "http://$addr/health" >/dev/null 2>&1 && return; sleep 0.2; done
    echo "load.sh: llama-server did not start in 300 s" >&2; cat "$out" >&2; exit 1
}

echo "load.sh: $(basename "$model"), $threads threads, levels $levels, $seconds s each, servers: $servers, rounds $rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for round in $(seq "$rounds"); do
    for c in $levels; do
        for s in $servers; do
            case "$s" in
                tl) start_tl "$bin/serve" ;;
                tl-blocks) TL_PREFIX_REUSE=blocks start_tl "$bin/serve" ;;
                tl-q8) start_tl "$bin/serve" --activations q8 ;;
                llama-server) start_llama "$c" ;;
                *) echo "load.sh: unknown server $s (tl, tl-blocks, tl-q8, llama-server)" >&2; exit 1 ;;
            esac
            kind=tl; [[ "$s" == llama-server ]] && kind=llama-server
            "$bin/load" --server "$kind" --label "$s" --addr "$addr" --model "$name" --concurrency "$c" \
                --seconds "$seconds" --max-tokens "${MAX_TOKENS:-32}" | tee -a "$results" || status=$?
            stop
        done
    done
    echo "load.sh: round $round done; load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
if (( rounds > 1 )) && command -v python3 >/dev/null; then
    python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[(\S+)\] concurrency +(\d+): .*?; ([\d.]+) output tok/s .*TTFT p50 (\d+) ms p99 (\d+) ms; ITL p50 ([\d.]+) ms", line)
    if m:
        rows.setdefault((m[1], int(m[2])), []).append([float(x) for x in m.groups()[2:]])
print("medians over rounds: server, concurrency, output tok/s, TTFT p50 ms, TTFT p99 ms, ITL p50 ms (runs)")
for (s, c), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    med = [statistics.median(col) for col in zip(*v)]
    print(f"  {s:12} {c:3}  {med[0]:7.1f}  {med[1]:6.0f}  {med[2]:6.0f}  {med[3]:6.1f}  ({len(v)})")
PY
fi
exit "$status"
