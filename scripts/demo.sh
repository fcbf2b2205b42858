#!/usr/bin/env bash
# Answer one chat prompt with SmolLM2-135M-Instruct, from a fresh clone:
# fetch the model when missing, build `tl` in release, generate.
#
#   ./scripts/demo.sh "What is the capital of France?" [more generate flags]
#
# Greedy by default; pass e.g. `--temperature 0.7 --top-p 0.9 --seed 1` to sample.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

prompt="${1:-What is the capital of France?}"
shift || true

model="$(scripts/fetch_model.sh)"
cargo build --release --quiet -p tl-cli --bin tl
exec target/release/tl generate "$model" --chat --prompt "$prompt" \
    --max-tokens 256 --temperature 0 "$@"
