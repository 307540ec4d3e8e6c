"""``run_bench``: measure every configuration, the machine's bandwidth and each quant's quality, into a report.

A run keeps what it measured: after each configuration the report so far goes to ``on_update`` (the CLI writes
``report.md`` and ``report.json`` then, each replaced in one step), so a run stopped half way leaves a valid report
of what was done. Each result carries the key of what its figures depend on (``measurement_key``); a rerun given the
earlier results (``load_results``) reuses those whose key matches and measures only the rest. Before the first
measurement ``notify`` is told the expected time (``estimate_seconds``, an estimate from the model sizes, stages,
repeats, prompt lengths and depths), and after each configuration the stages that other processes slowed
(``ConfigResult.busy_stages``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import venus_edge.protocol as protocol
from venus_edge.bench.measure import (
    BUSY_OTHERS_CORES,
    REPLAY_MAX_TOKENS,
    BenchConfig,
    ConfigResult,
    llama_bench_path,
    measure_config,
    memory_bandwidth,
)
from venus_edge.bench.report import BenchReport, format_duration
from venus_edge.memory.header import read_model_header
from venus_edge.memory.machine import cpu_name, physical_cores
from venus_edge.trajectory import Trajectory

__all__ = ["estimate_seconds", "load_results", "measurement_key", "pick_reference", "reusable_results", "run_bench"]

#: The stages ``measure_config`` reports, in order (for a progress bar); "session" only with a session.
STAGES = ("load", "prefill", "first turn", "session", "decode, and raw llama-cpp-python", "llama-bench")
UNQUANTIZED_TYPES = ("F32", "F16", "BF16")
#: Tokens of agentic text the quality check compares (the logits of every position are kept: n_ctx x vocab floats,
#: ~0.6 GB for a Qwen vocabulary, one model at a time).
QUALITY_TOKENS = 1024

# The time estimate's model of a CPU (``estimate_seconds``): rough figures of 2-core x86 machines, meant to give the
# order of the wait, not a measurement. A decoded token reads every weight byte once at DECODE_BYTES_PER_S, plus a
# fixed cost per token; a prompt token costs 2 x parameters FLOPs at PREFILL_FLOPS_PER_THREAD per thread, plus a
# fixed cost; a load reads the file at LOAD_BYTES_PER_S.
DECODE_BYTES_PER_S = 25e9
DECODE_TOKEN_S = 0.005
PREFILL_FLOPS_PER_THREAD = 80e9
PREFILL_TOKEN_S = 0.002
LOAD_BYTES_PER_S = 1e9
#: Characters per token of English text and JSON, to size the session and the first turn before loading a vocabulary.
CHARS_PER_TOKEN = 3.5
#: Tokens of a DR-Venus first turn (the system prompt with the tool schemas and a question), as the bench renders it.
FIRST_TURN_TOKENS = 600
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
    reused: Sequence[ConfigResult] = (),
    on_update: Callable[[BenchReport], None] = lambda report: None,
    notify: Callable[[str], None] = lambda line: None,
) -> BenchReport:
    """Measure each configuration (``measure_config``), the copy bandwidth, and, with a ``reference``, each other
    quant of the same checkpoint (same parameter count and vocabulary) for KL divergence and top-1 agreement on the
    session's text (agentic text: the DR-Venus system prompt, tool calls and tool results) or a fixed text without a
    session.

    Args:
        reused: results of an earlier run (``load_results``); one whose ``key`` is a configuration's
            ``measurement_key`` is taken as it is instead of measuring that configuration again.
        on_update: given the report so far after each configuration measured (the configurations not measured yet
            are its ``pending``), and the whole report at the end.
        notify: given the lines to show a user: what is reused, the expected time (before the first measurement),
            and a warning for each stage measured while other processes used the CPU.

    Raises:
        ValueError: no configuration.
    """
    if not configs:
        raise ValueError("give at least one model")
    started = time.monotonic()
    keys = [measurement_key(config, session) for config in configs]
    results = reusable_results(configs, reused, session=session)
    if results:
        notify(f"reused {len(results)} measured configuration{'s' * (len(results) != 1)} (same file and settings); "
               f"{len(configs) - len(results)} to measure")
    to_measure = [index for index in range(len(configs)) if index not in results]
    estimate = sum(estimate_seconds(configs[index], session=session) for index in to_measure)
    if reference is not None:
        without_quality = [config for index, config in enumerate(configs)
                           if index not in results or results[index].quality is None]
        estimate += _quality_estimate(without_quality, reference)
    notify(f"expected time: about {format_duration(estimate)} (an estimate from the model sizes, stages, repeats, "
           "prompt lengths and depths; other load on the machine makes it longer)")
    machine = {"cpu": cpu_name(), "cores": physical_cores(), "logical_cpus": os.cpu_count(),
               "python": platform.python_version(), "llama_cpp_python": version("llama_cpp_python")}
    bandwidth = memory_bandwidth(threads=max(c.threads for c in configs)) if measure_bandwidth else 0.0

    def report() -> BenchReport:
        return BenchReport([results[index] for index in sorted(results)], bandwidth, machine,
                           str(reference) if reference else None, estimated_s=round(estimate, 1),
                           elapsed_s=round(time.monotonic() - started, 1), reused=len(configs) - len(to_measure),
                           pending=[configs[index].name for index in range(len(configs)) if index not in results])

    if not results:  # on disk from the start: a run stopped during its first configuration still leaves a report
        on_update(report())
    for index in to_measure:
        config = configs[index]
        result = measure_config(config, session=session, progress=functools.partial(progress, config))
        result.key = keys[index]
        results[index] = result
        for stage, others in result.busy_stages().items():
            notify(f"warning: figures of {config.name}: {stage} were taken while other processes used {others:.2f} "
                   f"of {machine['cores']} cores (more than {BUSY_OTHERS_CORES:g}); rerun on a quiet machine")
        on_update(report())
    if reference is not None:
        _add_quality(list(results.values()), reference, session)
    final = report()
    on_update(final)
    return final


def measurement_key(config: BenchConfig, session: Trajectory | None) -> dict[str, Any]:
    """What a configuration's figures depend on: the file (path and SHA-256, from ``venus_edge.provenance``'s hash
    cache when the file is unchanged), every setting of ``config``, the session replayed (its id and a hash of its
    messages), the llama-bench used, and the venus-edge and llama-cpp-python versions. JSON-ready."""
    from venus_edge.provenance import model_file_record

    settings = {**{name: getattr(config, name) for name in config.__dataclass_fields__}, "model": str(config.model)}
    replayed = None
    if session is not None:
        digest = hashlib.sha256(json.dumps(session.messages, sort_keys=True).encode("utf-8")).hexdigest()
        replayed = {"session_id": session.session_id, "messages_sha256": digest}
    bench = llama_bench_path() if config.llama_bench else None
    key: dict[str, Any] = json.loads(json.dumps({
        "model_sha256": model_file_record(config.model).sha256, "settings": settings, "session": replayed,
        "llama_bench": str(bench) if bench else None, "venus_edge": version("venus-edge"),
        "llama_cpp_python": version("llama_cpp_python")}))  # tuples as lists, as the key is read back from JSON
    return key


def reusable_results(configs: Sequence[BenchConfig], earlier: Sequence[ConfigResult], *,
                     session: Trajectory | None) -> dict[int, ConfigResult]:
    """The results among ``earlier`` that ``run_bench`` reuses, by the index of their configuration in ``configs``:
    those whose ``key`` is the configuration's ``measurement_key``."""
    by_key = {json.dumps(result.key, sort_keys=True): result for result in earlier if result.key}
    found = {}
    for index, config in enumerate(configs):
        result = by_key.get(json.dumps(measurement_key(config, session), sort_keys=True))
        if result is not None:
            found[index] = result
    return found


def load_results(path: Path, *, reference: Path | None) -> list[ConfigResult]:
    """The results of an earlier ``report.json`` to reuse (none when there is no such file). Their quality figures
    are kept only when they were measured against the same ``reference``.

    Raises:
        ValueError: the file is not a bench report (the message names it and says what to do).
    """
    if not path.exists():
        return []
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        results = [ConfigResult.from_dict(result) for result in saved["results"]]
        earlier_reference = saved.get("reference")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} cannot be read as a bench report ({type(exc).__name__}: {exc}); pass --fresh to "
                         "measure everything again (it replaces the report) or choose another --out") from None
    if earlier_reference != (str(reference) if reference else None):
        for result in results:
            result.quality = None
    return results


def estimate_seconds(config: BenchConfig, *, session: Trajectory | None = None) -> float:
    """The expected seconds of ``measure_config(config)``, an estimate: from the file's size and parameter count (the
    model of a CPU in this module's constants), the stages, repeats, prompt lengths and depths, and the session's
    length in characters. It does not know this machine; other load makes any run longer.

    Raises:
        ModelNotFoundError, ModelLoadError: the file is missing or its header is not a GGUF's.
    """
    header = read_model_header(config.model)
    decode_s = DECODE_TOKEN_S + header.weight_bytes / DECODE_BYTES_PER_S  # one new token
    prefill_s = PREFILL_TOKEN_S + 2 * header.n_params / (PREFILL_FLOPS_PER_THREAD * config.threads)  # one prompt token
    load_s = 1.0 + config.model.stat().st_size / LOAD_BYTES_PER_S
    stages = len(STAGES) - (session is None)
    seconds = load_s + stages * 0.2  # the load, and the load sample before each stage
    seconds += config.repeats * sum(config.prompt_lengths) * prefill_s
    seconds += config.repeats * FIRST_TURN_TOKENS * prefill_s
    if session is not None:
        prompt_chars = sum(len(message["content"]) for message in session.messages)
        decoded = sum(min(REPLAY_MAX_TOKENS, len(m["content"]) / CHARS_PER_TOKEN) for m in session.messages
                      if m["role"] == "assistant")
        seconds += min(prompt_chars / CHARS_PER_TOKEN, config.n_ctx) * prefill_s + decoded * decode_s
    ours = sum(depth * prefill_s + config.repeats * config.decode_tokens * decode_s for depth in config.depths)
    raw = load_s + config.repeats * sum(depth * prefill_s + config.decode_tokens * decode_s for depth in config.depths)
    seconds += ours + raw
    if config.llama_bench and llama_bench_path() is not None:  # each test once to warm up, then --repeats times
        runs = config.repeats + 1
        seconds += runs * sum(depth * prefill_s + config.decode_tokens * decode_s for depth in config.depths)
        seconds += runs * sum(config.prompt_lengths) * prefill_s + 2 * load_s
    return seconds


def _quality_estimate(configs: Sequence[BenchConfig], reference: Path) -> float:
    """Seconds of the quality check: each other quant of the reference's checkpoint and the reference, loaded and
    run over ``QUALITY_TOKENS`` tokens (on 2 threads, as ``compare_quant`` leaves llama.cpp's default)."""
    reference_header = read_model_header(reference)
    seconds = 0.0
    for model in {config.model for config in configs if config.model.resolve() != reference.resolve()}:
        header = read_model_header(model)
        if header.n_params != reference_header.n_params:
            continue
        for checked in (model, reference):
            params = read_model_header(checked).n_params
            seconds += 1.0 + checked.stat().st_size / LOAD_BYTES_PER_S
            seconds += QUALITY_TOKENS * (PREFILL_TOKEN_S + 2 * params / (PREFILL_FLOPS_PER_THREAD * 2))
    return seconds


def _add_quality(results: list[ConfigResult], reference: Path, session: Trajectory | None) -> None:
    try:
        from venus_edge.quantize.evaluate import CALIBRATION_TEXT, compare_quant
    except ImportError:  # the quantize package is not installed
        for result in results:
            _note(result, "quality: needs venus_edge.quantize")
        return
    from venus_edge.engines.llama_cpp import off_main_thread

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
            _note(result, f"quality of {Path(model).name}: another checkpoint than {reference.name}")
            continue
        if result.quality is not None:  # reused from an earlier run against the same reference
            continue
        if model not in measured:  # llama.cpp compute off the main thread (venus_edge.bench.measure's docstring)
            comparison = off_main_thread(functools.partial(compare_quant, model, reference, text,
                                                           n_ctx=QUALITY_TOKENS))
            measured[model] = {"mean_kl": comparison.mean_kl, "top1_agreement": comparison.top1_agreement,
                               "ppl_ratio": comparison.ppl_ratio, "n_tokens": comparison.n_tokens}
        result.quality = measured[model]



def _note(result: ConfigResult, note: str) -> None:
    """Add ``note`` to what ``result`` did not measure, once (a reused result has it already)."""
    if note not in result.skipped:
        result.skipped.append(note)
