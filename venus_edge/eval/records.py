"""The records of an evaluation: one ``EvalRow`` per (question, sample), a line of ``results.jsonl`` written by
the runner, and the ``EvalSummary`` that the report computes from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EvalRow", "EvalSummary"]


@dataclass(frozen=True)
class EvalRow:
    """One sample of one question.

    Attributes:
        id, sample: the question's id and the sample's index (0..k-1).
        prediction: the agent's final answer, or None.
        em, f1: exact match and token F1 against the accepted answers.
        judge: the judge's verdict (``JudgeVerdict.to_dict``), or None without a judge.
        correct: the judge's verdict when there is one (a failed judge counts as wrong), else ``em == 1``.
        termination: the session's termination reason.
        turns, tool_calls: model turns and tool calls of the session.
        prompt_tokens_evaluated, prompt_tokens_reused, tokens_decoded: token counts of the session.
        prefill_s, decode_s, elapsed_s: seconds in prefill, in decode, and wall clock.
        final_turn_mean_logprob: mean log-probability of the final turn's tokens (when the engine gave them).
        session_id: the session in ``trajectories.jsonl``.
        generated_turns, well_formed_turns: turns the model wrote (retried ones included) and those that pass the
            strict RL format check (PROTOCOL.md, "A well-formed turn").
        drafted_tokens, accepted_tokens: tokens speculative decoding drafted (``--draft``) and those the model kept;
            0 without drafting.
    """

    id: str
    sample: int
    question: str
    answers: list[str]
    prediction: str | None
    em: float
    f1: float
    judge: dict[str, Any] | None
    correct: bool
    termination: str
    turns: int
    tool_calls: int
    prompt_tokens_evaluated: int
    prompt_tokens_reused: int
    tokens_decoded: int
    prefill_s: float
    decode_s: float
    elapsed_s: float
    final_turn_mean_logprob: float | None = None
    session_id: str = ""
    generated_turns: int = 0
    well_formed_turns: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvalSummary:
    """The figures of one evaluation (``report.summarize``); ``to_dict`` is ``summary.json``."""

    data: dict[str, Any]
    rows: list[EvalRow] = field(repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]
