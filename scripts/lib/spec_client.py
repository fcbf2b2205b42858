#!/usr/bin/env python3
"""Speculation benchmark client (stdlib only): streams chat completions from an
OpenAI-compatible server (tl's `serve` or llama-server) and prints one JSON line per
workload: decode tokens/s per request (tokens after the first over the time from first to
last chunk), median over repeats, and a hash of the output text, so runs with speculation
on and off can be compared for identical output.

    spec_client.py ADDR MODEL [--concurrency N] [--repeats R] [--max-tokens T] [--extra JSON]
"""

import argparse
import hashlib
import http.client
import json
import statistics
import threading
import time

CODE = '''def mean_and_spread(values):
    total = 0
    count = 0
    for v in values:
        total += v
        count += 1
    mean = total / count
    spread = 0
    for v in values:
        spread += (v - mean) ** 2
    return mean, (spread / count) ** 0.5
'''

PASSAGE = (
    'The report opened with a warning. "Revenue fell by four percent in the third quarter," '
    'the chief financial officer said. Later she added, "We expect the new factory to open in '
    'March." A union representative replied that "workers were not consulted about the move." '
    'The chairman closed the meeting: "Our dividend will not change this year."'
)

WORKLOADS = {
    "code": "Rewrite this Python function, renaming the variable `total` to `acc` and "
    "changing nothing else. Reply with the code only.\n\n" + CODE,
    "quotes": "List every quoted sentence from this passage, verbatim, one per line.\n\n" + PASSAGE,
    "list": "Continue this list in the same format up to item 20:\n1. Monday - blue\n"
    "2. Tuesday - blue\n3. Wednesday - blue\n4. Thursday - blue\n5. Friday - blue\n"
    "6. Saturday - blue\n7. Sunday - blue\n8. Monday - blue\n",
    "free": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}


def one(addr, model, prompt, max_tokens, extra):
    host, port = addr.split(":")
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update(extra)
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first = last = None
    text = []
    tokens = None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                now = time.perf_counter()
                first = first or now
                last = now
                text.append(piece)
    c.close()
    out = "".join(text)
    n = tokens if tokens is not None else len(out.split())
    rate = (n - 1) / (last - first) if first and last and last > first and n > 1 else float("nan")
    return {"tokens": n, "ttft": (first or t0) - t0, "decode_tps": rate, "text": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("model")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--extra", default="{}")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--ab", default=None, help="tl only: alternate requests with this speculate value "
                    "and with speculate false on one server, batch 1; prints both medians and their ratio")
    a = ap.parse_args()
    extra = json.loads(a.extra)
    if a.ab is not None:
        spec = json.loads(a.ab)
        for name in a.workloads.split(","):
            on, off, same = [], [], True
            for _ in range(a.repeats):
                r_off = one(a.addr, a.model, WORKLOADS[name], a.max_tokens, {**extra, "speculate": False})
                r_on = one(a.addr, a.model, WORKLOADS[name], a.max_tokens, {**extra, "speculate": spec})
                off.append(r_off["decode_tps"])
                on.append(r_on["decode_tps"])
                same = same and r_on["text"] == r_off["text"]
            m_on, m_off = statistics.median(on), statistics.median(off)
            print(json.dumps({"workload": name, "speculate": spec, "off_tps": round(m_off, 2),
                              "on_tps": round(m_on, 2), "ratio": round(m_on / m_off, 2),
                              "tokens": r_on["tokens"], "identical_text": same}), flush=True)
        return
    for name in a.workloads.split(","):
        prompt = WORKLOADS[name]
        rates, texts, total_tokens, wall = [], set(), 0, []
        for _ in range(a.repeats):
            results = [None] * a.concurrency
            def run(i):
                try:
                    results[i] = one(a.addr, a.model, prompt, a.max_tokens, extra)
                except BaseException as e:  # a thread's failure must fail the run
                    results[i] = e
            t0 = time.perf_counter()
            ts = [threading.Thread(target=run, args=(i,)) for i in range(a.concurrency)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall.append(time.perf_counter() - t0)
            for r in results:
                if isinstance(r, BaseException):
                    raise SystemExit(f"{name}: {r}")
                rates.append(r["decode_tps"])
                texts.add(r["text"])
                total_tokens += r["tokens"]
        print(json.dumps({
            "workload": name,
            "concurrency": a.concurrency,
            "decode_tps_median": round(statistics.median(rates), 2),
            "aggregate_tps": round(total_tokens / sum(wall), 2),
            "tokens_per_request": total_tokens // (a.repeats * a.concurrency),
            "distinct_outputs": len(texts),
            "text_sha": hashlib.sha256(sorted(texts)[0].encode()).hexdigest()[:12],
        }), flush=True)


if __name__ == "__main__":
    main()
