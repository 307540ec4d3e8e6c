#!/usr/bin/env bash
# The powered toy comparison (README, "A comparison with the power to decide"), resumable across machines:
#   bash scripts/toy_powered.sh SEED [SEED ...]     one stream: each seed's detour SFT, then its IGPO and outcome runs
#   bash scripts/toy_powered.sh --pooled            the report over every seed of the design (SEEDS, default 0-5)
# Each finished seed is recorded in RESULTS (default benchmarks/results/detour-igpo, kept in the repository:
# scripts/toy_igpo.sh's RESULTS), and a recorded seed is skipped, so the seeds can run in several streams, sessions
# and machines. Commit RESULTS after a seed lands. Working files go to WORK (default runs/powered).
# On 2 cores: one stream per core; a seed takes ~1 h with another stream beside it (README).
set -euo pipefail
cd "$(dirname "$0")/.."
export RESULTS=${RESULTS:-benchmarks/results/detour-igpo}
WORK=${WORK:-runs/powered}
export EVAL_LIMIT=144 SAMPLES=0
if [ "${1:-}" = --pooled ]; then
  SEEDS=${SEEDS:-"0 1 2 3 4 5"} bash scripts/toy_igpo.sh "$WORK/detour-sft" "$WORK/detour-igpo"
  cp "$WORK/detour-igpo/summary.md" "$RESULTS/summary.md"  # the report, kept beside the records
  exit
fi
[ $# -gt 0 ] || { echo "usage: $0 SEED [SEED ...] | --pooled" >&2; exit 2; }
for SEED in "$@"; do
  if SEEDS=$SEED RECORD_CHECK=1 bash scripts/toy_igpo.sh "$WORK/detour-sft" "$WORK/detour-igpo"; then
    continue  # recorded with these settings (FRESH=1 redoes it)
  fi
  DETOUR_SHARE=0.5 SEEDS=$SEED EVAL_LIMIT=40 bash scripts/toy_sft.sh "$WORK/detour-sft"
  SEEDS=$SEED bash scripts/toy_igpo.sh "$WORK/detour-sft" "$WORK/detour-igpo"
done
