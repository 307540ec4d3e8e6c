"""What the SFT and IGPO trainers share around their loops: AdamW with weight-decay groups, checkpoints written
atomically and resumed by fingerprint, the final Hugging Face checkpoint, and the progress bar.

    optimizer = adamw(model, learning_rate=1e-5, betas=(0.9, 0.95), weight_decay=0.01)
    run_fingerprint = fingerprint(config, ("model", "data", "seed"), samples=len(samples))
    start = resume(accelerator, output_dir, run_fingerprint, total_steps=100)  # 0 for a new run
    ...
    save_checkpoint(accelerator, output_dir, step, run_fingerprint, keep=2)
    final_dir = save_final(accelerator, model, tokenizer, output_dir)

A checkpoint is ``OUT/checkpoints/step-N`` (accelerate's model, optimizer, scheduler and RNG state, plus
``state.json`` with the step and the run's fingerprint). It is written to ``step-N.tmp`` and renamed once whole, so
a killed run leaves no half checkpoint; a rerun resumes from the newest one if its fingerprint (the settings that
decide the data order and the schedule, and what the data holds) equals the run's, and refuses an ``OUT`` written by
another config or other data. ``final`` is written the same way (``final.tmp``, then renamed), so a ``final`` folder
is always whole and a run killed while saving it saves it again on the rerun. The step logs are JSONL; on a resume
``trim_step_log`` drops the rows of the steps that will be redone, and a line torn by the kill.

A checkpoint resumes on any number of processes under DDP: the model and optimizer are saved whole by the main
process, and accelerate keeps one RNG file per process (``random_states_<rank>.pkl``); a process the checkpoint has
no file for keeps the RNG that ``set_seed`` gave it (accelerate skips the missing file), and the extra files of a
larger run are left unread. Nothing the trainers draw depends on those RNGs: the data order and the IGPO questions
and rollouts are seeded by the step, and the models have no dropout. (FSDP's sharded state is saved per shard
by torch's distributed checkpoint, which reshards on load.)
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from venus_edge.jsonl import iter_records, parse_line, write_records

__all__ = ["ProgressBar", "adamw", "check_finite", "check_finite_weights", "content_digest", "end_processes",
           "fingerprint", "json_digest", "list_checkpoints", "resume", "save_checkpoint", "save_final",
           "trim_step_log", "weight_decay_groups"]


def weight_decay_groups(parameters: Iterable[Any], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups of the trainable ``parameters``: matrices decay by ``weight_decay``; norms and
    biases (fewer than 2 dimensions) do not, as transformers' ``Trainer`` groups them."""
    trainable = [p for p in parameters if p.requires_grad]
    return [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0}]


def adamw(model: Any, *, learning_rate: float, betas: tuple[float, float], weight_decay: float) -> Any:
    """``torch.optim.AdamW`` over ``model``'s trainable parameters in ``weight_decay_groups``."""
    import torch

    return torch.optim.AdamW(weight_decay_groups(model.parameters(), weight_decay), lr=learning_rate, betas=betas)


def fingerprint(config: Any, keys: Sequence[str], **extra: Any) -> str:
    """What must match for a checkpoint to be resumed: the ``keys`` settings of ``config`` (its ``to_dict``)
    and ``extra`` values (such as the number of samples), as sorted JSON."""
    settings = config.to_dict()
    return json.dumps({**{key: settings[key] for key in keys}, **extra}, sort_keys=True)


def content_digest(rows: Iterable[Sequence[int]]) -> str:
    """A SHA-256 of integer rows (token ids, masks), for a fingerprint: the same data trains the same steps."""
    digest = hashlib.sha256()
    for row in rows:
        values = array("q", row)
        digest.update(len(values).to_bytes(8, "little") + values.tobytes())
    return digest.hexdigest()


def check_finite_weights(step: int, model: Any, *, output_dir: Path) -> None:
    """``check_finite`` for the weights an update produced (a finite loss and gradient can still step to inf).

    Raises:
        ValueError: as ``check_finite``.
    """
    import torch

    parameters = list(model.named_parameters())
    finite = [torch.isfinite(parameter.detach()).all() for _, parameter in parameters]
    if parameters and bool(torch.stack(finite).all()):  # one device sync a step, not one per parameter
        return
    for (name, _), ok in zip(parameters, finite):
        if not bool(ok):
            check_finite(step, output_dir=output_dir, **{f"weight {name}": float("nan")})


def check_finite(step: int, *, output_dir: Path, **figures: Any) -> None:
    """Stop a run whose step ``step`` diverged (a loss or gradient norm that is NaN or infinite) before anything of
    it is logged or saved: its weights would replace the good checkpoints.

    Raises:
        ValueError: naming the figure, the step and what to do.
    """
    for name, value in figures.items():
        if value is not None and not math.isfinite(float(value)):
            raise ValueError(f"step {step}: the {name.replace('_', ' ')} is {float(value)}: training diverged, and "
                             f"this step was not saved (the checkpoints in {output_dir / 'checkpoints'} stand); "
                             "lower learning_rate (or max_grad_norm) and train again in a new output_dir")


def json_digest(value: Any) -> str:
    """A SHA-256 of a JSON value (questions and answers), for a fingerprint, as ``content_digest`` of token rows."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8", "replace")).hexdigest()


def list_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every whole checkpoint under ``output_dir/checkpoints``, oldest first."""
    folder = output_dir / "checkpoints"
    found = []
    for path in folder.glob("step-*") if folder.is_dir() else []:
        if path.suffix != ".tmp" and (path / "state.json").is_file() and path.name[5:].isdigit():
            found.append((int(path.name[5:]), path))
    return sorted(found)


def resume(accelerator: Any, output_dir: Path, run_fingerprint: str, *, total_steps: int) -> int:
    """Load the newest checkpoint of ``output_dir`` into ``accelerator``'s prepared objects; returns its step
    (0 when there is none).

    Raises:
        ValueError: the checkpoint was written by a run with another fingerprint (another config or data).
    """
    found = list_checkpoints(output_dir)
    if not found:
        return 0
    step, path = found[-1]
    state = _read_state(path / "state.json")
    written_by = state.get("fingerprint")
    if not _same_run(written_by, run_fingerprint):
        raise ValueError(f"{path} was written by another config or data ({written_by} != {run_fingerprint}); "
                         "use a new output_dir, or rerun the config that wrote it")
    try:
        accelerator.load_state(str(path))
    except Exception as exc:  # safetensors, torch and pickle raise their own types for a damaged file
        raise ValueError(f"{path} cannot be loaded into this run ({type(exc).__name__}: {str(exc)[:300]}). If the "
                         "model at the config's path was replaced by another one, train in a new output_dir; if the "
                         "checkpoint's files are damaged, remove that checkpoint to resume from the one before it") \
            from exc
    written_on = state.get("processes", 1)
    note = f"; written on {_processes(written_on)}, resumed on {_processes(accelerator.num_processes)}" \
        if written_on != accelerator.num_processes else ""
    accelerator.print(f"resumed from {path} (step {step} of {total_steps}{note})")
    return step


def _read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's ``state.json``.

    Raises:
        ValueError: it is not a JSON object (a damaged or foreign file), naming it.
    """
    state, problem, _ = parse_line(path.read_bytes())
    if problem:
        raise ValueError(f"{path} is not a checkpoint's state ({problem}); remove {path.parent} to resume from the "
                         "checkpoint before it")
    if not isinstance(state, dict):
        raise ValueError(f"{path} is not a checkpoint's state (a JSON object); remove {path.parent} to resume from "
                         "the checkpoint before it")
    return state


def _same_run(written_by: Any, run_fingerprint: str) -> bool:
    """Whether a checkpoint's fingerprint is this run's: every setting it recorded equal (a setting recorded only
    by newer code, such as the data digest, is not held against a checkpoint written before it)."""
    if written_by == run_fingerprint:
        return True
    try:
        written, now = json.loads(written_by), json.loads(run_fingerprint)
    except (TypeError, ValueError):
        return False
    return isinstance(written, dict) and all(now.get(key) == value for key, value in written.items()) and \
        set(written) <= set(now)


def trim_step_log(path: Path, last_step: int) -> int:
    """Keep the rows of ``path`` (JSONL, each with a ``step``) up to ``last_step``, the step a run resumes from:
    the later ones are redone. A line torn by a kill, or no row of the log, is dropped too. The file is rewritten
    atomically. Returns how many unreadable lines were dropped."""
    if not path.is_file():
        return 0
    kept, torn = [], 0
    for _, row, problem, _ in iter_records(path):
        if problem or not isinstance(row, dict) or not isinstance(row.get("step"), int):
            torn += 1
        elif row["step"] <= last_step:
            kept.append(row)
    write_records(path, kept)
    return torn


def save_checkpoint(accelerator: Any, output_dir: Path, step: int, run_fingerprint: str, keep: int) -> None:
    """Write ``checkpoints/step-N`` atomically (a temporary folder renamed once whole), then drop all but the
    newest ``keep``."""
    folder = output_dir / "checkpoints"
    final, tmp = folder / f"step-{step:06d}", folder / f"step-{step:06d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / "state.json").write_text(json.dumps({"step": step, "fingerprint": run_fingerprint,
                                                    "processes": accelerator.num_processes}) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for _, old in list_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def save_final(accelerator: Any, model: Any, tokenizer: Any, output_dir: Path) -> Path:
    """The trained model as a plain Hugging Face checkpoint in ``output_dir/final`` (LoRA adapters merged) with
    its tokenizer; returns the folder. Written to ``final.tmp`` and renamed once whole (an earlier ``final`` is
    replaced only then)."""
    final, tmp = output_dir / "final", output_dir / "final.tmp"
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        if hasattr(unwrapped, "merge_and_unload"):  # a peft model: fold the adapters into the weights
            unwrapped.load_state_dict(state)
            unwrapped = unwrapped.merge_and_unload()
            state = unwrapped.state_dict()
        unwrapped.config.use_cache = True
        if _loaded_from_gguf(unwrapped):  # transformers dequantized the GGUF: the weights are plain floats
            unwrapped.hf_quantizer = None
            if hasattr(unwrapped.config, "quantization_config"):
                del unwrapped.config.quantization_config
        shutil.rmtree(tmp, ignore_errors=True)
        unwrapped.save_pretrained(tmp, state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _replace_folder(tmp, final)
    accelerator.wait_for_everyone()
    return final


def _replace_folder(new: Path, target: Path) -> None:
    """Put the folder ``new`` at ``target`` by renames: a kill in between leaves no ``target`` (it is saved again),
    never half of one. A file or a symbolic link at ``target`` is removed (a link's target is left alone)."""
    old = target.with_name(target.name + ".old")
    _remove(old)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        target.rename(old)
    new.rename(target)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def end_processes() -> bool:
    """End a run that finished well on every process: wait for all of them, then destroy the process group.

    Returns:
        Whether this is the main process (the one that reports), read before the group is gone.

    A process that exits with its gloo group alive tears the group's worker threads down during interpreter
    finalization and can abort ("terminate called without an active exception", SIGABRT; pytorch/pytorch#190489),
    turning a finished run into a failed launch. Call it on success only: destroying the group while another
    process still waits in a collective hangs (torchtitan#1342). One process without a group is the main process.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return True
    is_main = dist.get_rank() == 0
    dist.barrier()
    dist.destroy_process_group()
    return is_main


def _loaded_from_gguf(model: Any) -> bool:
    quantizer = getattr(model, "hf_quantizer", None)
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    return str(getattr(method, "value", method)).lower() == "gguf"


class ProgressBar:
    """A rich progress bar with a figure (the loss; IGPO: the reward), tokens/s and ETA (nothing when disabled)."""

    def __init__(self, total: int, done: int, *, enabled: bool, label: str = "sft", figure: str = "loss") -> None:
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.progress = RichProgress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                                     TextColumn(figure + " {task.fields[loss]}"),
                                     TextColumn("{task.fields[speed]} tok/s"), TimeRemainingColumn(), transient=False)
            self.task = self.progress.add_task(label, total=total, completed=done, loss="-", speed="-")

    def __enter__(self) -> ProgressBar:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def update(self, done: int, loss: float, speed: float) -> None:
        """Show ``done`` steps, the figure ``loss`` and ``speed`` tokens/s."""
        if self.progress is not None:
            self.progress.update(self.task, completed=done, loss=f"{loss:.4f}", speed=f"{speed:.0f}")


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"
