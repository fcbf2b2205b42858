#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this), on a fresh machine:
# fetch the real models the SmolLM2 and Gemma 3 tests need (no-ops when cached), then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_model.sh >/dev/null
scripts/fetch_gemma3.sh >/dev/null
# The real-model tests must run, never skip, once the models are fetched.
export TL_REQUIRE_MODEL=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# The stdlib Python reference behind the sampler's golden file: its check values, and
# that regenerating the golden file reproduces it byte for byte.
python3 scripts/reference/test_reference.py 2>&1 | tail -n 3 || status=$?
# The official `openai` Python client for serve's openai_client test (git-ignored venv
# under target/; a no-op when it is up to date). If it cannot be built, that test fails.
scripts/openai_venv.sh 2>&1 | tail -n 2 || status=$?
# The official `anthropic` Python SDK for serve's anthropic_client test (same rules).
scripts/anthropic_venv.sh 2>&1 | tail -n 2 || status=$?
# langchain-openai, the agent library serve's tool_clients test drives (same rules).
scripts/agents_venv.sh 2>&1 | tail -n 2 || status=$?
# HAProxy (apt) and vllm-router (pip, git-ignored venv under target/) for serve's
# scale-out tests. If they cannot be installed, those tests fail.
scripts/scale_tools.sh 2>&1 | tail -n 2 || status=$?
# Headless Chromium (Debian's package) for serve's chat page test; installed when missing.
scripts/chromium.sh 2>&1 | tail -n 2 || status=$?
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
# cargo's last line is the last crate's (often empty) doc-test run: close with the totals.
awk '/^test result:/ { p += $4; f += $6 } END { printf "summary: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
