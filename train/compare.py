"""Paired comparisons of two models on the same held-out questions: bootstrap intervals and the power to decide.

    python -m venus_edge.train.compare --names outcome-only,IGPO \\
        0:runs/igpo/seed-0-outcome/eval:runs/igpo/seed-0-igpo/eval 1:...:...

Each model's evaluation folder (``venus-edge eval --out DIR``) holds ``summary.json``, whose ``per_question`` list
gives each question's samples and correct samples; a question's score is its share of correct samples (0 or 1 for a
greedy evaluation). Two models are compared question by question: the difference d_i = B_i - A_i of each question
both answered. Because both models meet the same questions, most of the questions' own difficulty cancels in d_i, and
the interval of the mean difference is far narrower than two separate intervals would suggest.

- Per seed: the percentile interval of mean(d) over ``resamples`` bootstrap resamples of the questions (a question's
  pair is drawn whole, which keeps the pairing).
- Pooled: the seeds are strata; each resample draws every seed's questions from that seed's own, and the pooled mean
  weighs each question equally. The interval covers the spread from which questions were asked, not the spread
  between training runs: with a handful of seeds the per-seed rows show that one.
- Power (McNemar's setting, paired binary outcomes): d_i is +1, -1 or 0, so Var(d) = p_d - delta^2 with p_d the
  share of discordant questions (one model right, the other wrong) and delta the true difference. A two-sided
  test at level alpha finds delta with probability ``power`` when
  n >= (z_{1-alpha/2} + z_{power})^2 (p_d - delta^2) / delta^2 questions (``required_pairs``); with the observed
  standard deviation s of d over n questions the smallest difference it finds so is
  (z_{1-alpha/2} + z_{power}) s / sqrt(n) (``detectable_difference``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

__all__ = [
    "PairedDifference",
    "detectable_difference",
    "paired_bootstrap",
    "pooled_bootstrap",
    "read_scores",
    "required_pairs",
]

DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True)
class PairedDifference:
    """The mean difference B - A over paired questions, with its bootstrap interval.

    Attributes:
        pairs: questions both models answered.
        mean_a, mean_b: the models' mean scores over those questions.
        low, high: the ``confidence`` percentile interval of mean(B - A).
        b_only, a_only: questions B scored higher on, and A higher on (for binary scores: the discordant pairs).
        sd: the standard deviation of the per-question differences (n - 1 in the denominator).
    """

    pairs: int
    mean_a: float
    mean_b: float
    low: float
    high: float
    b_only: int
    a_only: int
    sd: float
    confidence: float

    @property
    def difference(self) -> float:
        return self.mean_b - self.mean_a


def read_scores(eval_dir: str | os.PathLike[str]) -> dict[str, float]:
    """Each answered question's share of correct samples, by question id, from ``EVAL_DIR/summary.json``.

    Raises:
        FileNotFoundError: no ``summary.json`` (the evaluation did not finish).
        ValueError: a ``summary.json`` without a ``per_question`` list, or an entry without id, correct and samples.
    """
    path = Path(eval_dir) / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation summary at {path} (did the evaluation finish?)")
    per_question = json.loads(path.read_text(encoding="utf-8")).get("per_question")
    if not isinstance(per_question, list):
        raise ValueError(f"{path} has no per_question list")
    scores = {}
    for index, entry in enumerate(per_question):
        try:
            if entry.get("samples"):
                scores[str(entry["id"])] = entry["correct"] / entry["samples"]
        except (AttributeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: per_question entry {index} is not an evaluated question with id, correct "
                             f"and samples ({type(exc).__name__}: {exc}): {str(entry)[:120]}") from None
    return scores


def _differences(a: Mapping[str, float], b: Mapping[str, float]) -> list[float]:
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError(f"no question in common ({len(a)} and {len(b)} questions): are these the same held-out set?")
    return [b[q] - a[q] for q in shared]


def _summary(a: Mapping[str, float], b: Mapping[str, float], means: Sequence[float], confidence: float,
             diffs: Sequence[float]) -> PairedDifference:
    ordered = sorted(means)
    tail = (1 - confidence) / 2
    low = ordered[min(len(ordered) - 1, math.floor(tail * len(ordered)))]
    high = ordered[max(0, math.ceil((1 - tail) * len(ordered)) - 1)]
    shared = set(a) & set(b)
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    return PairedDifference(n, sum(a[q] for q in shared) / n, sum(b[q] for q in shared) / n, low, high,
                            sum(d > 0 for d in diffs), sum(d < 0 for d in diffs), sd, confidence)


def paired_bootstrap(a: Mapping[str, float], b: Mapping[str, float], *, resamples: int = DEFAULT_RESAMPLES,
                     confidence: float = 0.95, seed: int = 0) -> PairedDifference:
    """The mean of B - A over the questions both answered (paired by id), with a percentile bootstrap interval.

    Args:
        a, b: score per question id (``read_scores``); questions only one of them answered are left out.
        resamples: bootstrap resamples.
        confidence: the interval's coverage (0.95: the 2.5 and 97.5 percentiles).
        seed: the resampling's seed (same seed, same interval).

    Raises:
        ValueError: no question in common.
    """
    return pooled_bootstrap([(a, b)], resamples=resamples, confidence=confidence, seed=seed)


def pooled_bootstrap(strata: Sequence[tuple[Mapping[str, float], Mapping[str, float]]], *,
                     resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, seed: int = 0) -> PairedDifference:
    """``paired_bootstrap`` over several seeds at once: each seed's questions are resampled within that seed
    (question ids may repeat across seeds; each seed is its own world), every question weighs the same.

    Raises:
        ValueError: a seed without a question in common, or no seed.
    """
    if not strata:
        raise ValueError("no seed to compare")
    per_seed = [_differences(a, b) for a, b in strata]
    total = sum(len(d) for d in per_seed)
    rng = random.Random(seed)
    means = [sum(sum(rng.choices(d, k=len(d))) for d in per_seed) / total for _ in range(resamples)]
    merged_a = {f"{i}:{q}": v for i, (a, _) in enumerate(strata) for q, v in a.items()}
    merged_b = {f"{i}:{q}": v for i, (_, b) in enumerate(strata) for q, v in b.items()}
    return _summary(merged_a, merged_b, means, confidence, [d for diffs in per_seed for d in diffs])


def _z_sum(alpha: float, power: float) -> float:
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def required_pairs(delta: float, discordant: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Paired binary outcomes needed to find a true difference ``delta`` with probability ``power`` in a two-sided
    test at level ``alpha``, when a share ``discordant`` of the questions is right for one model only (module
    docstring). ``required_pairs(0.05, 0.25)`` is 778.

    Raises:
        ValueError: ``discordant`` below ``abs(delta)`` (the two cannot differ by more than they disagree) or above 1.
    """
    if not abs(delta) <= discordant <= 1 or delta == 0:
        raise ValueError(f"need 0 < |delta| <= discordant <= 1, got delta {delta}, discordant {discordant}")
    return math.ceil(_z_sum(alpha, power) ** 2 * (discordant - delta**2) / delta**2)


def detectable_difference(sd: float, pairs: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true difference found with probability ``power`` (two-sided, level ``alpha``) from ``pairs``
    questions whose differences have standard deviation ``sd``."""
    return _z_sum(alpha, power) * sd / math.sqrt(pairs)


def markdown(names: tuple[str, str], rows: Sequence[tuple[str, PairedDifference]], pooled: PairedDifference | None,
             *, delta: float = 0.05, left_out: Sequence[tuple[str, str]] = ()) -> str:
    """A table row per seed and a pooled row, then the detectable difference of the pooled comparison, then the
    seeds ``left_out`` (label, reason): a report read later says which seeds it does not pool and why."""
    a_name, b_name = names
    level = f"{round(rows[0][1].confidence * 100)} %" if rows else ""
    lines = [f"| seed | questions | {a_name} | {b_name} | {b_name} - {a_name} | {level} interval | "
             f"{b_name} better / {a_name} better |", "|---|---|---|---|---|---|---|"]
    for label, d in [*rows, *([("pooled", pooled)] if pooled else [])]:
        lines.append(f"| {label} | {d.pairs} | {d.mean_a:.3f} | {d.mean_b:.3f} | {d.difference:+.3f} | "
                     f"[{d.low:+.3f}, {d.high:+.3f}] | {d.b_only} / {d.a_only} |")
    final = pooled or (rows[-1][1] if rows else None)
    if final is not None and final.b_only + final.a_only == 0:
        lines += ["", f"No question of {final.pairs} separates the models: the spread of their difference is not "
                      f"estimable, and the power is that of the plan (required_pairs: {required_pairs(delta, 0.25)} "
                      f"questions for {delta} at 25 % discordant questions)."]
    elif final is not None and final.pairs > 1:
        mde = detectable_difference(final.sd, final.pairs)
        verdict = "would" if mde <= delta else "would not"
        lines += ["", f"Over {final.pairs} paired questions (difference sd {final.sd:.3f}) a true difference of "
                      f"{mde:.3f} is found 80 % of the time (two-sided, 5 %): a difference of {delta} {verdict} be "
                      "seen reliably."]
    if left_out:
        lines += ["", *(f"Seed {label} is left out: {reason}" for label, reason in left_out)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m venus_edge.train.compare``: print the markdown comparison of model B against model A."""
    parser = argparse.ArgumentParser(prog="python -m venus_edge.train.compare", description=main.__doc__)
    parser.add_argument("runs", nargs="+", metavar="SEED:A_EVAL_DIR:B_EVAL_DIR",
                        help="per seed, the evaluation folders of model A and of model B")
    parser.add_argument("--names", default="A,B", metavar="A,B", help="the models' names in the table")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES)
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    args = parser.parse_args(argv)
    names = tuple(args.names.split(","))
    if len(names) != 2:
        parser.error(f"--names takes two names separated by a comma, not {args.names!r}")
    rows, strata, left_out = [], [], []
    for run in args.runs:
        parts = run.split(":")
        if len(parts) != 3:
            parser.error(f"{run!r} is not SEED:A_EVAL_DIR:B_EVAL_DIR")
        try:
            a, b = read_scores(parts[1]), read_scores(parts[2])
            rows.append((parts[0], paired_bootstrap(a, b, resamples=args.resamples, seed=args.seed)))
        except (OSError, ValueError) as exc:
            print(f"seed {parts[0]} left out: {exc}", file=sys.stderr)
            left_out.append((parts[0], str(exc)))
            continue
        strata.append((a, b))
    if not rows:
        print("error: no seed could be compared", file=sys.stderr)
        return 1
    pooled = pooled_bootstrap(strata, resamples=args.resamples, seed=args.seed) if len(strata) > 1 else None
    print(markdown((names[0], names[1]), rows, pooled, left_out=left_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
