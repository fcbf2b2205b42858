#!/usr/bin/env python3
"""Write the fuzz seed corpora (fuzz/corpus/<target>/seed-*) from the real fixtures and
the SmolLM2 GGUF's header. Reproducible; run from the repository root:
    python3 fuzz/seeds.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import json, os, struct, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "arch-llama/tests/fixtures")
CORPUS = os.path.join(ROOT, "fuzz/corpus")
SMOL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/tl/SmolLM2-135M-Instruct.Q4_1.gguf")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(p, n=None):
    with open(p, "rb") as f:
        return f.read(n) if n else f.read()


# safetensors: the two small fixtures whole, and a minimal one-tensor file.
put("safetensors", "tiny-llama-int4", read(f"{FIX}/tiny-llama-int4/model.safetensors"))
hdr = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "__metadata__": {"format": "pt"}}).encode()
put("safetensors", "one", struct.pack("<Q", len(hdr)) + hdr + struct.pack("<2f", 1.0, -2.0))
hdr = json.dumps({"b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
put("safetensors", "bf16", struct.pack("<Q", len(hdr)) + hdr + bytes(8))

# config.json: the fixtures' configs and small variants the refusals look at.
cfg = json.loads(read(f"{FIX}/tiny-llama/config.json"))
put("config", "tiny-llama", json.dumps(cfg))
put("config", "tiny-llama-int4", read(f"{FIX}/tiny-llama-int4/config.json"))
for k, v in [("rope_scaling", {"rope_type": "linear", "factor": 2.0}), ("num_key_value_heads", 3), ("vocab_size", 1 << 40),
             ("tl_arch", "qwen2"), ("eos_token_id", [257, 1 << 33]), ("hidden_act", "gelu")]:
    put("config", f"variant-{k}", json.dumps({**cfg, k: v}))
# Multimodal checkpoints nesting their text model under text_config (core/src/nested.rs).
for mm in ["arch-gemma4/tests/fixtures/tiny-gemma4-mm", "arch-qwen3-5/tests/fixtures/tiny-qwen3_5-mm"]:
    put("config", os.path.basename(mm), read(os.path.join(ROOT, mm, "config.json")))

# BERT encoders (arch-bert): the tiny BertModel and cross-encoder configs, and
# sentence-transformers' module files (modules.json NUL 1_Pooling/config.json).
BERT = os.path.join(ROOT, "arch-bert/tests/fixtures")
for b in ["tiny-bert", "tiny-bert-ce"]:
    put("config", b, json.dumps({**json.loads(read(f"{BERT}/{b}/config.json")), "tl_tokenizer": "hf"}))
# The other encoder families' config readers (arch-modernbert, arch-nomic-bert).
for crate, b in [("arch-modernbert", "tiny-modernbert"), ("arch-modernbert", "tiny-modernbert-cls"),
                 ("arch-nomic-bert", "tiny-nomic-bert"), ("arch-nomic-bert", "tiny-nomic-bert-bias")]:
    cfg = json.loads(read(os.path.join(ROOT, crate, "tests/fixtures", b, "config.json")))
    put("config", b, json.dumps({**cfg, "tl_tokenizer": "hf"}))
put("st_modules", "tiny-bert", read(f"{BERT}/tiny-bert/modules.json") + b"\0" + read(f"{BERT}/tiny-bert/1_Pooling/config.json"))
put("st_modules", "cls-max", read(f"{BERT}/tiny-bert/modules.json") + b"\0" +
    json.dumps({"pooling_mode_cls_token": True, "pooling_mode_max_tokens": True}).encode())

# GGUF: the SmolLM2 header's first 256 KiB, and a tiny complete llama GGUF.
if os.path.isfile(SMOL):
    put("gguf", "smollm2-head", read(SMOL, 256 << 10))


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(v):
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, int):
        return struct.pack("<II", 4, v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + gstr(v)
    if all(isinstance(x, str) for x in v):
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(gstr(x) for x in v)
    if any(isinstance(x, float) for x in v):
        return struct.pack("<IIQ", 9, 6, len(v)) + b"".join(struct.pack("<f", x) for x in v)
    return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)


def gguf(meta, tensors):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, v in meta:
        out += gstr(k) + gval(v)
    off, infos, data = 0, b"", b""
    for name, dims, t, raw in tensors:  # dims in GGUF order (columns first)
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", t, off)
        pad = (-len(raw)) % 32
        data += raw + bytes(pad)
        off += len(raw) + pad
    out += infos
    out += bytes((-len(out)) % 32)
    return out + data


toks = ["<unk>", "<s>", "</s>"] + [chr(ord("a") + i) for i in range(13)]
meta = [("general.architecture", "llama"), ("llama.embedding_length", 32), ("llama.feed_forward_length", 64),
        ("llama.block_count", 1), ("llama.attention.head_count", 2), ("llama.attention.head_count_kv", 1),
        ("llama.context_length", 64), ("llama.attention.layer_norm_rms_epsilon", 1e-5),
        ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.tokens", toks), ("tokenizer.ggml.token_type", [1] * len(toks)),
        ("tokenizer.ggml.merges", ["a b", "c d"]), ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.eos_token_id", 2),
        ("tokenizer.chat_template", "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}")]
q4_0 = (struct.pack("<e", 0.5) + bytes(range(16))) * 2  # two Q4_0 blocks of 32
q8_0 = (struct.pack("<e", 0.25) + bytes(range(32)))
tensors = [("token_embd.weight", [32, 16], 0, struct.pack("<512f", *[i / 512 for i in range(512)])),
           ("output_norm.weight", [32], 1, struct.pack("<32e", *[1.0] * 32)),
           ("blk.0.attn_q.weight", [64, 1], 2, q4_0), ("blk.0.attn_k.weight", [32, 1], 8, q8_0)]
put("gguf", "tiny-llama", gguf(meta, tensors))
put("gguf", "qwen2-arch", gguf([("general.architecture", "qwen2")] + meta[1:], tensors[:2]))
# The Llama 3 vocabulary's pre-tokenizer, and a SentencePiece vocabulary (scores, no merges).
put("gguf", "llama-bpe", gguf(meta + [("tokenizer.ggml.pre", "llama-bpe")], tensors[:2]))
spm_toks = ["<unk>", "<s>", "</s>", "<0x41>", "\u2581", "a", "b", "ab", "\u2581ab"]
spm = [m for m in meta if not m[0].startswith("tokenizer.ggml.")] + [
    ("tokenizer.ggml.model", "llama"), ("tokenizer.ggml.tokens", spm_toks),
    ("tokenizer.ggml.scores", [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0]),
    ("tokenizer.ggml.token_type", [2, 3, 3, 6, 1, 1, 1, 1, 1]), ("tokenizer.ggml.bos_token_id", 1),
    ("tokenizer.ggml.add_bos_token", True)]
put("gguf", "sentencepiece", gguf(spm, tensors[:2]))

# A mixture of experts (qwen3moe): the router and the experts stacked [E, I, d] that the
# store serves per expert; then a stacked tensor of the wrong size and a k above E.
moe_meta = [("general.architecture", "qwen3moe")] + [(k.replace("llama.", "qwen3moe."), v) for k, v in meta[1:]] + [
    ("qwen3moe.expert_count", 2), ("qwen3moe.expert_used_count", 1), ("qwen3moe.expert_feed_forward_length", 32)]
exps = struct.pack("<2048f", *[i / 2048 for i in range(2048)])  # 2 experts of [32, 32]
moe_tensors = tensors[:2] + [("blk.0.ffn_gate_inp.weight", [32, 2], 0, struct.pack("<64f", *[0.5] * 64)),
                             ("blk.0.ffn_gate_exps.weight", [32, 32, 2], 0, exps)]
put("gguf", "qwen3moe-stacked", gguf(moe_meta, moe_tensors))
put("gguf", "qwen3moe-stacked-short", gguf(moe_meta, moe_tensors[:3] + [("blk.0.ffn_gate_exps.weight", [32, 32, 3], 0, exps)]))
put("gguf", "qwen3moe-k-above-e", gguf(moe_meta[:-2] + [("qwen3moe.expert_used_count", 3),
                                                         ("qwen3moe.expert_feed_forward_length", 32)], moe_tensors))

# Every GGUF block type tl keeps as stored (type id, block bytes, f16 scale offsets), two
# rows of 256 weights each, bytes 0..255 with finite scales; then the bad cases: the data
# shorter than the tensors claim, NaN / inf scales, and block counts that overflow.
BLOCKS = {"Q4_0": (2, 18, [0]), "Q4_1": (3, 20, [0, 2]), "Q5_0": (6, 22, [0]), "Q5_1": (7, 24, [0, 2]),
          "Q8_0": (8, 34, [0]), "Q2_K": (10, 84, [80, 82]), "Q3_K": (11, 110, [108]), "Q4_K": (12, 144, [0, 2]),
          "Q5_K": (13, 176, [0, 2]), "Q6_K": (14, 210, [208]), "IQ4_NL": (20, 18, [0]), "MXFP4": (39, 17, [])}


def blocks(name, scale=0.01):
    t, size, at = BLOCKS[name]
    n = 2 * 256 * size // (256 if size in (84, 110, 144, 176, 210) else 32)
    raw = bytearray((i * 37 + t) % 256 for i in range(n))
    for b in range(0, n, size):
        for a in at:
            raw[b + a:b + a + 2] = struct.pack("<e", scale)
        if name == "MXFP4":
            raw[b] = 120 + b % 9  # an e8m0 exponent byte (scale 2^-8 .. 2^0); tl reads <= 252
    return t, bytes(raw)


block_tensors = [(f"blk.0.{k.lower()}.weight", [256, 2], *blocks(k)) for k in BLOCKS]
put("gguf", "blocks", gguf(meta, tensors[:2] + block_tensors))
whole = gguf(meta, tensors[:2] + block_tensors)
put("gguf", "blocks-short", whole[:-300])
bad = [(n, d, t, raw[:80] + struct.pack("<e", float("nan")) + raw[82:]) if t == 10 else
       (n, d, t, struct.pack("<e", float("inf")) + raw[2:]) for n, d, t, raw in block_tensors]
put("gguf", "blocks-nan-inf-scale", gguf(meta, tensors[:2] + bad))
# MXFP4 exponents tl refuses (253..255: weights past f32's range, 255 OCP's NaN), and the
# MXFP4 experts llama-quantize MXFP4_MOE writes, stacked.
t, raw = blocks("MXFP4")
put("gguf", "mxfp4-exponent", gguf(meta, tensors[:2] + [(f"blk.0.mxfp4.weight", [256, 2], t, bytes([253 + i % 3 if i % 17 == 0 else x for i, x in enumerate(raw)]))]))
mx_exps = bytes(((i * 29) % 256 if i % 17 else 118 + (i // 17) % 7) for i in range(2 * 32 * 32 // 32 * 17))
put("gguf", "qwen3moe-mxfp4-experts", gguf(moe_meta, moe_tensors[:3] + [
    (f"blk.0.ffn_{p}_exps.weight", [32, 32, 2], 39, mx_exps) for p in ("gate", "up", "down")]))
put("gguf", "blocks-overflow", gguf(meta, tensors[:2] + [("blk.0.q4_k.weight", [256, 1 << 56], *blocks("Q4_K")),
                                                        ("blk.0.q6_k.weight", [1 << 62, 4], *blocks("Q6_K")),
                                                        ("blk.0.q8_0.weight", [32, 1 << 58], *blocks("Q8_0"))]))

# KV envelope: a valid one-block export (geometry 1 layer, 1 head, head_dim 2, B 2), with
# the selector byte first (bit 0: fix the checksum up).
def fnv(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


env = b"TLKVBLK\0" + struct.pack("<IiIIIIII", 1, 1, 1, 1, 2, 2, 1, 0)
env += struct.pack("<IIQ", 2, 1, 0x1234) + struct.pack("<8H", *range(8))
put("kv_import", "one-block", b"\x00" + env + struct.pack("<Q", fnv(env)))
put("kv_import", "one-block-fixup", b"\x01" + env + bytes(8))
# Version 2 (q8 pools, selector bit 2): per slab the 4 codes then the 2 row scales (f16).
env2 = b"TLKVBLK\0" + struct.pack("<IiIIIIII", 2, 2, 1, 1, 2, 2, 1, 0)
env2 += struct.pack("<IIQ", 2, 1, 0x1234) + struct.pack("<4b2H", 1, -127, 127, 0, 0x2C00, 0x3C00)
env2 += struct.pack("<4b2H", -5, 6, 0, 64, 0x0001, 0x7BFF)
put("kv_import", "q8-one-block", b"\x04" + env2 + struct.pack("<Q", fnv(env2)))
put("kv_import", "q8-one-block-fixup", b"\x05" + env2 + bytes(8))
put("kv_import", "q8-into-f16-pool", b"\x00" + env2 + struct.pack("<Q", fnv(env2)))
# Version 3 (hybrid pools, selector bit 4): docs/formats/kv-block.md's golden envelope.
env3 = bytes.fromhex(os.popen(f"python3 {ROOT}/scripts/reference/kv_envelope_v3.py").read().strip())
put("kv_import", "v3-hybrid", b"\x10" + env3)
put("kv_import", "v3-hybrid-fixup", b"\x11" + env3[:-8] + bytes(8))
put("kv_import", "v3-into-plain-pool", b"\x00" + env3)

# Chat templates: the real ones the tests render, with a message after a NUL.
for name, src in json.loads(read(os.path.join(ROOT, "core/tests/data/chat_templates.json")))["templates"].items():
    if isinstance(src, str):
        put("chat_template", f"real-{name}", src + "\0hello <|im_end|> {{ x }}")
# And the real templates llama.cpp collects, when its source is here
# (scripts/build_llama_cpp.sh --source prints where); not named seed-*, so git ignores
# these copies of other projects' files.
LLAMA_TEMPLATES = os.path.expanduser("~/.cache/tl/llama.cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")
for name in sorted(os.listdir(LLAMA_TEMPLATES)) if os.path.isdir(LLAMA_TEMPLATES) else []:
    if name.endswith(".jinja"):
        with open(os.path.join(CORPUS, "chat_template", "llamacpp-" + name[:-6]), "wb") as f:
            f.write(read(os.path.join(LLAMA_TEMPLATES, name)) + b"\0hi")
put("chat_template", "loop", "{% for i in range(10) %}{% for j in range(10) %}{{ i }}{% endfor %}{% endfor %}\0x")
put("chat_template", "tojson", "{{ messages | tojson(indent=2) }}{{ bos_token }}\0x")

# Request bodies.
for name, body in [
    ("chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0.7,
              "top_p": 0.9, "seed": 1, "stop": ["\n"], "n": 2, "logprobs": True, "top_logprobs": 3, "stream": True,
              "stream_options": {"include_usage": True}}),
    ("completion", {"prompt": [1, 2, 3], "max_tokens": 4, "logprobs": 2, "top_k": 5, "min_p": 0.1,
                    "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5}),
    ("parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "max_completion_tokens": 2}),
]:
    put("request", name, json.dumps(body))

# Anthropic Messages bodies (the request target parses every input both ways).
WEATHER = {"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object",
           "properties": {"city": {"type": "string"}}, "required": ["city"]}}
for name, body in [
    ("messages", {"model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "Be brief."}],
                  "messages": [{"role": "user", "content": "hi"}], "stop_sequences": ["\n"], "temperature": 0.5,
                  "top_p": 0.9, "top_k": 4, "metadata": {"user_id": "u"}, "seed": 3, "stream": True,
                  "thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("messages-tools", {"max_tokens": 16, "tools": [WEATHER],
                        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                        "messages": [{"role": "user", "content": "Weather in Paris?"},
                                     {"role": "assistant", "content": [
                                         {"type": "thinking", "thinking": "t", "signature": ""},
                                         {"type": "text", "text": "Let me look."},
                                         {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                          "input": {"city": "Paris"}}]},
                                     {"role": "user", "content": [
                                         {"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [{"type": "text", "text": "sunny"}], "is_error": False},
                                         {"type": "text", "text": "And now?"}]}]}),
]:
    put("request", name, json.dumps(body))

# OpenAI Responses bodies (the request target parses every input as one too).
FN = {"type": "function", "name": "get_weather", "description": "Weather.", "strict": True,
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
for name, body in [
    ("responses", {"model": "m", "instructions": "Be brief.", "input": "hi", "max_output_tokens": 8,
                   "temperature": 0.5, "top_p": 0.9, "seed": 3, "stream": True, "store": False,
                   "metadata": {"k": "v"}, "reasoning": {"effort": "low"},
                   "text": {"format": {"type": "json_schema", "name": "x", "strict": True,
                                       "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}}),
    ("responses-tools", {"previous_response_id": "resp_1", "tools": [FN],
                         "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False,
                         "input": [{"role": "developer", "content": "Use tools."},
                                   {"type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                                   {"type": "message", "role": "assistant",
                                    "content": [{"type": "output_text", "text": "Let me look."}]},
                                   {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                                    "arguments": "{\"city\": \"Paris\"}"},
                                   {"type": "reasoning", "id": "rs_1", "summary": []},
                                   {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]}),
]:
    put("request", name, json.dumps(body))

# /v1/embeddings, /v1/rerank and /v1/score bodies (the embed_request target parses every input as each).
for name, body in [
    ("embeddings", {"model": "m", "input": "hello world", "encoding_format": "float", "dimensions": 16}),
    ("embeddings-list", {"input": ["a", "b c"], "encoding_format": "base64", "user": "u"}),
    ("embeddings-ids", {"input": [1, 2, 3, 4294967295]}),
    ("embeddings-id-lists", {"input": [[1, 2], [3], []], "dimensions": 0}),
    ("rerank", {"model": "m", "query": "cache", "documents": ["a cache", "a dog", "cache"], "top_n": 2,
                "return_documents": True}),
    ("rerank-ties", {"query": "aa", "documents": ["aa", "aa", "b", "\u00e9"], "top_n": 9}),
    ("embeddings-truncate", {"input": ["a long text"], "truncate": True}),
    ("score-one", {"text_1": "cache", "text_2": ["a cache", "a dog"], "truncate": False}),
    ("score-lists", {"text_1": ["a", "b"], "text_2": ["c", ""]}),
    ("score-mismatch", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}),
]:
    put("embed_request", name, json.dumps(body))

# JSON schemas as response_format brings them (the Pydantic shapes of
# serve/tests/openai_parse.py, and ones llguidance must refuse).
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
          "age": {"type": "integer", "minimum": 0, "maximum": 130}}, "required": ["name", "age"],
          "additionalProperties": False}
for name, schema in [
    ("object", {"type": "object"}),
    ("empty", {}),
    ("person", PERSON),
    ("nested_defs", {"$defs": {"Person": PERSON}, "type": "object",
                     "properties": {"members": {"type": "array", "items": {"$ref": "#/$defs/Person"}, "maxItems": 3}},
                     "required": ["members"], "additionalProperties": False}),
    ("enum_number", {"type": "object", "properties": {"colour": {"enum": ["red", "green"]},
                     "litres": {"type": "number", "minimum": 0.5, "maximum": 20}}, "required": ["colour", "litres"]}),
    ("optional_anyof", {"type": "object", "properties": {"comment": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                        "required": ["comment"]}),
    ("pattern_format", {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]{2,5}[0-9]+$"},
                        "when": {"type": "string", "format": "date-time"}}}),
    ("bad_bounds", {"type": "integer", "minimum": 5, "maximum": 1}),
    ("bad_ref", {"$ref": "#/$defs/absent"}),
    ("recursive", {"$defs": {"T": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}}}},
                   "$ref": "#/$defs/T"}),
]:
    put("json_schema", name, json.dumps(schema))

# model_ref: a reference, then the repository's file list, one per line.
gguf_files = "README.md\nmodel-Q4_K_M.gguf\nmodel-Q8_0.gguf\nmmproj-model-f16.gguf"
put("model_ref", "quant", "hf:org/repo:Q4_K_M\n" + gguf_files)
put("model_ref", "repo-ambiguous", "hf:org/repo\n" + gguf_files)
put("model_ref", "file", "hf.co/org/repo@v1/sub/model.gguf\nsub/model.gguf\nconfig.json")
put("model_ref", "dir", "hf:org/st\nconfig.json\nmodel-00001-of-00002.safetensors\nmodel-00002-of-00002.safetensors\nmodel.safetensors.index.json\ntokenizer.json\nonnx/model.onnx")
put("model_ref", "split", "hf:org/split:q4_k_m\nm-Q4_K_M-00001-of-00002.gguf\nm-Q4_K_M-00002-of-00002.gguf")
put("model_ref", "catalog", "qwen2.5-coder:1.5b")

# lora_adapter: byte 0 even = a GGUF adapter, odd = adapter_config.json \0 safetensors.
LORA = "families/tests/fixtures/lora"
put("lora_adapter", "gguf-llama-all", b"\0" + read(f"{LORA}/llama-all/adapter.gguf"))
put("lora_adapter", "peft-llama-rs", b"\1" + read(f"{LORA}/llama-rs/adapter_config.json") + b"\0" +
    read(f"{LORA}/llama-rs/adapter_model.safetensors"))
