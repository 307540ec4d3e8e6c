"""Long-horizon resampling: long trajectories repeated so that the few long ones weigh more in SFT.

Source: PROTOCOL.md, "Training facts" (DR-Venus ``SFT/data_clean/prepare_trajectories.py``): a sample of at most 50
turns is kept once, of 51 to 100 twice, of more than 100 five times, ``turns = (messages - 1) // 2``; 9,365
cleaned samples became 18,745.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from venus_edge.train.data import Sample

__all__ = ["DEFAULT_MULTIPLIERS", "DEFAULT_THRESHOLDS", "ResampleReport", "resample"]

DEFAULT_THRESHOLDS = (50, 100)
DEFAULT_MULTIPLIERS = (1, 2, 5)


@dataclass(frozen=True)
class ResampleReport:
    """Per bucket: ``(label, samples in, copies out)``, e.g. ``("51-100 turns", 120, 240)``."""

    buckets: tuple[tuple[str, int, int], ...]

    def markdown(self) -> str:
        rows = [f"| {label} | {n_in} | {n_out} |" for label, n_in, n_out in self.buckets]
        return "\n".join(["| turns | samples | after resampling |", "|---|---|---|", *rows])


def resample(
    samples: Sequence[Sample],
    *,
    thresholds: Sequence[int] = DEFAULT_THRESHOLDS,
    multipliers: Sequence[int] = DEFAULT_MULTIPLIERS,
    seed: int = 0,
) -> tuple[list[Sample], ResampleReport]:
    """Repeat each sample by the multiplier of its length bucket, then shuffle with ``seed``.

    Args:
        samples: cleaned samples.
        thresholds: increasing upper bounds (inclusive, in turns) of every bucket but the last.
        multipliers: copies per sample of each bucket; one more than ``thresholds``.
        seed: the shuffle's seed (same seed, same order).

    Raises:
        ValueError: thresholds not increasing, a multiplier below 1, or the wrong number of multipliers.
    """
    thresholds, multipliers = list(thresholds), list(multipliers)
    if len(multipliers) != len(thresholds) + 1:
        raise ValueError(f"{len(thresholds)} thresholds need {len(thresholds) + 1} multipliers, got {len(multipliers)}")
    if any(b <= a for a, b in itertools.pairwise(thresholds)) or any(t < 0 for t in thresholds):
        raise ValueError(f"thresholds must be increasing and non-negative, got {thresholds}")
    if any(not isinstance(m, int) or m < 1 for m in multipliers):
        raise ValueError(f"multipliers must be whole numbers >= 1, got {multipliers}")
    bounds = [0, *(t + 1 for t in thresholds)]
    labels = [f"{lo}-{hi - 1} turns" for lo, hi in itertools.pairwise(bounds)] + [
        f">{thresholds[-1]} turns" if thresholds else "all"
    ]
    counts = [0] * len(multipliers)
    out: list[Sample] = []
    for sample in samples:
        bucket = next((i for i, t in enumerate(thresholds) if sample.turns <= t), len(thresholds))
        counts[bucket] += 1
        out.extend([sample] * multipliers[bucket])
    random.Random(seed).shuffle(out)
    report = ResampleReport(tuple((label, n, n * m) for label, n, m in zip(labels, counts, multipliers)))
    return out, report
