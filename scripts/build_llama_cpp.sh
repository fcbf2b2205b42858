#!/usr/bin/env bash
# Build llama.cpp's llama-bench, llama-batched-bench and llama-quantize (CPU only,
# -march=native) for the side-by-side benchmarks, and print the directory that holds them.
#
# - LLAMA_CPP_DIR set: use that already-built llama.cpp (its build/bin/ or bin/), build nothing.
# - Otherwise the source comes from PyPI: the llama-cpp-python sdist vendors llama.cpp
#   (only PyPI, crates.io and Debian are reachable from our machines, not GitHub).
#   Everything is cached under ${TL_CACHE:-~/.cache/tl}/llama.cpp/; a second run with the
#   binaries present does nothing but print the path.
#   LLAMA_CPP_PYTHON_VERSION pins the sdist (default below); JOBS sets the build's -j.
# - LLAMA_CPP_NO_AMX=1: build into build-<version>-noamx with GGML_NATIVE=OFF and the
#   x86 extensions named explicitly (AVX2, FMA, F16C, BMI2, AVX-512 F/VBMI/VNNI/BF16,
#   AVX-VNNI) but no AMX. Some VMs report AMX in CPUID without enabling it (the kernel
#   refuses the tile state), and the native build then dies of SIGILL in its repacked
#   (`--repack 1`, llama-bench's default) path; this build runs llama.cpp as its users
#   run it there, repacking included. The default build is left as it is.
#   It also leaves out AVX512-FP16, and on CPUs that have it (Sapphire Rapids and later)
#   that build is the faster llama.cpp for f16 KV caches: with FP16 ggml's f16 vectors are
#   128 halves a step, so at head size 64 its flash-attention decode adds every value in
#   a scalar loop (docs/benchmarks.md, "llama.cpp's f16 decode on AVX512-FP16 CPUs").
# - `--source`: only fetch and unpack the source; print its directory (its
#   models/templates/ holds real chat templates: scripts/check_chat_templates.sh).
# - `--serve`: also build llama-server, llama-speculative and llama-lookup (the serving
#   and speculation baselines of docs/serving.md and docs/benchmarks.md).
# - `--perplexity`: also build llama-perplexity (scripts/q8_perplexity.sh's baseline).
# - `--embedding`: also build llama-embedding (scripts/bench_embeddings.sh's baseline).
# - `--tokenize`: also build llama-tokenize (scripts/fixtures/gemma4_vocab_llama_tokenize.py).
#
# All progress goes to stderr; stdout is only the bin (or source) directory.
set -euo pipefail

SOURCE_ONLY=0
SERVE=0
PPL=0
EMBED=0
TOKENIZE=0
[ "${1:-}" = --source ] && SOURCE_ONLY=1
[ "${1:-}" = --embedding ] && EMBED=1
[ "${1:-}" = --serve ] && SERVE=1
[ "${1:-}" = --perplexity ] && PPL=1
[ "${1:-}" = --tokenize ] && TOKENIZE=1

log() { echo "build_llama_cpp: $*" >&2; }
die() { log "error: $*"; exit 1; }

has_bins() {
    [ -x "$1/llama-bench" ] && [ -x "$1/llama-quantize" ] && [ -x "$1/llama-batched-bench" ] || return 1
    [ "$SERVE" = 0 ] || { [ -x "$1/llama-server" ] && [ -x "$1/llama-speculative" ] && [ -x "$1/llama-lookup" ]; } || return 1
    [ "$PPL" = 0 ] || [ -x "$1/llama-perplexity" ] || return 1
    [ "$EMBED" = 0 ] || [ -x "$1/llama-embedding" ] || return 1
    [ "$TOKENIZE" = 0 ] || [ -x "$1/llama-tokenize" ]
}

if [ -n "${LLAMA_CPP_DIR:-}" ]; then
    if [ "$SOURCE_ONLY" = 1 ]; then
        (cd "$LLAMA_CPP_DIR" && pwd)
        exit 0
    fi
    for d in "$LLAMA_CPP_DIR/build/bin" "$LLAMA_CPP_DIR/bin" "$LLAMA_CPP_DIR"; do
        if has_bins "$d"; then
            (cd "$d" && pwd)
            exit 0
        fi
    done
    die "LLAMA_CPP_DIR=$LLAMA_CPP_DIR has no llama-bench, llama-quantize and llama-batched-bench in build/bin/ or bin/"
fi

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${TL_CACHE:-$HOME/.cache/tl}"
ROOT="$CACHE/llama.cpp"
SRC_PARENT="$ROOT/src"
SDIST="$SRC_PARENT/llama_cpp_python-$VERSION.tar.gz"
SRC="$SRC_PARENT/llama_cpp_python-$VERSION/vendor/llama.cpp"
BUILD="$ROOT/build-$VERSION"
NO_AMX="${LLAMA_CPP_NO_AMX:-0}"
ISA_FLAGS=(-DGGML_NATIVE=ON)
if [ "$NO_AMX" = 1 ]; then
    BUILD="$BUILD-noamx"
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
        -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
        -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
BIN="$BUILD/bin"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ "$SOURCE_ONLY" = 0 ] && has_bins "$BIN"; then
    echo "$BIN"
    exit 0
fi

mkdir -p "$SRC_PARENT"

# 1. Source: the llama-cpp-python sdist. pip prepares the sdist's metadata in an isolated
#    build environment (it fetches scikit-build-core from PyPI), which is why this is not
#    --no-build-isolation.
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    if [ ! -s "$SDIST" ]; then
        log "fetching llama-cpp-python==$VERSION sdist from PyPI (about 75 MB)..."
        TMP="$(mktemp -d "$SRC_PARENT/.fetch.XXXXXX")"
        trap 'rm -rf "$TMP"' EXIT
        python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
            "llama-cpp-python==$VERSION" -d "$TMP" >&2
        mv "$TMP/llama_cpp_python-$VERSION.tar.gz" "$SDIST"
    fi
    log "extracting $SDIST"
    rm -rf "$SRC_PARENT/llama_cpp_python-$VERSION"
    tar -xzf "$SDIST" -C "$SRC_PARENT"
    [ -f "$SRC/CMakeLists.txt" ] || die "no vendor/llama.cpp in $SDIST"
fi
if [ "$SOURCE_ONLY" = 1 ]; then
    echo "$SRC"
    exit 0
fi

# 2. Tools: cmake and a C++ compiler.
if ! command -v cmake >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        log "installing cmake with apt-get"
        apt-get update -qq >&2 && apt-get install -y -qq cmake >&2
    fi
fi
if ! command -v cmake >/dev/null 2>&1; then
    log "installing cmake with pip"
    python3 -m pip install --quiet cmake >&2
    hash -r
fi
command -v cmake >/dev/null 2>&1 || die "cmake not found (apt-get install cmake, or pip install cmake)"
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 ||
    die "no C++ compiler (apt-get install g++)"

# 3. Configure and build only the targets asked for. CPU backend only, tuned for this CPU
#    (GGML_NATIVE, or the explicit list above), no network features, no web UI (which would
#    download one).
log "configuring $SRC -> $BUILD"
cmake -S "$SRC" -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    "${ISA_FLAGS[@]}" \
    -DGGML_CCACHE=OFF \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TOOLS=ON >&2
TARGETS=(llama-bench llama-quantize llama-batched-bench)
[ "$SERVE" = 0 ] || TARGETS+=(llama-server llama-speculative llama-lookup)
[ "$PPL" = 0 ] || TARGETS+=(llama-perplexity)
[ "$EMBED" = 0 ] || TARGETS+=(llama-embedding)
[ "$TOKENIZE" = 0 ] || TARGETS+=(llama-tokenize)
log "building ${TARGETS[*]} with -j$JOBS (several minutes on 2 cores)"
cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2

has_bins "$BIN" || die "build finished but $BIN lacks one of ${TARGETS[*]}"
echo "$BIN"
