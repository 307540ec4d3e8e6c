# Sourced by scripts/toy_sft.sh and scripts/toy_igpo.sh: the held-out evaluation of a toy checkpoint, through
# venus-edge research on its exported GGUF without a grammar.
VE=${VE:-.venv/bin/venus-edge}
PY=${PY:-.venv/bin/python}
# The sessions as the oracle ran them: corpus search (10 results) and extractive visit, a few turns, greedy.
# MAX_TURNS (default 6) and MAX_TOKENS per turn (default 160) bound a session, here and in toy_igpo.sh's rollouts;
# smaller values make a CI-sized run of a model that has not learned to stop affordable.
MAX_TURNS=${MAX_TURNS:-6}
MAX_TOKENS=${MAX_TOKENS:-160}
EVAL_FLAGS=(--extractive-visit --max-turns "$MAX_TURNS" --max-tokens "$MAX_TOKENS" --n-ctx 8192 --temperature 0 --quiet
  --no-plot)

evaluate() {  # evaluate MODEL_DIR_OR_GGUF CORPUS QUESTIONS OUT_DIR LIMIT [EXTRA EVAL FLAGS...]
  local model=$1
  if [ -d "$model" ]; then
    [ -d "$model-gguf" ] || $VE quantize "$model" --types Q8_0 --out "$model-gguf" --quiet --agentic-tokens 0 > /dev/null 2>&1
    model=$(ls "$model-gguf"/*Q8_0*.gguf)
  fi
  $VE eval "$3" --model "$model" --corpus "$2" --limit "$5" --out "$4" "${EVAL_FLAGS[@]}" "${@:6}" > /dev/null 2>&1 || true
}

wrong_pages() {  # wrong_pages WORLD_DIR EVAL_DIR -> share of sessions that opened a page the question does not need
  $PY - "$1" "$2" <<'PYTHON'
import sys
from pathlib import Path
from venus_edge.train.toyworld import research_errors
share = None
if (Path(sys.argv[2]) / "summary.json").exists():  # a finished evaluation, as figures() reads
    try:
        share = research_errors(sys.argv[1], sys.argv[2])["wrong_page_share"]
    except (OSError, KeyError, ValueError) as exc:
        print(f"wrong_pages: {exc}", file=sys.stderr)
print("-" if share is None else share)
PYTHON
}

figures() {  # figures EVAL_DIR -> "well_formed_turns | pass@1"
  $PY - "$1" <<'PYTHON'
import json, sys
from pathlib import Path
path = Path(sys.argv[1]) / "summary.json"
data = json.loads(path.read_text()) if path.exists() else {}
print(f"{data.get('well_formed_turns', '-')} | {data.get('pass@1', '-')}")
PYTHON
}
