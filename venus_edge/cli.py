"""The ``venus-edge`` command line.

    venus-edge research "QUESTION" [--corpus DIR] [--web] [--model PATH|REPO] [--max-turns N] [--out FILE] [--strict]
                        [--record DIR | --replay DIR] [--allow-network CIDR]
    venus-edge eval DATA [--k N] [--judge self|GGUF|URL] [--aggregate majority|confidence|judge] [--out DIR] ...
    venus-edge quantize SOURCE --types Q4_K_M,Q8_0 --out DIR [--base-type f16]
    venus-edge inspect FILE.gguf [--json]

Exit codes: 0 answered; 1 the session ended without an answer; 2 usage error; 3 model or input error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence, TextIO

from venus_edge.errors import VenusEdgeError
from venus_edge.events import (
    ErrorRaised,
    Event,
    LimitReached,
    SessionFinished,
    SessionStarted,
    ToolAttempted,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    TurnRetried,
    TurnStarted,
)
from venus_edge.models import DEFAULT_MODEL, DEFAULT_QUANT

if TYPE_CHECKING:
    from venus_edge.agent import AgentConfig, Result
    from venus_edge.engine import LlamaCppEngine

EXIT_ANSWERED, EXIT_NO_ANSWER, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="venus-edge", description="Run the DR-Venus deep-research agent locally.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    research = commands.add_parser("research", help="research a question with a local model and tools")
    research.add_argument("question", help="the question to research")
    add_session_arguments(research)
    research.add_argument("--out", type=Path, default=None, metavar="FILE", help="append the trajectory to this JSONL file")
    research.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    _add_eval_command(commands)
    _add_quantize_commands(commands)
    return parser


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that set up a research session (model, tools, limits, sampling): ``research`` and ``eval``."""
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"a GGUF path, or a hub repo owner/name[:file.gguf] (default {DEFAULT_MODEL}, {DEFAULT_QUANT})")
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
    parser.add_argument("--max-turns", type=int, default=200, metavar="N", help="model turns at most (default 200)")
    parser.add_argument("--max-tokens", type=int, default=15_000, metavar="N", help="new tokens per turn (default 15000)")
    parser.add_argument("--time-limit", type=float, default=9_000.0, metavar="S", help="wall-clock limit in seconds")
    parser.add_argument("--n-ctx", type=int, default=None, metavar="N", help="context window in tokens")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: physical cores)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--strict", action="store_true", help="constrain every turn with a grammar of the protocol")
    parser.add_argument("--min-tool-calls", type=int, default=0, metavar="N",
                        help="with --strict, tool calls required before an answer is allowed (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _add_eval_command(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from venus_edge.eval.cli import add_command

    add_command(commands)


def _add_quantize_commands(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `quantize` and `inspect` (their parsers import nothing heavy; gguf loads when they run)."""
    try:
        from venus_edge.quantize.cli import add_commands
    except ImportError:  # the quantize subpackage is not installed
        return
    add_commands(commands)


class SetupError(Exception):
    """A session could not be set up from the command line (a corpus, a tool flag); the CLI exits with code 3."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``venus-edge`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a broken PDF is reported once, as a typed failure
    try:
        if args.command == "research":
            return _research(args, parser)
        if args.command == "eval":
            from venus_edge.eval.cli import run

            return run(args, parser)
        if args.command in ("quantize", "inspect"):
            from venus_edge.quantize.cli import run as run_quantize

            return run_quantize(args)
    except (VenusEdgeError, SetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted; the trajectory written so far is kept", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE


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


@contextlib.contextmanager
def open_session(
    args: argparse.Namespace, *, logprobs: bool = False
) -> Iterator[tuple["LlamaCppEngine", list, "AgentConfig"]]:
    """The engine, tools and agent config the session flags describe; tools are built (corpora indexed, flags
    checked) before the model loads, and everything is closed on exit.

    Raises:
        SetupError: a tool cannot be built (a corpus without documents, a missing extra).
    """
    # Imported here so that `venus-edge --help` stays fast.
    from venus_edge.agent import AgentConfig
    from venus_edge.engine import LlamaCppEngine, SamplingParams
    from venus_edge.models import resolve_model
    from venus_edge.toolbox import default_tools
    from venus_edge.tools.errors import ToolError

    completer = _EngineWhenLoaded()
    try:
        tools = default_tools(
            args.corpus, web=args.web, completer=completer, allowed_networks=args.allow_network,
            record_dir=args.record, replay_dir=args.replay,
        )
    except (ToolError, ValueError, ImportError, OSError) as exc:
        raise SetupError(str(exc)) from exc
    engine = None
    try:
        engine = completer.engine = LlamaCppEngine(resolve_model(args.model), n_ctx=args.n_ctx,
                                                   n_threads=args.threads, seed=args.seed)
        config = AgentConfig(
            max_turns=args.max_turns, time_limit_s=args.time_limit, strict=args.strict, seed=args.seed,
            min_tool_calls=args.min_tool_calls,
            sampling=SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, logprobs=logprobs),
        )
        yield engine, tools, config
    finally:
        for tool in tools:  # visit's HTTP client: also ends any read still running
            close = getattr(tool, "close", None)
            if callable(close):
                close()
        if engine is not None:
            engine.close()


def _research(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from venus_edge.agent import Agent

    check_session_arguments(args, parser)
    with open_session(args) as (engine, tools, config):
        agent = Agent(engine, tools, config=config, trajectory_path=args.out)
        progress = _Progress(sys.stderr, quiet=args.quiet)
        stream = agent.events(args.question)
        while True:
            try:
                progress.show(next(stream))
            except StopIteration as stop:
                result = stop.value
                break
    if args.json:
        payload = {k: v for k, v in vars(result).items() if k != "messages"}
        payload["trajectory_path"] = str(result.trajectory_path) if result.trajectory_path else None
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        _print_result(result, sys.stdout)
    return EXIT_ANSWERED if result.answer is not None else EXIT_NO_ANSWER


class _EngineWhenLoaded:
    """visit's completer, bound to the engine once it is loaded (the tools are built before, see ``_research``)."""

    engine: "LlamaCppEngine | None" = None

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        assert self.engine is not None, "the engine is bound before the session starts"
        return self.engine.complete(messages, max_tokens=max_tokens)

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        assert self.engine is not None, "the engine is bound before the session starts"
        return self.engine.tokenize(text, parse_special=parse_special)


class _Progress:
    """One line per notable event on stderr: turn, tool calls, tokens/s, context fill."""

    def __init__(self, out: TextIO, *, quiet: bool) -> None:
        self.out, self.quiet = out, quiet

    def show(self, event: Event) -> None:
        if self.quiet:
            return
        line = self._line(event)
        if line:
            print(line, file=self.out, flush=True)

    def _line(self, event: Event) -> str | None:
        if isinstance(event, SessionStarted):
            return f"model {event.model.get('name')} ({event.model.get('file_type')}), n_ctx {event.model.get('n_ctx'):,}"
        if isinstance(event, TurnStarted):
            fill = 100 * event.prompt_tokens / max(event.n_ctx, 1)
            again = f" (attempt {event.attempt + 1})" if event.attempt else ""
            return f"turn {event.turn + 1}{again}: context {event.prompt_tokens:,}/{event.n_ctx:,} tokens ({fill:.0f}%)"
        if isinstance(event, TurnCompleted):
            stats = event.stats
            return (f"  {event.kind}: {stats['tokens_decoded']} tokens at {stats['decode_tokens_per_s']:.1f} tok/s, "
                    f"prefill {stats['prompt_tokens_evaluated']} new / {stats['prompt_tokens_reused']} reused")
        if isinstance(event, TurnRetried):
            return f"  retry ({event.reason}): {event.detail[:120]}"
        if isinstance(event, ToolCalled):
            return f"  {event.name} {json.dumps(event.arguments, ensure_ascii=False)[:160]}"
        if isinstance(event, ToolAttempted):
            if event.outcome == "ok" and not event.waited_s:
                return None  # only trouble and waits get a line; the call's result line follows
            waited = f", waited {event.waited_s:.1f} s" if event.waited_s else ""
            return f"  {event.name}: {event.backend} {event.outcome} ({event.detail[:240]}){waited}"
        if isinstance(event, ToolReturned):
            kinds = ", ".join(sorted({failure["kind"] for failure in event.failures}))
            failed = f", {len(event.failures)} failed ({kinds})" if event.failures else ""
            return f"  -> {event.observation_chars:,} chars in {event.elapsed_s:.1f} s, {len(event.visited_urls)} read{failed}"
        if isinstance(event, LimitReached):
            # The turn and context limits ask for one more turn (the final answer); the time limit ends the session.
            then = "the session ends without an answer" if event.limit == "time" else "the model is asked for its final answer"
            return f"  ! {event.limit} limit reached: {event.detail}; {then}"
        if isinstance(event, ErrorRaised):
            return f"  ! error in {event.where}: {event.message}"
        if isinstance(event, SessionFinished):
            return f"finished: {event.termination} after {event.turns} turns in {event.elapsed_s:.1f} s"
        return None


def _print_result(result: "Result", out: TextIO) -> None:
    if result.answer is not None:
        print(f"Answer:\n{result.answer}", file=out)
    else:
        print(f"No answer ({result.termination}).", file=out)
    print("\nSources:" if result.sources else "\nSources: none visited", file=out)
    for url in result.sources:
        print(f"  {url}", file=out)
    if result.unvisited_citations:
        print("Cited but never visited: " + ", ".join(result.unvisited_citations), file=out)
    if result.trajectory_path:
        print(f"\nTrajectory: {result.trajectory_path}", file=out)


if __name__ == "__main__":
    sys.exit(main())
