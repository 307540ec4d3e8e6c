"""Choosing one answer from several rollouts: majority, confidence-weighted, judge-selected."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest

from venus_edge.eval.aggregate import aggregate_answers


def test_majority_counts_normalized_answers_and_breaks_ties_by_order():
    assert aggregate_answers(["3.10", "3.11", "Python 3.11", "3.11."]) == 1
    assert aggregate_answers(["x", "y", "Y", "X"]) == 0, "a tie goes to the answer given first"
    assert aggregate_answers([None, "x", None]) == 1
    assert aggregate_answers([None, "", "  "]) is None


def test_confidence_weights_can_outvote_the_majority():
    answers = ["3.10", "3.10", "3.11"]
    logprobs = [math.log(0.2), math.log(0.2), math.log(0.9)]
    assert aggregate_answers(answers, method="confidence", mean_logprobs=logprobs) == 2
    assert aggregate_answers(answers, method="confidence", mean_logprobs=[None, None, None]) == 0
    assert aggregate_answers(answers, method="majority", mean_logprobs=logprobs) == 0


class Selector:
    def __init__(self, reply: str) -> None:
        self.reply, self.prompt = reply, ""

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        self.prompt = messages[-1]["content"]
        return self.reply


@pytest.mark.parametrize(
    "reply, chosen", [("best: 2", 1), ("**best:** 2", 1), ("2", 1), ("best: 9", 0), ("no idea", 0)]
)
def test_judge_selection_and_its_fallback_to_the_majority(reply, chosen):
    """Candidates are listed by votes (Paris 2, Lyon 1); naming none of them falls back to the majority."""
    selector = Selector(reply)
    answers = ["Paris", "Lyon", "paris"]
    assert aggregate_answers(answers, method="judge", question="Capital?", completer=selector) == chosen
    assert "1. Paris (2)" in selector.prompt and "2. Lyon (1)" in selector.prompt


def test_unknown_method_and_judge_without_a_model_are_refused():
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_answers(["x"], method="vote")
    with pytest.raises(ValueError, match="needs a completer"):
        aggregate_answers(["x"], method="judge")
