"""A random tiny Qwen3 whose vocabulary is a small BPE trained on the texts it will learn: a model to fine-tune on a
CPU (``venus-edge train tiny-model``), optionally pretrained to copy (``pretrain_copying``).

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

__all__ = ["pretrain_copying", "write_tiny_model"]

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


def pretrain_copying(
    model_dir: str | Path, texts: Sequence[str | Path], *, steps: int = 400, batch: int = 32, span: int = 48,
    learning_rate: float = 3e-3, seed: int = 0,
) -> list[float]:
    """Pretrain a tiny model in place on the induction curriculum: a random span of the texts, then the same
    span again, with the language-model loss on every token.

    A research agent copies all the time (the question's names into a query, a URL out of the results, a fact out
    of a page), and a random model learns copying from a few hundred SFT trajectories far too slowly: the toy run
    with unseen held-out names stayed at the no-tool baseline. The second half of each sequence is predictable only
    by looking back (an induction head, Olsson et al. 2022), which a 2-4 layer model learns in a few hundred
    steps. The spans come from the given texts (the training trajectories), so the curriculum holds no fact the
    model is later tested on.

    Args:
        model_dir: a checkpoint folder (``write_tiny_model``'s), overwritten with the pretrained weights.
        texts: what ``write_tiny_model`` accepts.
        steps, batch, span, learning_rate: AdamW with cosine decay over ``steps`` of ``batch`` sequences of
            ``2 * span + 1`` tokens.

    Returns:
        each step's loss on the repeated half (it falls towards 0 once the model copies).

    Raises:
        ValueError: texts shorter than one span.
    """
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    folder = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    stream: list[int] = []
    for text in _texts([Path(t) for t in texts]):
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(stream) <= span:
        raise ValueError(f"the texts hold {len(stream)} tokens, fewer than one span of {span}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.01)
    schedule = get_cosine_schedule_with_warmup(optimizer, max(1, steps // 20), steps)
    losses = []
    model.train()
    for _ in range(steps):
        rows = []
        for _ in range(batch):
            start = rng.randrange(len(stream) - span)
            piece = stream[start:start + span]
            rows.append(piece + [separator] + piece)
        ids = torch.tensor(rows)
        logits = model(input_ids=ids).logits[:, :-1]
        per_token = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                      reduction="none").view(batch, -1)
        loss = per_token.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(per_token[:, span:].mean().item(), 4))  # the repeated half
    model.save_pretrained(folder, safe_serialization=True)
    return losses
