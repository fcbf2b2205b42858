#!/usr/bin/env bash
# tl next to llama.cpp on the same model, same threads, same prompt and decode lengths.
#
#   scripts/bench_compare.sh [--plot] [GGUF]
#   SIZE=1b scripts/bench_compare.sh
#   PLOT_FROM=target/bench/compare-<time>.jsonl scripts/bench_compare.sh --plot
#
# --plot also draws the run as a PNG beside its table (tok/s per format, tl beside
# llama.cpp, prefill and decode, the ratio over each pair): scripts/plot_bench.py, in a
# venv with matplotlib the script makes once at .venv-plot (git-ignored). PLOT_FROM=FILE
# draws an earlier run's .jsonl, or a markdown table with the columns `tl prefill`,
# `llama.cpp prefill`, `tl decode` and `llama.cpp decode` (its .md, or one copied out of
# docs/benchmarks.md), without benchmarking; the PNG goes beside FILE (PLOT_OUT: elsewhere),
# titled PLOT_TITLE.
#
# GGUF defaults to the SmolLM2-135M-Instruct Q4_1 file scripts/fetch_model.sh fetches.
# On a clean machine this fetches the model, builds tl (release) and llama.cpp
# (scripts/build_llama_cpp.sh: PyPI sdist, cmake installed if missing), derives the other
# formats from GGUF (cached beside it), then benchmarks. Environment:
#   SIZE      135m (default): the rows below, on GGUF and formats derived from it.
#             1b: the real Qwen2.5-Coder-Instruct 0.5B and 1.5B Q4_K_M files
#             (CONFIGS coder-0.5b, coder-1.5b; scripts/fetch_qwen_coder.sh) and a
#             Llama-3.2-1B-shaped random Llama (hidden 2048, intermediate 8192, 16
#             layers, 32/8 heads, SmolLM2's tokenizer from GGUF), built once under
#             ${TL_CACHE}/llama-1b-shape/ (about 9 GB with every format; never in CI):
#             scripts/fixtures/make_llama_1b_shape.py (fixtures venv) writes the Hugging
#             Face model, the sdist's convert_hf_to_gguf.py makes a BF16 GGUF of it and
#             llama-quantize the Q4_K_M, Q5_K_M, Q6_K, Q8_0 and Q4_0 files. Both tools run
#             the same file; the table adds RSS, tl's weights_mib beside the file's tensor
#             bytes, decode as a fraction of its bandwidth roof (tensor bytes per token /
#             read bandwidth) and prefill as a fraction of the f32 FMA peak, both measured
#             by `probe` first. Defaults there: GEN=64 REPEATS=3 ROUNDS=3.
#   THREADS   worker threads of both tools, or a comma list of counts (default 2)
#   PROMPT    prompt tokens: prefill = one PROMPT-token step (default 128)
#   GEN       decoded tokens, after a PROMPT-token context (default 128)
#   REPEATS   timed repetitions per run; each run reports its median (default 5)
#   ROUNDS    rounds over all configurations, llama.cpp and tl back to back per
#             configuration, so slow drifts of a shared machine hit both (default 1);
#             the table gives the median over rounds
#   CONFIGS   comma list of rows to run (default: all; see CONFIG_ROWS below)
#   BATCH     tl's batched decode sizes, e.g. 8,32 (default 1: single sequence only; the
#             extra rows go to the JSON file, llama-bench has no batched decode)
#   OUT       where results go (default target/bench); each run writes
#             compare-<time>.jsonl (every raw line) and compare-<time>.md (the table)
#   LLAMA_BENCH_ARGS  extra llama-bench arguments (e.g. "--poll 0"); default none, i.e.
#             llama.cpp as its users run it
#   LLAMA_CPP_DIR  an already-built llama.cpp to use instead of building one
#   LLAMA_CPP_NO_AMX=1  build and use llama.cpp without AMX (scripts/build_llama_cpp.sh):
#             for VMs whose CPUID reports AMX the kernel does not enable, where the native
#             build dies of SIGILL unless llama-bench runs with `--repack 0`
#   TL_BIN    a directory with tl's bench, convert and probe already built (e.g. a copy of
#             another commit's target/release): used as they are, nothing is built;
#             TL_COMMIT names their commit in the table
#   TL_CACHE  cache directory (default ~/.cache/tl)
#   KV        tl's --kv backend (default f16-slab; q8-slab beside llama-bench's
#             LLAMA_BENCH_ARGS="-fa 1 -ctk q8_0 -ctv q8_0")
#   ACTIVATIONS  tl's --activations: exact (default) or q8 (int8 rows; docs/spec/numbers.md),
#             or exact,q8: both, back to back beside the same llama.cpp run (a second table
#             gives the q8 rows against it and the exact ratios beside them)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

log() { echo "bench_compare: $*" >&2; }

PLOT=0
ARGS=()
for a in "$@"; do
    case "$a" in
    --plot) PLOT=1 ;;
    *) ARGS+=("$a") ;;
    esac
done
set -- "${ARGS[@]+"${ARGS[@]}"}"

plot() { # RUN PNG: draw RUN (.jsonl or .md) with matplotlib from the venv made here
    local venv="$ROOT/.venv-plot"
    if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
        log "making $venv (matplotlib, for --plot)"
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install --quiet matplotlib >&2
    fi
    "$venv/bin/python" scripts/plot_bench.py "$1" "$2" "${PLOT_TITLE:-}" >&2
}

if [ -n "${PLOT_FROM:-}" ]; then
    [ -f "$PLOT_FROM" ] || { log "error: PLOT_FROM: no such file: $PLOT_FROM"; exit 1; }
    plot "$PLOT_FROM" "${PLOT_OUT:-${PLOT_FROM%.*}.png}"
    exit 0
fi

SIZE="${SIZE:-135m}"
case "$SIZE" in
135m)
    GEN="${GEN:-128}"
    REPEATS="${REPEATS:-5}"
    ROUNDS="${ROUNDS:-1}"
    CONFIGS="${CONFIGS:-q4_1,f32,q4_1-as-f32,f16,bf16,int4}"
    ;;
1b)
    GEN="${GEN:-64}"
    REPEATS="${REPEATS:-3}"
    ROUNDS="${ROUNDS:-3}"
    CONFIGS="${CONFIGS:-coder-1.5b,coder-0.5b,q4_k_m,q5_k_m,q6_k,q8_0,q4_0,bf16}"
    ;;
*)
    echo "bench_compare: error: SIZE=$SIZE: expected 135m or 1b" >&2
    exit 1
    ;;
esac
THREADS="${THREADS:-2}"
PROMPT="${PROMPT:-128}"
BATCH="${BATCH:-1}"
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
OUT="${OUT:-target/bench}"

GGUF="${1:-}"
if [ -z "$GGUF" ]; then
    GGUF="$(scripts/fetch_model.sh)"
fi
[ -f "$GGUF" ] || { log "error: no such file: $GGUF"; exit 1; }
GGUF="$(cd "$(dirname "$GGUF")" && pwd)/$(basename "$GGUF")"

if [ -n "${TL_BIN:-}" ]; then
    # Binaries built earlier (e.g. a copy of another commit's target/release), as they are.
    TL_BIN="$(cd "$TL_BIN" && pwd)"
    log "tl binaries: $TL_BIN (not rebuilt)"
else
    log "building tl (release: bench, convert, probe)"
    # -p tl-examples: the dependency features of the examples alone (a workspace-wide build
    # unifies the server's features in and rebuilds candle and the rest, ~20 min on 2 cores).
    cargo build --release --quiet -p tl-examples --bin bench --bin convert --bin probe >&2
    TL_BIN="$ROOT/target/release"
fi

LLAMA_BIN="$(scripts/build_llama_cpp.sh)"
log "llama.cpp binaries: $LLAMA_BIN"

STEM="${GGUF%.gguf}"
BF16_DIR="$STEM.bf16"
if [ "$SIZE" = 135m ]; then
    # Derived models, beside the source file, built once. llama-quantize dequantizes the Q4_1
    # weights (--allow-requantize), so every format holds the same (Q4_1-rounded) values up to
    # its own rounding. The tied embedding / LM head stays Q8_0 in the Q4_0 file, as tl's int4
    # keeps it (llama-quantize would otherwise pick its own type for it).
    derive() { # TYPE OUTFILE [extra llama-quantize args]
        local type="$1" out="$2"
        shift 2
        if [ ! -s "$out" ]; then
            log "making $out"
            "$LLAMA_BIN/llama-quantize" --allow-requantize "$@" "$GGUF" "$out.tmp" "$type" "$THREADS" >"$out.log" 2>&1 ||
                { log "error: llama-quantize $type failed, see $out.log"; exit 1; }
            mv "$out.tmp" "$out"
        fi
    }
    derive F32 "$STEM.requant-F32.gguf"
    derive F16 "$STEM.requant-F16.gguf"
    derive Q4_0 "$STEM.requant-Q4_0.gguf" --token-embedding-type q8_0 --output-tensor-type q8_0
    if [ ! -s "$BF16_DIR/model.safetensors" ]; then
        log "making $BF16_DIR (convert --dtype bf16)"
        rm -rf "$BF16_DIR.tmp"
        "$TL_BIN/convert" --gguf "$GGUF" --out "$BF16_DIR.tmp" --dtype bf16 >&2
        rm -rf "$BF16_DIR"
        mv "$BF16_DIR.tmp" "$BF16_DIR"
    fi
else
    # shellcheck source=lib/llama_1b_shape.sh
    source scripts/lib/llama_1b_shape.sh
fi

mkdir -p "$OUT"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RAW="$OUT/compare-$STAMP.jsonl"
TABLE="$OUT/compare-$STAMP.md"

export LLAMA_BENCH_ARGS="${LLAMA_BENCH_ARGS:-}"
export TL_BIN LLAMA_BIN THREADS PROMPT GEN REPEATS ROUNDS BATCH CONFIGS RAW TABLE GGUF STEM BF16_DIR SIZE
export FILES_1B="${FILES_1B:-}" PROBE_1B="${PROBE_1B:-}"
[ -n "${TL_COMMIT:-}" ] || TL_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
export TL_COMMIT
python3 - <<'PY'
import json, os, shlex, statistics, subprocess, sys, tempfile, time

env = os.environ
tl_bin, llama_bin = env["TL_BIN"], env["LLAMA_BIN"]
thread_counts = [int(t) for t in env["THREADS"].split(",") if t.strip()]
prompt, gen = int(env["PROMPT"]), int(env["GEN"])
repeats, rounds = int(env["REPEATS"]), int(env["ROUNDS"])
gguf, stem, bf16_dir = env["GGUF"], env["STEM"], env["BF16_DIR"]
llama_extra = shlex.split(env.get("LLAMA_BENCH_ARGS", ""))

# CONFIG_ROWS: name -> (what, tl model, tl --weights, llama.cpp model, llama.cpp label)
ROWS = {
    "q4_1": ("Q4_1 file, as stored", gguf, "native", gguf, "Q4_1"),
    "f32": ("F32 file (requantized from Q4_1)", f"{stem}.requant-F32.gguf", "native",
            f"{stem}.requant-F32.gguf", "F32"),
    "q4_1-as-f32": ("Q4_1 file widened to f32 at load", gguf, "f32",
                    f"{stem}.requant-F32.gguf", "F32"),
    "f16": ("F16 file, the same file for both", f"{stem}.requant-F16.gguf", "native",
            f"{stem}.requant-F16.gguf", "F16"),
    "bf16": ("bf16 safetensors (convert) vs F16 GGUF", bf16_dir, "native",
             f"{stem}.requant-F16.gguf", "F16"),
    "int4": ("tl int4 (g32, from Q4_1) vs Q4_0", gguf, "int4",
             f"{stem}.requant-Q4_0.gguf", "Q4_0"),
}
size = env["SIZE"]
costs = {}
if size == "1b":
    # The same file for both tools, kept as stored (`native`).
    costs = json.load(open(env["FILES_1B"]))
    ROWS = {n: (f"1B shape, {n.upper()} file", c["path"], "native", c["path"], n.upper())
            for n, c in costs.items()}
names = [c.strip() for c in env["CONFIGS"].split(",") if c.strip()]

def lab(n):
    """A row's name in the tables: the format, or the real file's model."""
    return f"Qwen2.5-Coder-{n[6:].upper()} Q4_K_M (real)" if n.startswith("coder-") else n.upper()
bad = [c for c in names if c not in ROWS]
if bad:
    sys.exit(f"bench_compare: error: unknown config(s) {bad}; known: {', '.join(ROWS)}")

raw = open(env["RAW"], "a")
loads = []

def record(obj):
    raw.write(json.dumps(obj) + "\n")
    raw.flush()

steals = []

def cpu_ticks():
    """/proc/stat's summed `cpu` line: (steal ticks, all ticks), or None off Linux."""
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:9]]
        return v[7], sum(v)
    except (OSError, ValueError, IndexError):
        return None

def spawn(cmd):
    """Run cmd: (exit code, stdout, stderr, peak RSS MiB of the child, 1-minute load before,
    steal %).

    The steal is the share of CPU time the hypervisor took while it ran (`steal` in
    /proc/stat; None where that cannot be read): on a VM whose vCPUs are descheduled a
    2-thread run waits for its slower thread, and a round with steal is not a measurement
    of either tool."""
    load = os.getloadavg()[0]
    loads.append(load)
    before, steal = cpu_ticks(), None
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = rc = os.waitstatus_to_exitcode(status)
        after = cpu_ticks()
        if before and after and after[1] > before[1]:
            steal = round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 2)
            steals.append(steal)
        fo.seek(0)
        fe.seek(0)
        return rc, fo.read(), fe.read(), ru.ru_maxrss / 1024.0, load, steal

def last_line(err):
    return (err.strip().splitlines() or ["?"])[-1]

def llama(row, rnd, threads, model):
    """llama-bench: pp PROMPT from an empty context, then tg GEN at depth PROMPT (as tl)."""
    res = {"load": os.getloadavg()[0]}
    for kind, args in (("prefill", ["-p", str(prompt), "-n", "0"]),
                       ("decode", ["-p", "0", "-n", str(gen), "-d", str(prompt)])):
        cmd = [f"{llama_bin}/llama-bench", "-m", model, "-t", str(threads), "-r", str(repeats),
               "-o", "jsonl"] + args + llama_extra
        rc, out, err, rss, load, steal = spawn(cmd)
        tag = {"tool": "llama.cpp", "config": row, "round": rnd, "kind": kind, "load_before": load,
               "steal_pct": steal}
        if rc != 0:
            # A crash writes nothing to stderr: say how it ended (-11: SIGSEGV).
            why = f"exit {rc}: {last_line(err)}"
            print(f"bench_compare: llama-bench {row} {kind} failed: {why}", file=sys.stderr)
            record({**tag, "error": why, "cmd": cmd})
            continue
        for line in out.splitlines():
            if not line.strip().startswith("{"):
                continue
            j = json.loads(line)
            j.update(tag, peak_rss_mib=round(rss, 1), median_ts=statistics.median(j["samples_ts"]))
            record(j)
            res[kind] = j["median_ts"]
            res["rss"] = max(res.get("rss", 0.0), rss)
    return res

activations = [a.strip() for a in (env.get("ACTIVATIONS") or "exact").split(",") if a.strip()]

def tl(row, rnd, threads, model, weights, act):
    cmd = [f"{tl_bin}/bench", "--model", model, "--weights", weights, "--threads", str(threads),
           "--prompt-tokens", str(prompt), "--decode-tokens", str(gen), "--repeats", str(repeats),
           "--batch", env["BATCH"], "--activations", act, "--kv", env.get("KV") or "f16-slab", "--json-only"]
    rc, out, err, rss, load, steal = spawn(cmd)
    tag = {"config": row, "round": rnd, "commit": env.get("TL_COMMIT"), "load_before": load,
           "steal_pct": steal, "activations": act, "kv": env.get("KV") or "f16-slab"}
    if rc != 0:
        print(f"bench_compare: tl bench {row} failed: {last_line(err)}", file=sys.stderr)
        record({"tool": "tl", **tag, "error": last_line(err), "cmd": cmd})
        return {"load": load, "error": last_line(err)}
    res = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        j.update(tag)
        record(j)
        if j["batch"] == 1:
            res = {"load": load, "prefill": j["prefill_tok_s"], "decode": j["decode_tok_s"],
                   "rss": j["peak_rss_mib"], "isa": j.get("isa"),
                   "weights_mib": j.get("weights_mib"), "load_s": j.get("load_s")}
    return res

# Each configuration's llama.cpp and tl runs back to back, so drifts of a shared machine's
# load hit both; the ratio is what to read.
# "tl" holds the first of ACTIVATIONS, "tl_q8" the q8 runs when both are asked for.
results = {(n, t): {"tl": [], "tl_q8": [], "llama": []} for t in thread_counts for n in names}
for rnd in range(1, rounds + 1):
    for t in thread_counts:
        for n in names:
            what, tl_model, weights, ll_model, _ = ROWS[n]
            print(f"bench_compare: round {rnd}/{rounds}, {t} thread(s): {n}", file=sys.stderr)
            results[(n, t)]["llama"].append(llama(n, rnd, t, ll_model))
            for i, act in enumerate(activations):
                key = "tl" if i == 0 else "tl_q8"
                results[(n, t)][key].append(tl(n, rnd, t, tl_model, weights, act))

def med(runs, key):
    v = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(v) if v else None

def f(x, d=1):
    return "—" if x is None else f"{x:.{d}f}"

def paired(tr, lr, key):
    """The median over rounds of tl/llama.cpp within each round (the two ran back to
    back, so a drift of a shared host's speed between rounds cancels), as text."""
    r = [t[key] / l[key] for t, l in zip(tr, lr) if t.get(key) and l.get(key)]
    return f"{statistics.median(r):.2f}" if r else "—"

def machine():
    model, flags = "?", set()
    try:
        for line in open("/proc/cpuinfo"):
            k, _, v = line.partition(":")
            if k.strip() == "model name" and model == "?":
                model = v.strip()
            elif k.strip() == "flags" and not flags:
                flags = set(v.split())
    except OSError:
        pass
    simd = [x for x in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx512_bf16") if x in flags]
    return f"{model}, {os.cpu_count()} logical CPUs, {' '.join(simd) or 'no AVX2/AVX-512'}"

llama_commit = None
for line in open(env["RAW"]):
    j = json.loads(line)
    if j.get("tool") == "llama.cpp" and j.get("build_commit"):
        llama_commit = f"{j['build_commit']} (build {j.get('build_number')})"
        break
tl_isa = next((r.get("isa") for v in results.values() for r in v["tl"] if r.get("isa")), "?")
cpus = os.cpu_count() or 1


def table_1b():
    """The 1B table: the 135M columns plus memory and each tool's fraction of the roofs."""
    probes = [json.loads(l) for l in open(env["PROBE_1B"]) if l.startswith("{")]
    for p in probes:
        record({"tool": "probe", **p})
    bw = {p["threads"]: p["gb_s"] for p in probes if p["probe"] == "read_bandwidth"}
    fma = {p["threads"]: p["gflop_s"] for p in probes if p["probe"] == "fma_peak"}
    mib = 1024.0 * 1024.0

    def flops(c):  # one PROMPT-token prefill step, logits of the last token only
        return (2 * prompt * c["block_matmul_params"] + 2 * c["head_params"]
                + 4 * c["attn_width"] * c["n_layers"] * prompt * (prompt + 1) // 2)

    def pct(x):
        return "—" if x is None else f"{100 * x:.0f}%"

    out = ["", "roofs measured by `probe` before the runs: "
           + "; ".join(f"{t} thread(s): read {bw.get(t, 0):.1f} GB/s, f32 FMA {fma.get(t, 0):.0f} GFLOP/s"
                       for t in thread_counts)
           + f". Decode roof = read bandwidth / the file's bytes per token (every tensor once; "
           f"KV cache left out); prefill roof = FMA peak / the FLOPs of one {prompt}-token step.",
           "",
           "| file | threads | tl prefill | llama.cpp prefill | prefill tl/llama | tl decode | "
           "llama.cpp decode | decode tl/llama | decode % of roof tl / llama.cpp | "
           "prefill % of FMA peak tl / llama.cpp | peak RSS MiB tl / llama.cpp | tl weights MiB | "
           "file tensor MiB | file MiB | tl load s | load avg |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for t in thread_counts:
        for n in names:
            c = costs[n]
            tr, lr = results[(n, t)]["tl"], results[(n, t)]["llama"]
            tp, td, lp, ld = med(tr, "prefill"), med(tr, "decode"), med(lr, "prefill"), med(lr, "decode")
            roof_tok = bw[t] * 1e9 / c["decode_bytes_per_token"] if t in bw else None
            peak_tok = fma[t] * 1e9 / flops(c) * prompt if t in fma else None
            frac = lambda x, r: None if x is None or r is None else x / r
            ld_all = [r["load"] for r in tr + lr if r.get("load") is not None]
            err = next((r["error"] for r in tr if r.get("error")), None)
            out.append(
                f"| {lab(n)} | {t} | {f(tp)} | {f(lp)} | {paired(tr, lr, 'prefill')} | {f(td)} | {f(ld)} | "
                f"{paired(tr, lr, 'decode')} | {pct(frac(td, roof_tok))} / {pct(frac(ld, roof_tok))} | "
                f"{pct(frac(tp, peak_tok))} / {pct(frac(lp, peak_tok))} | "
                f"{f(med(tr, 'rss'), 0)} / {f(med(lr, 'rss'), 0)} | {f(med(tr, 'weights_mib'), 0)} | "
                f"{c['tensor_bytes'] / mib:.0f} | {c['file_bytes'] / mib:.0f} | {f(med(tr, 'load_s'), 1)} | "
                f"{min(ld_all, default=0):.1f} .. {max(ld_all, default=0):.1f} |"
                + (f" tl failed: {err}" if err else ""))
    out += ["", "tensor bytes by type: " + "; ".join(
        f"{lab(n)}: " + ", ".join(f"{k} {v / mib:.0f}" for k, v in sorted(costs[n]["types"].items(),
                                                                          key=lambda kv: -kv[1]))
        for n in names) + " (MiB)"]
    return out

lines = [
    f"machine: {machine()}; tl kernels: {tl_isa}; llama.cpp {llama_commit or '?'} ({llama_bin})"
    + (f" (extra llama-bench args: {' '.join(llama_extra)})" if llama_extra else ""),
    "",
    f"prefill = pp{prompt}, decode = tg{gen} after a {prompt}-token context, tok/s, "
    f"median of {repeats} repeats" + (f", median over {rounds} rounds (a ratio is the median "
                                      "of each round's, the two tools running back to back)"
                                      if rounds > 1 else "")
    + f"; tl {env.get('TL_COMMIT')} (--kv {env.get('KV') or 'f16-slab'}); 1-minute load average before the runs "
    f"{min(loads):.1f} .. {max(loads):.1f}",
]
if steals:
    lines[-1] += (f"; CPU time stolen by the hypervisor during the runs: median "
                  f"{statistics.median(steals):.1f}%, max {max(steals):.1f}%")
# The 1-minute average lags and counts our own runs (up to max(threads) busy threads).
if max(loads) > max(thread_counts) + 0.5 * cpus:
    lines += ["", f"**warning: the machine was busy (load up to {max(loads):.1f} on {cpus} CPUs): "
              "llama.cpp's threads spin at barriers and slow down far more than tl's when other "
              "processes share the cores; compare at 1 thread, or rerun on a quiet machine.**"]
def table_q8():
    """The q8 rows against the same llama.cpp runs, the exact path's ratios beside them."""
    out = ["", f"`--activations {activations[1]}` beside the same llama.cpp runs (exact: the table above):", "",
           "| file | threads | tl q8 prefill | llama.cpp prefill | q8 tl/llama | exact tl/llama | "
           "tl q8 decode | llama.cpp decode | q8 tl/llama | exact tl/llama |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in thread_counts:
        for n in names:
            r = results[(n, t)]
            q, e, lr = r["tl_q8"], r["tl"], r["llama"]
            out.append(f"| {lab(n)} | {t} | {f(med(q, 'prefill'))} | {f(med(lr, 'prefill'))} | "
                       f"{paired(q, lr, 'prefill')} | {paired(e, lr, 'prefill')} | {f(med(q, 'decode'))} | "
                       f"{f(med(lr, 'decode'))} | {paired(q, lr, 'decode')} | {paired(e, lr, 'decode')} |")
    return out

if size == "1b":
    lines += table_1b()
else:
    lines += [
        "",
        "| config | threads | tl weights | llama.cpp model | tl prefill | llama.cpp prefill | "
        "prefill tl/llama | tl decode | llama.cpp decode | decode tl/llama | peak RSS MiB tl / llama.cpp |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in thread_counts:
        for n in names:
            what, _, weights, _, ll_label = ROWS[n]
            tr, lr = results[(n, t)]["tl"], results[(n, t)]["llama"]
            tp, td, lp, ld = med(tr, "prefill"), med(tr, "decode"), med(lr, "prefill"), med(lr, "decode")
            lines.append(f"| {n}: {what} | {t} | {weights} | {ll_label} | {f(tp)} | {f(lp)} | "
                         f"{paired(tr, lr, 'prefill')} | {f(td)} | {f(ld)} | {paired(tr, lr, 'decode')} | {f(med(tr, 'rss'), 0)} / {f(med(lr, 'rss'), 0)} |")
if len(activations) > 1:
    lines += table_q8()
text = "\n".join(lines) + "\n"
with open(env["TABLE"], "w") as fh:
    fh.write(text)
print(text)
print(f"raw JSON lines: {env['RAW']}\ntable: {env['TABLE']}")
PY
if [ "$PLOT" = 1 ]; then
    PLOT_TITLE="${PLOT_TITLE:-tl $TL_COMMIT beside llama.cpp, $SIZE, threads $THREADS, $(date -u +%Y-%m-%d)}" \
        plot "$RAW" "${TABLE%.md}.png"
fi
