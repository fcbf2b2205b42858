"""Sentences per second of all-MiniLM-L6-v2: tl embed, llama.cpp's llama-embedding and
sentence-transformers, on the same sentences, at batch 1 and batch 32 (scripts/bench_embeddings.sh
sets the environment). Each round runs the three tools in turn; the table has the median
of the rounds and the ratio of medians.

What each number times (model loading excluded everywhere):
- tl: `tl embed --stats`: from the first line read to the last vector written (tokenizing,
  encoding, writing JSON), its own wall clock.
- llama.cpp: llama-embedding's own `prompt eval time` (encoding only; its tokenizing is not in it).
- sentence-transformers: `model.encode(sentences, batch_size=B)` (tokenizing and encoding),
  torch on THREADS threads, after one untimed warm-up call.
"""
import json
import os
import re
import statistics
import subprocess
import sys

TL = os.environ["TL_BIN"] + "/tl"
LLAMA = os.environ["LLAMA_BIN"] + "/llama-embedding"
MODEL = os.environ["MODEL_DIR"]
GGUF = os.environ["GGUF"]
ST_PY = os.environ["ST_PY"]
SENTENCES = os.environ["SENTENCES"]
THREADS = int(os.environ.get("THREADS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
BATCHES = [int(b) for b in os.environ.get("BATCHES", "1,32").split(",")]
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
        [TL, "embed", MODEL, "--file", SENTENCES, "--truncate", "--batch", str(b), "--threads", str(THREADS),
         "--stats", "-o", os.devnull],
        capture_output=True, text=True, check=True)
    stats = json.loads(out.stderr.strip().splitlines()[-1])
    assert stats["lines"] == n, stats
    return n / stats["seconds"]


def run_llama(b):
    args = [LLAMA, "-m", GGUF, "-f", SENTENCES, "-t", str(THREADS), "-c", str(512 * b), "-b", str(512 * b),
            "-ub", str(512 * b), "-np", str(b), "--embd-normalize", "2", "--no-warmup"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"llama-embedding failed: {' '.join(args)}\n{out.stderr[-2000:]}")
    m = re.search(r"prompt eval time =\s*([0-9.]+) ms", out.stderr)
    if not m:
        raise SystemExit(f"no prompt eval time in llama-embedding's output:\n{out.stderr[-2000:]}")
    return n / (float(m.group(1)) / 1000.0)


def run_st(b):
    out = subprocess.run([ST_PY, "-c", ST_CODE, MODEL, SENTENCES, str(THREADS), str(b)],
                         capture_output=True, text=True, check=True)
    return n / json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


rates = {(tool, b): [] for tool in ("tl", "llama.cpp", "sentence-transformers") for b in BATCHES}
for r in range(ROUNDS):
    for b in BATCHES:
        for tool, fn in (("llama.cpp", run_llama), ("tl", run_tl), ("sentence-transformers", run_st)):
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
    f"median of {ROUNDS} rounds (scripts/bench_embeddings.sh, tl {os.environ.get('TL_COMMIT', '?')})",
    "",
    "| batch | tl sentences/s | llama.cpp (F32 GGUF) | sentence-transformers (torch) | tl / llama.cpp | tl / s-t |",
    "|---|---|---|---|---|---|",
]
for b in BATCHES:
    t, l, s = (statistics.median(rates[(k, b)]) for k in ("tl", "llama.cpp", "sentence-transformers"))
    lines.append(f"| {b} | {t:.1f} | {l:.1f} | {s:.1f} | {t / l:.2f}x | {t / s:.2f}x |")
with open(TABLE, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0)
