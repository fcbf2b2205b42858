#!/usr/bin/env python3
"""P/D against one server (docs/scale-out.md): `python3 scripts/pd_bench.py SERVE MODEL N`.

Starts three `serve` processes (1 thread each): one server alone, a prefill and a decode
server. For 7 prompts of ~430 tokens (greedy, N output tokens) it times the request on
one server, the prefill leg plus the decode leg, and the decode leg alone, checks that
the P/D text equals one server's, then times `GET /v1/kv` of a lease by itself; prints
medians and ratios. Standard library only.
"""
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request


def spawn(serve, model):
    p = subprocess.Popen([serve, "--model", model, "--port", "0", "--threads", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return p, re.search(r"http://(\S+)", p.stdout.readline()).group(1)


def post(addr, body):
    req = urllib.request.Request(f"http://{addr}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def main():
    serve, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    procs = [spawn(serve, model) for _ in range(3)]
    one, p, d = (a for _, a in procs)
    try:
        prompt = " ".join(f"item {i} is {i * 7 % 13}" for i in range(60))
        one_t, pd_t, dec_t, fetch_t = [], [], [], []
        for k in range(7):
            body = {"prompt": f"{prompt} case {k}:", "max_tokens": n, "temperature": 0}
            t0 = time.perf_counter()
            a = post(one, body)
            one_t.append(time.perf_counter() - t0)
            leg = dict(body, max_tokens=1, kv_transfer_params={"do_remote_decode": True})
            t0 = time.perf_counter()
            kv = post(p, leg)["kv_transfer_params"]
            t1 = time.perf_counter()
            b = post(d, dict(body, kv_transfer_params=kv))
            t2 = time.perf_counter()
            pd_t.append(t2 - t0)
            dec_t.append(t2 - t1)
            assert a["choices"][0]["text"] == b["choices"][0]["text"], "P/D differs from one server"
            kv = post(p, leg)["kv_transfer_params"]
            blocks = len(kv["remote_block_ids"])
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"http://{p}/v1/kv/{kv['remote_request_id']}?from=0&to={blocks}") as r:
                size = len(r.read())
            fetch_t.append(time.perf_counter() - t0)
        m = statistics.median
        print(f"{a['usage']['prompt_tokens']} prompt tokens, {n} output tokens, medians of 7:")
        print(f"one server {m(one_t) * 1e3:.1f} ms; P/D both legs {m(pd_t) * 1e3:.1f} ms "
              f"({m(pd_t) / m(one_t):.2f}x); decode leg alone {m(dec_t) * 1e3:.1f} ms ({m(dec_t) / m(one_t):.2f}x)")
        print(f"GET /v1/kv of {blocks} blocks ({size / 1e6:.1f} MB): {m(fetch_t) * 1e3:.1f} ms")
    finally:
        for proc, _ in procs:
            proc.kill()


if __name__ == "__main__":
    main()
