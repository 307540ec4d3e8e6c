"""The evaluation loop: every question ``k`` times through the agent, one row per (question, sample) written as
it finishes, resumable, then a summary.

``results.jsonl`` in the output folder holds one ``EvalRow`` per line, appended and fsync'ed as each sample
finishes, so a killed run loses at most the samples in flight; a rerun with the same folder reads what is there
(a line torn by the kill is skipped) and runs only the missing (question, sample) pairs. The agent's trajectories
go to ``trajectories.jsonl`` beside it. At the end ``report.write_report`` writes ``summary.json``,
``summary.md`` and ``summary.png``.

The runner does not know how rollouts are made: it calls ``sample(example, sample_indices)``, which yields
``(index, agent.Result)`` pairs as rollouts finish, in any order (sequential agents, or N rollouts batched on one
engine); each is scored and written as it arrives.
"""

from __future__ import annotations

import logging
import os

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from venus_edge.agent import Result
from venus_edge.eval.data import EvalExample
from venus_edge.eval.judge import LLMJudge
from venus_edge.eval.metrics import exact_match, pass_at_k, token_f1
from venus_edge.jsonl import append_record, iter_records
from venus_edge.tools.base import TextCompleter

__all__ = ["EvalRow", "EvalSummary", "run_eval"]

RESULTS_FILE = "results.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
SampleFn = Callable[[EvalExample, Sequence[int]], Iterable[tuple[int, Result]]]
logger = logging.getLogger(__name__)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvalSummary:
    """The figures of one evaluation (``report.summarize``); ``to_dict`` is ``summary.json``."""

    data: dict[str, Any]
    rows: list[EvalRow] = field(repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


def run_eval(
    examples: Sequence[EvalExample],
    sample: SampleFn,
    *,
    out_dir: str | os.PathLike[str],
    k: int = 1,
    judge: LLMJudge | None = None,
    aggregate: str | None = None,
    aggregate_completer: TextCompleter | None = None,
    on_row: Callable[[EvalRow], None] | None = None,
    plot: bool = True,
) -> EvalSummary:
    """Run ``k`` samples of every example (those not in ``out_dir`` already), score them, and report.

    Args:
        examples: the questions.
        sample: makes the rollouts: ``sample(example, [sample indices])`` yields ``(index, Result)`` as each
            finishes.
        out_dir: where ``results.jsonl``, the trajectories and the reports go (created; reused to resume).
        k: samples per question.
        judge: grade each answer with this judge (``correct`` then follows the judge, not exact match).
        aggregate: also choose one answer per question from its ``k`` samples (``aggregate.AGGREGATORS``) and
            report its accuracy (majority@k, ...).
        aggregate_completer: the judge model of the ``judge`` aggregation.
        on_row: called with each new row (progress bars).
        plot: write ``summary.png`` (needs matplotlib).

    Raises:
        ValueError: ``k < 1``, or two examples with the same id.
    """
    from venus_edge.eval.report import summarize, write_report

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ids = [example.id for example in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(f"example ids must be unique; repeated: {sorted(i for i, n in Counter(ids).items() if n > 1)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = {(row.id, row.sample): row for row in read_rows(out / RESULTS_FILE)}
    for example in examples:
        missing = [index for index in range(k) if (example.id, index) not in done]
        if not missing:
            continue
        for index, result in sample(example, missing):
            row = score(example, index, result, judge)
            append_record(out / RESULTS_FILE, row.to_dict())
            done[(example.id, index)] = row
            if on_row is not None:
                on_row(row)
    rows = [done[(example.id, index)] for example in examples for index in range(k)]
    summary = summarize(rows, examples, k, aggregate=aggregate, aggregate_completer=aggregate_completer)
    write_report(summary, out, plot=plot)
    return summary


def score(example: EvalExample, index: int, result: Result, judge: LLMJudge | None) -> EvalRow:
    """The row of one finished sample."""
    answers = list(example.answers)
    verdict = judge(example.question, result.answer, answers) if judge is not None else None
    em = exact_match(result.answer, answers)
    totals = result.totals
    return EvalRow(
        id=example.id, sample=index, question=example.question, answers=answers, prediction=result.answer,
        em=em, f1=round(token_f1(result.answer, answers), 4), judge=verdict.to_dict() if verdict else None,
        correct=bool(verdict.correct) if verdict is not None else em == 1.0, termination=result.termination,
        turns=result.turns, tool_calls=totals.tool_calls, prompt_tokens_evaluated=totals.prompt_tokens_evaluated,
        prompt_tokens_reused=totals.prompt_tokens_reused, tokens_decoded=totals.tokens_decoded,
        prefill_s=totals.prefill_s, decode_s=totals.decode_s, elapsed_s=result.elapsed_s,
        final_turn_mean_logprob=totals.final_turn_mean_logprob, session_id=result.session_id,
        generated_turns=totals.generated_turns, well_formed_turns=totals.well_formed_turns,
    )


def read_rows(path: Path) -> list[EvalRow]:
    """The rows of a ``results.jsonl`` (none when it does not exist); a torn or foreign line is skipped."""
    if not path.is_file():
        return []
    rows = []
    for number, record, problem in iter_records(path):
        if not problem:
            try:
                rows.append(EvalRow(**record))
                continue
            except TypeError as exc:
                problem = f"not a result row ({exc})"
        logger.warning("%s:%d skipped: %s", path, number, problem)
    return rows


def pass_at_ks(per_question: Iterable[tuple[int, int]], k: int) -> dict[str, float]:
    """Mean unbiased pass@j over questions, for j = 1, 2, 4, ... and k, from (samples, correct) pairs."""
    pairs = list(per_question)
    js = sorted({j for j in (1, 2, 4, 8, 16, 32, 64) if j <= k} | {k})
    return {f"pass@{j}": round(sum(pass_at_k(n, c, j) for n, c in pairs) / len(pairs), 4) for j in js}


