"""``venus-edge train``: the training commands.

    venus-edge train clean REDSearcher_SFT_10K.parquet runs/*.jsonl --out sft.jsonl --resample
    venus-edge train clean data.jsonl --out sft.jsonl --keep-correct --date 2026-03-01
    venus-edge train export-verl --sft sft.jsonl --questions questions.jsonl --out verl-data/

The parser imports nothing heavy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import textwrap
from collections.abc import Callable
from datetime import date as Date
from pathlib import Path
from typing import Any

from venus_edge.flags import OBSERVATION_STYLE_CHOICES, count_argument

__all__ = ["add_command", "run"]


_TRAIN_DESCRIPTION = """\
The training steps of a DR-Venus-style agent: clean trajectories into SFT rows (clean), supervised fine-tuning
(sft), RL with information-gain rewards (igpo), the data as verl's parquet files (export-verl), and a toy research
world (toy-world) and tiny model (tiny-model) to try them on a CPU. Each step writes where its --out or config
says; see venus-edge train STEP --help.

examples:
  venus-edge train clean runs/*.jsonl --out sft.jsonl --resample
  venus-edge train sft configs/sft/dr-venus-4b.yaml
  venus-edge train export-verl --sft sft.jsonl --questions questions.jsonl --out verl-data/
"""


#: A command for each step's --help, as a user would type it.
_EXAMPLES = {
    "clean": "venus-edge train clean runs/*.jsonl --out sft.jsonl --resample",
    "export-verl": "venus-edge train export-verl --sft sft.jsonl --questions questions.jsonl --out verl-data/",
    "sft": "venus-edge train sft configs/sft/qwen2.5-coder-0.5b-lora.yaml --max-steps 20",
    "igpo": "venus-edge train igpo configs/igpo/toy.yaml --steps 10",
    "toy-world": "venus-edge train toy-world runs/toy --people 120 --seed 0",
    "tiny-model": "venus-edge train tiny-model runs/toy/sft.jsonl --out runs/toy/base --vocab 2048 --hidden 128",
}


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``train`` and its sub-commands."""
    train = commands.add_parser("train", help="prepare training data and train a checkpoint (SFT, IGPO)",
                                description=_TRAIN_DESCRIPTION)
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
    clean.add_argument("--observation-style", choices=OBSERVATION_STYLE_CHOICES, default=OBSERVATION_STYLE_CHOICES[0],
                       help="write the data as the authors' inference code shows it (default) or as their RL rollouts "
                            "do: rl (README, Observation styles)")
    clean.add_argument("--keep-correct", action="store_true",
                       help="keep only samples whose final answer matches the ground truth (normalized exact match)")
    clean.add_argument("--max-turns", type=int, default=None, metavar="N", help="drop samples longer than N turns")
    clean.add_argument("--resample", action="store_true",
                       help="repeat long samples (default 1x up to 50 turns, 2x up to 100, 5x beyond)")
    clean.add_argument("--thresholds", default="50,100", metavar="A,B", help="resampling bucket bounds in turns")
    clean.add_argument("--multipliers", default="1,2,5", metavar="X,Y,Z", help="copies per sample in each bucket")
    clean.add_argument("--seed", type=int, default=0, help="the resampling shuffle's seed (default 0)")
    clean.set_defaults(_command_parser=clean)

    verl = sub.add_parser(
        "export-verl", help="write cleaned SFT rows and RL questions as the parquet files verl's trainers read",
        description="Write OUT/sft.parquet (verl's multi-turn SFT dataset: a messages column) from cleaned rows "
                    "(venus-edge train clean, with --resample if wanted), OUT/rl.parquet (verl's RL dataset: "
                    "data_source, prompt, ability, reward_model, extra_info, agent_name) from question files, and "
                    "OUT/chat_template.jinja for verl versions that tokenize message by message "
                    "(model.custom_chat_template; README, Trajectories for verl).")
    verl.add_argument("--sft", nargs="+", type=Path, default=[], metavar="SFT.jsonl",
                      help="cleaned rows (the output of venus-edge train clean)")
    verl.add_argument("--questions", nargs="+", type=Path, default=[], metavar="Q",
                      help="RL questions with answers (JSONL/JSON/CSV/parquet, as venus-edge train igpo reads)")
    verl.add_argument("--out", type=Path, required=True, metavar="DIR")
    verl.add_argument("--date", default=None, metavar="YYYY-MM-DD",
                      help="the RL prompt's date line (default today; the reference wrote 2026-03-01)")
    verl.add_argument("--observation-style", choices=OBSERVATION_STYLE_CHOICES, default=OBSERVATION_STYLE_CHOICES[0],
                      help="the RL prompt's system message: inference (default) or rl (README, Observation styles)")
    verl.add_argument("--data-source", default="venus-edge", help="the RL rows' data_source (default venus-edge)")
    verl.add_argument("--agent-name", default="dr_agent",
                      help="the RL rows' agent loop (default dr_agent, DR-Venus's; verl's own: tool_agent)")
    verl.set_defaults(_command_parser=verl)

    sft = sub.add_parser("sft", help="supervised fine-tuning on cleaned trajectories (transformers + accelerate)",
                         description="Train the model of CONFIG (YAML or JSON; see venus_edge.train.SFTConfig) on its "
                                     "cleaned data. A rerun resumes from the newest checkpoint. Several processes: "
                                     "accelerate launch --config_file configs/accelerate/<x>.yaml "
                                     "-m venus_edge.train.sft CONFIG")
    sft.add_argument("config", type=Path, metavar="CONFIG", help="the run's settings")
    sft.add_argument("--max-steps", type=int, default=None, metavar="N", help="stop after N optimizer steps")
    sft.add_argument("--output-dir", default=None, metavar="DIR", help="override the config's output_dir")
    sft.add_argument("--quiet", action="store_true", help="no progress bar")
    sft.set_defaults(_command_parser=sft)

    igpo = sub.add_parser("igpo", help="IGPO: RL with information-gain turn rewards from an SFT checkpoint",
                          description="Train the model of CONFIG (YAML or JSON; see venus_edge.train.IGPOConfig) with "
                                      "rollouts through the agent loop on its questions and corpus. A rerun resumes "
                                      "from the newest checkpoint. Several processes: accelerate launch --config_file "
                                      "configs/accelerate/<x>.yaml -m venus_edge.train.igpo_trainer CONFIG")
    igpo.add_argument("config", type=Path, metavar="CONFIG", help="the run's settings")
    igpo.add_argument("--steps", type=int, default=None, metavar="N", help="override the config's steps")
    igpo.add_argument("--output-dir", default=None, metavar="DIR", help="override the config's output_dir")
    igpo.add_argument("--outcome-only", action="store_true",
                      help="the ablation: no information-gain rewards (outcome and format penalties only)")
    igpo.add_argument("--quiet", action="store_true", help="no progress bar")
    igpo.set_defaults(_command_parser=igpo)

    toy = sub.add_parser("toy-world", help="generate the toy research world and its oracle trajectories",
                         description="Write OUT/corpus (invented people's pages), OUT/questions-train.jsonl, "
                                     "OUT/questions-heldout.jsonl and OUT/trajectories.jsonl (the oracle's sessions "
                                     "through the real agent loop).")
    toy.add_argument("out", type=Path, metavar="OUT")
    toy.add_argument("--people", type=count_argument(8), default=80, help="invented people (at least 8; default 80)")
    toy.add_argument("--seed", type=int, default=0)
    toy.add_argument("--detour-share", type=float, default=0.0, metavar="S",
                     help="share of oracle sessions whose first visit opens a wrong page, then the right one "
                          "(imperfect demonstrations: errors in research turns; default 0)")
    toy.add_argument("--observation-style", choices=OBSERVATION_STYLE_CHOICES, default=OBSERVATION_STYLE_CHOICES[0],
                     help="the oracle sessions' prompt and observations: inference (default) or rl (README, "
                          "Observation styles)")
    toy.set_defaults(_command_parser=toy)

    tiny = sub.add_parser("tiny-model", help="a random tiny Qwen3 with a small BPE vocabulary trained on your texts",
                          description="Train a byte-level BPE (Qwen's pre-tokenizer and added tokens) on the texts of "
                                      "the given files and write a random-weight Qwen3 checkpoint that uses it: a "
                                      "model to fine-tune on a CPU.")
    tiny.add_argument("texts", nargs="+", type=Path, metavar="FILE",
                      help="cleaned JSONL rows (their messages) and text or Markdown files, folders of them")
    tiny.add_argument("--out", type=Path, required=True, metavar="DIR")
    tiny.add_argument("--vocab", type=count_argument(512), default=4096, help="BPE vocabulary size (default 4096)")
    tiny.add_argument("--hidden", type=hidden_size, default=256,
                      help="hidden size, a multiple of 16 (4 heads of a head size llama.cpp runs; default 256)")
    tiny.add_argument("--layers", type=count_argument(1, 512), default=4, help="layers (default 4)")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--pretrain-copying", type=count_argument(0), default=0, metavar="STEPS",
                      help="then pretrain it STEPS steps to copy: random spans repeated at random distances in "
                           "windows of the texts (3500 for hidden 128, as toy_sft.sh; default 0: random weights)")
    tiny.set_defaults(_command_parser=tiny)
    for name, parser in sub.choices.items():  # each step's help ends with a command to copy
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.description = f"{textwrap.fill(parser.description or '', 116)}\n\nexample:\n  {_EXAMPLES[name]}"


def hidden_size(text: str) -> int:
    """``--hidden``: a multiple of 16 from 16 to 8,192 (4 heads, each a multiple of 4 wide)."""
    value = count_argument(16, 8192)(text)
    if value % 16:
        raise argparse.ArgumentTypeError(f"must be a multiple of 16, got {value}")
    return value


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the parsed ``train`` sub-command; returns the exit code."""
    if args.train_command == "clean":
        return _clean(args, args._command_parser)
    if args.train_command == "export-verl":
        return _export_verl(args, args._command_parser)
    if args.train_command == "sft":
        return _sft(args)
    if args.train_command == "igpo":
        return _igpo(args)
    if args.train_command == "toy-world":
        return _toy_world(args)
    if args.train_command == "tiny-model":
        return _tiny_model(args)
    parser.error(f"unknown train step {args.train_command!r}")  # exits (status 2)


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
    context = CleanContext(today, judge=exact_match_judge if args.keep_correct else None,
                           observation_style=args.observation_style)
    samples, report = clean_samples(loaded.samples, context)
    lines = [f"# Cleaning {', '.join(str(p) for p in args.inputs)}", ""]
    if loaded.rejected:
        lines += [f"{len(loaded.rejected)} rows not read:", "", "| reason | rows | first example |", "|---|---|---|"]
        firsts: dict[str, str] = {}
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
    text = "\n".join(lines) + f"\n\n{len(samples)} rows written to {args.out}\n"
    summary = {"inputs": [str(p) for p in args.inputs], "not_read": dict(loaded.reasons()), "clean": report.to_dict(),
               "resample": [list(b) for b in resampled.buckets] if resampled else None, "written": len(samples)}
    reports = {args.out.with_suffix(".report.md"): text,
               args.out.with_suffix(".report.json"): json.dumps(summary, indent=2, ensure_ascii=False) + "\n"}
    try:  # all or nothing: a full disk left a torn last row, and the rerun refused the file that held it
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_records(args.out, (sample.to_dict() for sample in samples))  # whole or not at all
        for path, content in reports.items():
            path.write_text(content, encoding="utf-8")
    except OSError as exc:
        for path in (args.out, *reports):
            with contextlib.suppress(OSError):  # the folder itself may be what failed
                path.unlink(missing_ok=True)
        print(f"error: cannot write {exc.filename or args.out}: {exc.strerror or exc}; nothing was kept: free "
              "the space (or give another --out) and run again", file=sys.stderr)
        return 3
    print(text, end="")
    return 0 if samples else 1


def _export_verl(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from venus_edge.eval.data import load_examples
    from venus_edge.train.clean import CleanContext, validate_structure
    from venus_edge.train.data import load_samples
    from venus_edge.train.errors import Dropped
    from venus_edge.train.verl_export import export_verl

    if not args.sft and not args.questions:
        parser.error("nothing to export: give --sft, --questions or both")
    try:
        today = Date.fromisoformat(args.date) if args.date else Date.today()
    except ValueError as exc:
        parser.error(str(exc))
    try:
        loaded = load_samples(args.sft)
        examples = [example for path in args.questions for example in load_examples(path).examples]
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    # Rows are written as they are; one not in the trained layout (not cleaned) is named and not exported.
    context, samples = CleanContext(today), []
    not_exported = [f"{r.source}: {r.reason}" for r in loaded.rejected]
    for sample in loaded.samples:
        try:
            samples.append(validate_structure(sample, context))
        except Dropped as drop:
            not_exported.append(f"{sample.source}: {drop} (run venus-edge train clean first)")
    for line in not_exported:
        print(f"not exported: {line}", file=sys.stderr)
    try:
        result = export_verl(args.out, samples=samples, examples=examples, today=today, data_source=args.data_source,
                             agent_name=args.agent_name, observation_style=args.observation_style)
    except (ImportError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:  # --out a file, a full disk
        print(f"error: cannot write under {args.out}: {exc.strerror or exc} ({exc.filename or args.out}); --out "
              "names a folder (created if missing)", file=sys.stderr)
        return 3
    print(f"{result.sft_rows} SFT rows -> {result.sft_path or '-'} ({len(not_exported)} not exported; "
          f"{result.control_token_samples} quote control-token text, which verl tokenizes as control tokens); "
          f"{result.rl_rows} RL questions -> {result.rl_path or '-'}; chat template for verl's per-message "
          f"tokenization: {result.template_path}")
    return 0 if result.sft_rows or result.rl_rows else 1


def _train(load: Callable[[], Any], train: Callable[[Any], Any]) -> Any:
    """Load a run's config and train it; a bad config is exit code 2, missing data, a model that cannot be read or a
    mismatched checkpoint 3,
    a rollout server that cannot be given the policy 4 (the last checkpoint stays: rerun to resume)."""
    from venus_edge.train.errors import RolloutServerError

    try:
        config = load()
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return train(config)
    except (OSError, ValueError) as exc:  # OSError: transformers' for a model it cannot find or read
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except RolloutServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4


def _sft(args: argparse.Namespace) -> int:
    from venus_edge.train.sft import SFTConfig, train_sft

    result = _train(lambda: SFTConfig.from_file(args.config, max_steps=args.max_steps, output_dir=args.output_dir),
                    lambda config: train_sft(config, progress=not args.quiet))
    if isinstance(result, int):
        return result
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from else ""
    loss = f"{result.last_loss:.4f}" if result.last_loss is not None else "-"
    print(f"{result.steps} steps{resumed}; last loss {loss}; {result.tokens_per_s:.0f} trained tokens/s; "
          f"{len(result.skipped)} samples skipped" + (f"; model in {result.final_dir}" if result.final_dir else ""))
    return 0


def _igpo(args: argparse.Namespace) -> int:
    from venus_edge.train.igpo_trainer import IGPOConfig, train_igpo

    result = _train(lambda: IGPOConfig.from_file(args.config, steps=args.steps, output_dir=args.output_dir,
                                                 information_gain=False if args.outcome_only else None),
                    lambda config: train_igpo(config, progress=not args.quiet))
    if isinstance(result, int):
        return result
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from else ""
    last = result.last
    figures = (f"; last step: reward {last['reward']}, accuracy {last['accuracy']}, kl {last['kl']}"
               if last else "")
    print(f"{result.steps} steps{resumed}{figures}" + (f"; model in {result.final_dir}" if result.final_dir else ""))
    return 0


def _toy_world(args: argparse.Namespace) -> int:
    from venus_edge.train.toyworld import generate_world, run_oracle

    journal = args.out / "trajectories.jsonl"
    if args.out.exists() and not args.out.is_dir():
        print(f"error: {args.out} is a file; OUT names a folder (created if missing)", file=sys.stderr)
        return 2
    if journal.exists():
        print(f"error: {journal} exists; choose a new OUT", file=sys.stderr)
        return 2
    if not 0.0 <= args.detour_share <= 1.0:
        print(f"error: --detour-share must be between 0 and 1, not {args.detour_share}", file=sys.stderr)
        return 2
    try:
        world = generate_world(args.out, people=args.people, seed=args.seed)
        correct, total = run_oracle(world.train, world.corpus, journal, detour_share=args.detour_share,
                                    seed=args.seed, observation_style=args.observation_style)
    except OSError as exc:  # OUT under a file, a full disk
        print(f"error: cannot write under {args.out}: {exc.strerror or exc} ({exc.filename or args.out})",
              file=sys.stderr)
        return 3
    print(
        f"{len(world.people)} people in {world.corpus}; {len(world.train)} training and {len(world.heldout)} held-out "
        f"questions; the oracle answered {correct} of {total} correctly; trajectories in {journal}"
    )
    return 0


def _tiny_model(args: argparse.Namespace) -> int:
    from venus_edge.train.tinymodel import write_tiny_model

    missing = [str(path) for path in args.texts if not path.exists()]
    if missing:
        print(f"error: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        print(f"error: {args.out} exists and is not an empty folder; give a new --out (a model is never written "
              "over another)", file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot make --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        folder = write_tiny_model(
            args.texts, args.out, vocab=args.vocab, hidden=args.hidden, layers=args.layers, seed=args.seed
        )
        if args.pretrain_copying:
            from venus_edge.train.tinymodel import pretrain_copying

            losses = pretrain_copying(folder, args.texts, steps=args.pretrain_copying, seed=args.seed)
            print(f"pretrained to copy: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    except BaseException as exc:  # nothing half-made stays (a random model that looks pretrained, a refused rerun)
        shutil.rmtree(args.out, ignore_errors=True)
        if not isinstance(exc, (ValueError, OSError)):
            raise
        print(f"error: {exc}; nothing was written to {args.out}", file=sys.stderr)
        return 2
    print(f"tiny Qwen3 checkpoint in {folder}")
    return 0
