"""scripts/toy_igpo.sh's record of finished seeds (RESULTS): a seed recorded on another machine is restored without
its SFT checkpoint and enters the pooled comparison; a record made with other settings is not used. The records here
are written by hand in the format the script writes (no training runs), so the test costs seconds."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# toy_igpo.sh's settings line for EVAL_LIMIT=144 SAMPLES=0 and every other setting at its default
SETTINGS = ("seed={seed} sft=0123456789abcdef modes=igpo outcome rollout_server= steps=8 questions=4 group=8 "
            "lr=1e-4 temperature=1.0 gamma=0.95 eval_limit=144 samples=0 max_turns=6 max_tokens=160")


def write_record(results: Path, seed: int, accuracy: dict[str, float], *, settings: str = SETTINGS) -> None:
    """One seed's record: its rows, its settings and the summary.json of each of its three evaluations."""
    rng = random.Random(seed)
    results.mkdir(parents=True, exist_ok=True)
    rows = []
    for model, folder in (("sft", "seed-{seed}-sft"), ("igpo", "seed-{seed}-igpo-eval"),
                          ("outcome", "seed-{seed}-outcome-eval")):
        per_question = [{"id": f"h{index}", "correct": int(rng.random() < accuracy[model]), "samples": 1}
                        for index in range(144)]
        name = folder.format(seed=seed)
        (results / f"{name}.summary.json").write_text(json.dumps({"per_question": per_question}))
        rows.append(f"| {seed} | {model} | 1.0 | {accuracy[model]} | - | 0.3 | - | - | - | - |\n")
    (results / f"seed-{seed}.rows.md").write_text("".join(rows))
    (results / f"seed-{seed}.settings").write_text(settings.format(seed=seed) + "\n")


def run_script(results: Path, out: Path, seeds: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "RESULTS": str(results), "SEEDS": seeds, "EVAL_LIMIT": "144", "SAMPLES": "0",
                   "RESAMPLES": "500", "PY": sys.executable}
    return subprocess.run(["bash", str(REPO / "scripts" / "toy_igpo.sh"), str(out / "no-sft-here"), str(out / "igpo")],
                          env=environment, capture_output=True, text=True, timeout=300)


def test_recorded_seeds_are_restored_and_pooled_without_their_sft_checkpoints(tmp_path):
    results = tmp_path / "results"
    write_record(results, 0, {"sft": 0.5, "igpo": 0.6, "outcome": 0.5})
    write_record(results, 1, {"sft": 0.5, "igpo": 0.55, "outcome": 0.5})
    completed = run_script(results, tmp_path, "0 1")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "seed 0: recorded in" in completed.stdout and "seed 1: recorded in" in completed.stdout
    summary = (tmp_path / "igpo" / "summary.md").read_text()
    for seed in (0, 1):
        assert (results / f"seed-{seed}.rows.md").read_text() in summary
        restored = tmp_path / "igpo" / f"seed-{seed}-igpo" / "eval" / "summary.json"
        assert restored.read_bytes() == (results / f"seed-{seed}-igpo-eval.summary.json").read_bytes()
    # the pooled comparison read the restored evaluations of both seeds: 288 pairs
    assert "### igpo against outcome" in summary and "| pooled | 288 |" in summary


def test_a_record_with_other_settings_is_not_used(tmp_path):
    results = tmp_path / "results"
    write_record(results, 0, {"sft": 0.5, "igpo": 0.6, "outcome": 0.5},
                 settings=SETTINGS.replace("max_tokens=160", "max_tokens=48"))
    completed = run_script(results, tmp_path, "0")
    # not restored: the script looks for the seed's SFT checkpoint to run it, and there is none
    assert completed.returncode != 0
    assert "restored" not in completed.stdout
    assert "no-sft-here/seed-0" in completed.stderr


def test_the_record_check_says_which_seeds_need_running(tmp_path):
    """toy_powered.sh runs a seed's SFT only when ``RECORD_CHECK=1 toy_igpo.sh`` says it is not recorded with these
    settings: 0 for a matching record (nothing restored, nothing run), 1 with the reason otherwise."""
    results = tmp_path / "results"
    write_record(results, 0, {"sft": 0.5, "igpo": 0.6, "outcome": 0.5})
    write_record(results, 1, {"sft": 0.5, "igpo": 0.6, "outcome": 0.5},
                 settings=SETTINGS.replace("max_tokens=160", "max_tokens=48"))

    def check(seeds: str, **extra: str) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "RESULTS": str(results), "SEEDS": seeds, "EVAL_LIMIT": "144", "SAMPLES": "0",
                       "PY": sys.executable, "RECORD_CHECK": "1", **extra}
        return subprocess.run(["bash", str(REPO / "scripts" / "toy_igpo.sh"), str(tmp_path / "sft"),
                               str(tmp_path / "igpo")], env=environment, capture_output=True, text=True, timeout=60)

    assert check("0").returncode == 0
    assert not (tmp_path / "igpo" / "seed-0-sft").exists()  # a check restores nothing
    other = check("1")
    assert other.returncode == 1 and "other settings" in other.stdout and "max_tokens=48" in other.stdout
    missing = check("2")
    assert missing.returncode == 1 and "seed 2: not recorded" in missing.stdout
    assert check("0", FRESH="1").returncode == 1  # FRESH redoes recorded seeds
