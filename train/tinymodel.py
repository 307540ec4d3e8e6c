"""A random tiny Qwen3 whose vocabulary is a small BPE trained on the texts it will learn: a model to fine-tune on a
CPU (``venus-edge train tiny-model``), optionally pretrained to copy (``pretrain_copying``).

With the 151,643-rank Qwen vocabulary the embedding and LM head dominate a tiny model's cost; a few thousand tokens
trained on the task's own texts make it ~17x faster (``shared/TEST_MODELS.md``). The BPE keeps Qwen's
pre-tokenizer and added tokens (``quantize.qwen_tokenizer.train_small_bpe``), so the protocol renders, tokenizes
and converts to GGUF (``qwen2`` pre-tokenizer) as with the real vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from venus_edge.protocol import (
    CONTEXT_LIMIT_NOTICE,
    FORMAT_ERROR_NOTICE,
    STEP_LIMIT_NOTICE,
    render_system_prompt,
)
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA
from venus_edge.train.data import load_samples

__all__ = ["COPY_PHASES", "copy_window", "pretrain_copying", "write_tiny_model"]

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


def copy_window(stream: Sequence[int], rng: Any, *, length: int, span: int) -> tuple[list[int], list[bool]]:
    """One row of the copying curriculum: ``length`` tokens of ``stream`` from a random start, over which a span of 4
    to ``span`` tokens, drawn at random from the window's own tokens, is written twice: at a random place and again
    at a random place after it.

    Returns:
        (ids, repeated): ``repeated[k]`` is True for the tokens of the repeat after its first, the ones a model
        predicts by finding the span earlier in the row (the first token of a repeat cannot be foreseen).

    Raises:
        ValueError: a stream not longer than ``length``, or ``length < 2 * span``, or ``span < 4``.
    """
    if length < 2 * span or span < 4:
        raise ValueError(f"a window of {length} tokens cannot hold a span of {span} and its repeat (span >= 4)")
    if len(stream) <= length:
        raise ValueError(f"the texts hold {len(stream)} tokens, fewer than one window of {length}")
    start = rng.randrange(len(stream) - length)
    row = list(stream[start:start + length])
    tokens = sorted(set(row))
    size = rng.randint(4, span)
    source = rng.randrange(length - 2 * size + 1)
    target = rng.randrange(source + size, length - size + 1)
    # Tokens drawn one by one from the window's: a sequence nothing but the copy predicts (a span of the templated
    # texts would be predictable from the text around it, and the model then learns the templates, not to look back)
    row[source:source + size] = row[target:target + size] = [rng.choice(tokens) for _ in range(size)]
    repeated = [False] * length
    repeated[target + 1:target + size] = [True] * (size - 1)
    return row, repeated


#: The copying curriculum's phases: (share of the steps, window length as a multiple of ``length``, batch as a
#: fraction of ``batch``, learning rate as a fraction of ``learning_rate``). A model learns to copy in short windows
#: first (it leaves the loss plateau sooner there), then the longer windows teach it to find a span far back among
#: many tokens, as a fact in a page a thousand tokens into a trajectory.
COPY_PHASES = ((5 / 7, 1, 1, 1), (6 / 35, 8, 1 / 4, 1 / 3), (4 / 35, 16, 1 / 8, 1 / 3))


def pretrain_copying(
    model_dir: str | Path, texts: Sequence[str | Path], *, steps: int = 3500, batch: int = 32, span: int = 24,
    length: int = 64, learning_rate: float = 3e-3, seed: int = 0,
) -> list[float]:
    """Pretrain a tiny model in place on an induction curriculum (``copy_window``): windows of the texts in which a
    span of random tokens appears twice, a random distance apart; the loss is the language-model loss on every
    token plus the mean loss of the repeats; the windows grow in phases (``COPY_PHASES``).

    A research agent copies all the time (the question's names into a query, a URL out of the results, a fact out
    of a page). A repeat of random tokens is predictable only by finding the span earlier in the window by its
    content (an induction head, Olsson et al. 2022). Two earlier designs taught something else: a span repeated
    right after itself teaches copying the token a fixed distance back (2 % top-1 on repeats at other distances),
    and a repeated span of the templated texts is mostly predictable from the text around it. Measured on a
    hidden-128, 2-layer toy model: in 64-token windows it leaves the plateau (guessing among the window's tokens)
    after ~700 steps and copies 91 % of repeat tokens after 2,500, but only 12 % in 256-token windows; the longer
    phases raise that to 91 % (256) and 64 % (1,024). The windows come from the given texts (the training
    trajectories), so the curriculum holds no fact the model is later tested on.

    Args:
        model_dir: a checkpoint folder (``write_tiny_model``'s), overwritten with the pretrained weights.
        texts: what ``write_tiny_model`` accepts.
        steps: all phases' steps together.
        batch, length, learning_rate: the first phase's windows per step, tokens per window and peak rate (AdamW,
            cosine decay within each phase).
        span: the longest repeated span in tokens (each is 4 to ``span`` long).

    Returns:
        each step's mean loss on the repeats' predictable tokens (all but their first); it falls towards 0 once
        the model copies (and rises at the start of a longer phase).

    Raises:
        ValueError: texts shorter than the longest window, or a window shorter than two spans.
    """
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    copy_window(range(length + 1), random.Random(0), length=length, span=span)  # bad sizes fail before loading
    folder = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    stream: list[int] = []
    for text in _texts([Path(t) for t in texts]):
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
    longest = length * max(times for _, times, _, _ in COPY_PHASES)
    if len(stream) <= longest:
        raise ValueError(f"the texts hold {len(stream)} tokens, fewer than one window of {longest}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    losses: list[float] = []
    model.train()
    done = 0
    for index, (share, times, batch_share, rate_share) in enumerate(COPY_PHASES):
        last = index == len(COPY_PHASES) - 1
        phase_steps = steps - done if last else round(steps * share)
        done += phase_steps
        if phase_steps <= 0:
            continue
        windows, window = max(1, round(batch * batch_share)), length * times
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate * rate_share, betas=(0.9, 0.95),
                                      weight_decay=0.01)
        schedule = get_cosine_schedule_with_warmup(optimizer, max(1, phase_steps // 20), phase_steps)
        for _ in range(phase_steps):
            rows, masks = zip(*(copy_window(stream, rng, length=window, span=span) for _ in range(windows)))
            ids = torch.tensor(rows)
            repeats = torch.tensor(masks)[:, 1:]  # per_token[:, k] predicts token k + 1
            logits = model(input_ids=ids).logits[:, :-1]
            per_token = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                          ids[:, 1:].reshape(-1), reduction="none").view(windows, -1)
            copy_loss = per_token[repeats].mean()
            loss = per_token.mean() + copy_loss  # the repeats are a few percent of the tokens: weigh them up
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(round(copy_loss.item(), 4))
    model.save_pretrained(folder, safe_serialization=True)
    return losses
