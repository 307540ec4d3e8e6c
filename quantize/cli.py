"""The `venus-edge quantize` and `venus-edge inspect` commands.

    venus-edge quantize SOURCE --types Q4_K_M,Q8_0 --out DIR [--base-type f16] [--hf-parity]
    venus-edge quantize SOURCE --target phone --out DIR
    venus-edge inspect FILE.gguf [--json] [--tensors]

`add_commands` registers the parsers without importing gguf, llama.cpp or numpy, so the runtime's CLI works
when the `[quantize]` extra is missing; `run` imports them when a command runs.

Exit codes: 0 done; 2 usage error; 3 input or model error (missing checkpoint, corrupt GGUF, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from venus_edge.errors import VenusEdgeError

if TYPE_CHECKING:  # evaluate imports numpy and llama_cpp; the commands import it when they run
    from .evaluate import QuantComparison, VerificationRow, VerificationTable

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = ("quantize", "inspect")
EXIT_OK, EXIT_USAGE, EXIT_ERROR = 0, 2, 3
_QUANT_TYPES = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0")  # = quantize.QUANT_TYPES, without importing gguf
_BASE_TYPES = ("f32", "f16", "bf16")
_DEFAULT_TYPES = "Q4_K_M,Q8_0"
_PHONE_TYPES = ("Q4_0", "Q8_0")  # = phone.PHONE_TYPES, without importing gguf
_TARGETS = ("phone",)


_QUANTIZE_DESCRIPTION = """\
Convert SOURCE (a Qwen3 checkpoint folder or hub repo) to a base GGUF, quantize it to each of --types, and verify
each against the base: KL divergence, top-1 agreement, perplexity and an agentic check that tool calls still parse.
Writes NAME-<type>.gguf for the base and each quant, table.md and table.json in --out. SOURCE may also be an
F16/BF16/F32 GGUF (the master: it is the base, used where it lies); a quantized GGUF is refused.

--target phone writes Q4_0 and Q8_0 (the types ARM builds of llama.cpp repack at load time) beside the master,
and prints what each file needs on the memory planner's phone presets (venus-edge plan FILE --device phone-8gb).

examples:
  venus-edge quantize inclusionAI/DR-Venus-4B-RL --types Q4_K_M,Q8_0 --out models/
  venus-edge quantize inclusionAI/DR-Venus-4B-RL --target phone --out phone/
"""


_INSPECT_DESCRIPTION = """\
Print a GGUF file's architecture, size and parameter count, its tokenizer (vocabulary, merges, special tokens, chat
template), its tensor types and every metadata key, from its header alone (no model load). Writes nothing (--json:
the same as JSON).

example:
  venus-edge inspect M-Q4_K_M.gguf --tensors
"""


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `quantize` and `inspect` on the `venus-edge` sub-command parsers."""
    quantize = subparsers.add_parser("quantize",
                                     help="convert a HF checkpoint to GGUF, quantize it and verify every quant",
                                     description=_QUANTIZE_DESCRIPTION)
    quantize.add_argument("source", metavar="SOURCE",
                          help="a checkpoint folder, a hub repo owner/name, or an F16/BF16/F32 GGUF (the master)")
    quantize.add_argument("--types", default=None, metavar="T1,T2",
                          help=f"comma-separated quant types among {', '.join(_QUANT_TYPES)} (default "
                               f"{_DEFAULT_TYPES}; with --target phone: {','.join(_PHONE_TYPES)}, and no other)")
    quantize.add_argument("--target", default=None, choices=_TARGETS,
                          help="a device profile: phone writes Q4_0 and Q8_0 beside the master and prints their "
                               "memory plans on the phone presets (default: none, --types decides)")
    quantize.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder (created if missing)")
    quantize.add_argument("--base-type", default="f16", choices=_BASE_TYPES, help="type of the base GGUF (default f16)")
    quantize.add_argument("--calibration", type=Path, default=None, metavar="FILE",
                          help="calibration text file for KL / top-1 / perplexity (default: a built-in text)")
    quantize.add_argument("--n-ctx", type=int, default=256, metavar="N",
                          help="calibration tokens at most (default 256)")
    quantize.add_argument("--agentic-tokens", type=int, default=16, metavar="N",
                          help="new tokens per agentic-check turn (default 16); 0 skips the agentic check")
    quantize.add_argument("--hf-parity", action="store_true",
                          help="also compare the base GGUF with the checkpoint in transformers (needs torch)")
    quantize.add_argument("--quiet", action="store_true", help="no progress on stderr")
    quantize.set_defaults(_command_parser=quantize)

    inspect = subparsers.add_parser("inspect", help="print a GGUF file's metadata, tokenizer facts and tensor types",
                                    description=_INSPECT_DESCRIPTION)
    inspect.add_argument("file", type=Path, metavar="FILE.gguf", help="the GGUF file")
    inspect.add_argument("--json", action="store_true", help="print the facts as JSON")
    inspect.add_argument("--tensors", action="store_true", help="also list every tensor with its shape and type")
    inspect.set_defaults(_command_parser=inspect)


def run(args: argparse.Namespace) -> int:
    """Run the parsed `quantize` or `inspect` command; returns the exit code."""
    try:
        if args.command == "quantize":
            return _quantize(args)
        if args.command == "inspect":
            return _inspect(args)
    except VenusEdgeError as error:  # the one root: QuantizeError and the runtime errors of the checks that load a GGUF
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except ModuleNotFoundError as error:
        print(f"error: {error.name} is not installed; install the extra: pip install 'venus-edge[quantize]'",
              file=sys.stderr)
        return EXIT_ERROR
    args._command_parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE


# ---------------------------------------------------------------------------------------------- inspect


def _inspect(args: argparse.Namespace) -> int:
    from .gguf_info import ggml_type_name, inspect_gguf, read_gguf_header

    facts = inspect_gguf(args.file)
    if args.tensors:
        header = read_gguf_header(args.file)
        facts["tensors"] = [
            {"name": t.name, "shape": list(t.shape), "type": ggml_type_name(t.ggml_type), "n_bytes": t.n_bytes}
            for t in header.tensors
        ]
    if args.json:
        print(json.dumps(facts, indent=2, ensure_ascii=False, default=str))
    else:
        _print_facts(facts, sys.stdout)
    return EXIT_OK


def _print_facts(facts: dict[str, Any], out: TextIO) -> None:
    tokenizer = facts["tokenizer"]
    types = ", ".join(f"{name} {count}" for name, count in sorted(facts["tensor_types"].items()))
    token_types = ", ".join(f"{name} {count:,}" for name, count in tokenizer["token_type_counts"].items())
    lines = [
        facts["path"],
        f"  architecture {facts['architecture']}, file type {facts['file_type']}, {facts['n_tensors']} tensors, "
        f"{facts['n_parameters'] / 1e6:.1f} M parameters, {facts['size_bytes'] / 2**20:.1f} MiB",
        f"tokenizer: model {tokenizer['model']}, pre {tokenizer['pre']}, {tokenizer['n_tokens']:,} tokens "
        f"({token_types}), {tokenizer['n_merges']:,} merges",
        f"  bos {tokenizer['bos_token_id']}, eos {tokenizer['eos_token_id']}, pad {tokenizer['padding_token_id']}, "
        f"add_bos {tokenizer['add_bos_token']}, chat template {'yes' if tokenizer['has_chat_template'] else 'no'}",
        f"tensor types: {types}",
    ]
    for tensor in facts.get("tensors", []):
        lines.append(f"  {tensor['name']:<40} {tensor['type']:<6} {tensor['shape']}")
    lines.append("metadata:")
    lines += [f"  {key} = {_short(value)}" for key, value in facts["metadata"].items()]
    print("\n".join(lines), file=out)


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------- quantize


class _Progress:
    """Step lines on stderr: `[i/n] what ... done in X s`."""

    def __init__(self, n_steps: int, out: TextIO, *, quiet: bool) -> None:
        self.n_steps, self.step, self.out, self.quiet = n_steps, 0, out, quiet
        self.started = time.perf_counter()

    def start(self, what: str) -> None:
        self.step += 1
        self.started = time.perf_counter()
        self._print(f"[{self.step}/{self.n_steps}] {what} ...")

    def done(self, detail: str = "") -> None:
        self._print(f"      done in {time.perf_counter() - self.started:.1f} s{': ' + detail if detail else ''}")

    def _print(self, line: str) -> None:
        if not self.quiet:
            print(line, file=self.out, flush=True)


def _parse_types(args: argparse.Namespace) -> list[str]:
    """--types, or the --target profile's types; an explicit --types other than the profile's is a usage error
    (the profile exists to name the types; two answers to one question would leave one ignored)."""
    given = _DEFAULT_TYPES if args.types is None else args.types
    if args.target == "phone" and args.types is None:
        given = ",".join(_PHONE_TYPES)
    types = [t.strip().upper() for t in given.split(",") if t.strip()]
    unknown = [t for t in types if t not in _QUANT_TYPES]
    if not types or unknown:
        args._command_parser.error(
            f"--types {given!r}: unknown {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(_QUANT_TYPES)}"
        )
    if args.target == "phone" and set(types) != set(_PHONE_TYPES):
        args._command_parser.error(
            f"--target phone writes {' and '.join(_PHONE_TYPES)} (the types ARM builds repack), but --types is "
            f"{args.types!r}; drop --types, or drop --target phone to choose the types yourself"
        )
    if args.hf_parity and Path(args.source).is_file():
        args._command_parser.error(f"--hf-parity compares with a checkpoint; SOURCE {args.source} is a GGUF file")
    if not 8 <= args.n_ctx <= MAX_CALIBRATION_TOKENS:  # 1e9 was a bad_alloc blamed on the GGUF ("re-create it")
        args._command_parser.error(f"--n-ctx must be between 8 and {MAX_CALIBRATION_TOKENS:,} (the check holds the "
                                   f"logits of every token, several times: n_ctx x vocabulary x 4 bytes), got "
                                   f"{args.n_ctx:,}")
    return list(dict.fromkeys(types))


#: ``--n-ctx`` at most. The check keeps every position's logits in several copies (n_ctx x vocabulary x 4 bytes
#: each: 1.2 GB at 2,048 with Qwen's 151,936 tokens) and, without flash attention, a compute buffer that grows with
#: n_ctx squared; 2,048 scored tokens measure a quant's KL well past the default 256.
MAX_CALIBRATION_TOKENS = 2_048


def _calibration_text(args: argparse.Namespace) -> str:
    from .errors import QuantizeError
    from .evaluate import CALIBRATION_TEXT

    if args.calibration is None:
        return CALIBRATION_TEXT
    calibration_path: Path = args.calibration
    try:
        text = calibration_path.read_text(encoding="utf-8")
        if not text.strip():
            raise QuantizeError(f"calibration text {args.calibration} is empty; give a text of a few sentences at "
                                "least, or leave out --calibration for the built-in one")
        return text
    except UnicodeDecodeError as error:
        raise QuantizeError(f"cannot read calibration text {args.calibration}: it is not UTF-8 (byte {error.start}); "
                            "give a UTF-8 text file (e.g. iconv -f latin1 -t utf-8 FILE)") from error
    except OSError as error:
        raise QuantizeError(f"cannot read calibration text {args.calibration}: {error.strerror or error}") from error


def _prepare_out_dir(out_dir: Path) -> None:
    from .errors import OutputNotWritableError

    if out_dir.exists() and not out_dir.is_dir():
        raise OutputNotWritableError(out_dir, "it is a file; --out names a folder (created if missing)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputNotWritableError(out_dir, f"{type(error).__name__}: {error}") from error


def _quantize(args: argparse.Namespace) -> int:
    """Convert, quantize each type, verify each against the base; print and write the table."""
    types = _parse_types(args)
    from .convert import resolve_checkpoint
    from .phone import check_master

    calibration = _calibration_text(args)
    source = Path(args.source)
    master = source if source.is_file() else None  # a GGUF source is the master, used where it lies
    if master is not None:  # checked before anything is written
        master_header, master_type = check_master(master)
        name = _name_without_type(master)
        _check_master_not_overwritten(master, args.out, name, types)
    else:
        folder, repo_id = resolve_checkpoint(args.source)
        name = (repo_id.split("/")[-1] if repo_id else folder.resolve().name) or "model"
    _prepare_out_dir(args.out)
    n_steps = int(master is None) + int(args.hf_parity) + 2 * len(types)
    progress = _Progress(n_steps, sys.stderr, quiet=args.quiet)
    if master is not None:
        base_path, table = _master_base(args, master, master_type, master_header.file_size_bytes)
    else:
        base_path, table = _convert_base(args, folder, name, progress)
    for qtype in types:
        row, comparison = _quantize_and_verify(args, base_path, name, qtype, progress, calibration)
        table.rows.append(row)
        table.calibration_tokens, table.rows[0].ppl = comparison.n_tokens, comparison.ppl_reference
    (args.out / "table.md").write_text(table.to_markdown(), encoding="utf-8")
    (args.out / "table.json").write_text(table.to_json(), encoding="utf-8")
    print(table.to_markdown(), end="")
    print(f"\nwrote {args.out / 'table.md'} and {args.out / 'table.json'}")
    if args.target == "phone":
        _print_phone_plans(base_path, [args.out / f"{name}-{qtype}.gguf" for qtype in types])
    return EXIT_OK


def _name_without_type(master: Path) -> str:
    """The output name for a GGUF master: its stem less a trailing -f16/-bf16/-f32 (`M-f16.gguf` -> `M`)."""
    stem = master.stem
    for base_type in _BASE_TYPES:
        if stem.lower().endswith(f"-{base_type}"):
            return stem[: -len(base_type) - 1] or stem
    return stem


def _check_master_not_overwritten(master: Path, out_dir: Path, name: str, types: list[str]) -> None:
    from .errors import QuantizeError

    for qtype in types:
        out_path = out_dir / f"{name}-{qtype}.gguf"
        if out_path.resolve() == master.resolve():
            raise QuantizeError(f"the {qtype} output {out_path} would replace the master {master} itself; "
                                "rename the master (e.g. NAME-f16.gguf) or choose another --out")


def _print_phone_plans(master: Path, quants: list[Path]) -> None:
    """The master's path, and each file's plan on the phone presets (as `venus-edge plan FILE --device` plans)."""
    from venus_edge.engines.llama_cpp import DEFAULT_HELPER_N_CTX

    from .phone import phone_memory_lines

    print(f"master (keep it: every later quant comes from it, never from a quant): {master}")
    print("on the phone presets (venus-edge plan FILE --device NAME; the window includes visit's helper context):")
    for line in phone_memory_lines([master, *quants], helper_n_ctx=DEFAULT_HELPER_N_CTX):
        print(f"  {line}")


def _master_base(
    args: argparse.Namespace, master: Path, master_type: str, size_bytes: int,
) -> tuple[Path, VerificationTable]:
    """A GGUF master as the base, used where it lies: the table with its row (and its agentic check)."""
    from .evaluate import VerificationRow, VerificationTable, agentic_check

    row = VerificationRow(file=master.name, file_type=master_type, size_bytes=size_bytes)
    if args.agentic_tokens > 0:
        agentic = agentic_check(master, max_tokens=args.agentic_tokens)
        row.agentic_failed, row.agentic_total = agentic.n_failed, agentic.n_prompts
    return master, VerificationTable(reference=master.name, rows=[row])


def _convert_base(
    args: argparse.Namespace, folder: Path, name: str, progress: _Progress,
) -> tuple[Path, VerificationTable]:
    """Step 1 (and the HF parity step): the base GGUF and the table with its row."""
    from .convert import convert_checkpoint
    from .evaluate import VerificationRow, VerificationTable, agentic_check, compare_to_hf

    base_path = args.out / f"{name}-{args.base_type}.gguf"
    progress.start(f"convert {args.source} -> {base_path} ({args.base_type.upper()})")
    convert_checkpoint(folder, base_path, out_type=args.base_type)
    progress.done(f"{base_path.stat().st_size / 2**20:.1f} MiB")
    row = VerificationRow(file=base_path.name, file_type=args.base_type.upper(), size_bytes=base_path.stat().st_size)
    if args.hf_parity:
        progress.start("compare the base GGUF with the checkpoint in transformers")
        parity = compare_to_hf(base_path, folder)
        row.max_abs_logit_diff, row.tokenization_match = parity.max_abs_logit_diff, parity.tokenization_match
        differing = f"{len(parity.tokenization_mismatches)} texts differ"
        progress.done(f"max |dlogit| {parity.max_abs_logit_diff:.2e}, tokenization "
                      f"{'identical' if parity.tokenization_match else differing}")
    if args.agentic_tokens > 0:
        agentic = agentic_check(base_path, max_tokens=args.agentic_tokens)
        row.agentic_failed, row.agentic_total = agentic.n_failed, agentic.n_prompts
    return base_path, VerificationTable(reference=base_path.name, rows=[row])


def _quantize_and_verify(
    args: argparse.Namespace, base_path: Path, name: str, qtype: str, progress: _Progress, calibration: str,
) -> tuple[VerificationRow, QuantComparison]:
    """Quantize the base to `qtype`, then KL / top-1 / perplexity against the base and the agentic check."""
    from .errors import QuantizeError
    from .evaluate import VerificationRow, agentic_check, compare_quant
    from .quantize import quantize_gguf

    out_path = args.out / f"{name}-{qtype}.gguf"
    progress.start(f"quantize -> {out_path.name}")
    report = quantize_gguf(base_path, out_path, qtype)
    fallbacks = [f"{f.tensor}: {f.expected} -> {f.actual}" for f in report.fallbacks]
    progress.done(f"{report.out_size_bytes / 2**20:.1f} MiB, "
                  + (f"{len(fallbacks)} tensors fell back: {', '.join(fallbacks)}" if fallbacks else "no fallbacks"))
    progress.start(f"verify {out_path.name} against {base_path.name}")
    try:
        comparison = compare_quant(out_path, base_path, calibration, n_ctx=args.n_ctx)
    except ValueError as error:  # a calibration text of fewer than 2 tokens
        raise QuantizeError(f"cannot check {out_path.name} (written): {error}; give a longer --calibration text") \
            from error
    row = VerificationRow(
        file=out_path.name, file_type=qtype, size_bytes=report.out_size_bytes, mean_kl=comparison.mean_kl,
        top1_agreement=comparison.top1_agreement, ppl=comparison.ppl_quant, ppl_ratio=comparison.ppl_ratio,
        fallbacks=fallbacks,
    )
    if args.agentic_tokens > 0:
        agentic = agentic_check(out_path, max_tokens=args.agentic_tokens)
        row.agentic_failed, row.agentic_total = agentic.n_failed, agentic.n_prompts
    progress.done(f"KL {comparison.mean_kl:.2e}, top-1 {comparison.top1_agreement:.3f}, "
                  f"ppl ratio {comparison.ppl_ratio:.4f}" + (f", agentic fails {row.agentic_failed}/{row.agentic_total}"
                                                             if row.agentic_total else ""))
    return row, comparison
