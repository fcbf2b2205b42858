#!/usr/bin/env bash
# Render the real chat templates that llama.cpp collects (models/templates/ in the
# llama-cpp-python sdist: Llama 3.x, Qwen 2.5/3, Mistral, DeepSeek, Gemma, Phi, gpt-oss,
# ...) with transformers and with tl, and compare the text. A developer check, not part of
# scripts/test.sh: it downloads the sdist (about 75 MB) and transformers (no torch).
# docs/reliability.md records the last result. Exits 1 when a template differs.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$(scripts/build_llama_cpp.sh --source)"
tdir="$src/models/templates"
venv="${TL_CACHE:-$HOME/.cache/tl}/chat-templates-venv"
pin() { grep -i "^$1==" scripts/fixtures/requirements.txt; }
if ! "$venv/bin/python" -c 'import transformers, jinja2' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "$(pin transformers)" "$(pin Jinja2)" "$(pin MarkupSafe)"
fi
out=target/chat-templates
mkdir -p "$out"
"$venv/bin/python" scripts/chat_templates/compare.py golden "$tdir" "$out/golden.json"
cargo run --release --quiet -p tl-core --example render_chat_templates -- "$tdir" "$out/golden.json" "$out/tl.json"
"$venv/bin/python" scripts/chat_templates/compare.py check "$out/golden.json" "$out/tl.json"
