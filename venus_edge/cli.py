"""The ``venus-edge`` command line.

    venus-edge research "QUESTION" [--corpus DIR] [--web] [--model PATH|REPO] [--max-turns N] [--out FILE] [--strict]
                        [--record DIR | --replay DIR] [--allow-network CIDR]
    venus-edge eval DATA [--k N] [--judge self|GGUF|URL] [--aggregate majority|confidence|judge] [--out DIR] ...
    venus-edge quantize SOURCE --types Q4_K_M,Q8_0 --out DIR [--base-type f16]
    venus-edge inspect FILE.gguf [--json]
    venus-edge plan MODEL [--ram SIZE | --device phone-8gb] [--n-ctx N] [--kv-type f16|q8_0|q4_0] [--json]
    venus-edge doctor [--model M] [--json] [--root DIR]
    venus-edge train clean IN... --out OUT.jsonl [--resample] [--keep-correct]
    venus-edge serve [--model M] [--corpus DIR] [--host 127.0.0.1] [--port 8765] [--server-api-key KEY]
    venus-edge mcp [--model M] [--corpus DIR] [--transport stdio|http]
    venus-edge bench MODEL... [--n-ctx N] [--kv-type f16,q8_0] [--threads N,...] [--reference F16.gguf] [--out DIR]

Exit codes: 0 answered; 1 the session ended without an answer; 2 usage error; 3 model or input error; 4 the
session ran to its end and its result is on stdout, but its trajectory (``--out``, ``--resume``) could not be saved
whole (a full or read-only disk; one line on stderr says what was lost and where); 141 stdout's reader left
(``| head``), ended quietly.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from venus_edge.errors import VenusEdgeError
from venus_edge.events import (
    ContextCompacted,
    ErrorRaised,
    Event,
    LimitReached,
    Paced,
    SessionFinished,
    SessionStarted,
    ToolAttempted,
    ToolCalled,
    ToolReturned,
    TurnCompleted,
    TurnRetried,
    TurnStarted,
)
from venus_edge.flags import (
    COMMAND_SETTING_FLAGS,
    SETTING_FLAGS,
    add_memory_arguments,
    add_pace_arguments,
    add_session_arguments,
    check_output_file,
    check_session_arguments,
    count_argument,
    pace_config,
)
from venus_edge.memory.devices import DEVICE_PRESETS, DevicePreset, device_preset
from venus_edge.memory.presets import PRESET_MODELS, preset_model_header
from venus_edge.result import BATTERY_LOW, NO_SOURCES, termination_of
from venus_edge.session import SessionSettings, open_session
from venus_edge.text import shown_path, valid_text

if TYPE_CHECKING:
    from venus_edge.memory.header import ModelHeader
    from venus_edge.result import Result

EXIT_ANSWERED, EXIT_NO_ANSWER, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe
#: The result was printed but the journal asked for is incomplete: not 0, as a script that reads ``--out`` or will
#: ``--resume`` must not take the file for whole; not 1 or 3, as the research itself did not fail.
EXIT_NOT_SAVED = 4


_RESEARCH_DESCRIPTION = """\
Research QUESTION with a local model (llama.cpp, or a server with --engine openai) and tools: search and visit a
--corpus folder, the --web, or a --replay recording, turn by turn until the model answers. Prints the answer and the
sources it read on stdout (--json: the whole result), progress on stderr. --out FILE appends the trajectory (JSONL)
to FILE; --resume FILE continues a killed session from it. --pace slows down, pauses or stops (resumably) a
session on a device that heats or drains (README, Pacing on a hot or draining device).

examples:
  venus-edge research "When was tomllib added to Python?" --corpus docs/ --model M.gguf --out runs/t.jsonl
  venus-edge research --resume runs/t.jsonl --corpus docs/ --model M.gguf
"""


_PLAN_DESCRIPTION = """\
Choose the context window (n_ctx) and KV-cache type that fit MODEL in the RAM budget, as research and eval would
load it, and print the plan: the memory of the weights, the KV cache, the compute buffers and the helper context.
Reads the GGUF header only and writes nothing (--json: the plan and the header as JSON).

MODEL may also name a model of the presets without a file, with a quant type: DR-Venus-4B:Q4_0, Qwen3-1.7B:Q8_0,
Qwen3-0.6B, SmolLM2-135M (default Q4_K_M). --device plans for a phone or laptop preset instead of this machine: its
RAM less what the system and other apps keep, with every byte resident (a plan that would page the weights from
flash is refused, naming what fits).

examples:
  venus-edge plan inclusionAI/DR-Venus-4B-RL-GGUF --ram 6G
  venus-edge plan DR-Venus-4B:Q4_0 --device phone-8gb
"""


_DOCTOR_DESCRIPTION = """\
Say what this device is and what to run on it: the CPU's architecture and the features llama.cpp uses (AVX2,
AVX-512, AVX-VNNI; NEON, dotprod, i8mm, SVE), performance and efficiency cores, RAM total and available,
temperatures, the llama.cpp build's backends and its own system info, and with --model the quant type, threads,
n_ctx and KV-cache type to run that model with (its GGUF header and the memory planner; no weights are loaded).
Reads /proc and /sys (Linux, Android); what cannot be read is listed as unknown, with the file and why.

examples:
  venus-edge doctor --model DR-Venus-4B-RL-Q4_K_M.gguf
  venus-edge doctor --model DR-Venus-4B --json
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="venus-edge", description="Run the DR-Venus deep-research agent locally.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    research = commands.add_parser("research", help="research a question with a local model and tools",
                                   description=_RESEARCH_DESCRIPTION)
    research.add_argument("question", nargs="?", default=None,
                          help="the question to research (omitted with --resume: the journal holds it)")
    add_session_arguments(research)
    research.add_argument("--samples", type=int, default=1, metavar="N",
                          help="research N times at once (one batch) and aggregate the answers (default 1)")
    research.add_argument("--aggregate", choices=("majority", "confidence", "judge"), default="majority",
                          help="how --samples answers become one (default majority; judge uses the model itself)")
    research.add_argument("--out", type=Path, default=None, metavar="FILE",
                          help="append the trajectory to this JSONL file")
    research.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    research.add_argument("--resume", type=Path, default=None, metavar="FILE",
                          help="continue a killed session from its journal FILE, with the same tools or --replay of "
                               "their recording; its question, seed, limits and context policy come from the journal "
                               "(those flags are ignored) and new records go to FILE")
    research.add_argument("--session", default=None, metavar="ID",
                          help="with --resume: the session to continue (default the journal's last unfinished one)")
    add_pace_arguments(research)
    _add_plan_command(commands)
    _add_doctor_command(commands)
    _add_eval_command(commands)
    _add_quantize_commands(commands)
    _add_train_command(commands)
    _add_server_commands(commands)
    from venus_edge.bench.cli import add_command as add_bench_command

    add_bench_command(commands)
    for command in commands.choices.values():
        command.formatter_class = argparse.RawDescriptionHelpFormatter  # examples kept as written
        if command.get_default("_command_parser") is None:  # its own errors show its own usage line, not venus-edge's
            command.set_defaults(_command_parser=command)
    return parser


def _add_plan_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = commands.add_parser("plan", help="choose n_ctx and the KV-cache type that fit a model in the RAM budget",
                               description=_PLAN_DESCRIPTION)
    plan.add_argument("model", metavar="MODEL", help="a GGUF path, a hub repo owner/name[:file.gguf], or a preset "
                                                     "model such as DR-Venus-4B:Q4_0")
    plan.add_argument("--n-ctx", type=count_argument(1), default=None, metavar="N",
                      help="a fixed context window (default: the largest that fits, at most min(n_ctx_train, 32768))")
    add_memory_arguments(plan)
    plan.add_argument("--device", type=_device_argument, default=None, metavar="NAME",
                      help=f"plan for a device preset instead of this machine's RAM: {', '.join(DEVICE_PRESETS)}")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")


def _device_argument(text: str) -> DevicePreset:
    """``--device``: a preset of ``DEVICE_PRESETS``, or a usage error that suggests the nearest and lists them."""
    try:
        return device_preset(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _model_header(spec: str, parser: argparse.ArgumentParser) -> ModelHeader:
    """The header of ``spec``: a preset model by name (``DR-Venus-4B:Q4_0``; Q4_K_M when no type is given), else a
    GGUF file or hub repo (``resolve_model``) read to its header."""
    from venus_edge.engines.models import resolve_model
    from venus_edge.memory import read_model_header

    name, _, quant = spec.partition(":")
    preset = next((known for known in PRESET_MODELS if known.lower() == name.lower()), None)
    if preset is None:
        return read_model_header(resolve_model(spec))
    try:
        return preset_model_header(preset, quant.upper() or "Q4_K_M")
    except KeyError as exc:
        parser.error(str(exc.args[0]))


def _plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``venus-edge plan``: the plan ``research`` would load with (its helper context for ``visit`` included), on
    this machine, in ``--ram``, or on a ``--device`` preset."""
    from venus_edge.engines.llama_cpp import DEFAULT_HELPER_N_CTX
    from venus_edge.memory import available_ram_bytes, format_bytes, plan_memory, plan_on_device

    if args.n_ctx is not None and args.n_ctx < 1:
        parser.error("--n-ctx must be at least 1")
    if args.device is not None and args.ram is not None:
        parser.error("--device and --ram exclude each other: --device NAME plans for that device's RAM")
    header = _model_header(args.model, parser)
    device: DevicePreset | None = args.device
    if device is not None:
        plan = plan_on_device(header, device, n_ctx=args.n_ctx, kv_type=args.kv_type,
                              helper_n_ctx=DEFAULT_HELPER_N_CTX)
    else:
        plan = plan_memory(header, ram_bytes=args.ram or available_ram_bytes(), n_ctx=args.n_ctx,
                           kv_type=args.kv_type, helper_n_ctx=DEFAULT_HELPER_N_CTX)
    if args.json:
        device_part = {"device": device.to_dict()} if device is not None else {}
        print(json.dumps({**plan.to_dict(), "header": header.to_dict(), **device_part}, indent=2))
        return EXIT_ANSWERED
    if device is not None:
        print(f"{device.name}: {format_bytes(device.ram_bytes)} of RAM, {format_bytes(device.kept_bytes)} kept by "
              f"the system and other apps ({device.source}), {format_bytes(device.app_bytes)} for the app")
    print(plan.render())
    return EXIT_ANSWERED


def _add_doctor_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = commands.add_parser("doctor", help="what this device is and what to run on it",
                                 description=_DOCTOR_DESCRIPTION)
    doctor.add_argument("--model", default=None, metavar="M",
                        help="recommend settings for this model: a GGUF path (its header only is read), a hub repo "
                             "owner/name[:file.gguf], or a preset model such as DR-Venus-4B")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--root", type=Path, default=Path("/"), metavar="DIR",
                        help="read proc/ and sys/ under DIR, e.g. a copy of a phone's (default /)")


def _doctor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``venus-edge doctor``: the device under ``--root`` and, with ``--model``, what to run that model with."""
    from venus_edge.engines.llama_cpp import DEFAULT_HELPER_N_CTX
    from venus_edge.memory import diagnose, llama_system_info

    if not args.root.is_dir():
        parser.error(f"--root {args.root}: not a directory (give the folder that holds proc/ and sys/)")
    header = _model_header(args.model, parser) if args.model else None
    try:
        info: str | None = llama_system_info()
    except ImportError:
        info = None
    report = diagnose(args.root, header=header, llama_info=info, helper_n_ctx=DEFAULT_HELPER_N_CTX)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render())
    return EXIT_ANSWERED


def _add_eval_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from venus_edge.eval.cli import add_command

    add_command(commands)


def _add_quantize_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `quantize` and `inspect` (their parsers import nothing heavy; gguf loads when they run)."""
    try:
        from venus_edge.quantize.cli import add_commands
    except ImportError:  # the quantize subpackage is not installed
        return
    add_commands(commands)


def _add_train_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``train`` (its parser imports nothing heavy)."""
    try:
        from venus_edge.train.cli import add_command
    except ImportError:  # the train subpackage is not installed
        return
    add_command(commands)


def _add_server_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and ``mcp`` (their parsers import nothing heavy; FastAPI and mcp load when they run)."""
    from venus_edge.server.cli import add_commands

    add_commands(commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``venus-edge`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    parser: argparse.ArgumentParser = args._command_parser  # the command's, so that its errors show its usage
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command line the reports record
    if isinstance(getattr(args, "question", None), str):  # argv bytes that are not UTF-8 arrive as lone surrogates
        args.question = valid_text(args.question, source="the question argument")
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a broken PDF is reported once, as a typed failure
    try:
        if args.command == "research":
            return _research(args, parser)
        if args.command == "plan":
            return _plan(args, parser)
        if args.command == "doctor":
            return _doctor(args, parser)
        if args.command == "eval":
            from venus_edge.eval.cli import run

            return run(args, parser)
        if args.command in ("quantize", "inspect"):
            from venus_edge.quantize.cli import run as run_quantize

            return run_quantize(args)
        if args.command == "bench":
            from venus_edge.bench.cli import run as run_bench

            return run_bench(args, parser)
        if args.command in ("serve", "mcp"):
            from venus_edge.server.cli import run as run_server

            return run_server(args, parser)
        if args.command == "train":
            from venus_edge.train.cli import run as run_train

            return run_train(args, parser)
    except VenusEdgeError as exc:  # the one root: runtime, session, tools, quantize and train errors
        names = {**SETTING_FLAGS, **COMMAND_SETTING_FLAGS.get(args.command, {})}
        print(f"error: {exc.message_for(names)}", file=sys.stderr)  # the fix named by its flag
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(_INTERRUPTED.get(args.command, "interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout's reader left (`| head`): end quietly, as a killed writer would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not raise again
        return EXIT_BROKEN_PIPE
    parser.error(f"unknown command {args.command!r}")


#: What Ctrl-C leaves behind, by command (exit 130).
_INTERRUPTED = {
    "research": "interrupted; a trajectory written with --out is kept as far as it got (continue it with --resume "
                "FILE)",
    "eval": "interrupted; the results written so far are kept (the same command goes on from them)",
    "serve": "stopped; a session that was running is kept in the journal, resumable with research --resume",
    "mcp": "stopped; a research that was running is journaled as cancelled",
    "bench": "interrupted; the report keeps the configurations measured (the same command goes on from them)",
}


def _research(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_session_arguments(args, parser)
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if args.resume is not None:
        if args.question is not None or args.samples > 1 or args.out is not None:
            parser.error("--resume continues a recorded session: give no question, --samples or --out")
    elif args.question is None:
        parser.error("give the question to research (or --resume FILE)")
    elif not args.question.strip():  # as the server refuses it: a session would research nothing
        parser.error("the question is empty; give the question to research")
    elif args.session is not None:
        parser.error("--session ID goes with --resume FILE")
    check_output_file(args.out, "--out", parser)
    question: str | None = args.question  # given unless --resume, checked above
    settings = replace(SessionSettings.from_args(args), pace=pace_config(args, parser))
    if args.samples > 1:
        return _research_samples(args, settings)
    if args.resume is not None:  # a journal with nothing to resume, or a session being written, before the model loads
        from venus_edge.agent import resumable_session

        resumed = resumable_session(args.resume, args.session)
        args.session = resumed.session_id
        try:
            settings = _journal_style(settings, resumed.header.get("config"))
        except ValueError as exc:
            parser.error(f"--resume {shown_path(args.resume)}: {exc}")
    with open_session(settings) as session:
        agent = session.agent(trajectory_path=args.out)
        progress = _Progress(sys.stderr, quiet=args.quiet)
        if args.resume is not None:
            stream = agent.resume_events(args.resume, args.session)
        else:
            assert question is not None
            stream = agent.events(question)
        for event in stream:
            progress.show(event)
        assert isinstance(event, SessionFinished), "a session's last event is SessionFinished"
        result = event.result
    if args.json:
        print(json.dumps(_result_payload(result), ensure_ascii=False, indent=2))
    else:
        _print_result(result, sys.stdout)
    if result.termination == BATTERY_LOW:
        print(_battery_low_hint(result), file=sys.stderr)
    return _exit_code(result.answer is not None, [result])


def _battery_low_hint(result: Result) -> str:
    """What to do after pacing stopped a session for its battery: resume its journal, or (without one) run again."""
    if result.trajectory_path is None or result.journal_error:
        return ("stopped: the battery is low; this session kept no journal to resume (give --out FILE next time), "
                "so run it again once the device charges")
    return (f"stopped: the battery is low; once the device charges, resume with: venus-edge research --resume "
            f"{shown_path(result.trajectory_path)} and the same tools and model flags")


def _journal_style(settings: SessionSettings, config: object) -> SessionSettings:
    """``settings`` with the observation style a resumed session was started with (its journal's config): the
    tools render as the session's history does, whatever ``--observation-style`` says now (with a note on stderr
    when the two differ). A journal from before the setting holds none: the ``inference`` style it was written in.

    Raises:
        ValueError: the journal names no observation style this version knows.
    """
    from venus_edge.tools.observation_styles import observation_style  # here: `venus-edge --help` loads no protocol

    style = observation_style(config.get("observation_style", "inference") if isinstance(config, dict) else "inference")
    if style != settings.observation_style:
        print(f"note: the session was started with --observation-style {style}; it continues so",
              file=sys.stderr)
    return replace(settings, observation_style=style)


def _exit_code(answered: bool, results: Sequence[Result]) -> int:
    """The exit code of a research run whose result is printed: ``EXIT_NOT_SAVED`` (with one line on stderr) when a
    journal record was lost, else answered or not."""
    lost = [result.journal_error for result in results if result.journal_error]
    if lost:
        more = f" (and {len(lost) - 1} more of the {len(results)} samples)" if len(lost) > 1 else ""
        print(f"warning: {lost[0]}{more}", file=sys.stderr)
        return EXIT_NOT_SAVED
    return EXIT_ANSWERED if answered else EXIT_NO_ANSWER


def _research_samples(args: argparse.Namespace, settings: SessionSettings) -> int:
    """``--samples N``: N rollouts at once (one llama.cpp batch, or concurrent server requests), one answer."""
    from venus_edge.eval.aggregate import aggregate_answers

    with open_session(settings, logprobs=args.aggregate == "confidence", samples=args.samples) as session:
        if not args.quiet:
            print(f"{args.samples} rollouts of {session.engine.model_info().get('name')}", file=sys.stderr)
        finished = dict(session.rollouts(args.question, range(args.samples), trajectory_path=args.out))
        results = [finished[i] for i in range(args.samples)]
        chosen = aggregate_answers(
            [r.answer for r in results], method=args.aggregate, question=args.question,
            mean_logprobs=[r.totals.final_turn_mean_logprob for r in results], completer=session.completer,
        )
    if not args.quiet:
        for i, result in enumerate(results):
            print(f"  sample {i + 1}: {result.termination} after {result.turns} turns: {result.answer!r}",
                  file=sys.stderr)
    if args.json:
        payload = {"answer": None if chosen is None else results[chosen].answer, "chosen_sample": chosen,
                   "aggregate": args.aggregate, "samples": [_result_payload(r) for r in results]}
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    elif chosen is None:
        print(f"No answer: none of the {args.samples} samples answered.")
    else:
        print(f"({args.aggregate} of {args.samples} samples; sample {chosen + 1})")
        _print_result(results[chosen], sys.stdout)
    return _exit_code(chosen is not None, results)


def _result_payload(result: Result) -> dict[str, Any]:
    payload = {k: v for k, v in vars(result).items() if k != "messages"}
    payload["totals"] = result.totals.to_dict()
    payload["trajectory_path"] = shown_path(result.trajectory_path) if result.trajectory_path else None
    return payload


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
            model = event.model
            return f"model {model.get('name')} ({model.get('file_type')}), n_ctx {model.get('n_ctx'):,}"
        if isinstance(event, TurnStarted):
            fill = 100 * event.prompt_tokens / max(event.n_ctx, 1)
            again = f" (attempt {event.attempt + 1})" if event.attempt else ""
            if event.purpose == "notes":
                return f"  notes for the context policy{again}: context {event.prompt_tokens:,}/{event.n_ctx:,} tokens"
            return f"turn {event.turn + 1}{again}: context {event.prompt_tokens:,}/{event.n_ctx:,} tokens ({fill:.0f}%)"
        if isinstance(event, TurnCompleted):
            stats = event.record.stats
            drafted = stats.get("drafted_tokens", 0)  # speculative decoding (--draft); absent in older journals
            drafting = f", drafted {drafted}, accepted {stats.get('accepted_tokens', 0)}" if drafted else ""
            return (f"  {event.record.kind}: {stats['tokens_decoded']} tokens at "
                    f"{stats['decode_tokens_per_s']:.1f} tok/s, "
                    f"prefill {stats['prompt_tokens_evaluated']} new / {stats['prompt_tokens_reused']} reused"
                    f"{drafting}")
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
            return (f"  -> {event.observation_chars:,} chars in {event.elapsed_s:.1f} s, "
                    f"{len(event.visited_urls)} read{failed}")
        if isinstance(event, LimitReached):
            # The turn and context limits ask for one more turn (the final answer); the time limit ends the session.
            then = ("the session ends without an answer" if event.limit == "time" else
                    "the context policy acts" if event.limit == "context" else
                    "the model is asked for its final answer")
            return f"  ! {event.limit} limit reached: {event.detail}; {then}"
        if isinstance(event, ContextCompacted):
            return (f"  context {event.policy}: {event.detail}; {event.tokens_before:,} -> {event.tokens_after:,} "
                    f"tokens, {event.tokens_reevaluated:,} to evaluate again")
        if isinstance(event, ErrorRaised):
            return f"  ! error in {event.where}: {event.message}"
        if isinstance(event, Paced):
            return f"  ~ {Paced.words(event.action, event.detail)}"
        if isinstance(event, SessionFinished):
            result = event.result
            return f"finished: {result.termination} after {result.turns} turns in {result.elapsed_s:.1f} s"
        return None


def summary_heading(termination: str, *, answered: bool) -> str:
    """The first line of a run's summary, in the termination table's words (``venus_edge.result.TERMINATIONS``, as
    the page shows them): ``Answer:``, ``Answer (answer forced at the turn limit):`` or, without an answer, e.g.
    ``No answer: turn limit (termination 'max_steps').``"""
    ending = termination_of(termination)
    if not answered:
        return f"{ending.label} (termination '{ending.name}')."
    if ending.outcome == "forced_answer":
        return f"Answer ({ending.label[0].lower()}{ending.label[1:]}):"
    return "Answer:"


def _print_result(result: Result, out: TextIO) -> None:
    """What a person reads after a run: the answer, what was searched, the pages read (the answer's sources, with
    their titles where a search listed them), citations of pages never read, the tokens speculative decoding drafted
    and the model accepted (when it drafted any), and the journal."""
    print(summary_heading(result.termination, answered=result.answer is not None), file=out)
    if result.answer is not None:
        print(result.answer, file=out)
    searches, titles = _searches(result.messages)
    print("\nSearched:" if searches else "\nSearched: nothing", file=out)
    for query, found in searches:
        counted = ("results dropped at the context limit" if found is None else
                   f"{found} result{'' if found == 1 else 's'}")
        print(f"  {json.dumps(query, ensure_ascii=False)} ({counted})", file=out)
    print("\nSources (pages read):" if result.sources else f"\nSources: {NO_SOURCES}", file=out)
    for url in result.sources:
        print(f"  {url}" + (f"  ({titles[url]})" if titles.get(url) else ""), file=out)
    if result.unvisited_citations:
        print("Cited but never read: " + ", ".join(result.unvisited_citations), file=out)
    totals = result.totals
    if totals.drafted_tokens:
        print(f"\nSpeculative decoding: {totals.drafted_tokens:,} tokens drafted, {totals.accepted_tokens:,} accepted "
              f"({totals.accepted_tokens / totals.drafted_tokens:.0%})", file=out)
    if result.trajectory_path:
        print(f"\nTrajectory: {shown_path(result.trajectory_path)}", file=out)


def _searches(messages: Sequence[dict[str, str]]) -> tuple[list[tuple[str, int | None]], dict[str, str]]:
    """The queries of the conversation's searches, each with its number of results, and the titles of the pages they
    listed, by URL (``parse_search_observation``). A search whose results the context limit replaced (the forced
    answer's notice stands in their place) is listed by the queries of its call, with None results; a context
    policy's stubs and restarts leave out what they dropped."""
    import venus_edge.protocol as protocol
    from venus_edge.tools.search import parse_search_observation

    searches: list[tuple[str, int | None]] = []
    titles: dict[str, str] = {}
    for call, reply in zip(messages[2::2], messages[3::2]):
        if call["role"] != "assistant" or reply["role"] != "user":
            continue
        if protocol.limit_kind(reply["content"]) is not None:  # the limit's notice replaced this call's results
            tool_call = protocol.parse_turn(call["content"], ["search"]).tool_call
            if tool_call is not None and tool_call.name == "search":
                queries = tool_call.arguments.get("query")
                searches += [(str(query), None) for query in (queries if isinstance(queries, list) else [queries])]
            continue
        for block in parse_search_observation(protocol.observation_text(reply["content"])) or ():
            hits = block["web_page_info_list"]
            searches.append((block["query"], len(hits)))
            for hit in hits:
                if hit.get("url") and hit.get("title"):
                    titles.setdefault(str(hit["url"]), str(hit["title"]))
    return searches, titles

if __name__ == "__main__":
    sys.exit(main())
