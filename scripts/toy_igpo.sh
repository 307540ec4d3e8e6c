#!/usr/bin/env bash
# IGPO on the toy world, from the toy SFT checkpoint, against the outcome-only ablation with the same budget:
#   bash scripts/toy_igpo.sh [SFT_OUT] [OUT]   (defaults runs/toy-sft and runs/toy-igpo; run scripts/toy_sft.sh first)
# For each seed in SEEDS (default "0"; the SFT run of that seed must exist in SFT_OUT/seed-N) and each mode in MODES
# (default "igpo outcome"): STEPS optimizer steps (default 8) of QUESTIONS training questions (4) x GROUP rollouts
# (8), lr LR (1e-4), rollouts sampled at TEMPERATURE (1.0), then the held-out evaluation of the result as
# scripts/toy_sft.sh evaluates the SFT checkpoint (EVAL_LIMIT questions, default 40, greedy), and again with SAMPLES
# samples per question (default 4; 0 skips the sampled evaluations) at TEMPERATURE. Writes OUT/summary.md: per seed, one row each for SFT, IGPO and
# outcome-only: held-out accuracy greedy and sampled, the share of sessions that opened a page their question does
# not need (research errors; see DETOUR_SHARE in scripts/toy_sft.sh), the mean training reward of the first and last
# steps.
# GAMMA (default 0.95, DR-Venus's) is the discount of the turn advantages.
# Then the paired comparisons (venus_edge.train.compare): per seed and pooled over the seeds, IGPO against
# outcome-only and each against SFT, greedy and sampled, each question scored by both models of a pair (the same
# EVAL_LIMIT held-out questions; SFT is re-evaluated greedy here for that), with 95 % paired bootstrap intervals
# (RESAMPLES, default 10000) and the smallest difference the pooled comparison finds 80 % of the time.
# Power: paired binary outcomes (McNemar): a true difference delta = 0.05 is found with 80 % probability (two-sided,
# 5 %) from n >= (1.96 + 0.84)^2 (p_d - delta^2) / delta^2 questions, p_d the share answered right by one model only:
# 307 at p_d 0.10, 464 at 0.15, 778 at 0.25. A toy world of 120 people has 144 held-out questions, so the powered
# design is all of them (EVAL_LIMIT=144) over 6 seeds, 864 pairs, enough up to p_d 0.28:
#   DETOUR_SHARE=0.5 SEEDS="0 1 2 3 4 5" bash scripts/toy_sft.sh runs/detour-sft
#   SEEDS="0 1 2 3 4 5" EVAL_LIMIT=144 bash scripts/toy_igpo.sh runs/detour-sft runs/detour-igpo
# (README, "A comparison with the power to decide", gives the time it takes.)
# ROLLOUT_SERVER=llama-server samples the rollouts on a managed llama-server, GROUP at once (default: in the training
# process, one after another).
# A seed finished earlier with the same settings and the same SFT checkpoint is kept, not redone (its rows are read
# back and its evaluations compared), so an interrupted run loses only the seed it was in and seeds can run in separate
# invocations, each after its toy_sft.sh seed (then run once more with all of them for the pooled comparison);
# FRESH=1 redoes every seed.
# RESULTS=DIR keeps each finished seed's record where a machine that is not this one can read it (a folder in the
# repository: benchmarks/results/detour-igpo for the powered run): its rows, its settings and its evaluations'
# summary.json files. A seed recorded there with the same settings is restored from it,
# without its SFT checkpoint (made on the machine that recorded it: the SFT hash is not compared), so a run spread
# over machines loses only the seed each was in. scripts/toy_powered.sh runs the powered design that way.
set -euo pipefail
cd "$(dirname "$0")/.."
SFT_OUT=${1:-runs/toy-sft}
OUT=${2:-runs/toy-igpo}
SEEDS=${SEEDS:-"0"}
MODES=${MODES:-"igpo outcome"}
ROLLOUT_SERVER=${ROLLOUT_SERVER:-}
STEPS=${STEPS:-8}
QUESTIONS=${QUESTIONS:-4}
GROUP=${GROUP:-8}
LR=${LR:-1e-4}
TEMPERATURE=${TEMPERATURE:-1.0}
GAMMA=${GAMMA:-0.95}
EVAL_LIMIT=${EVAL_LIMIT:-40}
SAMPLES=${SAMPLES:-4}
RESAMPLES=${RESAMPLES:-10000}
RESULTS=${RESULTS:-}
mkdir -p "$OUT"
source scripts/toy_eval.sh
SAMPLED=(--temperature "$TEMPERATURE" --k "$SAMPLES")

echo "| seed | model | held-out well-formed | held-out accuracy | sampled accuracy (T $TEMPERATURE, k $SAMPLES) | wrong-page sessions | sampled | train reward first step | last step | s |" > "$OUT/summary.md"
echo "|---|---|---|---|---|---|---|---|---|---|" >> "$OUT/summary.md"
row() {  # row SEED MODEL EVAL_DIR SAMPLED_DIR WORLD REWARDS SECONDS: to the summary and to the seed's rows
  local sampled line
  sampled=$(figures "$4" | cut -d'|' -f2 | tr -d ' ')
  line="| $1 | $2 | $(figures "$3") | $sampled | $(wrong_pages "$5" "$3") | $(wrong_pages "$5" "$4") | $6 | $7 |"
  echo "$line" | tee -a "$OUT/summary.md" >> "$OUT/seed-$1.rows.partial"
  echo "$line"
}
evaluations() {  # evaluations SEED -> the evaluation folders of that seed, relative to OUT
  local mode
  echo "seed-$1-sft"
  [ "$SAMPLES" = 0 ] || echo "seed-$1-sft-sampled"
  for mode in $MODES; do
    echo "seed-$1-$mode/eval"
    [ "$SAMPLES" = 0 ] || echo "seed-$1-$mode/eval-sampled"
  done
}
without_sft() { sed 's/ sft=[^ ]*//' "$@"; }  # settings without the SFT checkpoint's hash
record() {  # record SEED: OUT's whole seed into RESULTS; the old record goes first, the settings come last
  local eval
  mkdir -p "$RESULTS"
  rm -f "$RESULTS/seed-$1.settings" "$RESULTS/seed-$1.rows.md"
  for eval in $(evaluations "$1"); do
    rm -f "$RESULTS/${eval//\//-}.summary.json"
    [ ! -f "$OUT/$eval/summary.json" ] || cp "$OUT/$eval/summary.json" "$RESULTS/${eval//\//-}.summary.json"
  done
  cp "$OUT/seed-$1.rows.md" "$RESULTS/"
  cp "$OUT/seed-$1.settings" "$RESULTS/"
}
for SEED in $SEEDS; do
  COMMON="modes=$MODES rollout_server=$ROLLOUT_SERVER steps=$STEPS questions=$QUESTIONS group=$GROUP lr=$LR"
  COMMON+=" temperature=$TEMPERATURE gamma=$GAMMA eval_limit=$EVAL_LIMIT samples=$SAMPLES"
  COMMON+=" max_turns=$MAX_TURNS max_tokens=$MAX_TOKENS"
  RECORD="$RESULTS/seed-$SEED.settings"
  if [ -z "${FRESH:-}" ] && [ -n "$RESULTS" ] && [ -f "$RECORD" ] && [ -f "$RESULTS/seed-$SEED.rows.md" ]; then
    if [ "$(without_sft "$RECORD")" != "seed=$SEED $COMMON" ]; then
      echo "seed $SEED: the record in $RESULTS has other settings ($(without_sft "$RECORD")); not used"
      [ -z "${RECORD_CHECK:-}" ] || exit 1
    elif [ -n "${RECORD_CHECK:-}" ]; then
      continue
    elif cmp -s "$RECORD" "$OUT/seed-$SEED.settings"; then  # this machine's own run of it: kept whole
      cat "$OUT/seed-$SEED.rows.md" >> "$OUT/summary.md"
      echo "seed $SEED: done earlier with these settings, kept ($OUT/seed-$SEED-*)"
      continue
    else
      for EVAL in $(evaluations "$SEED"); do
        rm -rf "${OUT:?}/$EVAL" && mkdir -p "$OUT/$EVAL"  # an unfinished evaluation has no summary (its row: "-")
        [ ! -f "$RESULTS/${EVAL//\//-}.summary.json" ] || cp "$RESULTS/${EVAL//\//-}.summary.json" "$OUT/$EVAL/summary.json"
      done
      cp "$RESULTS/seed-$SEED.rows.md" "$RECORD" "$OUT/"
      cat "$OUT/seed-$SEED.rows.md" >> "$OUT/summary.md"
      echo "seed $SEED: recorded in $RESULTS with these settings, restored"
      continue
    fi
  fi
  if [ -n "${RECORD_CHECK:-}" ]; then  # toy_powered.sh asks whether every seed is recorded, before running any
    [ -n "${FRESH:-}" ] || echo "seed $SEED: not recorded in ${RESULTS:-RESULTS (unset)}"
    exit 1
  fi
  SFT="$(cd "$SFT_OUT/seed-$SEED" && pwd)"
  SETTINGS="seed=$SEED sft=$(sha1sum < "$SFT/run/final/model.safetensors" | cut -c1-16) $COMMON"
  if [ -z "${FRESH:-}" ] && [ -f "$OUT/seed-$SEED.rows.md" ] && \
     [ "$(cat "$OUT/seed-$SEED.settings" 2>/dev/null)" = "$SETTINGS" ]; then
    cat "$OUT/seed-$SEED.rows.md" >> "$OUT/summary.md"
    echo "seed $SEED: done earlier with these settings, kept ($OUT/seed-$SEED-*)"
    [ -z "$RESULTS" ] || record "$SEED"  # a seed finished before it was recorded (killed between, or no RESULTS)
    continue
  fi
  rm -f "$OUT/seed-$SEED.rows.md" "$OUT/seed-$SEED.settings" "$OUT/seed-$SEED.rows.partial"
  rm -rf "$OUT/seed-$SEED-sft" "$OUT/seed-$SEED-sft-sampled"
  evaluate "$SFT/run/final" "$SFT/world/corpus" "$SFT/world/questions-heldout.jsonl" "$OUT/seed-$SEED-sft" "$EVAL_LIMIT"
  [ "$SAMPLES" = 0 ] || evaluate "$SFT/run/final" "$SFT/world/corpus" "$SFT/world/questions-heldout.jsonl" \
    "$OUT/seed-$SEED-sft-sampled" "$EVAL_LIMIT" "${SAMPLED[@]}"
  row "$SEED" sft "$OUT/seed-$SEED-sft" "$OUT/seed-$SEED-sft-sampled" "$SFT/world" "- | -" -
  for MODE in $MODES; do
    RUN="$OUT/seed-$SEED-$MODE"
    rm -rf "$RUN"
    mkdir -p "$RUN"
    cat > "$RUN/igpo.yaml" <<YAML
# IGPO from the toy SFT checkpoint. A tiny model and a few steps: a larger learning rate than the recipe's 1e-6.
model: $SFT/run/final
questions: [$SFT/world/questions-train.jsonl]
corpus: [$SFT/world/corpus]
output_dir: run
steps: $STEPS
questions_per_step: $QUESTIONS
group_size: $GROUP
learning_rate: $LR
information_gain: $([ "$MODE" = igpo ] && echo true || echo false)
max_turns: $MAX_TURNS
max_tokens: $MAX_TOKENS
temperature: $TEMPERATURE
gamma: $GAMMA
n_ctx: 8192
seed: $SEED
YAML
    if [ -n "$ROLLOUT_SERVER" ]; then
      printf 'rollout_server: %s\nrollout_concurrency: %s\n' "$ROLLOUT_SERVER" "$GROUP" >> "$RUN/igpo.yaml"
    fi
    START=$(date +%s)
    $VE train igpo "$RUN/igpo.yaml" --quiet > "$RUN/train.txt"
    SECONDS_TAKEN=$(( $(date +%s) - START ))
    evaluate "$RUN/run/final" "$SFT/world/corpus" "$SFT/world/questions-heldout.jsonl" "$RUN/eval" "$EVAL_LIMIT"
    [ "$SAMPLES" = 0 ] || evaluate "$RUN/run/final" "$SFT/world/corpus" "$SFT/world/questions-heldout.jsonl" \
      "$RUN/eval-sampled" "$EVAL_LIMIT" "${SAMPLED[@]}"
    REWARDS=$($PY -c "
import json, sys
rows = [json.loads(l) for l in open('$RUN/run/log.jsonl')]
print(f\"{rows[0]['reward']} | {rows[-1]['reward']}\")")
    row "$SEED" "$MODE" "$RUN/eval" "$RUN/eval-sampled" "$SFT/world" "$REWARDS" "$SECONDS_TAKEN"
  done
  mv "$OUT/seed-$SEED.rows.partial" "$OUT/seed-$SEED.rows.md"
  echo "$SETTINGS" > "$OUT/seed-$SEED.settings"  # last: the seed is whole
  [ -z "$RESULTS" ] || record "$SEED"
done
[ -z "${RECORD_CHECK:-}" ] || exit 0  # every seed recorded

eval_dir() {  # eval_dir SEED MODEL greedy|sampled -> the folder of that evaluation
  local tail=""
  [ "$3" = sampled ] && tail="-sampled"
  if [ "$2" = sft ]; then echo "$OUT/seed-$1-sft$tail"; else echo "$OUT/seed-$1-$2/eval$tail"; fi
}
MODELS=" sft $MODES "
for PAIR in "outcome igpo" "sft igpo" "sft outcome"; do
  read -r A B <<< "$PAIR"
  [[ "$MODELS" == *" $A "* && "$MODELS" == *" $B "* ]] || continue
  for KIND in greedy sampled; do
    [ "$KIND" = sampled ] && [ "$SAMPLES" = 0 ] && continue
    RUNS=()
    for SEED in $SEEDS; do
      RUNS+=("$SEED:$(eval_dir "$SEED" "$A" "$KIND"):$(eval_dir "$SEED" "$B" "$KIND")")
    done
    LABEL=$([ "$KIND" = greedy ] && echo "greedy" || echo "sampled (T $TEMPERATURE, k $SAMPLES)")
    printf '\n### %s against %s: held-out accuracy, %s\n\n' "$B" "$A" "$LABEL" >> "$OUT/summary.md"
    $PY -m venus_edge.train.compare --names "$A,$B" --resamples "$RESAMPLES" "${RUNS[@]}" >> "$OUT/summary.md" || true
  done
done
cat "$OUT/summary.md"
