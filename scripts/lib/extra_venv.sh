# Sourced: `extra_venv` prints the python of ${TL_CACHE:-~/.cache/tl}/fixtures-extra-venv,
# building it first when missing or incomplete. It holds the few pinned packages the
# fixtures venv lacks and our developer checks need: sentencepiece (llama.cpp's
# convert_hf_to_gguf.py imports it for every Llama, before it looks for a tokenizer.model)
# and accelerate (transformers refuses to load a GGUF file without it), with psutil, the one
# dependency of accelerate the fixtures venv lacks, and tiktoken (gpt-oss's own tokenizer
# library: make_o200k_vocab.py's golden; its deps regex and requests come with transformers);
# all --no-deps, so nothing floats. A .pth
# file puts the fixtures venv's packages (torch, transformers, numpy, gguf, PyYAML) behind
# these, so nothing is installed twice and the fixtures venv itself stays untouched.
# Needs scripts/fixtures/setup_venv.sh to have run.
extra_venv() {
    local root fixtures venv site
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    fixtures="$root/scripts/fixtures/.venv/bin/python"
    venv="${TL_CACHE:-$HOME/.cache/tl}/fixtures-extra-venv"
    if ! "$venv/bin/python" -c 'import sentencepiece, accelerate, tiktoken, torch, transformers, gguf, yaml' 2>/dev/null; then
        echo "extra_venv: making $venv (sentencepiece, accelerate over the fixtures venv)" >&2
        rm -rf "$venv"
        "$fixtures" -m venv "$venv" >&2
        "$venv/bin/python" -m pip install --quiet --no-deps \
            "sentencepiece==0.2.1" "accelerate==1.15.0" "psutil==7.2.2" "tiktoken==0.12.0" >&2
        site="$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
        "$fixtures" -c 'import site; print(site.getsitepackages()[0])' >"$site/fixtures-venv.pth"
        "$venv/bin/python" -c 'import sentencepiece, accelerate, tiktoken, torch, transformers, gguf, yaml' >&2
    fi
    echo "$venv/bin/python"
}
