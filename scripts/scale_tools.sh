#!/usr/bin/env bash
# The routers serve's scale-out tests (serve/tests/scale_*.rs) run replicas behind:
# HAProxy from Debian (apt-get, when `haproxy` is not on PATH) and vllm-router from PyPI
# in target/venv-vllm-router (git-ignored; pinned in scripts/vllm-router-requirements.txt;
# a no-op when up to date). The tests fail, naming this script, when either is missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v haproxy >/dev/null 2>&1 && [[ ! -x /usr/sbin/haproxy ]]; then
    echo "scale_tools: installing haproxy"
    if [[ "$(id -u)" == 0 ]]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
    fi
fi
echo "scale_tools: $(haproxy -v 2>/dev/null | head -n 1 || /usr/sbin/haproxy -v | head -n 1)"
# shellcheck source=lib/pinned_venv.sh
source "$root/scripts/lib/pinned_venv.sh"
pinned_venv vllm_router_venv "$root/target/venv-vllm-router" "$root/scripts/vllm-router-requirements.txt" vllm_router
