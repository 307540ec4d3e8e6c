"""``venus-edge train``: the training commands.

    venus-edge train clean REDSearcher_SFT_10K.parquet runs/*.jsonl --out sft.jsonl --resample
    venus-edge train clean data.jsonl --out sft.jsonl --keep-correct --date 2026-03-01

The parser imports nothing heavy.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date as Date
from pathlib import Path

__all__ = ["add_command", "run"]


def add_command(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``train`` and its sub-commands."""
    train = commands.add_parser("train", help="prepare training data and train a checkpoint (SFT)")
    sub = train.add_subparsers(dest="train_command", required=True, metavar="STEP")
    clean = sub.add_parser(
        "clean", help="clean trajectories into the trained protocol, with a report",
        description="Read journals and dataset rows (OpenAI messages or ShareGPT; .jsonl, .json, .parquet), apply "
                    "the cleaning rules of DR-Venus's SFT data, optionally resample long trajectories, and write "
                    "one JSONL row per kept sample. The report goes to stdout and next to OUT.")
    clean.add_argument("inputs", nargs="+", type=Path, metavar="IN", help="journal or dataset files")
    clean.add_argument("--out", type=Path, required=True, metavar="OUT.jsonl", help="the cleaned rows")
    clean.add_argument("--date", default=None, metavar="YYYY-MM-DD",
                       help="the system prompt's date line (default today; the reference wrote 2026-03-01)")
    clean.add_argument("--keep-correct", action="store_true",
                       help="keep only samples whose final answer matches the ground truth (normalized exact match)")
    clean.add_argument("--max-turns", type=int, default=None, metavar="N", help="drop samples longer than N turns")
    clean.add_argument("--resample", action="store_true",
                       help="repeat long samples (default 1x up to 50 turns, 2x up to 100, 5x beyond)")
    clean.add_argument("--thresholds", default="50,100", metavar="A,B", help="resampling bucket bounds in turns")
    clean.add_argument("--multipliers", default="1,2,5", metavar="X,Y,Z", help="copies per sample in each bucket")
    clean.add_argument("--seed", type=int, default=0, help="the resampling shuffle's seed (default 0)")
    clean.set_defaults(_command_parser=clean)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the parsed ``train`` sub-command; returns the exit code."""
    if args.train_command == "clean":
        return _clean(args, args._command_parser)
    parser.error(f"unknown train step {args.train_command!r}")
    return 2


def _clean(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from venus_edge.jsonl import write_records
    from venus_edge.train.clean import CleanContext, clean_samples, exact_match_judge
    from venus_edge.train.data import load_samples
    from venus_edge.train.resampling import resample

    try:
        today = Date.fromisoformat(args.date) if args.date else Date.today()
        thresholds = [int(x) for x in args.thresholds.split(",") if x.strip()]
        multipliers = [int(x) for x in args.multipliers.split(",") if x.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    if args.out.exists():
        parser.error(f"{args.out} exists; choose a new file (cleaning never appends to earlier output)")
    try:
        loaded = load_samples(args.inputs, max_turns=args.max_turns)
    except (FileNotFoundError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    context = CleanContext(today, judge=exact_match_judge if args.keep_correct else None)
    samples, report = clean_samples(loaded.samples, context)
    lines = [f"# Cleaning {', '.join(str(p) for p in args.inputs)}", ""]
    if loaded.rejected:
        lines += [f"{len(loaded.rejected)} rows not read:", "", "| reason | rows | first example |", "|---|---|---|"]
        firsts = {}
        for rejected in loaded.rejected:
            firsts.setdefault(rejected.reason.split(":")[0], f"{rejected.source}: {rejected.reason}")
        lines += [f"| {reason} | {n} | {firsts[reason]} |" for reason, n in loaded.reasons().most_common()]
        lines.append("")
    lines.append(report.markdown())
    resampled = None
    if args.resample:
        try:
            samples, resampled = resample(samples, thresholds=thresholds, multipliers=multipliers, seed=args.seed)
        except ValueError as exc:
            parser.error(str(exc))
        lines += ["", resampled.markdown()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_records(args.out, (sample.to_dict() for sample in samples))
    text = "\n".join(lines) + f"\n\n{len(samples)} rows written to {args.out}\n"
    print(text, end="")
    args.out.with_suffix(".report.md").write_text(text, encoding="utf-8")
    summary = {"inputs": [str(p) for p in args.inputs], "not_read": dict(loaded.reasons()), "clean": report.to_dict(),
               "resample": [list(b) for b in resampled.buckets] if resampled else None, "written": len(samples)}
    args.out.with_suffix(".report.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                                                    encoding="utf-8")
    return 0 if samples else 1
