"""Paired bootstrap intervals and the power computation of the toy comparison, on synthetic data whose truth is
known. Every draw is seeded, so each test gives one fixed result; the bounds say what a correct method gives
(a false failure needs a bug, not bad luck)."""

from __future__ import annotations

import json
import math
import random

import pytest

from venus_edge.train.compare import (
    detectable_difference,
    main,
    paired_bootstrap,
    pooled_bootstrap,
    read_scores,
    required_pairs,
)


def paired_outcomes(rng: random.Random, n: int, *, p_a: float, b_only: float, a_only: float):
    """Binary outcomes of two models on n questions: A right with p_a; B flips A's wrong answers to right with a
    share ``b_only`` of all questions and A's right ones to wrong with ``a_only``: true difference b_only - a_only."""
    a, b = {}, {}
    for index in range(n):
        right = rng.random() < p_a
        flip = rng.random()
        other = flip >= a_only / p_a if right else flip < b_only / (1 - p_a)
        a[f"q{index}"], b[f"q{index}"] = float(right), float(other)
    return a, b


def test_the_interval_covers_the_true_difference_at_its_level():
    """200 synthetic comparisons of 120 questions, true difference +0.05: the 95 % intervals must cover it in
    0.90-0.99 of them (a percentile bootstrap at n 120 covers ~0.94; 200 trials put the share within +-0.035)."""
    rng = random.Random(7)
    covered = 0
    for trial in range(200):
        a, b = paired_outcomes(rng, 120, p_a=0.5, b_only=0.15, a_only=0.10)
        d = paired_bootstrap(a, b, resamples=400, seed=trial)
        covered += d.low <= 0.05 <= d.high
    assert 0.90 <= covered / 200 <= 0.99


def test_pairing_is_by_question_and_narrows_the_interval():
    rng = random.Random(1)
    a, b = paired_outcomes(rng, 200, p_a=0.6, b_only=0.06, a_only=0.02)
    paired = paired_bootstrap(a, b, resamples=2000)
    # The same scores in another order: pairs are found by id, not by position.
    assert paired_bootstrap(dict(reversed(list(a.items()))), b, resamples=2000) == paired
    # Swapping the models negates the difference and mirrors the interval (same resamples, same seed).
    swapped = paired_bootstrap(b, a, resamples=2000)
    assert swapped.difference == pytest.approx(-paired.difference)
    assert (swapped.low, swapped.high) == pytest.approx((-paired.high, -paired.low))
    # An unpaired bootstrap of the same data (A and B resampled apart) is about sqrt(2 p (1 - p) / p_d) = 2.3 times
    # wider (p 0.6, discordant share p_d 0.09): questions' own difficulty no longer cancels.
    draws = random.Random(0)
    av, bv = list(a.values()), list(b.values())
    unpaired = sorted(sum(draws.choices(bv, k=200)) / 200 - sum(draws.choices(av, k=200)) / 200 for _ in range(2000))
    assert (paired.high - paired.low) * 1.8 < unpaired[1949] - unpaired[50]
    discordant = (sum(b[q] > a[q] for q in a), sum(a[q] > b[q] for q in a), 200)
    assert (paired.b_only, paired.a_only, paired.pairs) == discordant


def test_questions_only_one_model_answered_are_left_out():
    a = {"q1": 1.0, "q2": 0.0, "q3": 1.0}
    b = {"q2": 1.0, "q3": 1.0, "q4": 0.0}
    d = paired_bootstrap(a, b, resamples=200)
    assert (d.pairs, d.mean_a, d.mean_b, d.b_only, d.a_only) == (2, 0.5, 1.0, 1, 0)
    with pytest.raises(ValueError, match="no question in common"):
        paired_bootstrap({"x": 1.0}, {"y": 1.0})


def test_pooled_interval_is_stratified_by_seed():
    rng = random.Random(3)
    seeds = [paired_outcomes(rng, 150, p_a=p, b_only=0.12, a_only=0.07) for p in (0.3, 0.5, 0.7)]
    pooled = pooled_bootstrap(seeds, resamples=2000)
    singles = [paired_bootstrap(a, b, resamples=2000) for a, b in seeds]
    assert pooled.pairs == 450  # the same question ids in every seed are different questions (their own worlds)
    assert pooled.difference == pytest.approx(sum(s.difference * s.pairs for s in singles) / 450)
    assert pooled.low <= pooled.difference <= pooled.high
    assert max(s.high - s.low for s in singles) > 1.5 * (pooled.high - pooled.low)


def test_the_power_computation():
    # (1.96 + 0.84)^2 (p_d - delta^2) / delta^2 with delta 0.05: 307 pairs at p_d 0.1, 778 at 0.25.
    assert required_pairs(0.05, 0.10) == 307
    assert required_pairs(0.05, 0.25) == 778
    with pytest.raises(ValueError, match="discordant"):
        required_pairs(0.05, 0.02)
    # Simulated: at the required size a paired z-test finds the true +0.05 in about 80 % of 300 comparisons
    # (the binomial spread of 300 trials at 0.8 is +-0.023).
    rng = random.Random(11)
    n = required_pairs(0.05, 0.25)
    found = 0
    for _ in range(300):
        a, b = paired_outcomes(rng, n, p_a=0.5, b_only=0.15, a_only=0.10)
        diffs = [b[q] - a[q] for q in a]
        mean = sum(diffs) / n
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        found += abs(mean / (sd / math.sqrt(n))) > 1.959964
        assert detectable_difference(sd, n) == pytest.approx(0.05, abs=0.01)
    assert 0.72 <= found / 300 <= 0.88


def summary(folder, outcomes):
    folder.mkdir(parents=True)
    per_question = [{"id": q, "samples": 4, "correct": c} for q, c in outcomes.items()]
    (folder / "summary.json").write_text(json.dumps({"questions": len(outcomes), "per_question": per_question}))
    return folder


def test_the_command_reads_eval_summaries_and_prints_the_table(tmp_path, capsys):
    a0 = summary(tmp_path / "a0", {"q1": 1, "q2": 4, "q3": 0})
    b0 = summary(tmp_path / "b0", {"q1": 3, "q2": 4, "q3": 2})
    a1 = summary(tmp_path / "a1", {"q1": 0, "q2": 2})
    b1 = summary(tmp_path / "b1", {"q1": 0, "q2": 4})
    assert read_scores(a0) == {"q1": 0.25, "q2": 1.0, "q3": 0.0}
    code = main(["--names", "outcome-only,IGPO", "--resamples", "500", f"0:{a0}:{b0}", f"1:{a1}:{b1}",
                 f"2:{tmp_path / 'missing'}:{b1}"])
    captured = capsys.readouterr()
    assert code == 0
    assert "| seed | questions | outcome-only | IGPO | IGPO - outcome-only | 95 % interval |" in captured.out
    assert "| 0 | 3 | 0.417 | 0.750 | +0.333 |" in captured.out
    assert "| pooled | 5 | 0.350 | 0.650 | +0.300 |" in captured.out
    assert "a difference of 0.05 would not be seen reliably" in captured.out
    assert "seed 2 left out: no evaluation summary at" in captured.err
    # and in the report itself, which is kept (toy_powered.sh --pooled) and read without the terminal
    assert f"Seed 2 is left out: no evaluation summary at {tmp_path / 'missing'}" in captured.out
    assert "Seed 0 is left out" not in captured.out and "Seed 1 is left out" not in captured.out


def test_models_that_agree_everywhere_claim_no_power(tmp_path, capsys):
    """All-zero scores (two models that never answer) give sd 0: no detectable difference is claimed from that."""
    a = summary(tmp_path / "a", {"q1": 0, "q2": 0})
    b = summary(tmp_path / "b", {"q1": 0, "q2": 0})
    assert main(["--resamples", "100", f"0:{a}:{b}"]) == 0
    out = capsys.readouterr().out
    assert "| 0 | 2 | 0.000 | 0.000 | +0.000 | [+0.000, +0.000] | 0 / 0 |" in out
    assert "No question of 2 separates the models" in out and "would be seen" not in out


@pytest.mark.parametrize("entry", [{"id": "q1", "samples": 4}, {"samples": 4, "correct": 1}, "q1", None,
                                   {"id": "q1", "samples": 4, "correct": "one"}])
def test_a_broken_summary_entry_names_the_file_and_the_entry(tmp_path, entry):
    """An entry without id, correct or samples (or not an object) is a ValueError naming the file, not a KeyError."""
    folder = tmp_path / "eval"
    folder.mkdir()
    good = {"id": "q0", "samples": 2, "correct": 1}
    (folder / "summary.json").write_text(json.dumps({"per_question": [good, entry]}))
    with pytest.raises(ValueError, match=r"summary\.json: per_question entry 1 is not an evaluated question"):
        read_scores(folder)
