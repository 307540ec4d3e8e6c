#!/usr/bin/env bash
# The scale path on one GPU, in under 10 minutes (issue 30): a few SFT steps and a few IGPO steps with rollouts on
# vLLM (rollout_server: vllm, weights reloaded in place after every step), for
#   1. a tiny Qwen3 (hidden 256, 2 layers, BPE 2048) built here from the toy world, in float32, lr 1e-3, so that a
#      missed weight reload would show as a large server_logprob_gap from step 2 on;
#   2. Qwen2.5-0.5B-Instruct (QWEN05: a hub id, downloaded once, or a local folder), in bfloat16, the recipe's lr.
#     bash scripts/gpu_check.sh [OUT]        (default runs/gpu-check; set up .venv first: bash scripts/setup.sh)
# Settings: QWEN05 (default Qwen/Qwen2.5-0.5B-Instruct), VLLM_SPEC (default vllm: pip installs it when
# `import vllm` fails; the machine needs the network for that and for the Qwen download), GPU_SHARE (default 0.3:
# vLLM's --gpu-memory-utilization, leaving the rest to the trainer on the same GPU), STEPS (IGPO steps, default 3).
# Writes OUT/summary.md: per run the IGPO steps' failures, trained tokens, reward, largest server log-prob gap, the
# seconds of each step and the seconds of each phase.
#
# Expected figures (expectations from the CPU tests and the engines' documentation; no GPU has run this script yet):
#   - wall time on one H100/H200: vllm install 2-4 min if missing; each vLLM start 30-60 s with --enforce-eager;
#     tiny SFT + IGPO about 2 min, Qwen2.5-0.5B SFT (20 steps) + IGPO about 3 min; under 10 min in all;
#   - both IGPO runs: failures 0 in every step, trained_tokens > 0, and OUT/*/rollout-policy/server.log holding one
#     "Reloading weights inplace" per step after the first;
#   - tiny Qwen3 in float32: server_logprob_gap below 0.05 in every step (vLLM's and transformers' float32 kernels
#     differ at ~1e-3); a stale server would be 0.1 or more from step 2 on at lr 1e-3;
#   - Qwen2.5-0.5B in bfloat16: server_logprob_gap below 1.0 (bfloat16 rounding, largest over every sampled token);
#     SFT loss falling over its 20 steps; toy accuracy anywhere in 0-0.5 after so few steps (not a quality check).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu-check}
PY=${PY:-.venv/bin/python}
VE=${VE:-.venv/bin/venus-edge}
QWEN05=${QWEN05:-Qwen/Qwen2.5-0.5B-Instruct}
VLLM_SPEC=${VLLM_SPEC:-vllm}
GPU_SHARE=${GPU_SHARE:-0.3}
STEPS=${STEPS:-3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PHASES="$OUT/phases.txt"
: > "$PHASES"
phase() {  # phase NAME COMMAND...: run it, append "NAME seconds" to phases.txt
  local name=$1 start
  shift
  start=$(date +%s)
  "$@"
  echo "$name $(( $(date +%s) - start ))" >> "$PHASES"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if ! "$PY" -c "import vllm" 2>/dev/null; then
  phase install-vllm "$PY" -m pip install --quiet "$VLLM_SPEC"
fi
export PATH="$(dirname "$PY"):$PATH"  # `vllm serve` from the same environment

# The toy world, its cleaned trajectories, and the tiny Qwen3 (head_dim 64, as vLLM's attention kernels want).
rm -rf "$OUT/world" "$OUT/tiny" "$OUT/qwen05"
phase toy-world $VE train toy-world "$OUT/world" --people 40 --seed 0
$VE train clean "$OUT/world/trajectories.jsonl" --out "$OUT/sft.jsonl" > /dev/null
phase tiny-model $VE train tiny-model "$OUT/sft.jsonl" --out "$OUT/tiny/base" --vocab 2048 --hidden 256 --layers 2

write_configs() {  # write_configs RUN MODEL DTYPE SFT_LR IGPO_LR
  local run=$1
  cat > "$run/sft.yaml" <<YAML
model: $2
data: [$OUT/sft.jsonl]
output_dir: $run/sft
epochs: 1
global_batch_size: 8
micro_batch_size: 4
learning_rate: $4
gradient_checkpointing: false
dtype: $3
save_every: 1000
YAML
  cat > "$run/igpo.yaml" <<YAML
model: $run/sft/final
questions: [$OUT/world/questions-train.jsonl]
corpus: [$OUT/world/corpus]
output_dir: $run/igpo
steps: $STEPS
questions_per_step: 4
group_size: 4
max_turns: 4
max_tokens: 128
n_ctx: 4096
learning_rate: $5
dtype: $3
rollout_server: vllm
rollout_concurrency: 16
rollout_server_args: [--gpu-memory-utilization, "$GPU_SHARE", --enforce-eager]
YAML
}

mkdir -p "$OUT/tiny" "$OUT/qwen05"
write_configs "$OUT/tiny" "$OUT/tiny/base" float32 1.0e-3 1.0e-3
write_configs "$OUT/qwen05" "$QWEN05" bfloat16 1.0e-5 1.0e-6
for RUN in tiny qwen05; do
  phase "$RUN-sft" $VE train sft "$OUT/$RUN/sft.yaml" --max-steps 20 --quiet
  phase "$RUN-igpo-vllm" $VE train igpo "$OUT/$RUN/igpo.yaml" --quiet
done

"$PY" - "$OUT" > "$OUT/summary.md" <<'PYTHON'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| run | step | failures | trained tokens | reward | accuracy | server log-prob gap | step s |")
print("|---|---|---|---|---|---|---|---|")
for run in ("tiny", "qwen05"):
    for line in (out / run / "igpo" / "log.jsonl").read_text().splitlines():
        r = json.loads(line)
        print(f"| {run} | {r['step']} | {r['failures']} | {r['trained_tokens']} | {r['reward']} | {r['accuracy']} | "
              f"{r['server_logprob_gap']} | {r['step_s']} |")
    reloads = (out / run / "igpo" / "rollout-policy" / "server.log").read_text().count("Reloading weights")
    print(f"\n{run}: vLLM logged {reloads} weight reload(s)\n")
print("| phase | s |\n|---|---|")
for line in (out / "phases.txt").read_text().splitlines():
    name, seconds = line.split()
    print(f"| {name} | {seconds} |")
PYTHON
cat "$OUT/summary.md"
