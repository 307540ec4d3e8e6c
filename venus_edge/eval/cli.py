"""``venus-edge eval``: evaluate a model, a quant type or a corpus on a question set.

    venus-edge eval pydocs --corpus /usr/share/doc/python3.11/html --model M.gguf --k 4 --aggregate majority
    venus-edge eval browse_comp_test_set.csv --web --judge self --out runs/browsecomp

The parser imports nothing heavy; the model loads when the command runs. Progress goes to stderr: a live bar on a
terminal, a plain line per finished sample otherwise (a log file, a pipe). The reports end with what was run
(``venus_edge.provenance``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from venus_edge.errors import ModelNotFoundError
from venus_edge.eval.aggregate import AGGREGATORS

if TYPE_CHECKING:
    from venus_edge.eval.data import EvalExample
    from venus_edge.eval.records import EvalRow
    from venus_edge.provenance import RunRecord
    from venus_edge.result import Result
    from venus_edge.session import SessionSettings

__all__ = ["add_command", "run"]



_EVAL_DESCRIPTION = """\
Research each question of DATA (--k samples each) and score the answers: exact match, F1, pass@k, an optional LLM
--judge and an --aggregate answer of the k. Writes results.jsonl, trajectories.jsonl, summary.md, summary.json and
summary.png under --out; a rerun with the same --out resumes.

example:
  venus-edge eval pydocs --corpus /usr/share/doc/python3.11/html --model M.gguf --k 4 --aggregate majority
"""


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``eval`` with the session flags of ``research``."""
    from venus_edge.flags import add_session_arguments

    parser = commands.add_parser("eval", help="evaluate the agent on a question set (pass@k, EM, F1, judge)",
                                 description=_EVAL_DESCRIPTION)
    parser.add_argument("data", help="a question set: 'pydocs' (shipped), or a .jsonl/.json/.csv/.parquet file "
                        "(BrowseComp's CSV and GAIA's metadata.jsonl are read as published)")
    add_session_arguments(parser)
    parser.add_argument("--k", type=int, default=1, metavar="N", help="samples per question (default 1)")
    parser.add_argument("--judge", default=None, metavar="JUDGE",
                        help="grade answers with an LLM judge: 'self' (the evaluated model), a GGUF path or hub repo, "
                             "or an OpenAI-compatible server URL (default: exact match only)")
    parser.add_argument("--aggregate", choices=AGGREGATORS, default=None,
                        help="also choose one answer from the k samples and report its accuracy")
    parser.add_argument("--parallel", action="store_true",
                        help="run the k samples of a question at once: one llama.cpp batch, or concurrent requests "
                             "to --base-url")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N questions")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="results, trajectories and reports (default runs/eval-<data>); rerun to resume")
    parser.add_argument("--no-plot", action="store_true", help="do not write summary.png")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``eval``; exit code 0 when every sample was scored."""
    from venus_edge.eval.data import load_examples
    from venus_edge.eval.judge import LLMJudge
    from venus_edge.eval.runner import TRAJECTORIES_FILE, run_eval
    from venus_edge.flags import check_session_arguments
    from venus_edge.session import SessionSettings, open_session

    check_session_arguments(args, parser)
    if args.k < 1:
        parser.error("--k must be at least 1")
    if args.aggregate == "judge" and args.judge is None:
        parser.error("--aggregate judge needs --judge")
    try:
        loaded = load_examples(args.data, limit=args.limit)
    except (OSError, ValueError, ImportError) as exc:
        parser.error(str(exc))
    for number, reason in loaded.skipped:
        print(f"skipped row {number}: {reason}", file=sys.stderr)
    out = args.out or Path("runs") / f"eval-{Path(args.data).stem}"
    samples = args.k if args.parallel else 1
    settings = SessionSettings.from_args(args)
    with open_session(settings, logprobs=args.aggregate == "confidence", samples=samples) as session:
        judge_engine = _judge_engine(args.judge, session.engine, settings)
        try:
            judge = LLMJudge(judge_engine) if judge_engine is not None else None
            record = _run_record(args, settings, session.engine, judge_engine)

            def sample(example: EvalExample, indices: Sequence[int]) -> Iterator[tuple[int, Result]]:
                return session.rollouts(example.question, indices, trajectory_path=out / TRAJECTORIES_FILE)

            with _Progress(len(loaded.examples) * args.k, quiet=args.quiet) as progress:
                summary = run_eval(loaded.examples, sample, out_dir=out, k=args.k, judge=judge,
                                   aggregate=args.aggregate, aggregate_completer=judge_engine,
                                   on_row=progress.advance, on_start=progress.start, plot=not args.no_plot,
                                   run=record)
        finally:
            if judge_engine is not None and judge_engine is not session.engine:
                judge_engine.close()
    _print_summary(summary.data, out)
    return 0


def _judge_engine(judge: str | None, engine: Any, settings: SessionSettings) -> Any:
    """None, the evaluated engine (``self``), a model server (``http(s)://...``), or another GGUF for judging, on the
    session's threads and GPU layers (``--threads``, ``--gpu-layers``: a judge left on the CPU beside a model on the
    GPU would be the slow half of the run)."""
    if judge is None:
        return None
    if judge == "self":
        return engine
    if judge.startswith(("http://", "https://")):
        from venus_edge.engines.openai import OpenAIEngine

        return OpenAIEngine(judge)
    from venus_edge.engines.llama_cpp import LlamaCppEngine
    from venus_edge.engines.models import resolve_model

    try:
        path = resolve_model(judge)
    except ModelNotFoundError as exc:
        raise exc.given_by("judge") from exc.__cause__
    return LlamaCppEngine(path, n_threads=settings.threads, gpu_layers=settings.gpu_layers)


def _run_record(args: argparse.Namespace, settings: SessionSettings, engine: Any, judge_engine: Any) -> RunRecord:
    """What this run runs: the session's settings, eval's own flags, the model files (the evaluated one and a GGUF
    judge) and what the engine resolved at load (n_ctx, threads, KV type)."""
    from venus_edge.flags import add_session_arguments
    from venus_edge.provenance import command_flags, describe_run

    probe = argparse.ArgumentParser(add_help=False)
    add_session_arguments(probe)
    session_flags = {action.dest for action in probe._actions}
    flags = command_flags(vars(args), leave_out=session_flags)
    engines = [engine] + ([judge_engine] if judge_engine is not None and judge_engine is not engine else [])
    models = [info["path"] for info in (e.model_info() for e in engines) if info.get("path")]
    record = describe_run("eval", models=models, settings=settings, flags=flags,
                          command_line=getattr(args, "argv", None))
    return record.with_engine(engine.model_info())


def _duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class _Progress:
    """Progress on stderr as samples finish: on a terminal a live bar (rich: samples done, running accuracy, ETA);
    otherwise (a log file, a pipe) one plain line per finished sample, flushed, so a log shows the run as it goes:

        eval: 3/10 samples, 2 correct (67%), 1m05s elapsed, about 2m32s left
    """

    def __init__(self, total: int, *, quiet: bool, stream: TextIO | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.live = not quiet and self.stream.isatty()
        self.plain = not quiet and not self.live
        self.correct = self.done = 0
        self.started = time.monotonic()

    def __enter__(self) -> _Progress:
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("accuracy {task.fields[accuracy]}"), TimeRemainingColumn(),
                                     console=Console(stderr=True))
            self.progress.start()
            self.task = self.progress.add_task("eval", total=self.total, accuracy="-")
        return self

    def start(self, pending: int) -> None:
        """The run starts with ``pending`` samples to run (fewer than the total when it resumes)."""
        self.total, self.started = pending, time.monotonic()
        if self.live:
            self.progress.update(self.task, total=pending)

    def advance(self, row: EvalRow) -> None:
        self.done += 1
        self.correct += row.correct
        if self.live:
            self.progress.update(self.task, advance=1, accuracy=f"{self.correct / self.done:.3f}")
        elif self.plain:
            print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        """Samples done of this run's, correct so far, time elapsed and a rough time left (the mean time per sample
        so far, times the samples left)."""
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * max(0, self.total - self.done) if self.done else 0.0
        return (f"eval: {self.done}/{self.total} samples, {self.correct} correct ({self.correct / self.done:.0%}), "
                f"{_duration(elapsed)} elapsed, about {_duration(left)} left")

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()


def _print_summary(data: dict[str, Any], out: Path) -> None:
    shown = {key: value for key, value in data.items() if key not in ("per_question",)}
    for key, value in shown.items():
        print(f"{key}: {value}")
    print(f"\nresults: {out / 'results.jsonl'}\nreport: {out / 'summary.md'}")
