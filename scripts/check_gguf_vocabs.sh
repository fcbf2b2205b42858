#!/usr/bin/env bash
# Tokenize the test cases llama.cpp ships with its vocabulary-only GGUFs
# (models/ggml-vocab-*.gguf in the llama-cpp-python sdist, with .inp/.out: the ids that
# Hugging Face's tokenizer gives, `encode(text, add_special_tokens=False)`) with tl's GGUF
# tokenizer, and compare. A developer check, not part of scripts/test.sh: it downloads the
# sdist (about 75 MB) once. docs/reliability.md records the last result. Exits 1 when a
# vocabulary tl accepts tokenizes a case differently; vocabularies tl refuses are listed
# with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$(scripts/build_llama_cpp.sh --source)"
cargo run --release --quiet -p tl-examples --example gguf_vocabs -- "$src/models"
