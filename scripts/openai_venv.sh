#!/usr/bin/env bash
# Creates target/venv-openai (git-ignored, under target/) with the official `openai`
# Python client and its dependencies, pinned in scripts/openai-requirements.txt, for the
# serve crate's openai_client test. Does nothing when the venv exists, imports, and was
# built from the current requirements (a stamp inside the venv holds their hash).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/pinned_venv.sh
source "$root/scripts/lib/pinned_venv.sh"
pinned_venv openai_venv "$root/target/venv-openai" "$root/scripts/openai-requirements.txt" openai
