"""SFT training speed: our trainer against a plain transformers ``Trainer`` on the same model, data and batches.

    .venv/bin/python -m pytest benchmarks/bench_sft.py --benchmark-only -s

Both train a random tiny Qwen3 (small BPE vocabulary, hidden 128, 2 layers) on the toy world's cleaned oracle
trajectories for the same number of optimizer steps (global batch 16 as 4 micro-batches of 4, AdamW, cosine schedule,
clipping at 1.0, on the CPU). Printed: tokens/s of each (all tokens of the padded-free batches, not only trained
ones) and the ratio ours / Trainer. The Trainer gets the same input ids with ``labels`` = -100 outside the assistant
mask, and ``train_sampling_strategy="group_by_length"`` so that its batches pad as little as ours.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

STEPS = 8
RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    from venus_edge.cli import main

    out = tmp_path_factory.mktemp("bench-sft")
    assert main(["train", "toy-world", str(out / "world"), "--people", "40", "--seed", "0"]) == 0
    assert main(["train", "clean", str(out / "world" / "trajectories.jsonl"), "--out", str(out / "sft.jsonl")]) == 0
    assert main(["train", "tiny-model", str(out / "sft.jsonl"), "--out", str(out / "base"), "--vocab", "2048",
                 "--hidden", "128", "--layers", "2"]) == 0
    return out


def _ours(toy: Path) -> float:
    from venus_edge.train.sft import SFTConfig, train_sft

    config = SFTConfig.from_dict({"model": str(toy / "base"), "data": [str(toy / "sft.jsonl")],
                                  "output_dir": str(toy / f"ours-{time.time_ns()}"), "global_batch_size": 16,
                                  "micro_batch_size": 4, "learning_rate": 1e-3, "gradient_checkpointing": False,
                                  "max_steps": STEPS, "save_every": 10_000})
    result = train_sft(config, progress=False)
    loop_s = result.trained_tokens / result.tokens_per_s  # the training loop's own time, model loading left out
    return _tokens_per_step(toy) * result.steps / loop_s


def _tokens_per_step(toy: Path) -> float:
    """Mean tokens of a global batch of 16 samples of the data."""
    from transformers import AutoTokenizer

    from venus_edge.train.data import load_samples
    from venus_edge.train.tokenize import tokenize_samples

    tokenizer = AutoTokenizer.from_pretrained(toy / "base")
    tokenized, _ = tokenize_samples(load_samples([toy / "sft.jsonl"]).samples, tokenizer)
    return 16 * sum(len(t) for t in tokenized) / len(tokenized)


def _trainer(toy: Path) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from venus_edge.train.data import load_samples
    from venus_edge.train.tokenize import tokenize_samples

    tokenizer = AutoTokenizer.from_pretrained(toy / "base")
    tokenized, _ = tokenize_samples(load_samples([toy / "sft.jsonl"]).samples, tokenizer)
    rows = [{"input_ids": list(t.input_ids),
             "labels": [i if m else -100 for i, m in zip(t.input_ids, t.assistant_mask)]}
            for t in tokenized]

    def collate(batch):
        width = max(len(r["input_ids"]) for r in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
            labels[i, : len(r["labels"])] = torch.tensor(r["labels"])
            attention[i, : len(r["input_ids"])] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": attention}

    model = AutoModelForCausalLM.from_pretrained(toy / "base")
    arguments = TrainingArguments(
        output_dir=str(toy / f"trainer-{time.time_ns()}"), per_device_train_batch_size=4, gradient_accumulation_steps=4,
        max_steps=STEPS, learning_rate=1e-3, lr_scheduler_type="cosine", warmup_steps=1, adam_beta1=0.9,
        adam_beta2=0.95, weight_decay=0.01, max_grad_norm=1.0, report_to=[], save_strategy="no", logging_steps=1,
        train_sampling_strategy="group_by_length", use_cpu=True, disable_tqdm=True, remove_unused_columns=False, seed=0,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=rows, data_collator=collate)
    start = time.perf_counter()
    trainer.train()
    return _tokens_per_step(toy) * STEPS / (time.perf_counter() - start)


def test_sft_speed_against_the_transformers_trainer(benchmark, toy):
    def measure() -> dict[str, float]:
        return {"ours": _ours(toy), "trainer": _trainer(toy)}

    figures = benchmark.pedantic(measure, rounds=1, iterations=1)
    print(f"\nSFT, tiny Qwen3 (hidden 128, 2 layers, 2K vocabulary), {STEPS} steps of 16 samples on the CPU")
    print(f"| ours tok/s | Trainer tok/s | ours/Trainer |\n|---|---|---|\n| {figures['ours']:.0f} | "
          f"{figures['trainer']:.0f} | {figures['ours'] / figures['trainer']:.2f} |")
