"""Scoring the ground truth at turn boundaries: b_t, the mean log-probability of the answer tokens of the
pseudo-answer appended to the context the policy saw before turn t (PROTOCOL.md, "Training facts").

The contexts of one rollout are prefixes of one token sequence, so the scores are computed in one pass over it:
the sequence is fed in chunks up to each boundary into one KV cache, the pseudo-answer is run on top, and the cache
is cropped back to the boundary (``score_boundaries``). The reference sends one prompt-logprobs request per boundary
to vLLM and relies on its prefix cache for the same saving (``dr_agent_loop.py``, ``_score_ig_at_turn``);
``score_boundaries_directly`` is that one-forward-per-boundary method, kept as the check and the benchmark's
reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from venus_edge.train.igpo import PSEUDO_ANSWER_PREFIX, PSEUDO_ANSWER_SUFFIX

if TYPE_CHECKING:
    import torch

__all__ = ["PseudoAnswer", "cache_keyword", "pseudo_answer", "score_boundaries", "score_boundaries_directly"]


@dataclass(frozen=True)
class PseudoAnswer:
    """The pseudo-answer's token ids and the span ``[start, end)`` of the ground-truth tokens in them."""

    token_ids: tuple[int, ...]
    start: int
    end: int


def pseudo_answer(answer: str, encode: Callable[..., Any]) -> PseudoAnswer:
    """Tokenize the pseudo-answer for ``answer`` and find the tokens that carry the answer's characters.

    Args:
        answer: the ground truth (the first alias when there are several).
        encode: a Hugging Face fast tokenizer's ``__call__`` or ``encode_plus`` (``return_offsets_mapping`` is
            passed; special tokens are parsed).

    Raises:
        ValueError: an empty answer, or a tokenizer whose offsets cover none of its characters.
    """
    if not answer.strip():
        raise ValueError("the ground truth is empty: there is nothing to score")
    text = f"{PSEUDO_ANSWER_PREFIX}{answer}{PSEUDO_ANSWER_SUFFIX}"
    encoding = encode(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoding["input_ids"]), list(encoding["offset_mapping"])
    first, last = len(PSEUDO_ANSWER_PREFIX), len(PSEUDO_ANSWER_PREFIX) + len(answer)
    covering = [i for i, (a, b) in enumerate(offsets) if a < last and b > first]
    if not covering:
        raise ValueError(f"no token of the pseudo-answer covers the answer {answer!r}")
    return PseudoAnswer(tuple(ids), covering[0], covering[-1] + 1)


def cache_keyword(model: Any) -> str:
    """The forward argument that takes a KV cache: ``cache`` from transformers 5.x, ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _answer_score(logits: torch.Tensor, answer: PseudoAnswer) -> float:
    """Mean log-prob of the answer span; ``logits[k]`` predicts pseudo-answer token k."""
    import torch

    targets = torch.tensor(answer.token_ids[answer.start:answer.end], device=logits.device)
    rows = torch.log_softmax(logits[answer.start:answer.end].float(), dim=-1)
    return float(rows.gather(1, targets[:, None]).mean())


def score_boundaries(
    model: Any, sequence: Sequence[int], boundaries: Sequence[int], answer: PseudoAnswer
) -> list[float]:
    """b at each boundary, reusing the KV cache of the shared prefix.

    Args:
        model: a causal LM (transformers), in eval mode or not (no gradient is taken).
        sequence: the rollout's token ids.
        boundaries: context lengths, each in [1, len(sequence)], the contexts being ``sequence[:boundary]``.
        answer: ``pseudo_answer(...)``.

    Returns:
        one score per boundary, in the order given.

    Cost: one forward over ``sequence[:max(boundaries)]`` plus one over the pseudo-answer per boundary, against
    ``sum(boundaries)`` context tokens for one forward per boundary.

    Raises:
        ValueError: a boundary outside [1, len(sequence)].
    """
    import torch
    from transformers import DynamicCache

    _check(sequence, boundaries)
    order = sorted(range(len(boundaries)), key=lambda i: boundaries[i])
    scores = [0.0] * len(boundaries)
    device = next(model.parameters()).device
    cache = DynamicCache()
    keyword = cache_keyword(model)
    fed = 0
    last_logits = None
    with torch.no_grad():
        for index in order:
            boundary = boundaries[index]
            if boundary > fed:
                chunk = torch.tensor([list(sequence[fed:boundary])], device=device)
                chunk_logits = model(input_ids=chunk, use_cache=True, logits_to_keep=1, **{keyword: cache}).logits
                last_logits = chunk_logits[0, -1:]
                fed = boundary
            answer_ids = torch.tensor([list(answer.token_ids)], device=device)
            logits = model(input_ids=answer_ids, use_cache=True, **{keyword: cache}).logits[0]
            assert last_logits is not None, "boundaries are >= 1 (_check), so the first one fed the context"
            scores[index] = _answer_score(torch.cat([last_logits, logits[:-1]]), answer)
            cache.crop(-len(answer.token_ids))  # a negative length removes the last tokens (all versions)
    return scores


def score_boundaries_directly(
    model: Any, sequence: Sequence[int], boundaries: Sequence[int], answer: PseudoAnswer
) -> list[float]:
    """b at each boundary with one full forward of ``sequence[:boundary] + pseudo-answer`` per boundary."""
    import torch

    _check(sequence, boundaries)
    device = next(model.parameters()).device
    scores = []
    with torch.no_grad():
        for boundary in boundaries:
            ids = torch.tensor([list(sequence[:boundary]) + list(answer.token_ids)], device=device)
            logits = model(input_ids=ids).logits[0, boundary - 1 : -1]
            scores.append(_answer_score(logits, answer))
    return scores


def _check(sequence: Sequence[int], boundaries: Sequence[int]) -> None:
    for boundary in boundaries:
        if not 1 <= boundary <= len(sequence):
            raise ValueError(f"boundary {boundary} is outside a sequence of {len(sequence)} tokens")
