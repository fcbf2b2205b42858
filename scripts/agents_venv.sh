#!/usr/bin/env bash
# Creates target/venv-agents (git-ignored, under target/) with langchain-openai, an agent
# library's OpenAI adapter, and its dependencies, pinned in scripts/agents-requirements.txt,
# for the serve crate's tool_clients test (a two-step tool loop against SmolLM2). Does
# nothing when the venv exists, imports, and was built from the current requirements.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/pinned_venv.sh
source "$root/scripts/lib/pinned_venv.sh"
pinned_venv agents_venv "$root/target/venv-agents" "$root/scripts/agents-requirements.txt" "langchain_openai, openai"
