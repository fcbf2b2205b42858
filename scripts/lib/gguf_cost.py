"""What one token costs in a GGUF file: the bytes a decode step reads, the FLOPs a prefill does.

Usage: python gguf_cost.py NAME=FILE.gguf ... > costs.json (run in the fixtures venv: it reads
the files with the `gguf` package, an implementation independent of tl's loader).

For each file, a JSON object with
- file_bytes, tensor_bytes (every tensor's stored bytes) and types (tensor bytes per type name);
- decode_bytes_per_token: what a batch-1 decode step must read, every tensor once, except a
  token embedding that has a separate output tensor (then only one row of it is read);
  the KV cache (a few MiB at these lengths) is left out;
- block_matmul_params (the weights of the layers' matrix products, multiplied with every
  prompt token), head_params (the LM head, multiplied with the last token only, as both
  tools compute logits for the last token of a step), attn_width (heads x head_dim) and
  n_layers, from which bench_compare.sh computes prefill FLOPs for P prompt tokens:
  2 P block + 2 head + 4 attn_width n_layers P (P + 1) / 2 (QK^T and PV, causal).
"""
import json
import os
import sys

from gguf import GGUFReader


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.parts[f.data[0]].tolist()[0]


def cost(path):
    r = GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    by_name = {t.name: t for t in r.tensors}
    types = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + int(t.n_bytes)
    tensor_bytes = sum(int(t.n_bytes) for t in r.tensors)
    head = by_name.get("output.weight") or by_name["token_embd.weight"]
    per_token = tensor_bytes
    if "output.weight" in by_name:
        emb = by_name["token_embd.weight"]
        per_token -= int(emb.n_bytes) - int(emb.n_bytes) // int(emb.shape[-1])
    matmuls = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    block = sum(int(t.n_elements) for t in r.tensors
                if t.name.startswith("blk.") and t.name.split(".")[2] in matmuls)
    n_head = field(r, f"{arch}.attention.head_count")
    hidden = field(r, f"{arch}.embedding_length")
    head_dim = field(r, f"{arch}.attention.key_length") or hidden // n_head
    return {
        "path": path,
        "file_bytes": os.path.getsize(path),
        "tensor_bytes": tensor_bytes,
        "types": types,
        "decode_bytes_per_token": per_token,
        "block_matmul_params": block,
        "head_params": int(head.n_elements),
        "attn_width": n_head * head_dim,
        "n_layers": field(r, f"{arch}.block_count"),
    }


def main():
    out = {}
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        out[name] = cost(path)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
