#!/usr/bin/env bash
# Build llama.cpp's llama-server and llama-bench from the llama-cpp-python source package that setup.sh keeps, into
# $VENUS_EDGE_CACHE/bin (default ~/.cache/venus-edge/bin). They are the real server that tests and the
# OpenAI-compatible engine talk to, and the reference of the benchmarks. Built once (8-12 minutes on 2 cores) and
# reused; rebuilt when a binary is missing or does not run. Nothing is downloaded: the web UI is left out.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-0.3.36}
CACHE=${VENUS_EDGE_CACHE:-$HOME/.cache/venus-edge}
SDIST="$CACHE/sdist/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
BIN="$CACHE/bin"

works() { [ -x "$BIN/$1" ] && "$BIN/$1" --version >/dev/null 2>&1; }
if works llama-server && works llama-bench; then
  exit 0
fi
if [ ! -s "$SDIST" ]; then
  echo "error: $SDIST is missing; run scripts/setup.sh (it downloads the source package)" >&2
  exit 1
fi
CMAKE=$(command -v cmake || true)
if [ -z "$CMAKE" ]; then  # the wheel build got its cmake from PyPI; so do we
  .venv/bin/python -m pip install -q cmake && CMAKE=.venv/bin/cmake
fi

echo "building llama-server and llama-bench from llama-cpp-python $LLAMA_CPP_VERSION (8-12 minutes, once)..."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src" "$BIN"
tar -xzf "$SDIST" -C "$WORK/src" --strip-components=3 "llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
"$CMAKE" -S "$WORK/src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  >"$WORK/cmake.log" 2>&1 || { tail -20 "$WORK/cmake.log" >&2; exit 1; }
"$CMAKE" --build "$WORK/build" --target llama-server llama-bench -j "$(nproc)" >"$WORK/build.log" 2>&1 \
  || { tail -30 "$WORK/build.log" >&2; exit 1; }
install -m 755 "$WORK/build/bin/llama-server" "$WORK/build/bin/llama-bench" "$BIN/"
echo "llama-server and llama-bench are in $BIN"
