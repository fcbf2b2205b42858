#!/usr/bin/env python3
"""A random PEFT LoRA adapter of a given model shape, for benchmarks (not a fixture: its
numbers are never compared with anything). Writes adapter_config.json and
adapter_model.safetensors (F32) into OUT, with lora_A and lora_B on every layer's
q/k/v/o and gate/up/down, and prints its size.

    scripts/make_bench_lora.py OUT --layers 30 --hidden 576 --inter 1536 \\
        --heads 9 --kv-heads 3 --head-dim 64 [--rank 16] [--alpha 32] [--class LlamaForCausalLM] [--dtype f32|f16|bf16]

Needs numpy only (the fixtures venv has it). Deterministic for a given shape and seed.
"""

import argparse
import json
import struct
from pathlib import Path

import numpy as np


def as_bytes(a: np.ndarray, dtype: str) -> bytes:
    a = np.ascontiguousarray(a, dtype="<f4")
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    if dtype == "BF16":
        # Round to nearest even on the upper 16 bits (finite values only here).
        u = a.view("<u4").astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
    return a.tobytes()


def save_safetensors(path: Path, tensors: dict, dtype: str = "F32") -> None:
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        b = as_bytes(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    for k in ["layers", "hidden", "inter", "heads", "kv_heads", "head_dim"]:
        p.add_argument("--" + k.replace("_", "-"), type=int, required=True)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--class", dest="cls", default="LlamaForCausalLM")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    d, i, q, kv = a.hidden, a.inter, a.heads * a.head_dim, a.kv_heads * a.head_dim
    shapes = {"self_attn.q_proj": (d, q), "self_attn.k_proj": (d, kv), "self_attn.v_proj": (d, kv),
              "self_attn.o_proj": (q, d), "mlp.gate_proj": (d, i), "mlp.up_proj": (d, i), "mlp.down_proj": (i, d)}
    tensors = {}
    for layer in range(a.layers):
        for m, (inp, out) in shapes.items():
            base = f"base_model.model.model.layers.{layer}.{m}"
            tensors[base + ".lora_A.weight"] = rng.standard_normal((a.rank, inp)) / np.sqrt(inp)
            tensors[base + ".lora_B.weight"] = rng.standard_normal((out, a.rank)) * 0.01
    a.out.mkdir(parents=True, exist_ok=True)
    save_safetensors(a.out / "adapter_model.safetensors", tensors, a.dtype.upper())
    cfg = {"peft_type": "LORA", "r": a.rank, "lora_alpha": a.alpha, "use_rslora": False, "bias": "none",
           "target_modules": sorted(m.split(".")[1] for m in shapes), "auto_mapping": {"base_model_class": a.cls}}
    (a.out / "adapter_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    size = (a.out / "adapter_model.safetensors").stat().st_size
    print(f"{a.out}: rank {a.rank}, {a.dtype}, {len(tensors)} tensors, {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
