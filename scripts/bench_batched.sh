#!/usr/bin/env bash
# Batched decode, tl beside llama.cpp's llama-batched-bench on the same files: B sequences,
# each prefilled with its own PROMPT-token prompt, then GEN decode steps of B tokens; total
# decode tokens per second over all B sequences (llama-batched-bench's S_TG).
#
#   scripts/bench_batched.sh            # the 1B shape, every format
#   SIZE=135m scripts/bench_batched.sh  # SmolLM2-135M-Instruct Q4_1
#
# Environment:
#   SIZE      1b (default): the Llama-3.2-1B-shaped files of `SIZE=1b scripts/bench_compare.sh`
#             (built once under ${TL_CACHE}/llama-1b-shape/ by scripts/lib/llama_1b_shape.sh);
#             135m: the SmolLM2 Q4_1 file scripts/fetch_model.sh fetches.
#   CONFIGS   1B formats (default q4_k_m,q5_k_m,q6_k,q8_0,q4_0,bf16)
#   BATCH     batch sizes (default 1,2,3,4,6,8,16)
#   THREADS   threads of both tools (default 2)
#   PROMPT    prompt tokens per sequence (default 32)
#   GEN       decode steps (default 32)
#   REPEATS   tl's timed repetitions per batch size, the median reported (default 3;
#             llama-batched-bench runs each once)
#   ROUNDS    rounds over every file, the two tools back to back per file (default 2); the
#             table gives medians over rounds and each ratio as the median of the rounds'
#   TL_BIN, TL_COMMIT, LLAMA_CPP_DIR, LLAMA_CPP_NO_AMX, TL_CACHE, OUT: as bench_compare.sh
# Writes OUT/batched-<time>.jsonl (every raw line) and OUT/batched-<time>.md (the tables).
# A measurement, never run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

SIZE="${SIZE:-1b}"
CONFIGS="${CONFIGS:-q4_k_m,q5_k_m,q6_k,q8_0,q4_0,bf16}"
BATCH="${BATCH:-1,2,3,4,6,8,16}"
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-32}"
GEN="${GEN:-32}"
REPEATS="${REPEATS:-3}"
ROUNDS="${ROUNDS:-2}"
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
OUT="${OUT:-target/bench}"

log() { echo "bench_batched: $*" >&2; }

case "$SIZE" in 1b | 135m) ;; *) log "error: SIZE=$SIZE: expected 1b or 135m"; exit 1 ;; esac
GGUF="$(scripts/fetch_model.sh)"

if [ -n "${TL_BIN:-}" ]; then
    TL_BIN="$(cd "$TL_BIN" && pwd)"
else
    log "building tl (release: bench, convert, probe)"
    cargo build --release --quiet -p tl-examples --bin bench --bin convert --bin probe >&2
    TL_BIN="$ROOT/target/release"
fi
LLAMA_BIN="$(scripts/build_llama_cpp.sh)"

if [ "$SIZE" = 1b ]; then
    # shellcheck source=lib/llama_1b_shape.sh
    source scripts/lib/llama_1b_shape.sh
else
    FILES_1B="$(mktemp "${TMPDIR:-/tmp}/files-135m.XXXXXX")"
    printf '{"q4_1": {"path": "%s"}}\n' "$GGUF" >"$FILES_1B"
    CONFIGS=q4_1
fi

mkdir -p "$OUT"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
[ -n "${TL_COMMIT:-}" ] || TL_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
export TL_BIN LLAMA_BIN THREADS PROMPT GEN REPEATS ROUNDS BATCH CONFIGS FILES_1B TL_COMMIT SIZE
export RAW="$OUT/batched-$STAMP.jsonl" TABLE="$OUT/batched-$STAMP.md"
python3 - <<'PY'
import json, os, statistics, sys

env = os.environ
threads, prompt, gen = env["THREADS"], int(env["PROMPT"]), int(env["GEN"])
batches = sorted({int(b) for b in env["BATCH"].split(",") if b.strip()} | {1})
files = json.load(open(env["FILES_1B"]))
names = [c.strip() for c in env["CONFIGS"].split(",") if c.strip()]
bad = [n for n in names if n not in files]
if bad:
    sys.exit(f"bench_batched: error: unknown config(s) {bad}; known: {', '.join(files)}")
sys.path.insert(0, "scripts/lib")
from bench_run import RawLog
log = RawLog(env["RAW"], "bench_batched")
record, run = log.record, log.run

def tl(name, rnd, path):
    cmd = [f"{env['TL_BIN']}/bench", "--model", path, "--threads", threads, "--prompt-tokens", str(prompt),
           "--decode-tokens", str(gen), "--repeats", env["REPEATS"], "--json-only",
           "--batch", ",".join(map(str, batches))]
    out = {}
    for j in run(cmd):
        record({**j, "config": name, "round": rnd, "commit": env["TL_COMMIT"]})
        out[j["batch"]] = j["decode_tok_s"]
    return out

def llama(name, rnd, path):
    ctx = max(batches) * (prompt + gen) + 16
    cmd = [f"{env['LLAMA_BIN']}/llama-batched-bench", "-m", path, "-t", threads, "-tb", threads,
           "-c", str(ctx), "-npp", str(prompt), "-ntg", str(gen), "-npl", ",".join(map(str, batches)),
           "--output-format", "jsonl"]
    out = {}
    for j in run(cmd):
        record({**j, "tool": "llama.cpp", "config": name, "round": rnd})
        out[j["pl"]] = j["speed_tg"]
    return out

res = {n: {"tl": [], "llama": []} for n in names}
for rnd in range(1, int(env["ROUNDS"]) + 1):
    for n in names:
        print(f"bench_batched: round {rnd}, {n}", file=sys.stderr)
        res[n]["llama"].append(llama(n, rnd, files[n]["path"]))
        res[n]["tl"].append(tl(n, rnd, files[n]["path"]))

def med(runs, b):
    v = [r[b] for r in runs if r.get(b)]
    return statistics.median(v) if v else None

def ratio(a_runs, b_runs, a_key, b_key):
    """Median over rounds of a/b within each round (the same round's runs)."""
    v = [a[a_key] / b[b_key] for a, b in zip(a_runs, b_runs) if a.get(a_key) and b.get(b_key)]
    return statistics.median(v) if v else None

f = lambda x, d=1: "—" if x is None else f"{x:.{d}f}"
head = "| file | " + " | ".join(f"B = {b}" for b in batches) + " |"
rule = "|---|" + "---:|" * len(batches)
lines = [f"batched decode, total tok/s over B sequences ({prompt}-token prompt each, {gen} steps), "
         f"{threads} threads, tl {env['TL_COMMIT']}; llama.cpp: llama-batched-bench ({env['LLAMA_BIN']}); "
         f"medians over {env['ROUNDS']} rounds, ratios the median of each round's", "",
         "tl tok/s (x its B = 1 figure):", "", head, rule]
for n in names:
    t = res[n]["tl"]
    lines.append(f"| {n.upper()} | " + " | ".join(
        f"{f(med(t, b))} ({f(ratio(t, t, b, 1), 2)}x)" for b in batches) + " |")
lines += ["", "llama.cpp tok/s (x its B = 1 figure):", "", head, rule]
for n in names:
    l = res[n]["llama"]
    lines.append(f"| {n.upper()} | " + " | ".join(
        f"{f(med(l, b))} ({f(ratio(l, l, b, 1), 2)}x)" for b in batches) + " |")
lines += ["", "tl / llama.cpp:", "", head, rule]
for n in names:
    lines.append(f"| {n.upper()} | " + " | ".join(
        f(ratio(res[n]["tl"], res[n]["llama"], b, b), 2) for b in batches) + " |")
text = "\n".join(lines) + "\n"
open(env["TABLE"], "w").write(text)
print(text)
print(f"raw JSON lines: {env['RAW']}\ntable: {env['TABLE']}")
PY
