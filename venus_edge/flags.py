"""The command-line flags that set up a research session, shared by ``research``, ``eval``, ``serve`` and ``mcp``
(and ``plan``'s memory flags), with their checks; ``venus_edge.session.SessionSettings.from_args`` turns them into
the settings record the rest of the package takes.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from venus_edge.engines.models import DEFAULT_MODEL, DEFAULT_QUANT
from venus_edge.errors import missing_file_reason
from venus_edge.memory.machine import MAX_THREADS, physical_cores
from venus_edge.memory.plan import KV_TYPES, parse_size
from venus_edge.pacing import PaceConfig
from venus_edge.text import shown_path, valid_text

__all__ = ["COMMAND_SETTING_FLAGS", "DEPRECATED_UNTIL", "OBSERVATION_STYLE_CHOICES", "PACE_FLAGS", "SETTING_FLAGS",
           "add_deprecated_alias", "add_draft_argument", "add_gpu_layers_argument", "add_memory_arguments",
           "add_pace_arguments", "add_session_arguments", "check_key_text", "check_output_file",
           "check_output_folder", "check_session_arguments", "count_argument", "draft_argument", "number_argument",
           "pace_config", "size_argument", "threads_argument", "tool_sequence_argument"]

#: Each setting an error's advice may name (``VenusEdgeError.message_for``), by its Python name, and the flag that
#: sets it: the CLI prints the flag, so the fix it names is one the user can type.
SETTING_FLAGS = {
    "n_ctx": "--n-ctx", "answer_reserve_tokens": "--answer-reserve", "context_policy": "--context-policy",
    "max_tokens": "--max-tokens", "max_turns": "--max-turns", "time_limit_s": "--time-limit", "n_threads": "--threads",
    "kv_type": "--kv-type", "ram_bytes": "--ram", "keep_last": "--keep-last", "min_tool_calls": "--min-tool-calls",
    "draft": "--draft", "gpu_layers": "--gpu-layers", "python": "--python",
    "python_unsandboxed_network": "--python-unsandboxed-network",
    "strict": "--strict", "observation_style": "--observation-style", "samples": "--samples", "model": "--model",
    "judge": "--judge",
}
#: A command's own flag for a setting, where it differs from ``SETTING_FLAGS``' (several rollouts at once; the model
#: as the command's first argument).
COMMAND_SETTING_FLAGS = {"serve": {"samples": "--slots"}, "eval": {"samples": "--k"},
                         "plan": {"model": "venus-edge plan"},
                         "bench": {"model": "venus-edge bench", "reference": "--reference"}}

#: The release that drops the old spellings of renamed flags (``add_deprecated_alias``).
DEPRECATED_UNTIL = "0.2.0"


class _DeprecatedAlias(argparse.Action):
    """A renamed flag's old spelling: hidden from ``--help``, stores into the new flag's ``dest`` and warns on stderr
    that it goes away."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new_flag: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"warning: {option_string} is deprecated and goes away in venus-edge {DEPRECATED_UNTIL}; use "
              f"{self.new_flag}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated_alias(parser: argparse._ActionsContainer, old_flag: str, new_flag: str) -> None:
    """Let ``old_flag`` stand for ``new_flag`` (already added to ``parser``, or to the mutually exclusive group
    given) until ``DEPRECATED_UNTIL``: same ``dest``, type and metavar, no help line, a one-line warning when
    used."""
    new = next(action for action in parser._actions if new_flag in action.option_strings)
    same: dict[str, Any] = {"type": new.type} if new.type is not None else {}
    parser.add_argument(old_flag, action=_DeprecatedAlias, new_flag=new_flag, dest=new.dest, metavar=new.metavar,
                        choices=new.choices, **same)


def add_session_arguments(parser: argparse.ArgumentParser, *, old_api_key: bool = True) -> None:
    """The flags that set up a research session (model, engine, tools, limits, sampling): ``research``, ``eval``,
    ``serve``, ``mcp``. ``--base-url``'s bearer token is ``--engine-api-key`` (``args.api_key``); ``old_api_key``
    keeps its old spelling ``--api-key`` as a deprecated alias (``research`` and ``eval``; in ``serve`` that spelling
    was the server's own key)."""
    parser.add_argument("--model", default=None,
                        help=f"a GGUF path, or a hub repo owner/name[:file.gguf] (default {DEFAULT_MODEL}, "
                             f"{DEFAULT_QUANT}); with --engine openai, the server's model name")
    parser.add_argument("--engine", choices=("llama", "openai"), default="llama",
                        help="llama: llama.cpp in this process (default); openai: a server at --base-url")
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="the OpenAI-compatible server of --engine openai (llama-server, vLLM, SGLang)")
    parser.add_argument("--engine-api-key", dest="api_key", default=os.environ.get("VENUS_EDGE_API_KEY"),
                        metavar="KEY", help="bearer token for --base-url, the model server (default "
                                            "$VENUS_EDGE_API_KEY)")
    if old_api_key:
        add_deprecated_alias(parser, "--api-key", "--engine-api-key")
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
    parser.add_argument("--search-results", type=count_argument(1), default=10, metavar="N",
                        help="results per search query (default 10, as DR-Venus was trained)")
    parser.add_argument("--extractive-visit", action="store_true",
                        help="visit shows the page passages that match the goal, without a model-written summary "
                             "(for models too small to summarize)")
    parser.add_argument("--max-turns", type=count_argument(1), default=200, metavar="N",
                        help="research turns at most (default 200, as DR-Venus); a session still researching "
                             "then gets one more turn, asked for its final answer (as the protocol does)")
    parser.add_argument("--max-tokens", type=count_argument(1), default=15_000, metavar="N",
                        help="new tokens per turn (default 15000)")
    parser.add_argument("--time-limit", type=number_argument(0, inclusive=False), default=9_000.0, metavar="S",
                        help="wall-clock limit in seconds")
    parser.add_argument("--n-ctx", type=count_argument(1), default=None, metavar="N",
                        help="context window in tokens (of each sample's sequence when several run at once)")
    parser.add_argument("--threads", type=threads_argument, default=None, metavar="N",
                        help=f"CPU threads (default: the performance cores, {physical_cores()} here)")
    add_memory_arguments(parser)
    add_draft_argument(parser)
    add_gpu_layers_argument(parser)
    parser.add_argument("--no-prompt-cache", action="store_true",
                        help="do not save or restore the system prompt's KV state (kept under "
                             "$XDG_CACHE_HOME/venus-edge/prompt-cache; see README, Prompt cache)")
    parser.add_argument("--temperature", type=number_argument(0, inclusive=True), default=1.0,
                        help="sampling temperature (default 1.0)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--strict", action="store_true", help="constrain every turn with a grammar of the protocol")
    parser.add_argument("--min-tool-calls", type=count_argument(0), default=0, metavar="N",
                        help="with --strict, tool calls required before an answer is allowed (default 0)")
    parser.add_argument("--require-calls", type=tool_sequence_argument, default=(), metavar="TOOL,...",
                        help="with --strict, the session's first tool calls, in order (e.g. search,visit: a search, "
                             "then a visit of a URL it found), before an answer is allowed")
    parser.add_argument("--context-policy", choices=("force-answer", "keep-last-k", "summarize"),
                        default="force-answer",
                        help="at the context budget: force the final answer (default, as trained), keep only the "
                             "last K tool results whole, or summarize the evidence and restart")
    parser.add_argument("--keep-last", type=count_argument(0), default=3, metavar="K",
                        help="tool results kept whole by --context-policy keep-last-k (default 3)")
    parser.add_argument("--answer-reserve", type=count_argument(0), default=None, metavar="N",
                        help="tokens of n_ctx always kept free for the final answer, at least (default: a quarter "
                             "of --n-ctx, at most 1024; grows to the longest turn seen)")
    parser.add_argument("--python", action="store_true",
                        help="turn on the PythonInterpreter tool: the model's code runs in a sandbox (no network, a "
                             "fresh temporary folder, CPU, memory, process, output and time limits); off, a call gets "
                             "'Error: Tool PythonInterpreter not found', as in DR-Venus's RL environment")
    parser.add_argument("--python-unsandboxed-network", action="store_true",
                        help="with --python, run code even where this machine cannot make the sandbox's namespaces "
                             "(the code can then reach the network and write what this user may write)")
    parser.add_argument("--observation-style", choices=OBSERVATION_STYLE_CHOICES,
                        default=OBSERVATION_STYLE_CHOICES[0],
                        help="how the system prompt, tool results and notices are written: inference, as the authors' "
                             "inference code (default), or rl, as the RL rollouts DR-Venus-4B-RL was trained on "
                             "(search hits with a date key, three tools listed; README, Observation styles)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def count_argument(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number of at least ``minimum`` and at most ``maximum`` (turns, tokens,
    threads, results): any other value is a usage error naming the flag, never a traceback from deeper in."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    count.__name__ = "count"  # argparse names the type in its messages
    return count


def threads_argument(text: str) -> int:
    """``--threads``: a whole number from 1 to llama.cpp's limit (``MAX_THREADS``), or a usage error that says how
    many cores this machine has (100,000 threads crashed llama.cpp)."""
    value = count_argument(1)(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_THREADS} (llama.cpp's limit), got {value}; this "
                                         f"machine has {physical_cores()} performance cores, the default")
    return value


#: ``--observation-style``'s choices, the default first: ``venus_edge.protocol.OBSERVATION_STYLES``, spelled here so
#: that building the parser does not import the protocol and the tool layer (``venus-edge --help`` stays fast); a
#: test checks that the two agree.
OBSERVATION_STYLE_CHOICES = ("inference", "rl")

#: The tools of a session set up from these flags (``venus_edge.toolbox.default_tools``).
SESSION_TOOLS = ("search", "visit")


def tool_sequence_argument(text: str) -> tuple[str, ...]:
    """An argparse ``type`` for a comma-separated list of the session's tools (``--require-calls search,visit``)."""
    names = tuple(name.strip() for name in text.split(","))
    unknown = [name for name in names if name not in SESSION_TOOLS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(map(repr, unknown))} is not a tool; the tools are "
                                         f"{', '.join(SESSION_TOOLS)} (e.g. search,visit)")
    return names


def number_argument(minimum: float, *, inclusive: bool) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number above ``minimum`` (or equal to it, ``inclusive``): seconds,
    temperatures. NaN, infinities and words are a usage error naming the flag, as in ``count_argument``."""
    bound = f"of at least {minimum:g}" if inclusive else f"greater than {minimum:g}"

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and (value >= minimum if inclusive else value > minimum)):
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text!r}")
        return value

    number.__name__ = "number"  # argparse names the type in its messages
    return number


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


#: ``--draft``'s words; any other value is the path of a draft GGUF.
DRAFT_LOOKUP, DRAFT_OFF = "lookup", "off"


def draft_argument(text: str) -> str | None:
    """``--draft``: ``lookup`` (n-gram lookup in the session's own tokens), ``off`` (None) or the path of an existing
    draft GGUF (``LlamaCppEngine``'s ``draft``); anything else is a usage error that says what to give. Whether the
    file is a GGUF with the model's vocabulary is the engine's to check, when it loads (``ModelLoadError``)."""
    if text == DRAFT_OFF:
        return None
    if text == DRAFT_LOOKUP:
        return text
    if not text.strip():  # Path("") is the current folder
        raise argparse.ArgumentTypeError(f"empty; give {DRAFT_LOOKUP}, {DRAFT_OFF} or a GGUF path")
    path = Path(text).expanduser()
    if path.is_file():
        return str(path)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {missing_file_reason(path, '.gguf')}; or give lookup or off")
    raise argparse.ArgumentTypeError(f"no file {text}; give {DRAFT_LOOKUP}, {DRAFT_OFF} or a GGUF path")


def add_gpu_layers_argument(parser: argparse.ArgumentParser) -> None:
    """``--gpu-layers N``, llama.cpp's ``n_gpu_layers`` of the in-process engine (``research``, ``eval``, ``serve``,
    ``mcp`` and ``bench``); checked against the build by ``engines.llama_load.check_gpu_layers``."""
    parser.add_argument("--gpu-layers", type=count_argument(-1, maximum=2**31 - 1), default=0, metavar="N",
                        help="layers on the GPU, -1 for all (default 0: the CPU); needs llama-cpp-python built with "
                             "a GPU backend, e.g. CMAKE_ARGS=-DGGML_CUDA=on (README, On a GPU)")


def add_draft_argument(parser: argparse.ArgumentParser) -> None:
    """``--draft``, speculative decoding of the in-process engine (``research``, ``eval``, ``serve``, ``mcp`` and
    ``bench``)."""
    parser.add_argument("--draft", type=draft_argument, default=None, metavar="lookup|MODEL.gguf|off",
                        help="speculative decoding: lookup drafts from the session's own text (its tool results, "
                             "earlier turns), MODEL.gguf is a small draft model with the same vocabulary; greedy text "
                             "is the same as without it and sampled text keeps the model's distribution; it drafts "
                             "only while that is faster here (default off; "
                             "only the in-process engine, one rollout at a time)")


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
    check_output_folder(args.record, "--record", parser)
    check_key_text(args.api_key, "the bearer token for --base-url (--engine-api-key or $VENUS_EDGE_API_KEY)", parser)
    if args.engine == "openai" and not args.base_url:
        parser.error("--engine openai needs --base-url URL (e.g. http://127.0.0.1:8080)")
    if args.base_url and args.engine != "openai":
        parser.error("--base-url is for --engine openai")
    if args.python_unsandboxed_network and not args.python:
        parser.error("--python-unsandboxed-network goes with --python")
    if args.python and args.strict:
        parser.error("--strict's grammar has no <code> block for a PythonInterpreter call; drop --strict or --python")


def check_output_file(path: Path | None, flag: str, parser: argparse.ArgumentParser) -> None:
    """Refuse a journal or trajectory file that cannot be written, before anything loads: a session's record would
    otherwise be lost at its end (``research --out FOLDER`` ran the whole session, then said it was not saved). The
    file is created empty when missing (with its folders), as the session's first record would create it."""
    if path is None:
        return
    if path.is_dir():
        example = shown_path(path / "runs.jsonl")
        parser.error(f"{flag} {shown_path(path)} is a folder; give a file in it, e.g. {example}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab"):
            pass
    except OSError as exc:
        parser.error(f"{flag} {shown_path(path)} cannot be written ({exc.strerror or exc}); give a file in a folder "
                     "you can write")


def check_output_folder(path: Path | None, flag: str, parser: argparse.ArgumentParser) -> None:
    """Refuse a folder that files cannot be written into, before anything loads (``--record``: every tool call
    would otherwise fail to record, and the model would read the error instead of the result). It is created when
    missing."""
    if path is None:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except FileExistsError:
        parser.error(f"{flag} {shown_path(path)} is a file; give a folder")
    except OSError as exc:
        parser.error(f"{flag} {shown_path(path)} cannot be written ({exc.strerror or exc}); give a folder you can "
                     "write")


def check_key_text(key: str | None, what: str, parser: argparse.ArgumentParser) -> None:
    """Refuse an API key that is not valid Unicode (an environment variable or argument whose bytes are not UTF-8,
    which Python reads as lone surrogates): a secret is never repaired, as the repaired one would not match."""
    if key is not None and valid_text(key) != key:
        parser.error(f"{what} holds bytes that are not UTF-8; give the key as text")


#: Each ``PaceConfig`` setting the CLI sets, by its Python name, and its flag (``add_pace_arguments``).
PACE_FLAGS = {"max_temp_c": "--pace-max-temp", "pause_temp_c": "--pace-pause-temp",
              "resume_temp_c": "--pace-resume-temp", "battery_floor_pct": "--pace-battery-floor",
              "min_threads": "--pace-min-threads", "root": "--pace-root"}


def add_pace_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pace`` and its settings (``research``): pacing for a device that heats and drains
    (``venus_edge.pacing``). The settings default to ``PaceConfig``'s and go only with ``--pace``."""
    defaults = PaceConfig()
    parser.add_argument("--pace", action="store_true",
                        help="between turns, read the device's temperatures and battery (/sys): lower the threads "
                             "when it is hot, pause until it cools, and stop on a low battery, resumable with "
                             "--resume (off by default; README, Pacing on a hot or draining device)")
    temperature = number_argument(-273.15, inclusive=True)
    parser.add_argument(PACE_FLAGS["max_temp_c"], dest="pace_max_temp_c", type=temperature, default=None,
                        metavar="C", help=f"with --pace, halve the threads at or above C degrees Celsius "
                                          f"(default {defaults.max_temp_c:g})")
    parser.add_argument(PACE_FLAGS["pause_temp_c"], dest="pace_pause_temp_c", type=temperature, default=None,
                        metavar="C", help=f"with --pace, pause at or above C until the device cools to "
                                          f"--pace-resume-temp (default {defaults.pause_temp_c:g})")
    parser.add_argument(PACE_FLAGS["resume_temp_c"], dest="pace_resume_temp_c", type=temperature, default=None,
                        metavar="C", help=f"with --pace, a pause ends at or below C (default "
                                          f"{defaults.resume_temp_c:g})")
    parser.add_argument(PACE_FLAGS["battery_floor_pct"], dest="pace_battery_floor_pct", type=count_argument(0),
                        default=None, metavar="PCT",
                        help=f"with --pace, stop (resumable) when the battery discharges below PCT percent (default "
                             f"{defaults.battery_floor_pct})")
    parser.add_argument(PACE_FLAGS["min_threads"], dest="pace_min_threads", type=threads_argument, default=None,
                        metavar="N", help=f"with --pace, never lower the threads below N (default "
                                          f"{defaults.min_threads})")
    parser.add_argument(PACE_FLAGS["root"], dest="pace_root", type=Path, default=None, metavar="DIR",
                        help="with --pace, read sys/ under DIR instead of / (a copy of a device's, a test's)")


def pace_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> PaceConfig | None:
    """The ``PaceConfig`` that ``--pace`` and its settings describe, or None without ``--pace``; a setting without
    ``--pace``, a root that is not a folder, or settings that do not fit together are usage errors naming the
    flags."""
    given = {name: value for name in PACE_FLAGS if (value := getattr(args, f"pace_{name}")) is not None}
    if not args.pace:
        if given:
            parser.error(f"{PACE_FLAGS[next(iter(given))]} goes with --pace")
        return None
    root = given.get("root")
    if root is not None and not root.is_dir():
        parser.error(f"--pace-root {root}: not a directory (give the folder that holds sys/)")
    try:
        return PaceConfig(**given)
    except ValueError as exc:
        message = str(exc)
        for name, flag in PACE_FLAGS.items():
            message = message.replace(name, flag)
        parser.error(f"--pace: {message}")
