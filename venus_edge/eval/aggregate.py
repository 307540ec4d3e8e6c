"""Choosing one answer from several rollouts of a question (test-time scaling).

- ``majority``: the most frequent answer after ``metrics.normalize_answer``; a tie goes to the answer given first.
- ``confidence``: each rollout votes with its confidence (the geometric-mean probability the model gave the
  tokens of its final turn, ``Result.totals["final_turn_mean_logprob"]``); the answer with the largest total wins.
  Rollouts without a confidence vote 1.0, so with none at all this is the majority vote.
- ``judge``: a model sees the question and the distinct answers (with their vote counts) and picks one
  (``select_answer``); a reply that names no candidate falls back to the majority vote.

Rollouts without an answer do not vote. Each function returns the index of the chosen rollout (its first
rollout with the chosen answer), or None when no rollout answered.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from venus_edge.engines.base import TextCompleter
from venus_edge.eval.metrics import normalize_answer

__all__ = ["AGGREGATORS", "aggregate_answers", "select_answer"]

AGGREGATORS = ("majority", "confidence", "judge")

SELECT_PROMPT = """Several research attempts answered the same question differently. Pick the answer most likely \
to be correct.

Question: {question}

Candidate answers (with how many attempts gave each):
{candidates}

Reply with one line: best: <the number of the best candidate>"""


def aggregate_answers(
    answers: Sequence[str | None],
    *,
    method: str = "majority",
    mean_logprobs: Sequence[float | None] | None = None,
    question: str = "",
    completer: TextCompleter | None = None,
) -> int | None:
    """The index of the rollout whose answer ``method`` chooses (see the module docstring).

    Args:
        answers: each rollout's final answer (None when it gave none).
        method: ``majority``, ``confidence`` or ``judge``.
        mean_logprobs: per rollout, the mean log-probability of its final turn's tokens (``confidence``).
        question: the question (``judge``).
        completer: the judge model (``judge``).

    Raises:
        ValueError: an unknown method, or ``judge`` without a completer.
    """
    if method not in AGGREGATORS:
        raise ValueError(f"unknown aggregation {method!r}; choose one of {', '.join(AGGREGATORS)}")
    groups: dict[str, list[int]] = {}
    for index, answer in enumerate(answers):
        if answer is not None and normalize_answer(answer):
            groups.setdefault(normalize_answer(answer), []).append(index)
    if not groups:
        return None
    if method == "judge":
        if completer is None:
            raise ValueError("the judge aggregation needs a completer (the judge model)")
        return select_answer(question, answers, groups, completer)
    weights = [1.0] * len(answers)
    if method == "confidence" and mean_logprobs is not None:
        weights = [1.0 if lp is None else math.exp(lp) for lp in mean_logprobs]
    best = max(groups.values(), key=lambda members: (sum(weights[i] for i in members), -members[0]))
    return best[0]


def select_answer(
    question: str, answers: Sequence[str | None], groups: dict[str, list[int]], completer: TextCompleter
) -> int:
    """Ask ``completer`` to pick among the distinct answers; the majority vote when its reply names none."""
    ordered = sorted(groups.values(), key=lambda members: (-len(members), members[0]))
    listing = "\n".join(
        f"{number}. {answers[members[0]]} ({len(members)})" for number, members in enumerate(ordered, 1)
    )
    reply = completer.complete(
        [{"role": "user", "content": SELECT_PROMPT.format(question=question, candidates=listing)}], max_tokens=64
    )
    match = re.search(r"best\s*[:=]?\s*\**\s*(\d+)", reply, re.IGNORECASE) or re.fullmatch(r"\s*(\d+)\s*\.?\s*", reply)
    if match and 1 <= int(match.group(1)) <= len(ordered):
        return ordered[int(match.group(1)) - 1][0]
    return ordered[0][0]
