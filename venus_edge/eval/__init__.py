"""Evaluation: datasets, metrics (exact match, token F1, an LLM judge, pass@k), answer aggregation over several
rollouts, the resumable runner and its reports (``venus-edge eval``).

    from venus_edge.eval import load_examples, run_eval
    examples = load_examples("pydocs").examples        # the shipped Python-docs set, or a JSONL/CSV/parquet path
    summary = run_eval(examples, sample, out_dir="runs/eval", k=4)

Every name a module of this package lists in its ``__all__`` is exported here, loaded on first use (the runner
imports the agent and llama.cpp; ``venus-edge --help`` must not).
"""

import importlib as _importlib
from typing import Any as _Any

_MODULE_EXPORTS = {
    "aggregate": ("AGGREGATORS", "aggregate_answers", "select_answer"),
    "data": ("ANSWER_SPLIT", "EvalExample", "LoadReport", "load_examples", "read_data_rows", "split_answers"),
    "judge": ("JudgeVerdict", "LLMJudge", "parse_verdict"),
    "metrics": ("exact_match", "normalize_answer", "pass_at_k", "token_f1"),
    "records": ("EvalRow", "EvalSummary"),
    "report": ("summarize", "write_report"),
    "runner": ("run_eval",),
}
_EXPORTS = {name: module for module, names in _MODULE_EXPORTS.items() for name in names}


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'venus_edge.eval' has no attribute {name!r}")
    return getattr(_importlib.import_module(f"venus_edge.eval.{module}"), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = sorted(_EXPORTS)
