#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this), on a fresh machine:
# fetch the real model the SmolLM2 tests need (a no-op when cached), then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_model.sh >/dev/null
# The real-model tests must run, never skip, once the model is fetched.
export TL_REQUIRE_MODEL=1
cargo test --workspace "$@"
