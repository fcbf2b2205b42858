"""Sentences per second of all-MiniLM-L6-v2: tl embed, llama.cpp's llama-embedding and
sentence-transformers, on the same sentences, at batch 1 and batch 32 (scripts/bench_embeddings.sh
sets the environment). Each round runs the three tools in turn; the table has the median
of the rounds and the ratio of medians.

What each number times (model loading excluded everywhere):
- tl: `tl embed --stats`: from the first line read to the last vector written (tokenizing,
  encoding, writing JSON), its own wall clock.
- llama.cpp: llama-embedding's wall clock on every sentence minus its wall clock on the first
  sentence alone (loading excluded that way; tokenizing and encoding in it).
- sentence-transformers: `model.encode(sentences, batch_size=B)` (tokenizing and encoding),
  torch on THREADS threads, after one untimed warm-up call.
"""
import json
import os
import statistics
import subprocess
import sys
import time

TL = os.environ["TL_BIN"] + "/tl"
LLAMA = os.environ["LLAMA_BIN"] + "/llama-embedding"
MODEL = os.environ["MODEL_DIR"]
GGUF = os.environ["GGUF"]
# What tl reads: the directory (default) or, with TL_READS=gguf, llama.cpp's own F32 GGUF.
TL_READS = os.environ.get("TL_READS", "dir")
TL_MODEL = GGUF if TL_READS == "gguf" else MODEL
ST_PY = os.environ["ST_PY"]
SENTENCES = os.environ["SENTENCES"]
THREADS = int(os.environ.get("THREADS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
BATCHES = [int(b) for b in os.environ.get("BATCHES", "1,32").split(",")]
# llama-embedding 0.3.36 packs more prompts into one batch than -np allows and aborts
# ("get_sub_batch: failed to add token") past -np 1 on these sentences: its rows past batch 1
# are left out until that is understood.
LLAMA_BATCHES = [int(b) for b in os.environ.get("LLAMA_BATCHES", "1").split(",")]
TABLE = os.environ["TABLE"]

with open(SENTENCES) as f:
    texts = [line.rstrip("\n") for line in f if line.strip()]
n = len(texts)

ST_CODE = r"""
import sys, time, json, torch
torch.set_num_threads(int(sys.argv[3]))
from sentence_transformers import SentenceTransformer
texts = [l.rstrip("\n") for l in open(sys.argv[2]) if l.strip()]
m = SentenceTransformer(sys.argv[1], device="cpu")
b = int(sys.argv[4])
m.encode(texts[:b], batch_size=b, normalize_embeddings=True)
t = time.perf_counter()
m.encode(texts, batch_size=b, normalize_embeddings=True)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def run_tl(b):
    out = subprocess.run(
        [TL, "embed", TL_MODEL, "--file", SENTENCES, "--truncate", "--batch", str(b), "--threads", str(THREADS),
         "--stats", "-o", os.devnull],
        capture_output=True, text=True, check=True)
    stats = json.loads(out.stderr.strip().splitlines()[-1])
    assert stats["lines"] == n, stats
    return n / stats["seconds"]


def run_llama(b):
    # llama-embedding prints no timing of its own here; its wall clock on every sentence
    # minus its wall clock on the first sentence alone (loading, warm-up, one sentence)
    # leaves the other n - 1 sentences' work. It packs prompts into its batch of n_batch
    # tokens whatever -np says, so "batch 1" is its smallest batch: 512 tokens, 1 sequence.
    one = SENTENCES + ".first"
    with open(one, "w") as f:
        f.write(texts[0] + "\n")

    def wall(path):
        # A context of 256 tokens per sequence (the sentences' bound), at least 512.
        c = str(max(512, 256 * b))
        args = [LLAMA, "-m", GGUF, "-f", path, "-t", str(THREADS), "-c", c, "-b", c, "-ub", c, "-np", str(b),
                "--embd-normalize", "2", "--no-warmup"]
        t = time.perf_counter()
        out = subprocess.run(args, capture_output=True, text=True, errors="replace")
        dt = time.perf_counter() - t
        if out.returncode != 0:
            raise SystemExit(f"llama-embedding failed: {' '.join(args)}\n{out.stderr[-2000:]}")
        return dt

    return (n - 1) / max(wall(SENTENCES) - wall(one), 1e-9)


def run_st(b):
    out = subprocess.run([ST_PY, "-c", ST_CODE, MODEL, SENTENCES, str(THREADS), str(b)],
                         capture_output=True, text=True, check=True)
    return n / json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


rates = {(tool, b): [] for tool in ("tl", "llama.cpp", "sentence-transformers") for b in BATCHES}
for r in range(ROUNDS):
    for b in BATCHES:
        for tool, fn in (("llama.cpp", run_llama), ("tl", run_tl), ("sentence-transformers", run_st)):
            if tool == "llama.cpp" and b not in LLAMA_BATCHES:
                continue
            x = fn(b)
            rates[(tool, b)].append(x)
            print(json.dumps({"round": r, "tool": tool, "batch": b, "sentences_s": round(x, 2)}), flush=True)

cpu = "unknown"
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
lines = [
    f"all-MiniLM-L6-v2, {n} sentences (uncut by max_seq_length 256), {THREADS} threads, {cpu}; "
    f"median of {ROUNDS} rounds (scripts/bench_embeddings.sh, tl {os.environ.get('TL_COMMIT', '?')} reading "
    f"{'the F32 GGUF' if TL_READS == 'gguf' else 'the safetensors directory'})",
    "",
    "| batch | tl sentences/s | llama.cpp (F32 GGUF) | sentence-transformers (torch) | tl / llama.cpp | tl / s-t |",
    "|---|---|---|---|---|---|",
]
for b in BATCHES:
    t, s = (statistics.median(rates[(k, b)]) for k in ("tl", "sentence-transformers"))
    if rates[("llama.cpp", b)]:
        l = statistics.median(rates[("llama.cpp", b)])
        lines.append(f"| {b} | {t:.1f} | {l:.1f} | {s:.1f} | {t / l:.2f}x | {t / s:.2f}x |")
    else:
        lines.append(f"| {b} | {t:.1f} | - | {s:.1f} | - | {t / s:.2f}x |")
with open(TABLE, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0)
