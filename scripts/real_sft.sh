#!/usr/bin/env bash
# SFT of a real pretrained model on the toy world, on a CPU: Qwen2.5-Coder-0.5B-Instruct from its Q4_K_M GGUF
# (transformers dequantizes it), LoRA through peft on a part of the toy world's cleaned trajectories, merged,
# exported to Q8_0 through quantize/ (Q4_K_M loses what the short run learned: <tool_call> went from log-prob -0.44
# to -15.6), and run by venus-edge research without a grammar on held-out questions,
# before and after.
#   bash scripts/real_sft.sh WORLD_RUN [OUT]    (default OUT runs/real-sft)
# WORLD_RUN is one seed's folder written by scripts/toy_sft.sh (it holds world/ and sft.jsonl).
# Settings: MODEL (the GGUF; see shared/TEST_MODELS.md), FRACTION (share of the trajectories trained on, one
# epoch, default 0.1), BATCH (trajectories per optimizer step, default 2), LR (default 5e-4), EVAL_LIMIT (held-out
# questions after SFT, default 20), BEFORE_LIMIT (before SFT, default 10: the model retries every turn).
# Rerun to resume: the evaluations and the SFT run continue where they stopped.
# Writes OUT/summary.md: well-formed turns and accuracy before and after, steps and seconds of SFT.
set -euo pipefail
cd "$(dirname "$0")/.."
WORLD_RUN=$(realpath "${1:?usage: real_sft.sh WORLD_RUN [OUT]}")
OUT=${2:-runs/real-sft}
MODEL=$(realpath "${MODEL:-/tmp/models/qwen2.5-coder-0.5b-q4_k_m.gguf}")
FRACTION=${FRACTION:-0.1}
BATCH=${BATCH:-2}
LR=${LR:-5.0e-4}
EVAL_LIMIT=${EVAL_LIMIT:-20}
mkdir -p "$OUT"
source scripts/toy_eval.sh
WORLD="$WORLD_RUN/world"

evaluate "$MODEL" "$WORLD/corpus" "$WORLD/questions-heldout.jsonl" "$OUT/eval-before" "${BEFORE_LIMIT:-10}"
cat > "$OUT/sft.yaml" <<YAML
model: $MODEL
data: [$WORLD_RUN/sft.jsonl]
output_dir: run
max_tokens: 4096
epochs: $FRACTION
global_batch_size: $BATCH
micro_batch_size: 1
learning_rate: $LR
warmup_ratio: 0.1
gradient_checkpointing: false
lora: {r: 16, alpha: 32, dropout: 0.0}
save_every: 5
YAML
START=$(date +%s)
$VE train sft "$OUT/sft.yaml" --quiet
SFT_S=$(( $(date +%s) - START ))
$VE quantize "$OUT/run/final" --types Q8_0 --out "$OUT/run/final-gguf" --quiet --agentic-tokens 0 > /dev/null
evaluate "$(ls "$OUT"/run/final-gguf/*Q8_0*.gguf)" "$WORLD/corpus" "$WORLD/questions-heldout.jsonl" \
  "$OUT/eval-after" "$EVAL_LIMIT"
STEPS=$(wc -l < "$OUT/run/log.jsonl")
{
  echo "| well-formed before | accuracy before | well-formed after | accuracy after | SFT steps | SFT s |"
  echo "|---|---|---|---|---|---|"
  echo "| $(figures "$OUT/eval-before") | $(figures "$OUT/eval-after") | $STEPS | $SFT_S |"
} > "$OUT/summary.md"
cat "$OUT/summary.md"
