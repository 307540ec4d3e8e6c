"""A random tiny Qwen3 whose vocabulary is a small BPE trained on the texts it will learn: a model to fine-tune on a
CPU (``venus-edge train tiny-model``).

With the 151,643-rank Qwen vocabulary the embedding and LM head dominate a tiny model's cost; a few thousand tokens
trained on the task's own texts make it ~17x faster (``shared/TEST_MODELS.md``). The BPE keeps Qwen's
pre-tokenizer and added tokens (``quantize.qwen_tokenizer.train_small_bpe``), so the protocol renders, tokenizes
and converts to GGUF (``qwen2`` pre-tokenizer) as with the real vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Sequence

from venus_edge.protocol import (
    CONTEXT_LIMIT_NOTICE,
    FORMAT_ERROR_NOTICE,
    STEP_LIMIT_NOTICE,
    render_system_prompt,
)
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.train.data import load_samples

__all__ = ["write_tiny_model"]

_TEXT_SUFFIXES = (".md", ".txt", ".html", ".htm")


def _texts(paths: Sequence[Path]) -> Iterator[str]:
    yield render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], "2026-03-01")
    yield from (FORMAT_ERROR_NOTICE, CONTEXT_LIMIT_NOTICE, STEP_LIMIT_NOTICE)
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if file.suffix.lower() in (".jsonl", ".json", ".parquet"):
                for sample in load_samples([file]).samples:
                    yield from (message["content"] for message in sample.messages)
            elif file.suffix.lower() in _TEXT_SUFFIXES:
                yield file.read_text(encoding="utf-8", errors="replace")


def write_tiny_model(
    texts: Sequence[str | Path], out_dir: str | Path, *, vocab: int = 4096, hidden: int = 256, layers: int = 4,
    seed: int = 0,
) -> Path:
    """Train the BPE on ``texts`` and write a seeded random Qwen3 checkpoint that uses it into ``out_dir``.

    Args:
        texts: cleaned JSONL/parquet rows (their message contents) and text files, or folders of them.
        out_dir: the checkpoint folder (config.json, safetensors, tokenizer files).
        vocab: BPE vocabulary size before the 26 added tokens.
        hidden, layers: model width and depth; 4 heads of ``hidden / 4``, 2 KV heads, FFN ``2 * hidden``.
        seed: the weights' seed.

    Raises:
        ValueError: a hidden size that 4 heads do not divide evenly, or a vocabulary under 512.
    """
    from venus_edge.quantize.qwen_tokenizer import QWEN3_ADDED_TOKENS, train_small_bpe
    from venus_edge.quantize.tiny import Qwen3Config, write_tiny_qwen3

    if hidden % 4 or vocab < 512:
        raise ValueError("hidden must be a multiple of 4 and vocab at least 512")
    out = Path(out_dir)
    tokenizer_dir = train_small_bpe(_texts([Path(t) for t in texts]), out / "tokenizer", vocab_size=vocab)
    spec = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    first_added = len(spec["model"]["vocab"])
    size = first_added + len(QWEN3_ADDED_TOKENS)
    config = Qwen3Config(
        vocab_size=(size + 63) // 64 * 64, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=16384,
        bos_token_id=first_added, eos_token_id=first_added + 2,  # <|endoftext|>, <|im_end|>
    )
    return write_tiny_qwen3(out, config=config, seed=seed, tokenizer_dir=tokenizer_dir)
