#!/usr/bin/env bash
# Cross-build the ARM check's tool: scripts/llama_greedy.cpp against llama.cpp for aarch64, from the llama-cpp-python
# source package that setup.sh keeps, into $VENUS_EDGE_CACHE/arm-<version>/llama-greedy (default ~/.cache/venus-edge).
# It runs here under qemu-user: qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu llama-greedy ... (tests/quantize/test_arm.py).
#
# Needs Debian's gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu and qemu-user (setup.sh installs them as root).
# The target is armv8.6-a (NEON, dotprod, i8mm: a recent phone core), so llama.cpp repacks Q4_0, Q8_0 and Q4_K
# at load into its i8mm layouts. No SVE: ggml takes its SVE Q4_0 kernel only on 256-bit vectors, and phone cores
# with SVE2 have 128-bit ones, so a phone runs the NEON+i8mm kernels built here.
# Built once (measured: 4.6 minutes on 2 cores, 28 at the lowest priority on a busy machine) and reused: silent when the binary runs and was
# linked from the current llama_greedy.cpp; only relinked (seconds) when that file changed. Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-0.3.36}
CACHE=${VENUS_EDGE_CACHE:-$HOME/.cache/venus-edge}
SDIST="$CACHE/sdist/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
OUT="$CACHE/arm-$LLAMA_CPP_VERSION"
ARM_ARCH=armv8.6-a+dotprod+i8mm
SYSROOT=/usr/aarch64-linux-gnu
# The static libraries stay in $OUT/lib, keyed by LIB_KEY; the tool is relinked alone when llama_greedy.cpp changes.
LIB_KEY="llama-cpp-python $LLAMA_CPP_VERSION, -march=$ARM_ARCH, no OpenMP"
LIBS="libllama.a libggml.a libggml-cpu.a libggml-base.a"

fingerprint() { { echo "$LIB_KEY"; cat scripts/llama_greedy.cpp; } | sha256sum | cut -d' ' -f1; }
# The tool prints its usage and exits 1 when run without arguments.
works() { (qemu-aarch64 -cpu max -L "$SYSROOT" "$OUT/llama-greedy" 2>&1 || true) | grep -q '^llama-greedy: usage'; }
link_tool() {
  aarch64-linux-gnu-g++ -O2 -std=c++17 -march="$ARM_ARCH" -static -I"$OUT/include" scripts/llama_greedy.cpp \
    $(for lib in $LIBS; do echo "$OUT/lib/$lib"; done) -lpthread -o "$OUT/llama-greedy" 2>"$OUT/link.log" \
    || { cat "$OUT/link.log" >&2; exit 1; }  # the log holds only glibc's warning about dlopen in a static binary
  works || { echo "error: $OUT/llama-greedy does not run under qemu-aarch64" >&2; exit 1; }
  fingerprint >"$OUT/stamp"
}

for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null; then
    echo "error: $tool is missing; as root: apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user" >&2
    exit 1
  fi
done
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$(fingerprint)" ] && works; then
  exit 0
fi
if [ -f "$OUT/lib/stamp" ] && [ "$(cat "$OUT/lib/stamp")" = "$LIB_KEY" ]; then
  link_tool
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

echo "cross-building llama.cpp for aarch64 ($ARM_ARCH) from llama-cpp-python $LLAMA_CPP_VERSION (5-30 minutes, once)..."
started=$(date +%s)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"
tar -xzf "$SDIST" -C "$WORK/src" --strip-components=3 "llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
printf '%s\n' "set(CMAKE_SYSTEM_NAME Linux)" "set(CMAKE_SYSTEM_PROCESSOR aarch64)" \
  "set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)" "set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)" \
  "set(CMAKE_FIND_ROOT_PATH $SYSROOT)" "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)" \
  "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)" "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)" >"$WORK/aarch64.cmake"
# Only the library; llama-greedy is linked by link_tool. OpenMP off so the static binary needs no libgomp (the
# thread pool does not change the arithmetic: each output row is computed by one thread).
"$CMAKE" -S "$WORK/src" -B "$WORK/build" -DCMAKE_TOOLCHAIN_FILE="$WORK/aarch64.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$ARM_ARCH" -DGGML_OPENMP=OFF \
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  >"$WORK/cmake.log" 2>&1 || { tail -20 "$WORK/cmake.log" >&2; exit 1; }
"$CMAKE" --build "$WORK/build" --target llama -j "$(nproc)" >"$WORK/build.log" 2>&1 \
  || { tail -30 "$WORK/build.log" >&2; exit 1; }
rm -rf "$OUT/lib" "$OUT/include"
mkdir -p "$OUT/lib" "$OUT/include"
for lib in $LIBS; do
  find "$WORK/build" -name "$lib" -exec cp {} "$OUT/lib/" \;
done
cp "$WORK/src/include/"*.h "$WORK/src/ggml/include/"*.h "$OUT/include/"
echo "$LIB_KEY" >"$OUT/lib/stamp"
link_tool
echo "llama-greedy (aarch64) is in $OUT, built in $(( $(date +%s) - started )) s"
