#!/usr/bin/env bash
# Creates target/venv-anthropic (git-ignored, under target/) with the official `anthropic`
# Python SDK and its dependencies, pinned in scripts/anthropic-requirements.txt, for the
# serve crate's anthropic_client test. Does nothing when the venv exists, imports, and was
# built from the current requirements (a stamp inside the venv holds their hash).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/pinned_venv.sh
source "$root/scripts/lib/pinned_venv.sh"
pinned_venv anthropic_venv "$root/target/venv-anthropic" "$root/scripts/anthropic-requirements.txt" anthropic
