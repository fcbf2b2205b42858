# Sourced by the scripts that need a Python venv (scripts/openai_venv.sh,
# scripts/fixtures/setup_venv.sh). `pinned_venv TAG VENV REQUIREMENTS IMPORTS` creates
# VENV with exactly the packages of REQUIREMENTS (binary wheels, --no-deps: every
# dependency is pinned in the file, nothing floats), checks that `import IMPORTS` works,
# and stamps the venv with the file's hash. Does nothing when the venv exists, imports,
# and was built from the current file. TAG prefixes the messages; $PYTHON picks the
# interpreter (python3).
pinned_venv() {
    local tag="$1" venv="$2" req="$3" imports="$4"
    local stamp="$venv/.requirements.sha256" python="${PYTHON:-python3}" want
    want="$(sha256sum "$req" | cut -d' ' -f1)"
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] &&
        "$venv/bin/python" -c "import $imports" 2>/dev/null; then
        echo "$tag: $venv is up to date"
        return 0
    fi
    echo "$tag: building $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: --no-deps -r "$req"
    "$venv/bin/python" -m pip check
    "$venv/bin/python" -c "import $imports"
    echo "$want" >"$stamp"
    echo "$tag: done"
}
