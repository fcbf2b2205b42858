"""The official `openai` client's embeddings API against a running tl serve
(serve/tests/openai_embeddings.rs), and /v1/rerank over plain HTTP (the standard library's
urllib: OpenAI has no rerank call).

  openai_embeddings.py BASE_URL MODEL

`client.embeddings.create` with a string, a list of strings, token ids and token-id lists
(the byte tokenizer's ids of the same texts give the same vectors), `encoding_format` float,
base64 (explicit: the little-endian f32 bytes) and the client's default (it asks for base64
and decodes it: the same floats), `dimensions` (truncated and normalised again), and errors
raised as the client's own exceptions. Prints one line per check; any failure raises (exit 1).
"""
import base64
import json
import math
import struct
import sys
import urllib.error
import urllib.request

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)


def f32(v):
    """The f32 bytes of a vector (JSON floats are f32's shortest decimals, base64 its bytes)."""
    return struct.pack(f"<{len(v)}f", *v)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


one = client.embeddings.create(model=model, input="hello world", encoding_format="float")
assert one.object == "list" and len(one.data) == 1, one
v = one.data[0].embedding
assert len(v) == 64 and abs(norm(v) - 1) < 1e-5, (len(v), norm(v))
assert one.usage.prompt_tokens == len(b"hello world") == one.usage.total_tokens, one.usage
print("string ok")

texts = ["a", "hello world", "The quick brown fox."]
many = client.embeddings.create(model=model, input=texts, encoding_format="float")
assert [d.index for d in many.data] == [0, 1, 2], many
assert many.data[1].embedding == v, "the same text alone and in a list"
print("list ok")

ids = client.embeddings.create(model=model, input=list(b"hello world"), encoding_format="float")
assert ids.data[0].embedding == v, "token ids"
lists = client.embeddings.create(model=model, input=[list(t.encode()) for t in texts], encoding_format="float")
assert [d.embedding for d in lists.data] == [d.embedding for d in many.data], "token-id lists"
print("tokens ok")

raw = client.embeddings.create(model=model, input="hello world", encoding_format="base64")
b = raw.data[0].embedding
assert isinstance(b, str), type(b)
assert base64.b64decode(b) == f32(v), "base64 is the float vector's little-endian bytes"
default = client.embeddings.create(model=model, input="hello world")
assert f32(default.data[0].embedding) == f32(v), "the client's default (base64, decoded)"
print("base64 ok")

cut = client.embeddings.create(model=model, input="hello world", dimensions=16, encoding_format="float")
c = cut.data[0].embedding
assert len(c) == 16 and abs(norm(c) - 1) < 1e-5, c
n16 = norm(v[:16])
assert max(abs(x - y / n16) for x, y in zip(c, v[:16])) < 1e-5, "truncated, normalised again"
print("dimensions ok")

for kwargs, exc in [({"dimensions": 0}, openai.BadRequestError), ({"dimensions": 65}, openai.BadRequestError),
                    ({"input": []}, openai.BadRequestError), ({"model": "nope"}, openai.NotFoundError)]:
    args = {"model": model, "input": "hi", **kwargs}
    try:
        client.embeddings.create(**args)
    except exc as e:
        assert e.status_code in (400, 404), e
        assert isinstance(e.body, dict) and e.body.get("message"), e.body
    else:
        raise AssertionError(f"{kwargs} was accepted")
print("errors ok")

def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


root = base.rsplit("/v1", 1)[0]
docs = ["hello there", "hello world", "something else", "world"]
for path in ["/v1/rerank", "/rerank"]:
    status, out = post(root + path, {"model": model, "query": "hello world", "documents": docs, "top_n": 2,
                                     "return_documents": True})
    assert status == 200, out
    res = out["results"]
    assert len(res) == 2 and res[0]["index"] == 1, out
    assert res[0]["relevance_score"] >= res[1]["relevance_score"], out
    assert res[0]["document"]["text"] == "hello world", out
    assert out["usage"]["prompt_tokens"] == sum(len(d) for d in ["hello world", *docs]), out
    status, bad = post(root + path, {"query": "q", "documents": []})
    assert status == 400 and bad["error"]["param"] == "documents", bad
print("rerank ok")
