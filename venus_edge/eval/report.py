"""Evaluation reports: the figures (``summarize``), ``summary.json``, ``summary.md`` and a plot of accuracy
against turns and tokens (``write_report``).

Accuracy figures (each a mean over questions):
- ``pass@1``: the share of a question's samples that are correct (the unbiased pass@1; with k samples per
  question it equals avg@k);
- ``pass@j``: the unbiased estimator of Chen et al. (``metrics.pass_at_k``) for j = 2, 4, ... up to k;
- ``{method}@k`` (e.g. ``majority@4``): whether the answer chosen from the k samples (``aggregate``) is correct,
  judged like a sample (exact match, or the judge's verdict when a judge graded the rows).

Both reports end with what was run (``venus_edge.provenance.RunRecord``: the model file and its SHA-256, every
setting, the versions, the machine, the date and the command line): ``summary.json`` under ``run``, ``summary.md``
as its last section.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_edge.engines.base import TextCompleter
from venus_edge.eval.aggregate import aggregate_answers
from venus_edge.eval.data import EvalExample
from venus_edge.eval.metrics import pass_at_ks
from venus_edge.eval.records import EvalRow, EvalSummary
from venus_edge.provenance import RunRecord

__all__ = ["summarize", "write_report"]

PLOT_BINS = 6


def summarize(
    rows: Sequence[EvalRow],
    examples: Sequence[EvalExample],
    k: int,
    *,
    aggregate: str | None = None,
    aggregate_completer: TextCompleter | None = None,
) -> EvalSummary:
    """The figures of an evaluation: accuracy (pass@j, EM, F1, judge), aggregated accuracy, cost, terminations."""
    by_id: dict[str, list[EvalRow]] = {}
    for row in rows:
        by_id.setdefault(row.id, []).append(row)
    per_question = []
    for example in examples:
        samples = sorted(by_id.get(example.id, []), key=lambda r: r.sample)
        entry: dict[str, Any] = {"id": example.id, "samples": len(samples), "correct": sum(r.correct for r in samples)}
        if aggregate and samples:
            chosen = aggregate_answers(
                [r.prediction for r in samples], method=aggregate,
                mean_logprobs=[r.final_turn_mean_logprob for r in samples], question=example.question,
                completer=aggregate_completer,
            )
            entry["aggregated_answer"] = None if chosen is None else samples[chosen].prediction
            entry["aggregated_correct"] = chosen is not None and samples[chosen].correct
        per_question.append(entry)
    answered = [q for q in per_question if q["samples"]]
    data: dict[str, Any] = {
        "questions": len(examples), "k": k, "samples": len(rows),
        **pass_at_ks(((q["samples"], q["correct"]) for q in answered),
                     min(k, min((q["samples"] for q in answered), default=k))),
        "em": _mean(r.em for r in rows), "f1": _mean(r.f1 for r in rows),
    }
    judgements = [r.judge for r in rows if r.judge is not None]
    if judgements:
        data["judge_accuracy"] = _mean(float(bool(j["correct"])) for j in judgements)
        data["judge_failures"] = sum(j["correct"] is None for j in judgements)
    if aggregate:
        data[f"{aggregate}@{k}"] = _mean(float(q.get("aggregated_correct", False)) for q in answered)
    for name in ("turns", "tool_calls", "tokens_decoded", "prompt_tokens_evaluated", "prompt_tokens_reused",
                 "prefill_s", "decode_s", "elapsed_s"):
        data[f"mean_{name}"] = _mean(getattr(r, name) for r in rows)
    generated = sum(r.generated_turns for r in rows)
    data["well_formed_turns"] = round(sum(r.well_formed_turns for r in rows) / generated, 4) if generated else None
    drafted = sum(r.drafted_tokens for r in rows)
    if drafted:  # speculative decoding (--draft): the tokens drafted and kept, over all samples
        data["drafted_tokens"] = drafted
        data["accepted_tokens"] = sum(r.accepted_tokens for r in rows)
        data["acceptance"] = round(data["accepted_tokens"] / drafted, 4)
    data["terminations"] = dict(Counter(r.termination for r in rows).most_common())
    data["per_question"] = per_question
    return EvalSummary(data, list(rows))


def _mean(values: Any) -> float:
    values = list(values)
    return round(statistics.fmean(values), 4) if values else 0.0


def write_report(summary: EvalSummary, out_dir: Path, *, plot: bool = True, run: RunRecord | None = None,
                 samples_resumed: int = 0) -> None:
    """``summary.json`` (every figure), ``summary.md`` (the table) and, with matplotlib, ``summary.png``.

    Args:
        summary: the figures.
        out_dir: the folder written to.
        plot: also write ``summary.png``.
        run: what was run: ``summary.json``'s ``run`` and ``summary.md``'s last section.
        samples_resumed: samples read from an earlier run into ``out_dir`` (the record describes this run only).
    """
    data = dict(summary.data)
    markdown = markdown_table(summary)
    if run is not None:
        data["run"] = {**run.to_dict(), "samples_from_earlier_runs": samples_resumed}
        markdown += "\n" + run.markdown()
        if samples_resumed:
            markdown += (f"\n{samples_resumed} of the {len(summary.rows)} samples were run earlier into this folder "
                         f"(resumed); the settings above are this run's.\n")
    (out_dir / "summary.json").write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    (out_dir / "summary.md").write_text(markdown, encoding="utf-8")
    if plot:
        plot_accuracy(summary.rows, out_dir / "summary.png")


def markdown_table(summary: EvalSummary) -> str:
    """The summary as Markdown: one table of figures, then terminations and the questions never answered right."""
    data = summary.data
    keys = [key for key in data if key not in ("terminations", "per_question")]
    lines = ["| figure | value |", "|---|---|", *(f"| {key} | {data[key]} |" for key in keys)]
    lines += ["", "| termination | samples |", "|---|---|"]
    lines += [f"| {name} | {count} |" for name, count in data["terminations"].items()]
    missed = [q["id"] for q in data["per_question"] if q["samples"] and not q["correct"]]
    lines += ["", f"Never correct ({len(missed)}): {', '.join(missed) if missed else 'none'}", ""]
    return "\n".join(lines)


def plot_accuracy(rows: Sequence[EvalRow], path: Path) -> bool:
    """Accuracy against turns and against decoded tokens, side by side; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (by_turns, by_tokens) = plt.subplots(1, 2, figsize=(10, 4))
    for axis, attribute, label in ((by_turns, "turns", "turns"), (by_tokens, "tokens_decoded", "tokens decoded")):
        xs, ys, counts = _binned(rows, attribute)
        axis.plot(xs, ys, marker="o")
        for x, y, count in zip(xs, ys, counts):
            axis.annotate(f"n={count}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
        axis.set_xlabel(label)
        axis.set_ylabel("accuracy")
        axis.set_ylim(-0.05, 1.05)
        axis.grid(alpha=0.3)
    figure.suptitle(f"accuracy of {len(rows)} samples")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _binned(rows: Sequence[EvalRow], attribute: str) -> tuple[list[float], list[float], list[int]]:
    """(x, accuracy, samples) per value of ``attribute`` when it takes at most ``PLOT_BINS`` values, else per
    equal-count bin (x the bin's mean)."""
    ordered = sorted(rows, key=lambda r: getattr(r, attribute))
    values = sorted({getattr(r, attribute) for r in ordered})
    if len(values) <= PLOT_BINS:
        bins = [[r for r in ordered if getattr(r, attribute) == value] for value in values]
    else:
        size = -(-len(ordered) // PLOT_BINS)
        bins = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    return ([statistics.fmean(getattr(r, attribute) for r in b) for b in bins],
            [statistics.fmean(float(r.correct) for r in b) for b in bins], [len(b) for b in bins])
