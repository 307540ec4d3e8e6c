"""Setting up a research session: ``SessionSettings``, a frozen record of everything that sets one up (model,
engine, tools, limits, sampling), built once (by the CLI from its flags, ``SessionSettings.from_args``; by a
server; in Python), and ``open_session``, which builds the tools, loads the engine and closes both. The flags
themselves are the CLI's (``venus_edge.flags``).

Engines: ``engine="llama"`` (default) runs the GGUF in-process (``LlamaCppEngine``; with ``samples > 1``, a
``BatchedLlamaCppEngine`` decoding the samples as one batch); ``engine="openai"`` with ``base_url`` talks to a model
server (``OpenAIEngine``; concurrent samples become concurrent requests, which the server batches when it has the
slots, e.g. ``llama-server -np 4``).

    settings = SessionSettings(model="model.gguf", corpus=(Path("docs"),), max_turns=20)
    with open_session(settings) as session:
        result = session.agent().run("When was tomllib added to Python?")
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from venus_edge.engines.models import DEFAULT_MODEL
from venus_edge.errors import VenusEdgeError

if TYPE_CHECKING:
    import argparse

    from venus_edge.agent import Agent, AgentConfig
    from venus_edge.engines.base import Engine, TextCompleter
    from venus_edge.memory.plan import KVType
    from venus_edge.pacing import PaceConfig
    from venus_edge.result import Result
    from venus_edge.tools.observation_styles import ObservationStyle

__all__: list[str] = []

#: Sample i of a question samples with seed + i * SAMPLE_SEED_STRIDE (the agent adds one per attempt).
SAMPLE_SEED_STRIDE = 100_003
#: The window of each sequence when ``samples > 1`` and ``n_ctx`` is not given: the batched KV cache holds
#: ``samples`` times this many tokens.
DEFAULT_SAMPLE_N_CTX = 8_192


class SetupError(VenusEdgeError):
    """A session could not be set up from its settings (a corpus, a tool setting); the CLI exits with code 3.

    ``names_settings``: the message writes the settings it names as ``{setting}`` fields (``VenusEdgeError``)."""

    def __init__(self, message: str, *, names_settings: bool = False) -> None:
        super().__init__(self._named(message) if names_settings else message)


@dataclass(frozen=True)
class SessionSettings:
    """Everything that sets up a research session. Defaults are the CLI's (and DR-Venus's limits).

    Attributes:
        model: a GGUF path, or a hub repo ``owner/name[:file.gguf]`` (None: ``DEFAULT_MODEL``); with
            ``engine="openai"``, the server's model name (None: its first).
        engine: ``llama`` (llama.cpp in this process) or ``openai`` (a server at ``base_url``).
        base_url: the OpenAI-compatible server of ``engine="openai"``.
        api_key: bearer token for ``base_url``.
        corpus: folders of HTML/Markdown/text/PDF documents to search and visit.
        web: also search the web (needs the web extra).
        record: record every tool call's result under this folder.
        replay: answer tool calls only from the records in this folder.
        allow_network: private networks (CIDR) visit may fetch.
        search_results: results per search query.
        extractive_visit: visit shows the passages that match the goal, without a model-written summary.
        max_turns: research turns at most, then one more turn asked for the final answer (``AgentConfig``).
        max_tokens: new tokens per turn at most.
        time_limit_s: wall-clock limit of a session, in seconds.
        n_ctx: context window in tokens (of each sample's sequence when several run at once); None: the memory
            planner's choice (``DEFAULT_SAMPLE_N_CTX`` per sequence with several samples).
        threads: CPU threads (None: the physical cores).
        kv_type: KV-cache type (``f16``, ``q8_0``, ``q4_0``; None: the memory planner's choice).
        ram_bytes: RAM budget in bytes for the model and its context (None: the memory available now).
        draft: speculative decoding (``LlamaCppEngine``'s ``draft``): ``lookup``, the path of a draft GGUF with the
            model's vocabulary, or None (off). In-process engines only; several samples at once draft by lookup only.
        gpu_layers: layers on the GPU (``LlamaCppEngine``'s ``gpu_layers``: -1 all, 0 none); in-process engines
            built with a GPU backend only.
        prompt_cache: save and restore the system prompt's KV state (README, Prompt cache).
        temperature: sampling temperature.
        seed: sampling seed.
        strict: constrain every turn with a grammar of the protocol.
        min_tool_calls: with ``strict``, tool calls required before an answer is allowed.
        required_calls: with ``strict``, the tools of the first calls, in order, before an answer is allowed.
        context_policy: at the context budget: ``force-answer``, ``keep-last-k`` or ``summarize``.
        keep_last: tool results kept whole by ``keep-last-k``.
        answer_reserve_tokens: tokens of n_ctx always kept free for the final answer, at least; None: a quarter of
            n_ctx, at most 1,024 (``agent.default_answer_reserve``).
        python: turn the ``PythonInterpreter`` tool on (``venus_edge.tools.python_interpreter``): the model's code
            runs in a sandbox with limits and no network. Off, a call gets the RL environment's answer for a tool it
            did not have (``Error: Tool PythonInterpreter not found``) and the prompt does not list the tool.
        python_unsandboxed_network: with ``python``, run the code even where this machine cannot make the sandbox's
            namespaces (no network or filesystem isolation then); without it such a session is refused.
        observation_style: how the system prompt, the observations and the notices are rendered
            (``tools.observation_styles``): ``inference``, as the authors' inference code (default), or ``rl``, as the
            RL rollouts that ``DR-Venus-4B-RL`` was trained on.
        pace: pace the session for a device that heats and drains (``venus_edge.pacing.PaceConfig``: lower the
            threads, pause to cool down, stop on a low battery, resumable); None (default): off.
    """

    model: str | None = None
    engine: Literal["llama", "openai"] = "llama"
    base_url: str | None = None
    api_key: str | None = None
    corpus: tuple[Path, ...] = ()
    web: bool = False
    record: Path | None = None
    replay: Path | None = None
    allow_network: tuple[str, ...] = ()
    search_results: int = 10
    extractive_visit: bool = False
    max_turns: int = 200
    max_tokens: int = 15_000
    time_limit_s: float = 9_000.0
    n_ctx: int | None = None
    threads: int | None = None
    kv_type: KVType | None = None
    ram_bytes: int | None = None
    draft: str | None = None
    gpu_layers: int = 0
    prompt_cache: bool = True
    temperature: float = 1.0
    seed: int = 0
    strict: bool = False
    min_tool_calls: int = 0
    required_calls: tuple[str, ...] = ()
    context_policy: str = "force-answer"
    keep_last: int = 3
    answer_reserve_tokens: int | None = None
    python: bool = False
    python_unsandboxed_network: bool = False
    observation_style: ObservationStyle = "inference"  # protocol.DEFAULT_OBSERVATION_STYLE (a test checks)
    pace: PaceConfig | None = None

    def __post_init__(self) -> None:
        from venus_edge.tools.observation_styles import observation_style  # here: `venus-edge --help` loads no protocol

        observation_style(self.observation_style)  # an unknown style fails here, naming the styles
        if self.engine == "openai" and not self.base_url:
            raise ValueError("engine 'openai' needs base_url, the model server (e.g. http://127.0.0.1:8080)")
        if self.python_unsandboxed_network and not self.python:
            raise ValueError("python_unsandboxed_network goes with python: it lets the Python tool run without its "
                             "network sandbox; turn the tool on (python=True), or leave both off")
        if self.python and self.strict:
            raise ValueError("strict mode's grammar has no <code> block, so a PythonInterpreter call could carry no "
                             "code; turn off strict or python")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SessionSettings:
        """The settings the session flags describe (``venus_edge.flags.add_session_arguments``), for the CLI."""
        return cls(
            model=args.model, engine=args.engine, base_url=args.base_url, api_key=args.api_key,
            corpus=tuple(args.corpus), web=args.web, record=args.record, replay=args.replay,
            allow_network=tuple(args.allow_network), search_results=args.search_results,
            extractive_visit=args.extractive_visit, max_turns=args.max_turns, max_tokens=args.max_tokens,
            time_limit_s=args.time_limit, n_ctx=args.n_ctx, threads=args.threads, kv_type=args.kv_type,
            ram_bytes=args.ram, draft=args.draft, gpu_layers=args.gpu_layers, prompt_cache=not args.no_prompt_cache,
            temperature=args.temperature,
            seed=args.seed,
            strict=args.strict, min_tool_calls=args.min_tool_calls, required_calls=tuple(args.require_calls),
            context_policy=args.context_policy,
            keep_last=args.keep_last, answer_reserve_tokens=args.answer_reserve,
            python=args.python, python_unsandboxed_network=args.python_unsandboxed_network,
            observation_style=args.observation_style,
        )

    def agent_config(self, *, logprobs: bool = False) -> AgentConfig:
        """The agent config these settings describe; ``logprobs`` asks for per-token log-probabilities."""
        from venus_edge.agent import AgentConfig
        from venus_edge.engines.base import SamplingParams

        return AgentConfig(
            max_turns=self.max_turns, time_limit_s=self.time_limit_s, strict=self.strict, seed=self.seed,
            min_tool_calls=self.min_tool_calls, required_calls=self.required_calls,
            context_policy=self.context_policy, keep_last=self.keep_last,
            answer_reserve_tokens=self.answer_reserve_tokens, observation_style=self.observation_style,
            sampling=SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens, logprobs=logprobs),
        )


@dataclass
class Session:
    """What ``open_session`` set up: the engines, the tools and the agent config.

    Attributes:
        engines: one engine per rollout that may decode at the same time: the sequences of a
            ``BatchedLlamaCppEngine`` (``samples > 1`` in-process), else the one engine.
        tools: the tools of every agent of the session.
        config: the agent config the settings describe.
        completer: the engine's chat completion (visit's evidence, a judge, answer aggregation); None where the
            engine has none (a training engine).
        pace: the pacing of every agent of the session (``SessionSettings.pace``), or None.
    """

    engines: list[Engine]
    tools: list[Any]
    config: AgentConfig
    completer: TextCompleter | None = None
    pace: PaceConfig | None = None

    @property
    def engine(self) -> Engine:
        """The engine of a single rollout (a batched engine's first sequence); it also completes text."""
        return self.engines[0]

    @property
    def concurrent(self) -> bool:
        """Rollouts may run at the same time: a batched engine's sequences, or an engine that takes concurrent
        requests (``Engine.concurrent_rollouts``: a model server)."""
        return len(self.engines) > 1 or self.engine.concurrent_rollouts

    def parallel_engines(self, n: int) -> list[Engine]:
        """The engines of up to ``n`` rollouts that decode at the same time: the batched engine's sequences, the
        one engine ``n`` times when it takes concurrent requests, else the one engine alone.

        Raises:
            ValueError: more rollouts than the batched engine has sequences.
        """
        if not self.concurrent:
            return [self.engine]
        if len(self.engines) == 1:
            return [self.engine] * n
        if n > len(self.engines):
            raise ValueError(f"{n} rollouts at once, but the batched engine has {len(self.engines)} sequences")
        return self.engines[:n]

    def agent(self, index: int = 0, *, engine: Engine | None = None,
              trajectory_path: str | os.PathLike[str] | None = None) -> Agent:
        """The agent of sample ``index``: its own seed, ``SAMPLE_SEED_STRIDE`` apart (sample 0 has the config's)."""
        from venus_edge.agent import Agent

        config = replace(self.config, seed=self.config.seed + index * SAMPLE_SEED_STRIDE) if index else self.config
        return Agent(engine or self.engine, self.tools, config=config, trajectory_path=trajectory_path, pace=self.pace)

    def rollouts(self, question: str, indices: Sequence[int], *,
                 trajectory_path: str | os.PathLike[str] | None = None) -> Iterator[tuple[int, Result]]:
        """Research ``question`` once per sample index, at the same time when the engines allow it
        (``parallel_engines``), yielding ``(index, Result)`` as each rollout finishes."""
        if not self.concurrent:
            for index in indices:
                yield index, self.agent(index, trajectory_path=trajectory_path).run(question)
            return
        agents = {index: self.agent(index, engine=engine, trajectory_path=trajectory_path)
                  for index, engine in zip(indices, self.parallel_engines(len(indices)))}
        with ThreadPoolExecutor(max_workers=len(agents), thread_name_prefix="rollout") as pool:
            futures = {pool.submit(agent.run, question): index for index, agent in agents.items()}
            for future in as_completed(futures):
                yield futures[future], future.result()


@contextlib.contextmanager
def open_session(settings: SessionSettings, *, logprobs: bool = False, samples: int = 1) -> Iterator[Session]:
    """The engine, tools and agent config ``settings`` describe. Tools are built first (corpora indexed, settings
    checked), so their errors come before a model load or download; everything is closed on exit.

    Args:
        settings: the session's settings.
        logprobs: ask the engine for per-token log-probabilities (confidence aggregation).
        samples: rollouts that run at once; above 1 with ``engine="llama"``, a batched engine with that many
            sequences (each with a window of ``settings.n_ctx``, default ``DEFAULT_SAMPLE_N_CTX``).

    Raises:
        SetupError: a tool cannot be built (a corpus without documents, a missing extra), or ``kv_type`` /
            ``ram_bytes`` / ``draft`` were given where they do not apply.
        ModelLoadError: the model, or the draft model, cannot be loaded (a draft GGUF with another vocabulary).
    """
    # Imported here so that `venus-edge --help` stays fast.
    from venus_edge.toolbox import close_tools, default_tools
    from venus_edge.tools.errors import ToolError

    completer = _EngineWhenLoaded()
    try:
        tools = default_tools(
            list(settings.corpus), web=settings.web, completer=None if settings.extractive_visit else completer,
            allowed_networks=list(settings.allow_network), record_dir=settings.record, replay_dir=settings.replay,
            search_results=settings.search_results, observation_style=settings.observation_style,
        )
        tools.append(python_tool(settings))
    except (ToolError, ValueError, ImportError, OSError) as exc:
        raise SetupError(str(exc)) from exc
    loaded = None
    try:
        loaded = _load_engine(settings, samples)
        engines = [loaded.sequence(i) for i in range(samples)] if samples > 1 and settings.engine == "llama" \
            else [loaded]
        completer.engine = engines[0]
        yield Session(engines, tools, settings.agent_config(logprobs=logprobs), completer, pace=settings.pace)
    finally:
        close_tools(tools)
        if loaded is not None:
            loaded.close()


def python_tool(settings: SessionSettings) -> Any:
    """The session's ``PythonInterpreter``: the sandboxed tool with ``python``, else the unlisted stand-in that gives
    the RL environment's answer; recorded with ``record``; with ``replay``, answered from the records (no code runs,
    and no sandbox is made).

    Raises:
        SandboxUnavailable: ``python`` where the sandbox cannot isolate code and ``python_unsandboxed_network`` is off.
    """
    from venus_edge.tools.python_interpreter import (
        ARGUMENTS_SCHEMA,
        PYTHON_INTERPRETER_NAME,
        PYTHON_INTERPRETER_SCHEMA,
        PythonInterpreterTool,
        python_interpreter_off,
    )
    from venus_edge.tools.replay import RecordingTool, ReplayTool

    if settings.replay is not None:  # a replay runs no code either: the recorded output answers
        return ReplayTool(PYTHON_INTERPRETER_NAME, PYTHON_INTERPRETER_SCHEMA, settings.replay,
                          arguments=ARGUMENTS_SCHEMA, listed=settings.python)
    tool = (PythonInterpreterTool(unsandboxed_network=settings.python_unsandboxed_network) if settings.python
            else python_interpreter_off())
    return RecordingTool(tool, settings.record) if settings.record is not None else tool


def _load_engine(settings: SessionSettings, samples: int) -> Any:
    """The engine ``settings`` name: an ``OpenAIEngine``, a ``BatchedLlamaCppEngine`` of ``samples`` sequences
    (``samples > 1``), or a ``LlamaCppEngine``."""
    if (settings.kv_type or settings.ram_bytes) and (settings.engine == "openai" or samples > 1):
        raise SetupError("--kv-type and --ram plan the in-process engine of one rollout at a time; they do not "
                         "apply to --engine openai or to several samples at once")
    if settings.gpu_layers and settings.engine == "openai":
        raise SetupError("--gpu-layers places the in-process engine's layers; it does not apply to --engine openai "
                         "(the model server has its own option, e.g. llama-server -ngl): drop --gpu-layers")
    if settings.gpu_layers and settings.engine != "openai":
        from venus_edge.engines.llama_load import check_gpu_layers

        try:  # before any model loads: refused in one line
            check_gpu_layers(settings.gpu_layers, asked=f"--gpu-layers {settings.gpu_layers}")
        except ValueError as exc:
            raise SetupError(str(exc)) from exc
    if settings.draft and settings.engine == "openai":
        raise SetupError("--draft (speculative decoding) runs in the in-process engine; it does not apply to --engine "
                         "openai (a model server drafts with its own options, e.g. llama-server --model-draft): drop "
                         "--draft")
    if settings.draft not in (None, "lookup") and samples > 1:
        raise SetupError("--draft with a draft model runs with one rollout at a time; several at once (--samples, "
                         "serve --slots, eval --parallel) draft by prompt lookup only: use --draft lookup, or drop "
                         "--draft")
    if settings.engine == "openai":
        from venus_edge.engines.openai import OpenAIEngine

        return OpenAIEngine(str(settings.base_url), model=settings.model, api_key=settings.api_key,
                            n_ctx=settings.n_ctx)
    from venus_edge.engines.models import resolve_model

    path = resolve_model(settings.model or DEFAULT_MODEL)
    if samples > 1:
        from venus_edge.engines.batched import BatchedLlamaCppEngine

        window = settings.n_ctx or DEFAULT_SAMPLE_N_CTX
        _refuse_samples_beyond_machine(path, samples, window)
        return BatchedLlamaCppEngine(path, n_seq=samples, n_ctx=window * samples, n_threads=settings.threads,
                                     draft=settings.draft, gpu_layers=settings.gpu_layers)
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.engines.prompt_cache import default_prompt_cache_dir

    prompt_cache_dir = default_prompt_cache_dir() if settings.prompt_cache else None
    return LlamaCppEngine(path, n_ctx=settings.n_ctx, n_threads=settings.threads, seed=settings.seed,
                          prompt_cache_dir=prompt_cache_dir, kv_type=settings.kv_type, ram_bytes=settings.ram_bytes,
                          draft=settings.draft, gpu_layers=settings.gpu_layers)


def _refuse_samples_beyond_machine(path: Path, samples: int, window: int) -> None:
    """Refuse ``samples`` sequences of ``window`` tokens whose one KV cache needs more memory than the machine has,
    naming ``--samples`` and how many fit (the batched engine's own refusal named only the total window, as if
    ``--n-ctx`` had been given).

    Raises:
        SetupError: the message names the samples, the memory, and the most samples that fit.
    """
    from venus_edge.engines.batched import BatchedLlamaCppEngine
    from venus_edge.memory.header import read_model_header
    from venus_edge.memory.machine import total_ram_bytes
    from venus_edge.memory.plan import format_bytes

    machine = total_ram_bytes()
    header = read_model_header(path)

    def needed(count: int) -> int:
        return BatchedLlamaCppEngine.memory_plan(header, n_seq=count, n_ctx=window * count).total_bytes

    plan = BatchedLlamaCppEngine.memory_plan(header, n_seq=samples, n_ctx=window * samples)
    if machine is None or plan.total_bytes <= machine:
        return
    fits = 0
    low, high = 1, samples  # the most samples that fit: needed() grows with the count
    while low <= high:
        middle = (low + high) // 2
        if needed(middle) <= machine:
            fits, low = middle, middle + 1
        else:
            high = middle - 1
    advice = (f"lower {{samples}} to {fits} (or {{n_ctx}} below {window:,})" if fits else
              f"lower {{n_ctx}} below {window:,}, or use a smaller model")
    raise SetupError(f"{{samples}} {samples:,} at {window:,} tokens each needs {format_bytes(plan.total_bytes)} (one "
                     f"KV cache of {plan.n_ctx:,} tokens, visit's included), more than this machine's "
                     f"{format_bytes(machine)} of RAM: {advice}", names_settings=True)


class _EngineWhenLoaded:
    """visit's completer, bound to the engine once it is loaded (the tools are built before, see ``open_session``)."""

    engine: Any = None

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        assert self.engine is not None, "the engine is bound before the session starts"
        return str(self.engine.complete(messages, max_tokens=max_tokens))

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        assert self.engine is not None, "the engine is bound before the session starts"
        return list(self.engine.tokenize(text, parse_special=parse_special))
