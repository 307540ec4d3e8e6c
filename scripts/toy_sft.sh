#!/usr/bin/env bash
# The toy SFT pipeline end to end, on a CPU, for each seed in SEEDS (default "0 1 2"):
#   world + oracle trajectories -> clean -> tiny Qwen3 with a small BPE, pretrained to copy -> eval before -> SFT
#   -> GGUF -> eval after
#   bash scripts/toy_sft.sh [OUT]            (default runs/toy-sft; set up .venv first: bash scripts/setup.sh)
# Settings: SEEDS, PEOPLE (default 120), EPOCHS (default 8), HIDDEN (128), LAYERS (2), PRETRAIN (copy-pretraining
# steps, default 3500), EVAL_LIMIT (held-out questions after SFT, default 40), BEFORE_LIMIT (before SFT, default 10:
# a random model retries every turn 5 times), DETOUR_SHARE (default 0: the share of oracle sessions whose first
# visit opens a wrong page before the right one; imperfect demonstrations that put errors in research turns).
# The no-tool baseline is the best constant answer per question kind, read from the training answers.
# Prints one line per seed (well-formed turn rate and accuracy on held-out questions, before and after) and writes
# OUT/summary.md. A seed finished earlier with the same settings is kept, not redone (its row is read back), so a
# killed or interrupted run loses only the seed it was in, and seeds can run in separate invocations (then run once
# more with all of them for the whole summary); FRESH=1 redoes every seed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/toy-sft}
SEEDS=${SEEDS:-"0 1 2"}
PEOPLE=${PEOPLE:-120}
EPOCHS=${EPOCHS:-8}
HIDDEN=${HIDDEN:-128}
LAYERS=${LAYERS:-2}
PRETRAIN=${PRETRAIN:-3500}
EVAL_LIMIT=${EVAL_LIMIT:-40}
BEFORE_LIMIT=${BEFORE_LIMIT:-10}
DETOUR_SHARE=${DETOUR_SHARE:-0}
mkdir -p "$OUT"
source scripts/toy_eval.sh

echo "| seed | well-formed before | accuracy before | well-formed after | accuracy after | no-tool baseline | SFT steps | SFT s |" > "$OUT/summary.md"
echo "|---|---|---|---|---|---|---|---|" >> "$OUT/summary.md"
for SEED in $SEEDS; do
  RUN="$OUT/seed-$SEED"
  SETTINGS="seed=$SEED people=$PEOPLE epochs=$EPOCHS hidden=$HIDDEN layers=$LAYERS pretrain=$PRETRAIN"
  SETTINGS+=" eval_limit=$EVAL_LIMIT before_limit=$BEFORE_LIMIT detour_share=$DETOUR_SHARE"
  SETTINGS+=" max_turns=$MAX_TURNS max_tokens=$MAX_TOKENS"
  if [ -z "${FRESH:-}" ] && [ -f "$RUN/row.md" ] && [ "$(cat "$RUN/settings.txt" 2>/dev/null)" = "$SETTINGS" ]; then
    cat "$RUN/row.md" >> "$OUT/summary.md"
    echo "seed $SEED: done earlier with these settings, kept ($RUN)"
    continue
  fi
  rm -rf "$RUN"
  $VE train toy-world "$RUN/world" --people "$PEOPLE" --seed "$SEED" --detour-share "$DETOUR_SHARE"
  $VE train clean "$RUN/world/trajectories.jsonl" --out "$RUN/sft.jsonl" > /dev/null
  $VE train tiny-model "$RUN/sft.jsonl" --out "$RUN/base" --vocab 2048 --hidden "$HIDDEN" --layers "$LAYERS" --seed "$SEED" --pretrain-copying "$PRETRAIN"
  cat > "$RUN/sft.yaml" <<YAML
# A random-weight model learns the protocol from scratch: a higher learning rate and many epochs than the
# recipe's fine-tuning of a pretrained model (lr 1e-5, 1 epoch).
model: base
data: [sft.jsonl]
output_dir: run
epochs: $EPOCHS
global_batch_size: 16
micro_batch_size: 4
learning_rate: 1.0e-3
warmup_ratio: 0.05
gradient_checkpointing: false
seed: $SEED
save_every: 50
YAML
  evaluate "$RUN/base" "$RUN/world/corpus" "$RUN/world/questions-heldout.jsonl" "$RUN/eval-before" "$BEFORE_LIMIT"
  START=$(date +%s)
  $VE train sft "$RUN/sft.yaml" --quiet
  SFT_S=$(( $(date +%s) - START ))
  evaluate "$RUN/run/final" "$RUN/world/corpus" "$RUN/world/questions-heldout.jsonl" "$RUN/eval-after" "$EVAL_LIMIT"
  $PY - "$RUN" "$SEED" "$SFT_S" "$EVAL_LIMIT" > "$RUN/row.md" <<'PYTHON'
import json, sys
from pathlib import Path
run, seed, seconds = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def figures(name):
    path = run / name / "summary.json"
    if not path.exists():
        return "-", "-"
    data = json.loads(path.read_text())
    return data.get("well_formed_turns"), data.get("pass@1")
steps = sum(1 for _ in (run / "run" / "log.jsonl").open())
def rows(name):
    return [json.loads(line) for line in (run / "world" / f"questions-{name}.jsonl").read_text().splitlines()]
train, heldout = rows("train"), rows("heldout")
limit = int(sys.argv[4])
scored = [q for q in heldout[:limit]]
best = {}
for kind in {q["kind"] for q in train}:
    answers = [q["answer"] for q in train if q["kind"] == kind]
    best[kind] = max(set(answers), key=answers.count)
baseline = round(sum(best.get(q["kind"]) == q["answer"] for q in scored) / len(scored), 4)
print(f"| {seed} | {' | '.join(map(str, figures('eval-before')))} | {' | '.join(map(str, figures('eval-after')))} | {baseline} | {steps} | {seconds} |")
PYTHON
  echo "$SETTINGS" > "$RUN/settings.txt"  # last: the seed is whole
  cat "$RUN/row.md" >> "$OUT/summary.md"
  cat "$RUN/row.md"
done
