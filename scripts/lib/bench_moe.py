"""The rows of scripts/bench_moe.sh and scripts/bench_qwen35.sh (they set the environment):
tl beside llama.cpp on their files, each round llama.cpp then tl on the same file; medians
over rounds and the median of each round's tl/llama.cpp ratio; raw JSON lines to $RAW, the
markdown table to $TABLE. $TITLE names the model; with $DEPTH, decode at that depth too;
$ACTIVATIONS (a comma list, default exact) runs tl once per `--activations` mode after each
llama.cpp run, a table row per file and mode."""
import json
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_run import RawLog  # noqa: E402

env = os.environ
threads, prompt, gen, batch = env["THREADS"], env["PROMPT"], env["GEN"], int(env["BATCH"])
title = env.get("TITLE", "MoE benchmark model (scripts/bench_moe.sh)")
depth = env.get("DEPTH")
files = json.load(open(env["FILES"]))
acts = [a.strip() for a in env.get("ACTIVATIONS", "exact").split(",") if a.strip()]
log = RawLog(env["RAW"], "bench_moe")
record, run = log.record, log.run


def llama(name, path):
    out = {}
    for kind, args in (("prefill", ["-p", prompt, "-n", "0"]), ("decode", ["-p", "0", "-n", gen, "-d", prompt])):
        cmd = [f"{env['LLAMA_BIN']}/llama-bench", "-m", path, "-t", threads, "-r", env["REPEATS"], "-o", "jsonl"]
        for j in run(cmd + args):
            record({**j, "tool": "llama.cpp", "config": name, "kind": kind})
            out[kind] = statistics.median(j["samples_ts"])
    if depth:
        cmd = [f"{env['LLAMA_BIN']}/llama-bench", "-m", path, "-t", threads, "-r", "1", "-o", "jsonl",
               "-p", "0", "-n", gen, "-d", depth]
        for j in run(cmd):
            record({**j, "tool": "llama.cpp", "config": name, "kind": "deep"})
            out["deep"] = statistics.median(j["samples_ts"])
    ctx = batch * (32 + int(gen)) + 16
    cmd = [f"{env['LLAMA_BIN']}/llama-batched-bench", "-m", path, "-t", threads, "-tb", threads, "-c", str(ctx),
           "-npp", "32", "-ntg", gen, "-npl", str(batch), "--output-format", "jsonl"]
    for j in run(cmd):
        record({**j, "tool": "llama.cpp", "config": name, "kind": "batched"})
        out["batched"] = j["speed_tg"]
    return out


def tl(name, path, act):
    out = {}
    mode = ["--activations", act]
    cmd = [f"{env['TL_BIN']}/bench", "--model", path, "--threads", threads, "--prompt-tokens", prompt,
           "--decode-tokens", gen, "--repeats", env["REPEATS"], "--json-only", "--batch", "1"] + mode
    for j in run(cmd):
        record({**j, "config": name, "commit": env["TL_COMMIT"]})
        out.update(prefill=j["prefill_tok_s"], decode=j["decode_tok_s"], rss=j["peak_rss_mib"],
                   loaded=j["rss_after_load_mib"], file=os.path.getsize(path) / 2**20,
                   kv=j["kv_pool_mib"] + (j.get("state_pool_mib") or 0), load=j["load_s"])
    if depth:
        cmd = [f"{env['TL_BIN']}/bench", "--model", path, "--threads", threads, "--prompt-tokens", depth,
               "--decode-tokens", gen, "--repeats", "1", "--json-only", "--batch", "1", "--no-prefill-warmup"] + mode
        for j in run(cmd):
            record({**j, "config": name, "commit": env["TL_COMMIT"], "kind": "deep"})
            out["deep"] = j["decode_tok_s"]
    cmd = [f"{env['TL_BIN']}/bench", "--model", path, "--threads", threads, "--prompt-tokens", "32",
           "--decode-tokens", gen, "--repeats", env["REPEATS"], "--json-only", "--batch", str(batch)] + mode
    for j in run(cmd):
        record({**j, "config": name, "commit": env["TL_COMMIT"], "kind": "batched"})
        if j["batch"] == batch:
            out["batched"] = j["decode_tok_s"]
    return out


res = {n: {"llama": [], **{a: [] for a in acts}} for n in files}
for rnd in range(1, int(env["ROUNDS"]) + 1):
    for n, path in files.items():
        print(f"bench_moe: round {rnd}, {n}", file=sys.stderr)
        res[n]["llama"].append(llama(n, path))
        for a in acts:
            res[n][a].append(tl(n, path, a))


def med(runs, k):
    v = [r[k] for r in runs if r.get(k)]
    return statistics.median(v) if v else None


def ratio(a, b, k):
    v = [x[k] / y[k] for x, y in zip(a, b) if x.get(k) and y.get(k)]
    return statistics.median(v) if v else None


def f(x, d=1):
    return "—" if x is None else f"{x:.{d}f}"


cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
kinds = ("prefill", "decode") + (("deep",) if depth else ()) + ("batched",)
deep_head = f"| decode @{depth} tl | decode @{depth} llama.cpp | ratio " if depth else ""
lines = [f"{title}, {threads} threads, {prompt}-token prompt, {gen} decoded; "
         f"batched: {batch} sequences of 32 tokens, {gen} steps; tl {env['TL_COMMIT']}; llama.cpp {env['LLAMA_BIN']}; "
         f"{cpu}, {platform.machine()}; medians over {env['ROUNDS']} rounds, ratios the median of each round's", "",
         "| file | prefill tl | prefill llama.cpp | ratio | decode tl | decode llama.cpp | ratio " + deep_head
         + f"| batched ({batch}) tl | batched llama.cpp | ratio | tl RSS after load, peak / (file + KV + state) |",
         "|---|" + "---:|" * (3 * len(kinds) + 1)]
for n, a in ((n, a) for n in files for a in acts):
    t, l = res[n][a], res[n]["llama"]
    rss, loaded = med(t, "rss"), med(t, "loaded")
    budget = (med(t, "file") or 0) + (med(t, "kv") or 0)
    row = [n.upper() + (f" (tl {a})" if acts != ["exact"] else "")]
    for k in kinds:
        row += [f(med(t, k)), f(med(l, k)), f(ratio(t, l, k), 2)]
    share = (lambda x: f(x / budget if x and budget else None, 2))
    row.append(f"{f(loaded, 0)}, {f(rss, 0)} / {f(budget, 0)} MiB = {share(loaded)}, {share(rss)}")
    lines.append("| " + " | ".join(row) + " |")
open(env["TABLE"], "w").write("\n".join(lines) + "\n")
