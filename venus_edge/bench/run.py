"""``run_bench``: measure every configuration, the machine's bandwidth and each quant's quality, into a report."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

import venus_edge.protocol as protocol
from venus_edge.bench.measure import BenchConfig, ConfigResult, measure_config, memory_bandwidth
from venus_edge.bench.report import BenchReport
from venus_edge.memory.header import read_model_header
from venus_edge.memory.machine import cpu_name, physical_cores
from venus_edge.trajectory import Trajectory

__all__ = ["pick_reference", "run_bench"]

#: The stages ``measure_config`` reports, in order (for a progress bar).
STAGES = ("load", "prefill", "first turn", "session", "decode, and raw llama-cpp-python", "llama-bench")
UNQUANTIZED_TYPES = ("F32", "F16", "BF16")
#: Tokens of agentic text the quality check compares (the logits of every position are kept: n_ctx x vocab floats,
#: ~0.6 GB for a Qwen vocabulary, one model at a time).
QUALITY_TOKENS = 1024


def pick_reference(models: Sequence[Path]) -> Path | None:
    """The unquantized file (F32, F16 or BF16) among ``models``, the reference of the quality check; None when
    there is none or they are not one checkpoint (different parameter counts)."""
    headers = {model: read_model_header(model) for model in models}
    if len({h.n_params for h in headers.values()}) != 1:
        return None
    return next((m for m, h in headers.items() if (h.file_type or "").upper() in UNQUANTIZED_TYPES), None)


def run_bench(
    configs: Sequence[BenchConfig],
    *,
    session: Trajectory | None = None,
    reference: Path | None = None,
    measure_bandwidth: bool = True,
    progress: Callable[[BenchConfig, str], None] = lambda config, stage: None,
) -> BenchReport:
    """Measure each configuration (``measure_config``), the copy bandwidth, and, with a ``reference``, each other
    quant of the same checkpoint (same parameter count and vocabulary) for KL divergence and top-1 agreement on the
    session's text (agentic text: the DR-Venus system prompt, tool calls and tool results) or a fixed text without a
    session.

    Raises:
        ValueError: no configuration.
    """
    if not configs:
        raise ValueError("give at least one model")
    results: list[ConfigResult] = []
    for config in configs:
        results.append(measure_config(config, session=session, progress=functools.partial(progress, config)))
    if reference is not None:
        _add_quality(results, reference, session)
    bandwidth = memory_bandwidth(threads=max(c.threads for c in configs)) if measure_bandwidth else 0.0
    machine = {"cpu": cpu_name(), "cores": physical_cores(), "logical_cpus": os.cpu_count(),
               "python": platform.python_version(), "llama_cpp_python": version("llama_cpp_python")}
    return BenchReport(results, bandwidth, machine, str(reference) if reference else None)


def _add_quality(results: list[ConfigResult], reference: Path, session: Trajectory | None) -> None:
    try:
        from venus_edge.quantize.evaluate import CALIBRATION_TEXT, compare_quant
    except ImportError:  # the quantize package is not installed
        for result in results:
            result.skipped.append("quality: needs venus_edge.quantize")
        return
    # The session after its system prompt: the question, the model's calls and the tool results it read.
    text = (protocol.render_messages(session.messages[1:], add_generation_prompt=False) if session
            else CALIBRATION_TEXT)
    measured: dict[str, dict[str, float]] = {}
    reference_header = read_model_header(reference)
    for result in results:
        model = result.config["model"]
        if Path(model).resolve() == reference.resolve():
            result.quality = {"reference": True}
            continue
        header = read_model_header(Path(model))
        if (header.n_params, header.n_vocab) != (reference_header.n_params, reference_header.n_vocab):
            result.skipped.append(f"quality of {Path(model).name}: another checkpoint than {reference.name}")
            continue
        if model not in measured:
            comparison = compare_quant(model, reference, text, n_ctx=QUALITY_TOKENS)
            measured[model] = {"mean_kl": comparison.mean_kl, "top1_agreement": comparison.top1_agreement,
                               "ppl_ratio": comparison.ppl_ratio, "n_tokens": comparison.n_tokens}
        result.quality = measured[model]

