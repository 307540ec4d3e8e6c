"""``venus-edge bench``: how fast and how big each GGUF runs here, beside llama.cpp's own figures. The report ends
with what was run (``venus_edge.provenance``: the files and their SHA-256, every flag, versions, machine, date).

    venus-edge bench MODEL... [--n-ctx N] [--kv-type f16,q8_0] [--threads 2,4] [--prompt-lengths 128,512,2048]
                     [--depths 0,2048,6144] [--decode-tokens N] [--repeats N] [--journal FILE | --no-session]
                     [--reference F16.gguf] [--out DIR] [--fresh] [--no-plot] [--draft lookup|MODEL.gguf|off]

The report in ``--out`` grows as the run goes (after each configuration), and a rerun with the same ``--out`` reuses
the configurations it already measured on the same file and settings (``--fresh`` measures everything again). Before
the first measurement a line says the expected time; after each configuration, a warning names each stage measured
while other processes used the CPU.

``--kv-type`` and ``--threads`` mean what they mean in ``research``; bench takes a comma list of them and measures
each (a sweep), where a session takes one. ``--draft`` (one value, as in ``research``) drafts in every
configuration. ``--kv`` and ``--session FILE`` are the deprecated spellings of ``--kv-type`` and ``--journal FILE``
(``research --session`` is a session's id).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # rich is imported when a bar is shown
    from rich.progress import Progress, TaskID

    from venus_edge.bench.report import BenchReport
    from venus_edge.provenance import RunRecord

__all__ = ["add_command", "run"]


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 0, got {text!r}")
    return values


def _thread_counts(text: str) -> tuple[int, ...]:
    """``--threads 2,4``: each a thread count as ``research --threads`` takes it (``threads_argument``)."""
    from venus_edge.flags import threads_argument

    values = tuple(threads_argument(part.strip()) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated thread counts, got {text!r}")
    return values


def _kv_types(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [v for v in values if v not in ("f16", "q8_0", "q4_0")]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"KV types are f16, q8_0, q4_0; got {text!r}")
    return values


_BENCH_DESCRIPTION = """\
Measure each GGUF on this machine, for each --kv-type and --threads given: load time and resident memory (beside the
planner's estimate), prefill and decode speed at several prompt lengths and depths, a replayed research session, and
quality against an unquantized reference, beside llama-bench's own figures. Prints the report; writes report.md,
report.json and the plots under --out. The report grows as the run goes (a stopped run keeps what it measured), a
rerun with the same --out measures only what is not there yet, and figures taken while other processes used the CPU
are marked.

example:
  venus-edge bench M-Q8_0.gguf M-Q4_K_M.gguf M-F16.gguf --kv-type f16,q8_0 --threads 2,4 --out runs/bench
"""


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``bench`` (its parser imports nothing heavy)."""
    from venus_edge.flags import (
        OBSERVATION_STYLE_CHOICES,
        add_deprecated_alias,
        add_draft_argument,
        add_gpu_layers_argument,
    )

    bench = commands.add_parser("bench", help="measure load, memory, prefill, decode, a session and quality of GGUFs",
                                description=_BENCH_DESCRIPTION)
    bench.add_argument("models", nargs="+", metavar="MODEL", help="GGUF files (e.g. Q8_0, Q6_K, Q4_K_M of one "
                                                                  "checkpoint) or hub repos owner/name[:file.gguf]")
    bench.add_argument("--n-ctx", type=int, default=8192, metavar="N",
                       help="context window (default 8192: the shipped session's last turn needs ~5K tokens)")
    bench.add_argument("--kv-type", dest="kv", type=_kv_types, default=("f16",), metavar="TYPES",
                       help="KV-cache types to measure, comma-separated: f16,q8_0,q4_0 (default f16)")
    add_deprecated_alias(bench, "--kv", "--kv-type")
    bench.add_argument("--threads", type=_thread_counts, default=None, metavar="N,...",
                       help="CPU thread counts to measure, comma-separated (default: the physical cores)")
    add_draft_argument(bench)
    add_gpu_layers_argument(bench)
    bench.add_argument("--prompt-lengths", type=_ints, default=(128, 512, 2048), metavar="N,...",
                       help="prefill test prompt lengths in tokens (default 128,512,2048)")
    bench.add_argument("--depths", type=_ints, default=(0, 2048, 6144), metavar="N,...",
                       help="decode test context depths in tokens (default 0,2048,6144)")
    bench.add_argument("--decode-tokens", type=int, default=64, metavar="N", help="tokens per decode test (default 64)")
    bench.add_argument("--repeats", type=int, default=2, metavar="N", help="runs per test, best kept (default 2)")
    replayed = bench.add_mutually_exclusive_group()
    replayed.add_argument("--journal", type=Path, default=None, metavar="FILE",
                          help="a journal (research --out) whose longest session is replayed "
                               "(default: the shipped one)")
    add_deprecated_alias(replayed, "--session", "--journal")
    replayed.add_argument("--no-session", action="store_true", help="do not replay a session")
    bench.add_argument("--reference", type=Path, default=None, metavar="GGUF",
                       help="the unquantized file quality is measured against (default: the F16/F32/BF16 file "
                            "among MODEL..., when they are one checkpoint)")
    bench.add_argument("--no-llama-bench", action="store_true", help="skip the llama-bench anchor")
    bench.add_argument("--out", type=Path, default=Path("runs/bench"), metavar="DIR",
                       help="report.md, report.json and plots go here (default runs/bench); a report there already "
                            "gives the configurations it measured on the same file and settings")
    bench.add_argument("--fresh", action="store_true",
                       help="measure every configuration again, reusing nothing from the report in --out")
    bench.add_argument("--no-plot", action="store_true", help="do not write the PNG plots")
    bench.add_argument("--observation-style", choices=OBSERVATION_STYLE_CHOICES, default=OBSERVATION_STYLE_CHOICES[0],
                       help="the style of the first turn's system prompt: inference (default) or rl (README, "
                            "Observation styles); a replayed session keeps its journal's")
    bench.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``venus-edge bench``; the exit code (0, or 2 for bad flags)."""
    from venus_edge.bench import measure
    from venus_edge.bench.run import STAGES, load_results, pick_reference, reusable_results, run_bench
    from venus_edge.engines.llama_load import check_gpu_layers
    from venus_edge.engines.models import resolve_model
    from venus_edge.errors import ModelNotFoundError, missing_file_reason
    from venus_edge.memory.machine import physical_cores

    for flag, value, least in (("--decode-tokens", args.decode_tokens, 2), ("--repeats", args.repeats, 1),
                               ("--n-ctx", args.n_ctx, 256)):
        if value < least:
            parser.error(f"{flag} must be at least {least}, got {value}")
    try:  # before any model loads: a CPU-only build would run "on the GPU" on the CPU
        check_gpu_layers(args.gpu_layers, asked=f"--gpu-layers {args.gpu_layers}")
    except ValueError as exc:
        parser.error(str(exc))
    models = [resolve_model(model) for model in args.models]
    if args.reference is not None and not args.reference.is_file():  # a local file only (no hub repo)
        raise ModelNotFoundError(str(args.reference), missing_file_reason(args.reference, ".gguf"),
                                 advice="" if args.reference.is_dir() else "Give a local GGUF ({reference} F16.gguf).")
    try:
        configs = [measure.BenchConfig(model, kv_type=kv, threads=threads, n_ctx=args.n_ctx,
                                       prompt_lengths=args.prompt_lengths, depths=args.depths,
                                       decode_tokens=args.decode_tokens, repeats=args.repeats,
                                       llama_bench=not args.no_llama_bench, draft=args.draft,
                                       gpu_layers=args.gpu_layers,
                                       observation_style=args.observation_style)
                   for model in models for kv in args.kv for threads in (args.threads or (physical_cores(),))]
    except ValueError as exc:
        parser.error(str(exc))
    session = None if args.no_session else measure.load_session(args.journal or measure.shipped_session_path())
    reference = args.reference or pick_reference(models)
    try:
        reused = [] if args.fresh else load_results(args.out / "report.json", reference=reference)
    except ValueError as exc:
        parser.error(str(exc))
    record = _run_record(args, models, reference)

    def keep(report: BenchReport) -> None:  # each configuration's figures on disk as soon as they are measured
        report.run = record
        report.write(args.out, plots=False)

    def say(line: str) -> None:
        print(f"bench: {line}", file=sys.stderr, flush=True)

    to_measure = len(configs) - len(reusable_results(configs, reused, session=session))
    with _progress_bar(to_measure * (len(STAGES) - (session is None)), quiet=args.quiet) as advance:
        report = run_bench(configs, session=session, reference=reference, reused=reused, on_update=keep, notify=say,
                           progress=lambda config, stage: advance(f"{config.name}: {stage}"))
    written = report.write(args.out, plots=not args.no_plot)
    print(report.markdown())
    print("written: " + ", ".join(str(path) for path in written), file=sys.stderr)
    return 0


def _run_record(args: argparse.Namespace, models: list[Path], reference: Path | None) -> RunRecord:
    """What this bench runs: every flag as given, the files measured (and the quality reference) with their hashes."""
    from venus_edge.provenance import command_flags, describe_run

    flags = command_flags(vars(args))
    files = list(dict.fromkeys(path.resolve() for path in [*models, *([reference] if reference else [])]))
    return describe_run("bench", models=files, flags=flags, command_line=getattr(args, "argv", None))


class _progress_bar:
    """Progress on stderr, advanced once per stage: a rich bar on a terminal; otherwise (a log file, a pipe) one
    plain line per stage as it starts, flushed, so a log shows the run as it goes; nothing when quiet (or rich is
    missing on a terminal)::

        bench: stage 3/12, SmolLM2-135M.Q4_K_M f16 t2: decode, 41 s elapsed
    """

    def __init__(self, total: int, *, quiet: bool, stream: TextIO | None = None) -> None:
        self.total, self.quiet = total, quiet
        self.stream = stream or sys.stderr
        self.plain = not quiet and not self.stream.isatty()
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.started, self.stage = time.monotonic(), 0

    def __enter__(self) -> Any:
        if not self.quiet and not self.plain:
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                pass
            else:  # on stderr: stdout carries the report
                self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), transient=True, console=Console(stderr=True))
                self.bar.start()
                self.task = self.bar.add_task("bench", total=self.total)
        return self.advance

    def advance(self, description: str) -> None:
        self.stage += 1
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, advance=1, description=description)
        elif self.plain:
            print(f"bench: stage {self.stage}/{self.total}, {description}, "
                  f"{time.monotonic() - self.started:.0f} s elapsed", file=self.stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
