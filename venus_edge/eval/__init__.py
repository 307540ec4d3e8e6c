"""Evaluation: datasets, metrics (exact match, token F1, an LLM judge, pass@k), answer aggregation over several
rollouts, the resumable runner and its reports (``venus-edge eval``).

    from venus_edge.eval import load_examples, run_eval
    examples = load_examples("pydocs").examples        # the shipped Python-docs set, or a JSONL/CSV/parquet path
    summary = run_eval(examples, sample, out_dir="runs/eval", k=4)

Every name a module of this package lists in its ``__all__`` is exported here, loaded on first use (the runner
imports the agent and llama.cpp; ``venus-edge --help`` must not).
"""

from typing import Any as _Any

from venus_edge.lazy import LazyExports as _LazyExports

_MODULE_EXPORTS = {
    "aggregate": ("AGGREGATORS", "aggregate_answers", "select_answer"),
    "data": ("ANSWER_SPLIT", "EvalExample", "LoadReport", "load_examples", "read_data_rows", "split_answers"),
    "judge": ("JudgeVerdict", "LLMJudge", "parse_verdict"),
    "metrics": ("exact_match", "normalize_answer", "pass_at_k", "token_f1"),
    "records": ("EvalRow", "EvalSummary"),
    "report": ("summarize", "write_report"),
    "runner": ("run_eval",),
}
_EXPORTS = _LazyExports(__name__, _MODULE_EXPORTS)


def __getattr__(name: str) -> _Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
