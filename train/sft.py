"""Supervised fine-tuning on cleaned trajectories: transformers + accelerate, the DR-Venus recipe as defaults.

    venus-edge train sft configs/sft/qwen2.5-coder-0.5b-lora.yaml
    accelerate launch --config_file configs/accelerate/fsdp.yaml -m venus_edge.train.sft configs/sft/dr-venus-4b.yaml

Source of the defaults: PROTOCOL.md, "Training facts" (DR-Venus SFT): loss on assistant tokens only (reasoning
included), token-mean; AdamW (0.9, 0.95), weight decay 0.01, lr 1e-5 with cosine decay after 10 % linear warmup,
1 epoch, global batch 32, gradient clipping at 1.0.

- The loss is the mean over every trained token of the global batch (all micro-batches of all processes): each
  micro-batch's summed cross-entropy is divided by the global batch's trained-token count, so a long trajectory
  weighs by its tokens, as in the recipe's token-mean, whatever the micro-batch split.
- Batches are grouped by length (samples of similar length share a micro-batch, padded to the longest; a sample is
  never cut or split across rows) in a seeded order.
- Distribution is accelerate's: one process on a CPU, DDP, FSDP or DeepSpeed ZeRO-3 from an ``accelerate launch``
  config (``configs/accelerate/``); this module writes no distributed code of its own. Each process takes every
  n-th micro-batch of a global batch.
- A checkpoint (``OUT/checkpoints/step-N``: accelerate's model, optimizer, scheduler and RNG state, plus
  ``state.json``) is written atomically every ``save_every`` steps; a rerun of the same config resumes from the
  newest one and skips the batches already trained, so a killed run loses at most ``save_every`` steps.
- LoRA (peft) trains adapters on the attention and MLP projections; the final model is merged and saved as a plain
  Hugging Face checkpoint in ``OUT/final``, ready for ``venus-edge quantize``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

from venus_edge.train.config import ConfigFile, betas, flag, number, optional, paths, text
from venus_edge.train.data import load_samples
from venus_edge.train.tokenize import TokenizedSample, tokenize_samples

__all__ = ["LORA_TARGETS", "LoraSettings", "SFTConfig", "SFTResult", "length_grouped_batches", "train_sft",
           "trained_added_tokens"]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """peft ``LoraConfig`` settings: rank, scaling ``alpha / r``, dropout, the modules adapted.

    ``train_added_tokens``: also train the embedding and output rows of the tokenizer's added tokens that the data
    trains (the protocol's ``<tool_call>``, ``</tool_call>``, ...), through peft's trainable tokens. A pretrained
    model may never have trained those rows, and LoRA on the projections cannot make it emit them: Qwen2.5-Coder-0.5B
    after 54 LoRA-only trajectories predicted every other trained token (mean loss 0.14) but ``<tool_call>`` at
    log-probability -8.3.
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS
    train_added_tokens: bool = True


@dataclass(frozen=True)
class SFTConfig(ConfigFile):
    """One SFT run (a YAML or JSON file; relative paths are relative to the file).

    Attributes:
        model: a Hugging Face checkpoint folder or hub id, or a ``.gguf`` file (transformers dequantizes it).
        data: cleaned JSONL files (``venus-edge train clean``).
        output_dir: checkpoints, ``log.jsonl`` and ``final/``.
        tokenizer: the tokenizer's folder or hub id (default: the model's).
        max_tokens: samples longer than this (in tokens) are skipped and reported, never cut.
        epochs: passes over the data (a fraction trains on part of it).
        global_batch_size: samples per optimizer step, over all processes (recipe: 32).
        micro_batch_size: samples per forward pass on one process.
        learning_rate, warmup_ratio, adam_betas, weight_decay, max_grad_norm: the optimizer (recipe defaults).
        gradient_checkpointing: recompute activations in the backward pass (memory for time).
        lora: train LoRA adapters instead of every weight; None trains every weight.
        dtype: the weights' dtype (``float32`` on CPU, ``bfloat16`` on GPUs).
        seed: data order and initialization of adapters.
        save_every: steps between checkpoints; keep_checkpoints: how many are kept.
        max_steps: stop after this many steps (the schedule still spans the full run when None).
    """

    model: str
    data: tuple[str, ...]
    output_dir: str
    tokenizer: str | None = None
    max_tokens: int = 32768
    epochs: float = 1.0
    global_batch_size: int = 32
    micro_batch_size: int = 1
    learning_rate: float = 1e-5
    warmup_ratio: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = True
    lora: LoraSettings | None = None
    dtype: str = "float32"
    seed: int = 0
    save_every: int = 100
    keep_checkpoints: int = 2
    max_steps: int | None = None

    required_settings: ClassVar[tuple[str, ...]] = ("model", "data", "output_dir")
    path_settings: ClassVar[tuple[str, ...]] = ("model", "tokenizer", "output_dir")
    path_list_settings: ClassVar[tuple[str, ...]] = ("data",)

    def check(self) -> None:
        """Raises ValueError for settings that cannot train."""
        if self.global_batch_size < 1 or self.micro_batch_size < 1:
            raise ValueError("global_batch_size and micro_batch_size must be >= 1")
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"global_batch_size {self.global_batch_size} is not a multiple of micro_batch_size "
                             f"{self.micro_batch_size}")
        if not 0 <= self.warmup_ratio < 1 or self.learning_rate <= 0 or self.epochs <= 0:
            raise ValueError("need 0 <= warmup_ratio < 1, learning_rate > 0 and epochs > 0")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype {self.dtype!r}: use float32, bfloat16 or float16")
        if self.save_every < 1 or self.keep_checkpoints < 1 or self.max_tokens < 2:
            raise ValueError("save_every and keep_checkpoints must be >= 1, max_tokens >= 2")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 (or left out for the whole run), got {self.max_steps}")

def lora_settings(value: Any) -> LoraSettings | None:
    """``lora:`` of a config: true (defaults), false/None, or a mapping of r, alpha, dropout, target_modules."""
    if value is None or value is False:
        return None
    if value is True:
        return LoraSettings()
    if not isinstance(value, Mapping):
        raise ValueError(f"expected true, false or a mapping of r, alpha, dropout, target_modules, got {value!r}")
    known = {f.name for f in dataclasses.fields(LoraSettings)}
    if set(value) - known:
        raise ValueError(f"unknown lora setting(s) {', '.join(sorted(set(value) - known))}")
    settings: dict[str, Any] = {}
    for name, item in value.items():
        if name == "target_modules":
            settings[name] = paths(item)
        elif name == "train_added_tokens":
            settings[name] = flag(item)
        else:
            settings[name] = number(float if name == "dropout" else int)(item)
    return LoraSettings(**settings)


SFTConfig.converters = {
    "data": paths, "tokenizer": optional(text), "max_tokens": number(int), "epochs": number(float),
    "global_batch_size": number(int), "micro_batch_size": number(int), "learning_rate": number(float),
    "warmup_ratio": number(float), "adam_betas": betas, "weight_decay": number(float),
    "max_grad_norm": number(float), "gradient_checkpointing": flag, "lora": lora_settings, "seed": number(int),
    "save_every": number(int), "keep_checkpoints": number(int), "max_steps": optional(number(int)),
}


@dataclass
class SFTResult:
    """What a run did: steps trained (in all, and in this process's run), the step it resumed from, the final
    model's folder, the last logged loss, samples skipped at tokenization, throughput (trained tokens/s), and
    accelerate's distributed type (``NO``, ``MULTI_GPU``, ``FSDP``, ``DEEPSPEED``, ...)."""

    steps: int
    resumed_from: int
    final_dir: Path | None
    last_loss: float | None
    skipped: list[str] = field(default_factory=list)
    trained_tokens: int = 0
    tokens_per_s: float = 0.0
    distributed: str = "NO"


def length_grouped_batches(lengths: Sequence[int], micro_batch_size: int, *, seed: int, epochs: float = 1.0,
                           group: int = 64) -> list[list[int]]:
    """Micro-batches of sample indices, ``micro_batch_size`` each (the last may be short), for ``epochs`` passes.

    Each pass shuffles with ``seed + pass``, cuts the order into mega-batches of ``group`` micro-batches, sorts each by
    length (so a micro-batch pads little) and shuffles the micro-batches of the pass (so a step is not all long
    samples). A fractional last pass takes its first part. Same inputs, same batches.
    """
    batches: list[list[int]] = []
    n = len(lengths)
    passes = math.ceil(epochs)
    for epoch in range(passes):
        rng = random.Random(seed + epoch)
        order = list(range(n))
        rng.shuffle(order)
        if epoch == passes - 1 and epochs != passes:
            order = order[: max(1, round(n * (epochs - epoch)))]
        chunk = micro_batch_size * group
        epoch_batches = []
        for start in range(0, len(order), chunk):
            mega = sorted(order[start : start + chunk], key=lambda i: -lengths[i])
            epoch_batches += [mega[i : i + micro_batch_size] for i in range(0, len(mega), micro_batch_size)]
        rng.shuffle(epoch_batches)
        batches += epoch_batches
    return batches


def _collate(samples: Sequence[TokenizedSample], pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(s) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    trained = torch.zeros((len(samples), width), dtype=torch.bool)
    for row, sample in enumerate(samples):
        ids[row, : len(sample)] = torch.tensor(sample.input_ids)
        attention[row, : len(sample)] = 1
        trained[row, : len(sample)] = torch.tensor(sample.assistant_mask, dtype=torch.bool)
    return {"input_ids": ids, "attention_mask": attention, "trained": trained}


def _summed_loss(model: Any, batch: Mapping[str, Any]) -> tuple[Any, int]:
    """(summed next-token cross-entropy over the trained tokens, their count) of one micro-batch.

    Logits are computed only at the positions that predict a trained token in some row (``logits_to_keep`` with
    indices): with a 151K vocabulary and agentic data (three quarters tool output) the full logits would be
    several times the rest of the activations.
    """
    import torch

    mask = batch["trained"][:, 1:]
    positions = mask.any(dim=0).nonzero().flatten()
    if positions.numel() == 0:
        return model(input_ids=batch["input_ids"][:, :1]).logits.sum() * 0.0, 0
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   logits_to_keep=positions).logits
    targets = batch["input_ids"][:, 1:][:, positions]
    kept = mask[:, positions]
    losses = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return (losses * kept.flatten()).sum(), int(kept.sum())


def _load_model(config: SFTConfig) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, config.dtype)
    model_path = Path(config.model)
    kwargs: dict[str, Any] = {}
    source = config.model
    if model_path.suffix == ".gguf":
        source, kwargs["gguf_file"] = str(model_path.parent), model_path.name
    tokenizer = AutoTokenizer.from_pretrained(config.tokenizer or source, **({} if config.tokenizer else kwargs))
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model, tokenizer


def trained_added_tokens(tokenized: Sequence[TokenizedSample], tokenizer: Any) -> list[int]:
    """Ids of the tokenizer's added tokens that occur at trained positions of ``tokenized``, sorted."""
    added = set(tokenizer.added_tokens_decoder)
    return sorted({i for t in tokenized for i, m in zip(t.input_ids, t.assistant_mask) if m and i in added})


def _with_lora(model: Any, settings: LoraSettings, token_ids: Sequence[int], *, gradient_checkpointing: bool) -> Any:
    """``model`` wrapped by peft: LoRA on the target projections, plus trainable rows for ``token_ids``."""
    from peft import LoraConfig, get_peft_model

    names = {module: name for name, module in model.named_modules()}
    present = {name.rsplit(".", 1)[-1] for name in names.values()}
    targets = [t for t in settings.target_modules if t in present]
    if not targets:
        raise ValueError(f"none of the LoRA target modules {settings.target_modules} is in the model")
    trainable_tokens: Any = None
    if settings.train_added_tokens and token_ids:
        # full module names: peft matches by suffix, and a second embedding (a vision tower's) must not match
        embedding, output = model.get_input_embeddings(), model.get_output_embeddings()
        trainable_tokens = {names[embedding]: list(token_ids)}
        if output is not None and output.weight is not embedding.weight:  # untied: the output rows too
            trainable_tokens[names[output]] = list(token_ids)
    lora = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=targets, task_type="CAUSAL_LM", trainable_token_indices=trainable_tokens)
    with warnings.catch_warnings():  # peft 0.21 reads a property transformers 5 deprecated: not ours to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = get_peft_model(model, lora)
    if gradient_checkpointing:
        model.enable_input_require_grads()
    return model


def _checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    folder = output_dir / "checkpoints"
    found = []
    for path in folder.glob("step-*") if folder.is_dir() else []:
        if path.suffix != ".tmp" and (path / "state.json").is_file() and path.name[5:].isdigit():
            found.append((int(path.name[5:]), path))
    return sorted(found)


def train_sft(config: SFTConfig, *, progress: bool = True) -> SFTResult:
    """Run (or resume) the SFT of ``config``; returns what was done.

    Raises:
        ValueError: no trainable sample, or a checkpoint of a different config in ``output_dir``.
        FileNotFoundError: a data file that does not exist.
    """
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_cosine_schedule_with_warmup

    accelerator = Accelerator(gradient_accumulation_steps=1)
    output_dir = Path(config.output_dir)
    set_seed(config.seed)
    model, tokenizer = _load_model(config)
    loaded = load_samples(config.data)
    tokenized, rejected = tokenize_samples(loaded.samples, tokenizer, max_tokens=config.max_tokens)
    skipped = [f"{r.source}: {r.reason}" for r in [*loaded.rejected, *rejected]]
    if not tokenized:
        raise ValueError(f"no trainable sample in {', '.join(config.data)} ({'; '.join(skipped[:3]) or 'empty'})")
    if config.lora is not None:
        model = _with_lora(model, config.lora, trained_added_tokens(tokenized, tokenizer),
                           gradient_checkpointing=config.gradient_checkpointing)
    processes = accelerator.num_processes
    per_step = config.global_batch_size // config.micro_batch_size  # micro-batches per step, all processes
    # The backward pass of DDP/FSDP averages gradients over processes, and DeepSpeed's also divides by its
    # accumulation steps: scale the loss back to a sum over the global batch.
    deepspeed = getattr(accelerator.state, "deepspeed_plugin", None) is not None
    loss_scale = processes * (max(1, per_step // processes) if deepspeed else 1)
    batches = length_grouped_batches([len(t) for t in tokenized], config.micro_batch_size, seed=config.seed,
                                     epochs=config.epochs)
    steps = [batches[i : i + per_step] for i in range(0, len(batches), per_step)]
    if processes > 1:  # every process must run as many forward passes in a step: a short last step is trimmed
        steps = [step[: len(step) - len(step) % processes] for step in steps]
        steps = [step for step in steps if step]
    total_steps = len(steps)
    run_steps = min(total_steps, config.max_steps) if config.max_steps else total_steps

    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.ndim >= 2]
    no_decay = [p for p in trainable if p.ndim < 2]  # norms and biases, as Trainer does
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=config.learning_rate, betas=config.adam_betas)
    _fix_deepspeed_batch(accelerator, config, per_step)
    model, optimizer = accelerator.prepare(model, optimizer)
    # The schedule is built on the prepared optimizer: DeepSpeed ZeRO-3's holds its own parameter groups.
    scheduler = accelerator.prepare(
        get_cosine_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps))

    start = 0
    fingerprint = _fingerprint(config, len(tokenized))
    if checkpoints := _checkpoints(output_dir):
        start, path = checkpoints[-1]
        state = json.loads((path / "state.json").read_text())
        if state.get("fingerprint") != fingerprint:
            raise ValueError(f"{path} was written by another config or data ({state.get('fingerprint')} != "
                             f"{fingerprint}); use a new output_dir")
        accelerator.load_state(str(path))
        accelerator.print(f"resumed from {path} (step {start} of {total_steps})")
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
        if skipped:
            (output_dir / "skipped.txt").write_text("\n".join(skipped) + "\n")

    if start >= run_steps:
        accelerator.print(f"{output_dir} already holds step {start} of {run_steps}: nothing to train")
        rows = (output_dir / "log.jsonl").read_text().splitlines() if (output_dir / "log.jsonl").is_file() else []
        last = json.loads(rows[-1])["loss"] if rows else None
        final = output_dir / "final"
        if run_steps == total_steps and not (final / "config.json").is_file():  # stopped before the final save
            final = _save_final(accelerator, model, tokenizer, output_dir)
        return SFTResult(start, start, final if final.is_dir() else None, last, skipped,
                         distributed=str(accelerator.distributed_type.value))
    model.train()
    last_loss = None
    trained_total, started = 0, time.perf_counter()
    bar = _Progress(run_steps, start, enabled=progress and accelerator.is_main_process)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with bar:
        for step in range(start, run_steps):
            mine = steps[step][accelerator.process_index :: processes]
            micro = [_collate([tokenized[i] for i in indices], pad_id) for indices in mine]
            local = sum(int(b["trained"][:, 1:].sum()) for b in micro)
            global_tokens = int(accelerator.reduce(torch.tensor(local, device=accelerator.device), "sum").item())
            summed = torch.zeros((), device=accelerator.device)
            for index, batch in enumerate(micro):
                batch = {k: v.to(accelerator.device) for k, v in batch.items()}
                context = accelerator.no_sync(model) if index < len(micro) - 1 else contextlib.nullcontext()
                with context:
                    loss_sum, _ = _summed_loss(model, batch)
                    accelerator.backward(loss_sum * loss_scale / max(global_tokens, 1))
                summed += loss_sum.detach()
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            last_loss = float(accelerator.reduce(summed, "sum").item()) / max(global_tokens, 1)
            trained_total += global_tokens
            elapsed = time.perf_counter() - started
            record = {"step": step + 1, "loss": round(last_loss, 6), "lr": scheduler.get_last_lr()[0],
                      "grad_norm": float(grad_norm) if grad_norm is not None else None,
                      "trained_tokens": global_tokens, "tokens_per_s": round(trained_total / elapsed, 1)}
            if accelerator.is_main_process:
                with (output_dir / "log.jsonl").open("a", encoding="utf-8") as log:
                    log.write(json.dumps(record) + "\n")
            bar.update(step + 1, last_loss, trained_total / elapsed)
            if (step + 1) % config.save_every == 0 or step + 1 == run_steps:
                _save_checkpoint(accelerator, output_dir, step + 1, fingerprint, config.keep_checkpoints)
    final_dir = None
    if run_steps == total_steps:
        final_dir = _save_final(accelerator, model, tokenizer, output_dir)
    elapsed = time.perf_counter() - started
    return SFTResult(run_steps, start, final_dir, last_loss, skipped, trained_total,
                     trained_total / elapsed if elapsed > 0 and trained_total else 0.0,
                     str(accelerator.distributed_type.value))


def _fingerprint(config: SFTConfig, samples: int) -> str:
    """What must match for a checkpoint to be resumed: the data order and the schedule."""
    keys = ("model", "data", "max_tokens", "epochs", "global_batch_size", "micro_batch_size", "seed", "learning_rate",
            "warmup_ratio", "lora")
    settings = {k: config.to_dict()[k] for k in keys}
    return json.dumps({**settings, "samples": samples}, sort_keys=True)


def _fix_deepspeed_batch(accelerator: Any, config: SFTConfig, per_step: int) -> None:
    """DeepSpeed wants its micro-batch size and accumulation in its config; no dataloader is prepared here to
    infer them from."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = config.micro_batch_size
    plugin.deepspeed_config["gradient_accumulation_steps"] = max(1, per_step // accelerator.num_processes)
    plugin.deepspeed_config["gradient_clipping"] = config.max_grad_norm


def _save_checkpoint(accelerator: Any, output_dir: Path, step: int, fingerprint: str, keep: int) -> None:
    """Write ``checkpoints/step-N`` atomically (a temporary folder renamed once whole), then drop old ones."""
    folder = output_dir / "checkpoints"
    final, tmp = folder / f"step-{step:06d}", folder / f"step-{step:06d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / "state.json").write_text(json.dumps({"step": step, "fingerprint": fingerprint}) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for _, old in _checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def _save_final(accelerator: Any, model: Any, tokenizer: Any, output_dir: Path) -> Path:
    """The trained model as a plain Hugging Face checkpoint (LoRA adapters merged) with its tokenizer."""
    final = output_dir / "final"
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
        unwrapped.save_pretrained(final, state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(final)
    accelerator.wait_for_everyone()
    return final


def _loaded_from_gguf(model: Any) -> bool:
    quantizer = getattr(model, "hf_quantizer", None)
    method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
    return str(getattr(method, "value", method)).lower() == "gguf"


class _Progress:
    """A rich progress bar with a figure (the loss; IGPO: the reward), tokens/s and ETA (nothing when disabled)."""

    def __init__(self, total: int, done: int, *, enabled: bool, label: str = "sft", figure: str = "loss") -> None:
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                                     TextColumn(figure + " {task.fields[loss]}"),
                                     TextColumn("{task.fields[speed]} tok/s"), TimeRemainingColumn(), transient=False)
            self.task = self.progress.add_task(label, total=total, completed=done, loss="-", speed="-")

    def __enter__(self) -> _Progress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def update(self, done: int, loss: float, speed: float) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done, loss=f"{loss:.4f}", speed=f"{speed:.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m venus_edge.train.sft CONFIG [--max-steps N]``: the entry point ``accelerate launch`` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="venus_edge.train.sft", description="SFT on cleaned trajectories")
    parser.add_argument("config", type=Path)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        config = SFTConfig.from_file(args.config, max_steps=args.max_steps, output_dir=args.output_dir)
        result = train_sft(config, progress=not args.quiet)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"steps": result.steps, "resumed_from": result.resumed_from, "loss": result.last_loss,
                      "final": str(result.final_dir) if result.final_dir else None,
                      "tokens_per_s": round(result.tokens_per_s, 1), "skipped": len(result.skipped),
                      "distributed": result.distributed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
