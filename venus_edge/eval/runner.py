"""The evaluation loop: every question ``k`` times through the agent, one row per (question, sample) written as
it finishes, resumable, then a summary.

``results.jsonl`` in the output folder holds one ``EvalRow`` per line, appended and fsync'ed as each sample
finishes, so a killed run loses at most the samples in flight; a rerun with the same folder reads what is there
(a line torn by the kill is skipped) and runs only the missing (question, sample) pairs. The agent's trajectories
go to ``trajectories.jsonl`` beside it. At the end ``report.write_report`` writes ``summary.json``,
``summary.md`` (each with the record of what was run, ``venus_edge.provenance.RunRecord``, when given) and
``summary.png``.

The runner does not know how rollouts are made: it calls ``sample(example, sample_indices)``, which yields
``(index, agent.Result)`` pairs as rollouts finish, in any order (sequential agents, or N rollouts batched on one
engine); each is scored and written as it arrives.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from venus_edge.engines.base import TextCompleter
from venus_edge.eval.data import EvalExample
from venus_edge.eval.judge import LLMJudge
from venus_edge.eval.metrics import exact_match, token_f1
from venus_edge.eval.records import EvalRow, EvalSummary
from venus_edge.eval.report import summarize, write_report
from venus_edge.jsonl import append_record, iter_records
from venus_edge.provenance import RunRecord
from venus_edge.result import Result

__all__ = ["run_eval"]

RESULTS_FILE = "results.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
SampleFn = Callable[[EvalExample, Sequence[int]], Iterable[tuple[int, Result]]]
logger = logging.getLogger(__name__)


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
    on_start: Callable[[int], None] | None = None,
    plot: bool = True,
    run: RunRecord | None = None,
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
        on_start: called once before the first rollout with the number of samples to run (those not in
            ``out_dir`` already).
        plot: write ``summary.png`` (needs matplotlib).
        run: the record of what was run, written into ``summary.md`` and ``summary.json``.

    Raises:
        ValueError: ``k < 1``, or two examples with the same id.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ids = [example.id for example in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(f"example ids must be unique; repeated: {sorted(i for i, n in Counter(ids).items() if n > 1)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = {(row.id, row.sample): row for row in read_rows(out / RESULTS_FILE)}
    wanted = [(example.id, index) for example in examples for index in range(k)]
    resumed = sum(key in done for key in wanted)
    if on_start is not None:
        on_start(len(wanted) - resumed)
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
    rows = [done[key] for key in wanted]
    summary = summarize(rows, examples, k, aggregate=aggregate, aggregate_completer=aggregate_completer)
    write_report(summary, out, plot=plot, run=run, samples_resumed=resumed)
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
        drafted_tokens=totals.drafted_tokens, accepted_tokens=totals.accepted_tokens,
    )


def read_rows(path: Path) -> list[EvalRow]:
    """The rows of a ``results.jsonl`` (none when it does not exist); a torn or foreign line is skipped."""
    if not path.is_file():
        return []
    rows = []
    for number, record, problem, note in iter_records(path):
        if note:
            logger.warning("%s:%d: %s", path, number, note)
        if not problem:
            try:
                rows.append(EvalRow(**record))
                continue
            except TypeError as exc:
                problem = f"not a result row ({exc})"
        logger.warning("%s:%d skipped: %s", path, number, problem)
    return rows
