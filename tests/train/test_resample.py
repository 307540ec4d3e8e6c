"""Long-horizon resampling: the recipe's buckets (<= 50: 1x, 51-100: 2x, > 100: 5x), seeded, configurable."""

from __future__ import annotations

import pytest

from venus_edge.train.data import Sample
from venus_edge.train.resampling import resample


def of_turns(turns: int) -> Sample:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "r"}] * (turns - 1)
    messages.append({"role": "assistant", "content": "answer"})
    return Sample(tuple(messages), f"{turns} turns")


@pytest.mark.parametrize(("turns", "copies"), [(1, 1), (50, 1), (51, 2), (100, 2), (101, 5), (200, 5)])
def test_each_sample_is_repeated_by_its_bucket(turns, copies):
    sample = of_turns(turns)
    assert sample.turns == turns
    out, report = resample([sample, of_turns(3)])
    assert out.count(sample) == copies and len(out) == copies + 1
    assert sum(n_out for _, _, n_out in report.buckets) == len(out)


def test_the_report_counts_each_bucket():
    _, report = resample([of_turns(10), of_turns(60), of_turns(70), of_turns(150)])
    assert report.buckets == (("0-50 turns", 1, 1), ("51-100 turns", 2, 4), (">100 turns", 1, 5))
    assert "| 51-100 turns | 2 | 4 |" in report.markdown()


def test_the_shuffle_is_seeded():
    samples = [of_turns(t) for t in range(1, 120, 7)]
    first, _ = resample(samples, seed=3)
    again, _ = resample(samples, seed=3)
    other, _ = resample(samples, seed=4)
    assert [s.question for s in first] == [s.question for s in again] != [s.question for s in other]


def test_thresholds_and_multipliers_are_configurable():
    out, report = resample([of_turns(5), of_turns(15)], thresholds=[10], multipliers=[1, 3])
    assert len(out) == 4 and report.buckets == (("0-10 turns", 1, 1), (">10 turns", 1, 3))


@pytest.mark.parametrize(("thresholds", "multipliers", "message"), [
    ([50, 100], [1, 2], "need 3 multipliers"),
    ([100, 50], [1, 2, 5], "increasing"),
    ([50, 100], [1, 0, 5], ">= 1"),
    ([50, 100], [1, 1.5, 5], ">= 1"),
])
def test_bad_settings_are_errors(thresholds, multipliers, message):
    with pytest.raises(ValueError, match=message):
        resample([of_turns(1)], thresholds=thresholds, multipliers=multipliers)
