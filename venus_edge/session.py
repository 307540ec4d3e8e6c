"""Setting up a research session from command-line flags: the flags ``research`` and ``eval`` share, their checks,
and ``open_session``, which builds the tools, loads the engine and closes both.

Engines: ``--engine llama`` (default) runs the GGUF in-process (``LlamaCppEngine``; with ``samples > 1``, a
``BatchedLlamaCppEngine`` decoding the samples as one batch); ``--engine openai --base-url URL`` talks to a model
server (``OpenAIEngine``; concurrent samples become concurrent requests, which the server batches when it has the
slots, e.g. ``llama-server -np 4``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus_edge.engines.models import DEFAULT_MODEL, DEFAULT_QUANT
from venus_edge.errors import VenusEdgeError
from venus_edge.memory.plan import KV_TYPES, parse_size

if TYPE_CHECKING:
    from venus_edge.agent import AgentConfig
    from venus_edge.engines.base import Engine
    from venus_edge.result import Result

__all__: list[str] = []

#: Sample i of a question samples with seed + i * SAMPLE_SEED_STRIDE (the agent adds one per attempt).
SAMPLE_SEED_STRIDE = 100_003
#: The window of each sequence when ``samples > 1`` and ``--n-ctx`` is not given: the batched KV cache holds
#: ``samples`` times this many tokens.
DEFAULT_SAMPLE_N_CTX = 8_192


class SetupError(VenusEdgeError):
    """A session could not be set up from the command line (a corpus, a tool flag); the CLI exits with code 3."""


def add_session_arguments(parser: argparse.ArgumentParser, *, engine_key_flag: str = "--api-key") -> None:
    """The flags that set up a research session (model, engine, tools, limits, sampling): ``research``, ``eval``,
    ``serve``, ``mcp``. ``engine_key_flag`` names the flag of ``--base-url``'s bearer token (``serve`` keeps
    ``--api-key`` for its own clients); its value is ``args.api_key`` either way."""
    parser.add_argument("--model", default=None,
                        help=f"a GGUF path, or a hub repo owner/name[:file.gguf] (default {DEFAULT_MODEL}, "
                             f"{DEFAULT_QUANT}); with --engine openai, the server's model name")
    parser.add_argument("--engine", choices=("llama", "openai"), default="llama",
                        help="llama: llama.cpp in this process (default); openai: a server at --base-url")
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="the OpenAI-compatible server of --engine openai (llama-server, vLLM, SGLang)")
    parser.add_argument(engine_key_flag, dest="api_key", default=os.environ.get("VENUS_EDGE_API_KEY"), metavar="KEY",
                        help="bearer token for --base-url (default $VENUS_EDGE_API_KEY)")
    parser.add_argument("--corpus", action="append", type=Path, default=[], metavar="DIR",
                        help="a folder of HTML/Markdown/text/PDF documents to search and visit (repeatable)")
    parser.add_argument("--web", action="store_true",
                        help="also search the web (ddgs engines with back-off and fallback; needs the web extra)")
    parser.add_argument("--record", type=Path, default=None, metavar="DIR",
                        help="record every tool call's result under DIR, to replay the session later")
    parser.add_argument("--replay", type=Path, default=None, metavar="DIR",
                        help="answer tool calls only from the records in DIR: no corpus, web or network needed")
    parser.add_argument("--allow-network", action="append", default=[], metavar="CIDR",
                        help="let visit fetch this private network, e.g. 10.20.0.0/16 (repeatable)")
    parser.add_argument("--search-results", type=int, default=10, metavar="N",
                        help="results per search query (default 10, as DR-Venus was trained)")
    parser.add_argument("--extractive-visit", action="store_true",
                        help="visit shows the page passages that match the goal, without a model-written summary "
                             "(for models too small to summarize)")
    parser.add_argument("--max-turns", type=int, default=200, metavar="N", help="model turns at most (default 200)")
    parser.add_argument("--max-tokens", type=int, default=15_000, metavar="N", help="new tokens per turn (default 15000)")
    parser.add_argument("--time-limit", type=float, default=9_000.0, metavar="S", help="wall-clock limit in seconds")
    parser.add_argument("--n-ctx", type=int, default=None, metavar="N",
                        help="context window in tokens (of each sample's sequence when several run at once)")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    add_memory_arguments(parser)
    parser.add_argument("--no-prompt-cache", action="store_true",
                        help="do not save or restore the system prompt's KV state (kept under "
                             "$XDG_CACHE_HOME/venus-edge/prompt-cache; see README, Prompt cache)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--strict", action="store_true", help="constrain every turn with a grammar of the protocol")
    parser.add_argument("--min-tool-calls", type=int, default=0, metavar="N",
                        help="with --strict, tool calls required before an answer is allowed (default 0)")
    parser.add_argument("--context-policy", choices=("force-answer", "keep-last-k", "summarize"),
                        default="force-answer",
                        help="at the context budget: force the final answer (default, as trained), keep only the "
                             "last K tool results whole, or summarize the evidence and restart")
    parser.add_argument("--keep-last", type=int, default=3, metavar="K",
                        help="tool results kept whole by --context-policy keep-last-k (default 3)")
    parser.add_argument("--answer-reserve", type=int, default=1_024, metavar="N",
                        help="tokens of n_ctx always kept free for the final answer, at least (default 1024; "
                             "grows to the longest turn seen)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def size_argument(text: str) -> int:
    """``--ram`` values: bytes of ``6G``, ``512M``, ``6GiB``, ``6.5GB`` (``parse_size``); a usage error otherwise."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kv-type`` and ``--ram``, the memory planner's flags (``research``, ``eval``, ``plan``)."""
    parser.add_argument("--kv-type", choices=KV_TYPES, default=None,
                        help="KV-cache type (default: the memory planner's choice; research and eval with --n-ctx "
                             "and no --ram use f16); q8_0 and q4_0 turn on flash attention")
    parser.add_argument("--ram", type=size_argument, default=None, metavar="SIZE",
                        help="RAM budget for the model and its context, e.g. 6G or 512M (default: the memory "
                             "available now); n_ctx and the KV-cache type are chosen to fit it")


def check_session_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse bad session flags before anything loads (a typo must not cost a model load or download)."""
    if not (args.corpus or args.web or args.replay):
        parser.error("give at least one --corpus DIR, --web, or --replay DIR")
    if args.record and args.replay:
        parser.error("--record and --replay exclude each other")
    for folder in args.corpus:
        if not folder.is_dir():
            parser.error(f"--corpus {folder}: not a directory")
    if args.replay and not args.replay.is_dir():
        parser.error(f"--replay {args.replay}: not a directory of recorded tool calls (make one with --record)")
    if args.max_turns < 1:
        parser.error("--max-turns must be at least 1")
    if args.keep_last < 0:
        parser.error("--keep-last must be at least 0")
    if args.answer_reserve < 0:
        parser.error("--answer-reserve must be at least 0")
    if args.engine == "openai" and not args.base_url:
        parser.error("--engine openai needs --base-url URL (e.g. http://127.0.0.1:8080)")
    if args.base_url and args.engine != "openai":
        parser.error("--base-url is for --engine openai")


@dataclass
class Session:
    """What ``open_session`` set up: the engine, the tools and the agent config.

    Attributes:
        engine: the model; with ``samples > 1`` and ``--engine llama``, a ``BatchedLlamaCppEngine``.
        tools: the tools of every agent of the session.
        config: the agent config the flags describe.
    """

    engine: Any
    tools: list[Any]
    config: AgentConfig

    def rollout_engines(self, n: int) -> list[Engine]:
        """One engine per concurrent rollout: the batched engine's sequences, else the one engine (a server
        handles concurrent requests; a ``LlamaCppEngine`` must then be driven one rollout at a time)."""
        sequence = getattr(self.engine, "sequence", None)
        return [sequence(i) for i in range(n)] if callable(sequence) else [self.engine] * n

    def sample_config(self, index: int) -> AgentConfig:
        """The config of sample ``index``: its own seed (``SAMPLE_SEED_STRIDE`` apart)."""
        return replace(self.config, seed=self.config.seed + index * SAMPLE_SEED_STRIDE)

    @property
    def concurrent(self) -> bool:
        """Rollouts may run at the same time (a batched engine or a server: ``concurrent_rollouts``)."""
        return bool(getattr(self.engine, "concurrent_rollouts", False))


@contextlib.contextmanager
def open_session(args: argparse.Namespace, *, logprobs: bool = False, samples: int = 1) -> Iterator[Session]:
    """The engine, tools and agent config the session flags describe. Tools are built first (corpora indexed,
    flags checked), so their errors come before a model load or download; everything is closed on exit.

    Args:
        args: the parsed flags of ``add_session_arguments``.
        logprobs: ask the engine for per-token log-probabilities (confidence aggregation).
        samples: rollouts that run at once; above 1 with ``--engine llama``, a batched engine with that many
            sequences (each with a window of ``--n-ctx``, default ``DEFAULT_SAMPLE_N_CTX``).

    Raises:
        SetupError: a tool cannot be built (a corpus without documents, a missing extra).
    """
    # Imported here so that `venus-edge --help` stays fast.
    from venus_edge.agent import AgentConfig
    from venus_edge.engines.base import SamplingParams
    from venus_edge.toolbox import close_tools, default_tools
    from venus_edge.tools.errors import ToolError

    completer = _EngineWhenLoaded()
    try:
        tools = default_tools(
            args.corpus, web=args.web, completer=None if args.extractive_visit else completer,
            allowed_networks=args.allow_network, record_dir=args.record, replay_dir=args.replay,
            search_results=args.search_results,
        )
    except (ToolError, ValueError, ImportError, OSError) as exc:
        raise SetupError(str(exc)) from exc
    engine = None
    try:
        engine = completer.engine = _load_engine(args, samples)
        config = AgentConfig(
            max_turns=args.max_turns, time_limit_s=args.time_limit, strict=args.strict, seed=args.seed,
            min_tool_calls=args.min_tool_calls, context_policy=args.context_policy, keep_last=args.keep_last,
            answer_reserve_tokens=args.answer_reserve,
            sampling=SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, logprobs=logprobs),
        )
        yield Session(engine, tools, config)
    finally:
        close_tools(tools)
        if engine is not None:
            engine.close()


def rollouts(
    session: Session, question: str, indices: Sequence[int], *, trajectory_path: str | os.PathLike[str] | None = None
) -> Iterator[tuple[int, Result]]:
    """Research ``question`` once per sample index, concurrently when the engine allows it (``Session.concurrent``),
    yielding ``(index, Result)`` as each rollout finishes. Each sample has its own seed (``sample_config``)."""
    from venus_edge.agent import Agent

    engines = session.rollout_engines(len(indices))
    agents = {index: Agent(engine, session.tools, config=session.sample_config(index), trajectory_path=trajectory_path)
              for index, engine in zip(indices, engines)}
    if not session.concurrent:
        for index, agent in agents.items():
            yield index, agent.run(question)
        return
    with ThreadPoolExecutor(max_workers=len(agents), thread_name_prefix="rollout") as pool:
        futures = {pool.submit(agent.run, question): index for index, agent in agents.items()}
        for future in as_completed(futures):
            yield futures[future], future.result()


def _load_engine(args: argparse.Namespace, samples: int) -> Any:
    if (args.kv_type or args.ram) and (args.engine == "openai" or samples > 1):
        raise SetupError("--kv-type and --ram plan the in-process engine of one rollout at a time; they do not "
                         "apply to --engine openai or to several samples at once")
    if args.engine == "openai":
        from venus_edge.engines.openai import OpenAIEngine

        return OpenAIEngine(args.base_url, model=args.model, api_key=args.api_key, n_ctx=args.n_ctx)
    from venus_edge.engines.models import resolve_model

    path = resolve_model(args.model or DEFAULT_MODEL)
    if samples > 1:
        from venus_edge.engines.batched import BatchedLlamaCppEngine

        window = args.n_ctx or DEFAULT_SAMPLE_N_CTX
        return BatchedLlamaCppEngine(path, n_seq=samples, n_ctx=window * samples, n_threads=args.threads)
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.engines.prompt_cache import default_prompt_cache_dir

    prompt_cache_dir = None if args.no_prompt_cache else default_prompt_cache_dir()
    return LlamaCppEngine(path, n_ctx=args.n_ctx, n_threads=args.threads, seed=args.seed,
                          prompt_cache_dir=prompt_cache_dir, kv_type=args.kv_type, ram_bytes=args.ram)


class _EngineWhenLoaded:
    """visit's completer, bound to the engine once it is loaded (the tools are built before, see ``open_session``)."""

    engine: Any = None

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        assert self.engine is not None, "the engine is bound before the session starts"
        return str(self.engine.complete(messages, max_tokens=max_tokens))

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        assert self.engine is not None, "the engine is bound before the session starts"
        return list(self.engine.tokenize(text, parse_special=parse_special))
