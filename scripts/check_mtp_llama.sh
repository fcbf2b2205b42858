#!/usr/bin/env bash
# Qwen3.5's MTP head as a drafter: tl beside llama.cpp's draft-mtp on the same random
# checkpoint (issue 45, item 3). A developer check, never in CI (it needs llama.cpp's built
# binaries and the fixtures venv; about 2 minutes on one core).
#
#   scripts/check_mtp_llama.sh            # K = 1 and 3, 4 prompts, 64 tokens each
#   KS="1 2 3 4" N=128 scripts/check_mtp_llama.sh
#
# 1. Converts arch-qwen3-5/tests/fixtures/tiny-qwen3_5-mtp (its MTP head kept: llama.cpp's
#    converter writes mtp.* as blk.4.nextn.*) with the sdist's convert_hf_to_gguf.py, f32,
#    into ${TL_CACHE:-~/.cache/tl}/mtp-check/model.gguf. The fixture has byte tokens and no
#    tokenizer, which llama.cpp cannot load, so set_vocab is replaced (the one change to the
#    converter's path) by a gpt2-type vocabulary of vocab_size tokens whose token i is the
#    ASCII text "[i]" (the last three "(", ")", "()" for the one merge a BPE vocabulary
#    needs), BOS 256, EOS 257. Nothing tokenizes text: prompts go in as token ids, and the
#    ids come back from llama-server's `tokens` and tl's per-token logprob texts. The
#    tensors are checked equal to the committed fixture model.gguf's.
# 2. Runs llama-server (-t 1, --spec-type draft-mtp --spec-draft-n-max K: the head read
#    from the same file) and `tl serve --speculate mtp:1 --threads 1` (K per request) on the
#    same prompts, greedy, N tokens each, and reads llama.cpp's `timings.draft_n` /
#    `draft_n_accepted` and tl's /metrics `tl_speculative_{draft,accepted}_tokens_total`
#    (difference over each request).
# 3. tl also serves the committed fixture model.gguf (byte tokens) and the safetensors
#    directory (BF16) with the same requests: their logprobs must equal the vocab file's
#    bit for bit and their counters too.
# 4. scripts/fixtures/mtp_draft_reference.py replays both schedulers (llama.cpp drafts every
#    step; tl pauses after misses, engine/src/speculate.rs) over Hugging Face's float32
#    greedy continuation and its own forward of the head (make_tiny_qwen3_5_mtp.py's Head).
#
# Prints, per K and prompt: drafted/accepted for llama.cpp, tl and the reference's two
# replays, and whether the greedy ids agree (where they part, if they do); then the
# totals and acceptance rates. Exits 1 if the tools' ids differ or a tool's counts differ
# from the reference's replay of its own scheduler. Deterministic: greedy, one thread.
set -euo pipefail
cd "$(dirname "$0")/.."

TL="${TL:-target/release/tl}"
[ -x "$TL" ] || TL=/work/target-bench/release/tl
LLAMA_BIN="${LLAMA_BIN:-$HOME/.cache/tl/llama.cpp/build-0.3.36/bin}"
LLAMA_SRC="${LLAMA_SRC:-$(scripts/build_llama_cpp.sh --source)}"
if [ -z "${PY:-}" ]; then source scripts/lib/extra_venv.sh; PY="$(extra_venv)"; fi
KS="${KS:-1 3}"
N="${N:-64}"
FIX=arch-qwen3-5/tests/fixtures/tiny-qwen3_5-mtp
WORK="${TL_CACHE:-$HOME/.cache/tl}/mtp-check"
mkdir -p "$WORK"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

cat >"$WORK/convert.py" <<'EOF'
import sys
llama = sys.argv[1]
sys.path[:0] = [llama + "/gguf-py", llama]  # the sdist's gguf-py, not the venv's
import convert_hf_to_gguf  # noqa: E402
import conversion.qwen as qwen  # noqa: E402
import gguf  # noqa: E402


def id_vocab(self):
    n = self.hparams["vocab_size"]
    pieces = [f"[{i}]" for i in range(n - 3)] + ["(", ")", "()"]
    types = [gguf.TokenType.NORMAL] * n
    types[256] = types[257] = gguf.TokenType.CONTROL
    w = self.gguf_writer
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(pieces)
    w.add_token_types(types)
    w.add_token_merges(["( )"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    w.add_add_bos_token(False)


qwen.Qwen3_5TextModel.set_vocab = id_vocab
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
EOF
nice -n 10 "$PY" "$WORK/convert.py" "$LLAMA_SRC" "$FIX" --outtype f32 --outfile "$WORK/model.gguf" \
    >"$WORK/convert.log" 2>&1 || { cat "$WORK/convert.log" >&2; exit 1; }
"$PY" - "$LLAMA_SRC" "$WORK/model.gguf" "$FIX/model.gguf" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + "/gguf-py")
import gguf, numpy as np
a, b = ({t.name: t.data for t in gguf.GGUFReader(p).tensors} for p in sys.argv[2:])
assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a), "tensors differ"
print(f"model.gguf: {len(a)} tensors, equal to the fixture's ({sum('nextn' in k for k in a)} blk.4.nextn.*)")
EOF
echo "sha256 $(sha256sum "$WORK/model.gguf" | cut -d' ' -f1)"

# Prompts: 4 byte-token texts of 8, 16, 24 and 32 tokens.
"$PY" - >"$WORK/prompts.json" <<'EOF'
import json
texts = ["Qwen3.5 ", "The MTP head dra", "fts one token, the trunk",
         " checks it: greedy, bit for bit."]
print(json.dumps([list(t.encode()) for t in texts]))
EOF

port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; return 1; }

# llama.cpp, one server per K.
for k in $KS; do
    p=$(port)
    nice -n 10 "$LLAMA_BIN/llama-server" -m "$WORK/model.gguf" --spec-type draft-mtp --spec-draft-n-max "$k" \
        -t 1 -tb 1 -c 512 -np 1 --host 127.0.0.1 --port "$p" >"$WORK/llama-$k.log" 2>&1 &
    pids+=($!); wait_up "$p"
    "$PY" - "$p" "$WORK/prompts.json" "$N" >"$WORK/llama-$k.json" <<'EOF'
import json, sys, urllib.request
port, prompts, n = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
out = []
for ids in prompts:
    body = {"prompt": ids, "n_predict": n, "temperature": 0, "return_tokens": True, "cache_prompt": False}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req))
    out.append({"ids": r["tokens"], "drafted": r["timings"]["draft_n"], "accepted": r["timings"]["draft_n_accepted"]})
print(json.dumps(out))
EOF
    kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
done

# tl, one server per model source; K per request.
sources=("$WORK/model.gguf" "$FIX/model.gguf" "$FIX")
for i in 0 1 2; do
    p=$(port)
    nice -n 10 "$TL" serve "${sources[$i]}" --speculate mtp:1 --threads 1 --port "$p" >"$WORK/tl-$i.log" 2>&1 &
    pids+=($!); wait_up "$p"
    "$PY" - "$p" "$WORK/prompts.json" "$N" "$KS" >"$WORK/tl-$i.json" <<'EOF'
import json, re, sys, urllib.request
port, prompts, n, ks = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3]), sys.argv[4].split()
def get(path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body and json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return urllib.request.urlopen(req).read().decode()
def counters():
    m = get("/metrics")
    num = lambda name: int(float(re.search(rf"^{name} (\S+)$", m, re.M).group(1)))
    return num("tl_speculative_draft_tokens_total"), num("tl_speculative_accepted_tokens_total")
out = {}
for k in ks:
    out[k] = []
    for ids in prompts:
        d0, a0 = counters()
        body = {"prompt": ids, "max_tokens": n, "temperature": 0, "logprobs": 1,
                "speculate": {"kind": "mtp", "k": int(k)}}
        r = json.loads(get("/v1/completions", body))
        lp = r["choices"][0]["logprobs"]
        d1, a1 = counters()
        last3 = {"(": 317, ")": 318, "()": 319}  # the vocab file's; byte-token sources give bytes
        ids_out = [int(m.group(1)) if (m := re.fullmatch(r"\[(\d+)\]", t)) else last3.get(t, t) for t in lp["tokens"]]
        out[k].append({"ids": ids_out, "logprobs": lp["token_logprobs"], "drafted": d1 - d0, "accepted": a1 - a0})
print(json.dumps(out))
EOF
    kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
done

echo "reference: Hugging Face float32 greedy + head drafts (mtp_draft_reference.py) ..."
# shellcheck disable=SC2086
nice -n 10 "$PY" scripts/fixtures/mtp_draft_reference.py "$WORK/prompts.json" "$N" $KS \
    >"$WORK/reference.json" 2>"$WORK/reference.log" || { cat "$WORK/reference.log" >&2; exit 1; }

"$PY" - "$WORK" "$KS" <<'EOF'
import json, sys
work, ks = sys.argv[1], sys.argv[2].split()
ref = json.load(open(f"{work}/reference.json"))["prompts"]
tl = [json.load(open(f"{work}/tl-{i}.json")) for i in range(3)]
ok = True
notes, srcdiff = [], {1: 0.0, 2: 0.0}
for j, r in enumerate(ref):
    for t in r["near_ties"]:
        notes.append(f"prompt {j}: near tie after {t['generated']} generated tokens: HF's head drafts {t['draft']},"
                     f" runner-up {t['runner_up']} by {t['margin']:.4f} logits, the trunk's next is {t['next']}")
def part(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
def rate(a, d):
    return f"{a / d:.3f}" if d else "-"
for k in ks:
    llama = json.load(open(f"{work}/llama-{k}.json"))
    print(f"\nK = {k}: drafted/accepted per prompt (llama.cpp | reference's llama.cpp replay || tl | reference's tl replay)")
    tot = [0] * 8
    for j, r in enumerate(ref):
        l, t = llama[j], tl[0][k][j]
        rl, rt = r["per_k"][k]["llama"], r["per_k"][k]["tl"]
        fl, ft = r["per_k"][k]["llama_tie_flipped"], r["per_k"][k]["tl_tie_flipped"]
        # a count that only the near-tie replay gives is reported, not failed
        if [l["drafted"], l["accepted"]] != rl and [l["drafted"], l["accepted"]] == fl:
            notes.append(f"K={k} prompt {j}: llama.cpp = the replay with the near-tie d1 flipped ({fl[0]}/{fl[1]})"); rl = fl
        if [t["drafted"], t["accepted"]] != rt and [t["drafted"], t["accepted"]] == ft:
            notes.append(f"K={k} prompt {j}: tl = the replay with the near-tie d1 flipped ({ft[0]}/{ft[1]})"); rt = ft
        # the fixture GGUF (f32, byte tokens): the same logprob bits; the safetensors (BF16,
        # computed as BF16 weights): logprobs within 1e-4; both: the same counters, and the
        # same token text wherever the id is ASCII
        for i, other in enumerate(tl[1:], 1):
            o = other[k][j]
            dl = max(abs(x - y) for x, y in zip(o["logprobs"], t["logprobs"]))
            text = all(s == chr(d) for s, d in zip(o["ids"], t["ids"]) if isinstance(d, int) and 32 <= d < 127)
            if (dl != 0 if i == 1 else dl > 1e-4) or not text or (o["drafted"], o["accepted"]) != (t["drafted"], t["accepted"]):
                print(f"  prompt {j}: tl on source {i} differs: {o['drafted']}/{o['accepted']}, logprobs {dl:.2e}"); ok = False
            srcdiff[i] = max(srcdiff[i], dl)
        same = part(l["ids"], t["ids"])
        vs_ref = part(l["ids"], r["greedy"])
        ids = "greedy ids agree" if same is None else f"ids part at token {same}"
        ids += ", = HF" if vs_ref is None else f", HF parts at {vs_ref}"
        print(f"  prompt {j} ({len(r['ids'])} tok): {l['drafted']}/{l['accepted']} | {rl[0]}/{rl[1]}"
              f" || {t['drafted']}/{t['accepted']} | {rt[0]}/{rt[1]}; {ids}")
        ok &= same is None and [l["drafted"], l["accepted"]] == rl and [t["drafted"], t["accepted"]] == rt
        for i, v in enumerate([l["drafted"], l["accepted"], rl[0], rl[1], t["drafted"], t["accepted"], rt[0], rt[1]]):
            tot[i] += v
    print(f"  total: llama.cpp {tot[1]}/{tot[0]} accepted ({rate(tot[1], tot[0])}), reference {tot[3]}/{tot[2]};"
          f" tl {tot[5]}/{tot[4]} ({rate(tot[5], tot[4])}), reference {tot[7]}/{tot[6]}")
print(f"\ntl on the fixture's GGUF: logprobs differ by {srcdiff[1]:.1e}; on its safetensors (BF16): by {srcdiff[2]:.1e};"
      " counters the same")
for n in notes:
    print("note:", n)
print("OK: same ids, and each tool's counts are the reference replay's" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
EOF
