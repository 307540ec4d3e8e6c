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
  n-th micro-batch of a global batch; a process left without one in a short last step runs a weightless pass, so
  the steps (and a checkpoint's meaning) are the same on any number of processes (under DeepSpeed, which counts
  micro-batches, the short last step is trimmed to a multiple of the process count instead).
- A checkpoint (``OUT/checkpoints/step-N``: accelerate's model, optimizer, scheduler and RNG state, plus
  ``state.json``) is written atomically every ``save_every`` steps; a rerun of the same config resumes from the
  newest one and skips the batches already trained, so a killed run loses at most ``save_every`` steps.
- LoRA (peft) trains adapters on the attention and MLP projections; the final model is merged and saved as a plain
  Hugging Face checkpoint in ``OUT/final``, ready for ``venus-edge quantize``.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.train.checkpoints import (
    ProgressBar,
    adamw,
    check_finite,
    check_finite_weights,
    content_digest,
    end_processes,
    fingerprint,
    resume,
    save_checkpoint,
    save_final,
    trim_step_log,
)
from venus_edge.train.config import ConfigFile, check_model_source, check_run_settings, require
from venus_edge.train.data import load_samples
from venus_edge.train.tokenize import TokenizedSample, tokenize_samples

__all__ = ["LORA_TARGETS", "LoraSettings", "SFTConfig", "SFTResult", "length_grouped_batches", "train_sft",
           "trained_added_tokens"]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: Passes over the data at most: the batch order of every pass is drawn before the first step.
MAX_EPOCHS = 1_000
#: What must match for a checkpoint to be resumed (with the number of samples): the data order and the schedule.
_RESUME_SETTINGS = ("model", "data", "max_tokens", "epochs", "global_batch_size", "micro_batch_size", "seed",
                    "learning_rate", "warmup_ratio", "lora")


@dataclass(frozen=True)
class LoraSettings(ConfigFile):
    """peft ``LoraConfig`` settings: rank, scaling ``alpha / r``, dropout, the modules adapted, and whether the
    added tokens' rows train too (``lora:`` of an SFT config: true for these defaults, or a mapping)."""

    r: int = field(default=16, metadata={"help": "the adapters' rank"})
    alpha: int = field(default=32, metadata={"help": "the scaling numerator: adapters are scaled by alpha / r"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the adapters' input, in [0, 1)"})
    target_modules: tuple[str, ...] = field(default=LORA_TARGETS, metadata={
        "help": "names of the projections adapted (those the model has; default every attention and MLP one)"})
    train_added_tokens: bool = field(default=True, metadata={
        "help": "also train the embedding and output rows of the tokenizer's added tokens that the data trains "
                "(the protocol's <tool_call>, </tool_call>, ...), through peft's trainable tokens. A pretrained "
                "model may never have trained those rows, and LoRA on the projections cannot make it emit them: "
                "Qwen2.5-Coder-0.5B after 54 LoRA-only trajectories predicted every other trained token (mean loss "
                "0.14) but <tool_call> at log-probability -8.3"})

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.r >= 1, f"r must be >= 1, got {self.r}; the recipe's LoRA runs use 16", setting="r", value=self.r)
        require(self.alpha > 0, f"alpha must be > 0, got {self.alpha}; 2 * r (32 for r 16) is the usual choice",
                setting="alpha", value=self.alpha)
        require(0 <= self.dropout < 1, f"dropout must lie in [0, 1), got {self.dropout}; 0 turns it off",
                setting="dropout", value=self.dropout)


@dataclass(frozen=True)
class SFTConfig(ConfigFile):
    """One SFT run (a YAML or JSON file, where relative paths are relative to the file; or built in Python).
    Each field's help is in its metadata (``SFTConfig.help_text()``); defaults are the DR-Venus recipe's."""

    model: str = field(metadata={"path": True, "help": "a Hugging Face checkpoint folder or hub id, or a .gguf "
                                                       "file (transformers dequantizes it)"})
    data: tuple[str, ...] = field(metadata={"path": True, "help": "cleaned JSONL files (venus-edge train clean)"})
    output_dir: str = field(metadata={"path": True, "help": "checkpoints, log.jsonl and final/"})
    tokenizer: str | None = field(default=None, metadata={"path": True, "help": "the tokenizer's folder or hub id "
                                                                              "(default: the model's)"})
    max_tokens: int = field(default=32768, metadata={
        "help": "samples longer than this (in tokens) are skipped and reported, never cut"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the data (a fraction trains on part of it)"})
    global_batch_size: int = field(default=32, metadata={
        "help": "samples per optimizer step, over all processes (recipe: 32)"})
    micro_batch_size: int = field(default=1, metadata={"help": "samples per forward pass on one process"})
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW's peak learning rate (recipe: 1e-5)"})
    warmup_ratio: float = field(default=0.1, metadata={
        "help": "share of the steps with a linear warmup, then cosine decay (recipe: 0.1)"})
    adam_betas: tuple[float, float] = field(default=(0.9, 0.95), metadata={"help": "AdamW's betas (recipe)"})
    weight_decay: float = field(default=0.01, metadata={
        "help": "AdamW's weight decay of the matrices; norms and biases do not decay (recipe: 0.01)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (recipe: 1.0)"})
    gradient_checkpointing: bool = field(default=True, metadata={
        "help": "recompute activations in the backward pass (memory for time)"})
    lora: LoraSettings | None = field(default=None, metadata={
        "help": "train LoRA adapters (true, or a mapping of LoraSettings) instead of every weight; none trains "
                "every weight"})
    dtype: str = field(default="float32", metadata={"help": "the weights' dtype (float32 on CPU, bfloat16 on GPUs)"})
    seed: int = field(default=0, metadata={"help": "data order and initialization of adapters"})
    save_every: int = field(default=100, metadata={"help": "optimizer steps between checkpoints"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many checkpoints are kept"})
    max_steps: int | None = field(default=None, metadata={
        "help": "stop after this many steps (the schedule still spans the full run); none trains the whole run"})

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("global_batch_size", "micro_batch_size"):
            value = getattr(self, name)
            require(value >= 1, f"{name} must be >= 1, got {value}", setting=name, value=value)
        require(self.global_batch_size % self.micro_batch_size == 0,
                f"global_batch_size {self.global_batch_size} is not a multiple of micro_batch_size "
                f"{self.micro_batch_size}; a step is whole micro-batches: make global_batch_size a multiple",
                setting="global_batch_size", value=self.global_batch_size)
        require(0 <= self.warmup_ratio < 1, f"warmup_ratio must lie in [0, 1), got {self.warmup_ratio}; the "
                "recipe's is 0.1", setting="warmup_ratio", value=self.warmup_ratio)
        require(0 < self.epochs <= MAX_EPOCHS, f"epochs must lie in (0, {MAX_EPOCHS:,}], got {self.epochs}; 0.5 "
                "trains on half the data", setting="epochs", value=self.epochs)
        require(self.max_tokens >= 2, f"max_tokens must be >= 2, got {self.max_tokens}; a sample needs a token to "
                "predict the next from", setting="max_tokens", value=self.max_tokens)
        require(self.max_steps is None or self.max_steps >= 1,
                f"max_steps must be >= 1 (or left out for the whole run), got {self.max_steps}",
                setting="max_steps", value=self.max_steps)
        check_run_settings(self)


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

    check_model_source(config.model)
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

    # step_scheduler_with_optimizer=False: accelerate would otherwise step the schedule once per process at every
    # optimizer step (it assumes a data loader it sharded), decaying the learning rate N times too fast on N processes
    accelerator = Accelerator(gradient_accumulation_steps=1, step_scheduler_with_optimizer=False)
    output_dir = Path(config.output_dir)
    set_seed(config.seed)
    model, tokenizer = _load_model(config)
    loaded = load_samples(config.data)
    tokenized, rejected = tokenize_samples(loaded.samples, tokenizer, max_tokens=config.max_tokens)
    skipped = [f"{r.source}: {r.reason}" for r in [*loaded.rejected, *rejected]]
    if not tokenized:
        raise ValueError(f"no trainable sample in {', '.join(config.data)} ({'; '.join(skipped[:3]) or 'empty'})")
    rows = model.get_input_embeddings().num_embeddings
    if (highest := max(max(sample.input_ids) for sample in tokenized)) >= rows:  # an IndexError deep in the forward
        raise ValueError(f"the tokenizer gives token id {highest:,} but the model {config.model} has {rows:,} "
                         "embedding rows: use the tokenizer that belongs to the model (tokenizer setting)")
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
    if processes > 1 and deepspeed:  # DeepSpeed counts micro-batches to find its steps: a short last step is trimmed
        steps = [step[: len(step) - len(step) % processes] for step in steps]
        steps = [step for step in steps if step]
    total_steps = len(steps)
    run_steps = min(total_steps, config.max_steps) if config.max_steps else total_steps

    optimizer = adamw(model, learning_rate=config.learning_rate, betas=config.adam_betas,
                      weight_decay=config.weight_decay)
    _fix_deepspeed_batch(accelerator, config, per_step)
    model, optimizer = accelerator.prepare(model, optimizer)
    # The schedule is built on the prepared optimizer: DeepSpeed ZeRO-3's holds its own parameter groups.
    scheduler = accelerator.prepare(
        get_cosine_schedule_with_warmup(optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps))

    # The data's tokens are part of the fingerprint: the same path rewritten with other rows is another run.
    data_digest = content_digest(row for sample in tokenized for row in (sample.input_ids, sample.assistant_mask))
    run_fingerprint = fingerprint(config, _RESUME_SETTINGS, samples=len(tokenized), data_sha256=data_digest)
    start = resume(accelerator, output_dir, run_fingerprint, total_steps=total_steps)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
        if skipped:
            (output_dir / "skipped.txt").write_text("\n".join(skipped) + "\n")
        if torn := trim_step_log(output_dir / "log.jsonl", start):  # rows of redone steps, and a torn line
            accelerator.print(f"{output_dir / 'log.jsonl'}: dropped {torn} unreadable line(s) (torn by a kill?)")

    if start >= run_steps:
        accelerator.print(f"{output_dir} already holds step {start} of {run_steps}: nothing to train")
        rows = (output_dir / "log.jsonl").read_text().splitlines() if (output_dir / "log.jsonl").is_file() else []
        last = json.loads(rows[-1])["loss"] if rows else None
        final = output_dir / "final"
        if run_steps == total_steps and not (final / "config.json").is_file():  # stopped before the final save
            final = save_final(accelerator, model, tokenizer, output_dir)
        return SFTResult(start, start, final if final.is_dir() else None, last, skipped,
                         distributed=str(accelerator.distributed_type.value))
    model.train()
    last_loss = None
    trained_total, started = 0, time.perf_counter()
    bar = ProgressBar(run_steps, start, enabled=progress and accelerator.is_main_process)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with bar:
        for step in range(start, run_steps):
            mine = steps[step][accelerator.process_index :: processes]
            # every process runs as many passes as the busiest (a short step leaves some with one fewer): the
            # gradient synchronization (and FSDP's gathers) are collectives that all must reach
            passes = math.ceil(len(steps[step]) / processes)
            micro = [_collate([tokenized[i] for i in indices], pad_id) for indices in mine]
            local = sum(int(b["trained"][:, 1:].sum()) for b in micro)
            global_tokens = int(accelerator.reduce(torch.tensor(local, device=accelerator.device), "sum").item())
            summed = torch.zeros((), device=accelerator.device)
            for index in range(passes):
                context = accelerator.no_sync(model) if index < passes - 1 else contextlib.nullcontext()
                if index >= len(micro):  # a weightless pass
                    with context:
                        empty = torch.zeros((1, 1), dtype=torch.long, device=accelerator.device)
                        accelerator.backward(model(input_ids=empty).logits.sum() * 0.0)
                    continue
                batch = {k: v.to(accelerator.device) for k, v in micro[index].items()}
                with context:
                    loss_sum, _ = _summed_loss(model, batch)
                    accelerator.backward(loss_sum * loss_scale / max(global_tokens, 1))
                summed += loss_sum.detach()
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            last_loss = float(accelerator.reduce(summed, "sum").item()) / max(global_tokens, 1)
            check_finite(step + 1, loss=last_loss, grad_norm=grad_norm, output_dir=output_dir)
            check_finite_weights(step + 1, model, output_dir=output_dir)
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
                save_checkpoint(accelerator, output_dir, step + 1, run_fingerprint, config.keep_checkpoints)
    final_dir = None
    if run_steps == total_steps:
        final_dir = save_final(accelerator, model, tokenizer, output_dir)
    elapsed = time.perf_counter() - started
    return SFTResult(run_steps, start, final_dir, last_loss, skipped, trained_total,
                     trained_total / elapsed if elapsed > 0 and trained_total else 0.0,
                     str(accelerator.distributed_type.value))


def _fix_deepspeed_batch(accelerator: Any, config: SFTConfig, per_step: int) -> None:
    """DeepSpeed wants its micro-batch size and accumulation in its config; no dataloader is prepared here to
    infer them from."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = config.micro_batch_size
    plugin.deepspeed_config["gradient_accumulation_steps"] = max(1, per_step // accelerator.num_processes)
    plugin.deepspeed_config["gradient_clipping"] = config.max_grad_norm


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
    if not end_processes():  # one summary line per run, not one per process
        return 0
    print(json.dumps({"steps": result.steps, "resumed_from": result.resumed_from, "loss": result.last_loss,
                      "final": str(result.final_dir) if result.final_dir else None,
                      "tokens_per_s": round(result.tokens_per_s, 1), "skipped": len(result.skipped),
                      "distributed": result.distributed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
