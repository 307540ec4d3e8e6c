"""`venus_edge.quantize.arm_check` without qemu: comparing two greedy runs, and the message when the ARM tool is
missing (the check itself, under qemu, is tests/quantize/test_arm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from venus_edge.quantize.arm_check import GreedyRun, arm_greedy_tool_path, compare_greedy
from venus_edge.quantize.errors import ArmToolMissingError, QuantizeError


def _run(logits: np.ndarray) -> GreedyRun:
    tokens = tuple(int(token) for token in logits.argmax(axis=-1))
    return GreedyRun("test", tokens, logits.astype(np.float32), 1.0, 3.0, "", None)


def test_identical_runs_compare_as_identical_with_zero_kl():
    logits = np.random.default_rng(0).normal(size=(4, 10))
    comparison = compare_greedy(_run(logits), _run(logits.copy()))
    assert comparison.identical and comparison.matching_tokens == 4
    assert comparison.max_kl == pytest.approx(0.0, abs=1e-7) and len(comparison.kl) == 4
    assert comparison.kl_at_difference is None and comparison.reference_margin is None


def test_first_difference_kl_and_margin_are_taken_where_both_saw_the_same_tokens():
    reference = np.zeros((4, 3))
    reference[:, 0] = 1.0
    reference[1, 1] = 0.9  # a near tie at position 1: token 0 by 0.1
    candidate = reference.copy()
    candidate[1, 1] = 1.2  # the candidate flips it
    candidate[2:] = np.array([0.0, 0.0, 5.0])  # later positions followed other tokens: not compared
    comparison = compare_greedy(_run(reference), _run(candidate))
    assert comparison.first_difference == 1 and comparison.matching_tokens == 1
    assert len(comparison.kl) == 2  # positions 0 and 1 only
    assert comparison.kl[0] == pytest.approx(0.0, abs=1e-7)
    p = np.exp(reference[1]) / np.exp(reference[1]).sum()
    q = np.exp(candidate[1]) / np.exp(candidate[1]).sum()
    assert comparison.kl_at_difference == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-4)
    assert comparison.reference_margin == pytest.approx(0.1, rel=1e-5)


def test_runs_of_other_shapes_are_refused():
    with pytest.raises(ValueError, match="differ in shape"):
        compare_greedy(_run(np.zeros((4, 3))), _run(np.zeros((3, 3))))


def test_decode_speed_counts_the_single_token_decodes():
    assert _run(np.zeros((4, 3))).decode_tokens_per_s == pytest.approx(1000.0)  # 3 decodes in 3 ms


def test_a_missing_tool_names_what_is_missing_and_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VENUS_EDGE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no qemu-aarch64 either
    expected = r"qemu-aarch64 is missing; run bash scripts/setup\.sh as root"
    with pytest.raises(ArmToolMissingError, match=expected) as info:
        arm_greedy_tool_path()
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, QuantizeError)
