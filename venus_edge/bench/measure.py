"""The measurements of ``venus-edge bench``: one GGUF at one KV-cache type and thread count, beside its anchors.

For each configuration (``BenchConfig``), in this process, one after the other:

- load: seconds to load ``LlamaCppEngine``; resident memory as the planner splits it (weights, KV cache, compute
  buffers; ``venus_edge.memory.MemoryPlan``) and as measured (VmRSS growth over the load and after use);
- prefill tokens/s at several prompt lengths (fresh prompts, nothing reused from the KV cache);
- time to first token of a DR-Venus first turn (the system prompt with the search and visit schemas and a
  question, as a session starts without the prompt cache);
- one recorded agent session replayed turn by turn (``replay_session``): each turn's prompt is the recorded
  conversation so far, decoded greedily for as many tokens as the recorded turn (capped), so every
  configuration does the same work: seconds per turn, prompt tokens evaluated against reused;
- decode tokens/s at several context depths (greedy, ``decode_tokens`` new tokens after a prompt of that depth),
  taking turns run by run with raw llama-cpp-python (``Llama.generate``, same file, threads, KV type, prompt and
  sampler), so that other load on the machine hits both alike; the best run of each is kept. The raw anchor is
  built, decodes and is freed on the engine's own decode thread: llama.cpp in the wheel is built with OpenMP, which
  keeps one thread team per calling thread, and a second team (raw decoding on the main thread) fights the engine's
  team for the same cores and slows whichever runs after it (SmolLM2 on 2 cores: ours 71-80 tokens/s before raw
  ran on the main thread, 31-41 after; with raw on the decode thread, ours 72-87 and raw 77-87). No llama.cpp
  compute of a bench run happens on the main thread (the quality check runs on a thread of its own,
  ``venus_edge.engines.llama_cpp.off_main_thread``);
- llama.cpp's ``llama-bench`` (``-n`` at ``-d`` depths, ``-p`` at the prompt lengths; random tokens, no sampler);
- the load on the machine before and during each stage (``ConfigResult.stages``): the one-minute load average as it
  starts and ends, and the cores' worth of CPU that other processes used just before it (0.2 s while this process
  idles) and over it (``venus_edge.memory.machine.others_cores``: all CPUs' busy time minus this process's and its
  children's). Figures of a stage during which others used more than ``BUSY_OTHERS_CORES`` are not to be trusted
  (``ConfigResult.busy_stages``; the report marks them): llama.cpp's threads wait for each other at every step, so
  one busy core slows all of them, and llama-bench's spinning threads starve under contention more than ours.

``memory_bandwidth`` measures the machine's copy bandwidth; ``bandwidth_limit`` turns it into the decode speed
that bandwidth allows (every weight byte and the KV cache up to the depth read once per token).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import venus_edge.protocol as protocol
from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.memory.header import read_model_header
from venus_edge.memory.machine import CpuTimes, cpu_times, load_average, others_cores, physical_cores
from venus_edge.memory.plan import KVType, kv_bytes_per_token
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.trajectory import Trajectory, read_journal

__all__ = ["BUSY_OTHERS_CORES", "BenchConfig", "ConfigResult", "bandwidth_limit", "kv_per_token",
           "llama_bench_arguments", "llama_bench_path",
           "load_session", "measure_config", "memory_bandwidth", "replay_session", "shipped_session_path"]

GREEDY_DECODE = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0)
#: A text small models continue for a long time: decode figures need the model not to stop early.
COUNTING_PROMPT = (
    "<|im_start|>user\nCount from 1 to 1000, separated by commas.<|im_end|>\n<|im_start|>assistant\n1, 2, 3,"
)
FILLER = ("The lighthouse keeper wrote the weather into the log every hour: wind, sea state, visibility and the "
          "ships that passed the point. ")
FIRST_TURN_QUESTION = "Which pickle protocol does Python 3.11 use by default, and since which version?"
#: Turns of the replayed session decode at most this many tokens each (the recorded turn may be longer).
REPLAY_MAX_TOKENS = 256
#: A stage during which other processes used more than this many cores' worth of CPU is marked busy: a quarter of a
#: core taken from a 2-thread decode already costs it a few tenths of its speed, beyond run-to-run noise.
BUSY_OTHERS_CORES = 0.25
#: Seconds the load is sampled before each stage, this process idle (``others_before``).
BEFORE_SAMPLE_S = 0.2


def shipped_session_path() -> Path:
    """The recorded session shipped with the package: a DR-Venus-protocol research on the Python docs (Qwen2.5-
    Coder-0.5B, ``--strict --min-tool-calls 2``, extractive visits), as ``venus-edge research --out`` writes it."""
    return Path(__file__).with_name("data") / "session.jsonl"


@dataclass(frozen=True)
class BenchConfig:
    """One configuration to measure.

    Attributes:
        model: the GGUF file.
        kv_type: KV-cache type (``f16``, ``q8_0``, ``q4_0``; a quantized V cache turns flash attention on).
        threads: llama.cpp threads (default: the physical cores).
        n_ctx: the context window, tokens.
        prompt_lengths: prompt lengths of the prefill test, tokens (each < n_ctx).
        depths: context depths of the decode test, tokens.
        decode_tokens: new tokens per decode test.
        repeats: runs per test; the best is kept (the figure least disturbed by other load).
        llama_bench: also run ``llama-bench`` when it is built.
        draft: speculative decoding of the engine measured (``LlamaCppEngine``'s ``draft``: ``lookup``, a draft
            GGUF's path, or None for off).
        gpu_layers: layers on the GPU (llama.cpp's ``n_gpu_layers``; -1 all, 0 none) of the engine, the raw
            anchor and llama-bench (``-ngl``) alike; with any, all three run flash attention, as the engine does.
            Checked against the build when the engine loads (``engines.llama_load.check_gpu_layers``).
        observation_style: the style of the first turn's system prompt (``tools.observation_styles``; ``rl`` lists three
            tools). A replayed session is replayed as its journal holds it.
    """

    model: Path
    kv_type: KVType = "f16"
    threads: int = field(default_factory=physical_cores)
    n_ctx: int = 8192
    prompt_lengths: tuple[int, ...] = (128, 512, 2048)
    depths: tuple[int, ...] = (0, 2048, 6144)
    decode_tokens: int = 64
    repeats: int = 2
    llama_bench: bool = True
    draft: str | None = None
    gpu_layers: int = 0
    observation_style: protocol.ObservationStyle = protocol.DEFAULT_OBSERVATION_STYLE

    def __post_init__(self) -> None:
        protocol.observation_style(self.observation_style)  # an unknown style fails here, naming the styles
        longest = max([*self.prompt_lengths, *(d + self.decode_tokens + 64 for d in self.depths)])
        if longest > self.n_ctx:
            raise ValueError(f"prompt lengths and depths + decode tokens must fit in n_ctx {self.n_ctx}; the longest "
                             f"test needs {longest} tokens: raise --n-ctx or lower --prompt-lengths/--depths")

    @property
    def name(self) -> str:
        drafting = "" if self.draft is None else f" draft={Path(self.draft).name}"
        placed = "" if not self.gpu_layers else f" gpu={'all' if self.gpu_layers == -1 else self.gpu_layers}"
        return f"{self.model.name} kv={self.kv_type} t={self.threads}{drafting}{placed}"

    @property
    def flash_attn(self) -> bool:
        """Flash attention in all three measured: a quantized V cache needs it, and the engine turns it on with GPU
        layers (``LlamaCppEngine``'s ``flash_attn``)."""
        return self.kv_type in ("q8_0", "q4_0") or bool(self.gpu_layers)


@dataclass
class ConfigResult:
    """What ``measure_config`` measured for one ``BenchConfig``. Times in seconds, sizes in bytes, speeds in
    tokens/s; per-length and per-depth figures are dicts keyed by the length or depth (as strings in JSON).

    Attributes:
        config: the configuration, as a dict.
        model: name, file type, parameters, file size and weight (tensor data) bytes of the model.
        load_s: engine load time.
        memory: planned ``weights``, ``kv``, ``compute`` bytes and measured ``rss_loaded`` (VmRSS growth over the
            load) and ``rss_used`` (after all tests: the weights are paged in by then).
        prefill: tokens/s per prompt length.
        ttft_s: time to first token of a DR-Venus first turn of ``ttft_prompt_tokens`` tokens.
        decode: tokens/s per depth (ours); ``decode_tokens``: tokens decoded per depth (fewer if the model ended).
        raw_decode: the same through raw llama-cpp-python.
        llama_bench: ``{"decode": {depth: tokens/s}, "prefill": {length: tokens/s}}`` from llama-bench, or None
            when it is not built (``skipped`` says why).
        session: ``replay_session``'s figures, or None.
        quality: KL divergence and top-1 agreement against a reference file, or None.
        load_average: the one-minute load average as each stage started (keyed by stage) and at the ``end``; None
            where the system keeps none.
        stages: per stage, ``wall_s`` (its seconds), ``load_before`` and ``load_after`` (one-minute load average as
            it started and ended), ``others_before`` and ``others_during`` (cores' worth of CPU other processes used
            in the 0.2 s before it and over it; None without ``/proc/stat``).
        skipped: what was not measured, and why.
        key: what the figures depend on (``venus_edge.bench.run.measurement_key``: the file's SHA-256, every
            setting, the session replayed, the versions); a rerun reuses a result whose key matches. Empty when the
            result was not made by ``run_bench``.
    """

    config: dict[str, Any]
    model: dict[str, Any]
    load_s: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)
    prefill: dict[int, float] = field(default_factory=dict)
    ttft_s: float = 0.0
    ttft_prompt_tokens: int = 0
    decode: dict[int, float] = field(default_factory=dict)
    decode_tokens: dict[int, int] = field(default_factory=dict)
    raw_decode: dict[int, float] = field(default_factory=dict)
    llama_bench: dict[str, dict[int, float]] | None = None
    session: dict[str, Any] | None = None
    quality: dict[str, Any] | None = None
    load_average: dict[str, float | None] = field(default_factory=dict)
    stages: dict[str, dict[str, float | None]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    key: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = json.loads(json.dumps(asdict(self), default=str))  # paths and keys as JSON has them
        return plain

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> ConfigResult:
        """The result ``to_dict`` wrote (``report.json``'s ``results``), with the lengths and depths as ints again.

        Raises:
            KeyError, TypeError, ValueError: ``saved`` is not such a result.
        """
        def by_int(figures: dict[str, Any]) -> dict[int, Any]:
            return {int(key): value for key, value in figures.items()}

        bench = saved.get("llama_bench")
        return cls(**{**saved, **{name: by_int(saved.get(name) or {})
                                  for name in ("prefill", "decode", "decode_tokens", "raw_decode")},
                      "llama_bench": {kind: by_int(figures) for kind, figures in bench.items()} if bench else None})

    def busy_stages(self) -> dict[str, float]:
        """The stages during which other processes used more than ``BUSY_OTHERS_CORES`` cores' worth of CPU, with
        that figure: their speeds are lower and noisier than on a quiet machine."""
        during = {name: load.get("others_during") for name, load in self.stages.items()}
        return {name: others for name, others in during.items() if others is not None and others > BUSY_OTHERS_CORES}


# ---------------------------------------------------------------------------------------------- the machine
def _rss_bytes() -> int:
    """This process's resident set (VmRSS), bytes."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def memory_bandwidth(*, size_bytes: int = 256 * 2**20, threads: int | None = None, repeats: int = 3) -> float:
    """The machine's memory copy bandwidth, bytes/s: ``threads`` threads each copy their share of a buffer of
    ``size_bytes`` (numpy releases the GIL while it copies), best of ``repeats``; each copied byte counts twice
    (read and written), as STREAM's Copy does. A buffer far larger than the caches measures RAM, not cache.

    Raises:
        ValueError: ``size_bytes`` below 1 MiB.
    """
    if size_bytes < 2**20:
        raise ValueError(f"size_bytes must be at least 1 MiB, got {size_bytes}")
    threads = threads or physical_cores()
    source = np.ones(size_bytes // 8, dtype=np.float64)
    target = np.empty_like(source)
    bounds = np.linspace(0, source.size, threads + 1, dtype=np.int64)

    def copy(part: int) -> None:
        np.copyto(target[bounds[part]: bounds[part + 1]], source[bounds[part]: bounds[part + 1]])

    times = []
    for _ in range(repeats + 1):
        workers = [threading.Thread(target=copy, args=(part,)) for part in range(threads)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        times.append(time.perf_counter() - start)
    return 2 * source.nbytes / min(times[1:])  # the first pass faults the target's pages in


def bandwidth_limit(bandwidth: float, weights_bytes: int, kv_bytes_per_token_: int, depth: int) -> float:
    """The decode tokens/s that ``bandwidth`` (bytes/s) allows when each token reads every weight byte and the KV
    cache of ``depth`` tokens once: ``bandwidth / (weights + kv_per_token * depth)``. Decode on a CPU is
    memory-bound, so a measured speed near this is near what the hardware can do."""
    return bandwidth / (weights_bytes + kv_bytes_per_token_ * depth)


# ---------------------------------------------------------------------------------------------- one config
def _filler_ids(engine: LlamaCppEngine, n_tokens: int) -> list[int]:
    unit = engine.tokenize(FILLER, parse_special=False)
    return (unit * (n_tokens // len(unit) + 1))[:n_tokens]


def _fresh_prompt(engine: LlamaCppEngine, body: list[int], salt: int) -> list[int]:
    """``body`` behind a different first token each time, so that nothing is reused from the KV cache."""
    first = engine.tokenize(f"{salt % 97} ", parse_special=False)[:1]
    return first + body[: len(body) - 1]


def _decode_prompt(engine: LlamaCppEngine, depth: int) -> list[int]:
    tail = engine.tokenize(COUNTING_PROMPT)
    return _filler_ids(engine, max(0, depth - len(tail))) + tail


def measure_config(config: BenchConfig, *, session: Trajectory | None = None,
                   progress: Callable[[str], None] = lambda stage: None) -> ConfigResult:
    """Measure one configuration (module docstring); ``progress`` is told each stage as it starts.

    Raises:
        ModelNotFoundError, ModelLoadError: the file is missing or llama.cpp refuses it.
    """
    header = read_model_header(config.model)
    result = ConfigResult(config={**asdict(config), "model": str(config.model)}, model={
        "name": config.model.name, "file_type": header.file_type, "n_params": header.n_params,
        "file_bytes": config.model.stat().st_size, "weight_bytes": header.weight_bytes})

    stage = _StageClock(result, progress)
    stage("load")
    before = _rss_bytes()
    start = time.perf_counter()
    engine = LlamaCppEngine(config.model, n_ctx=config.n_ctx, n_threads=config.threads, kv_type=config.kv_type,
                            helper_n_ctx=0, draft=config.draft, gpu_layers=config.gpu_layers)
    try:
        result.load_s = time.perf_counter() - start
        plan = engine.memory_plan
        result.memory = {"weights": plan.weights_bytes, "kv": plan.kv_bytes, "compute": plan.compute_bytes,
                         "rss_loaded": _rss_bytes() - before}
        stage("prefill")
        salt = 0
        for length in config.prompt_lengths:
            speeds = []
            for _ in range(config.repeats):
                salt += 1
                completion = engine.generate(_fresh_prompt(engine, _filler_ids(engine, length), salt),
                                             sampling=replace(GREEDY_DECODE, max_tokens=1))
                assert completion.stats.prompt_tokens_reused == 0, "a prefill test reused the KV cache"
                speeds.append(completion.stats.prefill_tokens_per_s)
            result.prefill[length] = max(speeds)
        stage("first turn")
        first_turn = engine.tokenize(protocol.render_messages([
            {"role": "system", "content": protocol.render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], "2026-12-01",
                                                                   style=config.observation_style)},
            {"role": "user", "content": FIRST_TURN_QUESTION}]))
        ttfts = []
        for _ in range(config.repeats):
            salt += 1
            engine.generate(_fresh_prompt(engine, _filler_ids(engine, 8), salt),
                            sampling=replace(GREEDY_DECODE, max_tokens=1))  # evict the first turn
            completion = engine.generate(first_turn, sampling=replace(GREEDY_DECODE, max_tokens=1))
            ttfts.append(completion.stats.prefill_s)
        result.ttft_s, result.ttft_prompt_tokens = min(ttfts), len(first_turn)
        if session is not None:
            stage("session")
            result.session = replay_session(engine, session)
        result.memory["rss_used"] = _rss_bytes() - before
        stage("decode, and raw llama-cpp-python")
        # The raw anchor lives on the engine's decode thread (module docstring: one OpenMP team per calling thread);
        # the engine's private runner is used as is, so that the engines keep no bench-only method.
        on_decode_thread = engine._on_decode_thread
        raw = on_decode_thread(_RawLlama, config)
        try:  # the two take turns, so that other load on the machine hits both alike
            for depth in config.depths:
                prompt = _decode_prompt(engine, depth)
                ours, theirs = [], []
                for _ in range(config.repeats):
                    sampling = replace(GREEDY_DECODE, max_tokens=config.decode_tokens)
                    ours.append(engine.generate(prompt, sampling=sampling).stats)
                    theirs.append(on_decode_thread(raw.decode_speed, prompt, config.decode_tokens))
                best = max(ours, key=lambda stats: stats.decode_tokens_per_s)
                result.decode[depth] = best.decode_tokens_per_s
                result.decode_tokens[depth] = best.tokens_decoded
                result.raw_decode[depth] = max(theirs)
        finally:
            on_decode_thread(raw.close)
    finally:
        engine.close()
    stage("llama-bench")
    result.llama_bench = _llama_bench(config, result.skipped)
    stage.finish()
    result.load_average["end"] = load_average()
    return result


class _StageClock:
    """Calling it with a stage's name ends the stage before (if any) and starts that one: the load before it is read
    (``ConfigResult.stages``), ``progress`` is told, and the clock starts after that, so the callback's own work is
    not counted."""

    def __init__(self, result: ConfigResult, progress: Callable[[str], None]) -> None:
        self.result, self.progress = result, progress
        self.name: str | None = None
        self.started: CpuTimes | None = None
        self.started_wall = 0.0

    def __call__(self, name: str) -> None:
        self.finish()
        load_before = self.result.load_average[name] = load_average()
        idle_start = cpu_times()
        time.sleep(BEFORE_SAMPLE_S)
        idle_end = cpu_times()
        others_before = others_cores(idle_start, idle_end) if idle_start and idle_end else None
        self.result.stages[name] = {"load_before": load_before, "others_before": _rounded(others_before)}
        self.progress(name)
        self.name, self.started, self.started_wall = name, cpu_times(), time.monotonic()

    def finish(self) -> None:
        """End the running stage: its wall time, the load average now and other processes' CPU over it."""
        if self.name is None:
            return
        ended = cpu_times()
        load = self.result.stages[self.name]
        load["wall_s"] = round(time.monotonic() - self.started_wall, 3)
        load["others_during"] = _rounded(others_cores(self.started, ended)) if self.started and ended else None
        load["load_after"] = load_average()
        self.name = None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class _RawLlama:
    """The anchor: ``llama_cpp.Llama`` on the same file, threads, n_ctx, KV type and GPU layers, decoding token by
    token with the same greedy sampler (no text, no stop strings, no statistics). Build, use and close it on the
    engine's decode thread (module docstring)."""

    def __init__(self, config: BenchConfig) -> None:
        import llama_cpp

        types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
        self.llm = llama_cpp.Llama(str(config.model), n_ctx=config.n_ctx, n_threads=config.threads,
                                   n_threads_batch=config.threads, n_batch=512, type_k=types[config.kv_type],
                                   type_v=types[config.kv_type], flash_attn=config.flash_attn,
                                   n_gpu_layers=config.gpu_layers, verbose=False)

    def decode_speed(self, prompt: list[int], tokens: int) -> float:
        """Tokens/s from the first sampled token to the ``tokens``-th (or the end-of-generation token)."""
        self.llm.reset()
        count, first = 0, 0.0
        for token in self.llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            count += 1
            if count == 1:
                first = time.perf_counter()
            if count == tokens or token == self.llm.token_eos():
                break
        return (count - 1) / (time.perf_counter() - first) if count > 1 else 0.0

    def close(self) -> None:
        self.llm.close()


def llama_bench_path() -> Path | None:
    """llama.cpp's ``llama-bench`` as ``scripts/build_llama_tools.sh`` builds it (``venus_edge.testing.
    llama_tool_path``: ``$VENUS_EDGE_CACHE/bin``), or on PATH; None when neither has it."""
    from venus_edge.testing import llama_tool_path

    try:
        return llama_tool_path("llama-bench")
    except FileNotFoundError:
        pass
    found = shutil.which("llama-bench")
    return Path(found) if found else None


def _llama_bench(config: BenchConfig, skipped: list[str]) -> dict[str, dict[int, float]] | None:
    if not config.llama_bench:
        return None
    binary = llama_bench_path()
    if binary is None:
        skipped.append("llama-bench: not built (bash scripts/build_llama_tools.sh builds it)")
        return None
    figures: dict[str, dict[int, float]] = {}
    for kind, arguments in llama_bench_arguments(config).items():
        done = subprocess.run([str(binary), *arguments], capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            skipped.append(f"llama-bench {kind}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
            continue
        rows = json.loads(done.stdout)
        key = "n_depth" if kind == "decode" else "n_prompt"
        figures[kind] = {int(row[key]): float(row["avg_ts"]) for row in rows}
    return figures or None


def llama_bench_arguments(config: BenchConfig) -> dict[str, list[str]]:
    """``llama-bench``'s arguments (without the binary) for the decode and the prefill runs of ``config``: the same
    file, threads, KV type, flash attention and GPU layers as the engine (``-ngl``, -1 all as in llama.cpp's
    ``llama_model::n_gpu_layers``; llama-bench's own default is -1, so 0 is always passed), JSON out."""
    common = ["-m", str(config.model), "-t", str(config.threads), "-ctk", config.kv_type, "-ctv", config.kv_type,
              "-fa", "on" if config.flash_attn else "off", "-ngl", str(config.gpu_layers), "-r", str(config.repeats),
              "-o", "json"]
    return {
        "decode": [*common, "-p", "0", "-n", str(config.decode_tokens), "-d", ",".join(map(str, config.depths))],
        "prefill": [*common, "-p", ",".join(map(str, config.prompt_lengths)), "-n", "0"],
    }


# ---------------------------------------------------------------------------------------------- a session
def replay_session(engine: Any, trajectory: Trajectory, *, max_tokens: int = REPLAY_MAX_TOKENS,
                   keep_texts: bool = False) -> dict[str, Any]:
    """Replay a recorded session on ``engine``: for each assistant turn, the conversation before it (as recorded,
    tool results included) is the prompt, decoded greedily for as many tokens as the recorded turn had (at most
    ``max_tokens``); then the recorded turn, not the decoded one, joins the conversation. Each configuration does
    the same work, and the KV cache is reused as in a live session (the prompt grows by the last turn and its
    tool result).

    ``engine``: any ``Engine`` (``tokenize``, ``n_ctx``, ``generate``): ours, the OpenAI-compatible one against a
    llama-server, or a benchmark's raw llama-cpp-python adapter. Turns whose prompt no longer fits in its
    ``n_ctx`` are not replayed (``turns_not_replayed``).

    Returns:
        ``{"session_id", "turns": [{"prompt_tokens", "evaluated", "reused", "decoded", "prefill_s", "decode_s",
        "total_s", "drafted", "accepted", "verify_steps"}], "turns_not_replayed", "total_s", "wall_s", "evaluated",
        "reused", "decoded", "prefill_s", "decode_s", "decode_tok_s", "prefill_tok_s", "drafted", "accepted",
        "verify_steps", "tokens_per_step"}`` (seconds; tokens per verification step None without drafting), and
        ``"texts"``, each turn's decoded text, with ``keep_texts``.

    Raises:
        ValueError: the session has no assistant turn, or its first one does not fit in n_ctx.
    """
    messages = trajectory.messages
    turns, texts = [], []
    recorded_turns = sum(message["role"] == "assistant" for message in messages)
    start = time.perf_counter()
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = engine.tokenize(protocol.render_messages(messages[:index]))
        recorded = engine.tokenize(message["content"], parse_special=False)
        budget = min(max_tokens, max(1, len(recorded)), engine.n_ctx - len(prompt) - 1)
        if budget < 1:
            break
        completion = engine.generate(prompt, sampling=replace(GREEDY_DECODE, max_tokens=budget))
        stats = completion.stats
        texts.append(completion.text)
        turns.append({"prompt_tokens": stats.prompt_tokens, "evaluated": stats.prompt_tokens_evaluated,
                      "reused": stats.prompt_tokens_reused, "decoded": stats.tokens_decoded,
                      "prefill_s": round(stats.prefill_s, 4), "decode_s": round(stats.decode_s, 4),
                      "total_s": round(stats.prefill_s + stats.decode_s, 4), "drafted": stats.drafted_tokens,
                      "accepted": stats.accepted_tokens, "verify_steps": stats.verify_steps})
    wall = time.perf_counter() - start
    if not turns:
        raise ValueError(f"session {trajectory.session_id} has no assistant turn that fits in n_ctx {engine.n_ctx}")
    totals = {key: sum(turn[key] for turn in turns)
              for key in ("evaluated", "reused", "decoded", "drafted", "accepted", "verify_steps")}
    prefill_s, decode_s = sum(t["prefill_s"] for t in turns), sum(t["decode_s"] for t in turns)
    result = {"session_id": trajectory.session_id, "turns": turns, "turns_not_replayed": recorded_turns - len(turns),
              "total_s": round(sum(t["total_s"] for t in turns), 3), "wall_s": round(wall, 3), **totals,
              "prefill_s": round(prefill_s, 3), "decode_s": round(decode_s, 3),
              "decode_tok_s": round(totals["decoded"] / decode_s, 2) if decode_s else 0.0,
              "prefill_tok_s": round(totals["evaluated"] / prefill_s, 2) if prefill_s else 0.0,
              "tokens_per_step": round((totals["verify_steps"] + totals["accepted"]) / totals["verify_steps"], 3)
              if totals["verify_steps"] else None}
    if keep_texts:
        result["texts"] = texts
    return result


def load_session(path: Path) -> Trajectory:
    """The longest session of a journal (``venus-edge research --out``).

    Raises:
        TrajectoryError: no such file; ValueError: no session in it.
    """
    sessions = read_journal(path).trajectories
    if not sessions:
        raise ValueError(f"{path} holds no session")
    return max(sessions, key=lambda t: len(t.turns))


def kv_per_token(model: Path, kv_type: str) -> int:
    """KV-cache bytes one token takes (``venus_edge.memory.plan.kv_bytes_per_token``)."""
    return kv_bytes_per_token(read_model_header(model), kv_type)
