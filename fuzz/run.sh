#!/usr/bin/env bash
# Build the named fuzz targets (all of them when none is named), then run each for SECONDS (default 600) in turn, at the lowest
# priority, logging to fuzz/logs/<target>.log. From the repository root:
#   fuzz/run.sh [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors config gguf kv_import chat_template request embed_request json_schema st_modules lora_adapter)
mkdir -p fuzz/logs
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
# One target at a time: `cargo fuzz build` with no name builds all nine binaries (each
# links the whole workspace, over an hour on two busy cores) when one was asked for.
: >fuzz/logs/build.log
for t in "${targets[@]}"; do
  nice -n 19 cargo +nightly fuzz build -O "$t" >>fuzz/logs/build.log 2>&1 ||
    { echo "build of $t failed: fuzz/logs/build.log"; exit 1; }
done
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  # -rss_limit_mb / -malloc_limit_mb: an input of at most max_len bytes must never need
  # anything near this (a claimed 2^60-element tensor must be refused, not allocated).
  nice -n 19 cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -max_len=300000 \
    -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1
  echo "$t: exit $? ($(grep -E '^stat::number_of_executed_units' "fuzz/logs/$t.log" | awk '{print $2}') executions)"
done
