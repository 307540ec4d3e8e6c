#!/usr/bin/env bash
# Speculative decoding on a memory-bound device (issue 27): the time-to-answer benchmark
# (benchmarks/bench_speculative.py) with every layer on an NVIDIA GPU, on a machine without network.
#   bash scripts/gpu_speculative.sh SOURCE_TARBALL WHEELS_DIR [OUT]      (default OUT: runs/gpu-speculative)
# SOURCE_TARBALL: llama-cpp-python's source package (the one scripts/setup.sh keeps in ~/.cache/venus-edge/sdist;
# a copy without llama.cpp's docs, test models and unused backends fits a 64 MiB transfer). WHEELS_DIR: wheels of
# venus-edge's pure-Python dependencies that the machine lacks (it has torch, transformers, numpy, lxml, httpx).
# Stages, each kept in WORK (default /tmp/gpu-speculative) and skipped when done, so a run cut by a time limit
# resumes where it stopped:
#   1. llama.cpp with CUDA (CUDA_ARCH, default 90: H100/H200) as shared libraries plus llama-server; the Python
#      bindings of the same package load them (LLAMA_CPP_LIB_PATH), venus-edge is installed without dependencies;
#   2. a model of SHAPE (qwen3-1.7b, default: the 1.5B class and DR-Venus's family; qwen3-4b: DR-Venus-4B's shape;
#      tiny: a dry run of the script on a CPU with SKIP_BUILD=1 and GPU_LAYERS=0)
#      with random weights, converted and quantized to Q4_K_M by venus-edge quantize. Random weights cost what
#      trained ones cost per token (the same tensors), but their greedy text is not a model's: acceptance here is
#      not the trained model's (README, "Speculative decoding", combines this curve with the acceptance measured
#      on the real 1.5B);
#   3. bench_speculative.py --gpu-layers -1 over the shipped session's first TURNS turns (default 3): the
#      verification-cost curve, ours plain / batch-invariant / + lookup (adaptive and k=4), raw llama-cpp-python,
#      llama-server plain and with ngram-simple, all on the GPU.
# Writes OUT/speculative.json and OUT/speculative.md, OUT/phases.txt (seconds per stage) and OUT/log.txt.
# Expected (not yet seen on a GPU when written): build 4-8 min on 16 cores for one architecture, model 2-3 min,
# benchmark 2-4 min; the verification cost of k <= 8 tokens within 1.5x of one token (memory-bound), so lookup at
# its acceptance is faster than plain, while on the 2-core CPU it is ~k (README).
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCE=$(realpath "$1")
WHEELS=$(realpath "$2")
OUT=${3:-runs/gpu-speculative}
WORK=${WORK:-/tmp/gpu-speculative}
SHAPE=${SHAPE:-qwen3-1.7b}
CUDA_ARCH=${CUDA_ARCH:-90}
TURNS=${TURNS:-3}
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
  tar -xzf "$SOURCE" -C "$WORK" --strip-components=1 --wildcards '*/llama_cpp/*'
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
  tar -xzf "$SOURCE" -C "$WORK/src" --strip-components=3 --wildcards '*/vendor/llama.cpp/*'
  mapfile -t hints < <(cublas_hints)
  cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF "${hints[@]}" > "$WORK/cmake.log" 2>&1 \
    || { tail -30 "$WORK/cmake.log"; return 1; }
  cmake --build "$WORK/build" --target llama llama-server -j "$(nproc)" > "$WORK/build.log" 2>&1 \
    || { grep -m5 -B2 -A8 'error' "$WORK/build.log" | head -60; return 1; }
  mkdir -p "$WORK/cache/bin"
  ln -sf "$WORK/build/bin/llama-server" "$WORK/cache/bin/llama-server"
}
export PYTHONPATH="$WORK/site" VENUS_EDGE_CACHE="$WORK/cache"
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
