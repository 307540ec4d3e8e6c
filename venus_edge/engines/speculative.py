"""Speculative decoding's drafters and the rule that decides how many tokens to draft.

A drafter proposes the tokens it expects next; the engine verifies them in one ``llama_decode`` of the pending token
and the draft, samples the target model at every verified position with its own sampler chain, and keeps the
drafted tokens up to the first one the target did not sample (``venus_edge.engines.decode``). Every drafter here
is deterministic (given the context it proposes one sequence), so sampling the target at a position and comparing
with the drafted token is the accept/reject rule of Leviathan et al. 2023 ("Fast Inference from Transformers via
Speculative Decoding", Algorithm 1) and Chen et al. 2023 ("Accelerating Large Language Model Decoding with
Speculative Sampling", Algorithm 2) for a draft distribution that is a point mass on the drafted token t: accept t
with probability min(1, p(t) / 1) = p(t), and on rejection sample from norm(max(0, p - q)), which is p with t
removed and renormalized. The output keeps the target distribution exactly; with the same seed it is the same
text, since the sampler draws once per emitted token either way.

Two drafters:

- ``PromptLookup``: n-gram lookup in the session's own tokens (prompt, tool results, earlier turns): the last
  ``ngram`` tokens are looked up where they occurred before, and what followed them there is proposed (prompt
  lookup decoding, Saxena 2023; llama.cpp's ``common_ngram_cache``). Research turns copy names, URLs and quotes out
  of tool results; the visit extractor copies evidence out of the page.
- ``DraftModel``: a second, small GGUF with the same vocabulary, decoding greedily on a context of its own.

``DraftLength`` chooses the draft length per step from what verification costs on this machine (seconds of a
``llama_decode`` of n tokens against one, measured as the engine runs) and the acceptance seen so far: it drafts
k tokens only when the expected tokens per unit of time beat plain decoding, so drafting does not make a session
slower on a CPU where a batch of k tokens costs nearly k single tokens (compute-bound), and pays on one where it
costs little more than one (memory-bound: a laptop GPU, a phone).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from venus_edge.engines.base import shared_prefix_length

__all__ = ["DraftLength", "DraftModel", "Drafter", "ModelDrafter", "PromptLookup", "check_same_vocabulary",
           "expected_tokens"]

#: Tokens drafted per step at most (the verification batch is one more).
MAX_DRAFT = 16
#: Drafting must be expected to be this much faster than plain decoding: the cost and acceptance estimates are
#: noisy, and a guess that is slightly off must not make a session slower.
GAIN_MARGIN = 1.10


class Drafter(Protocol):
    """What the decode loop asks of a drafter. Calls come from the engine's decode thread, one call at a time.

    ``begin(context)`` starts a generation whose context so far is ``context`` (the prompt); ``extend(tokens)``
    says which tokens joined the context since (emitted tokens, in order); ``propose(n)`` returns up to ``n``
    tokens expected to follow the context, possibly none.
    """

    def begin(self, context: Sequence[int]) -> None: ...

    def extend(self, tokens: Sequence[int]) -> None: ...

    def propose(self, max_tokens: int) -> list[int]: ...

    #: Seconds a proposal of n tokens costs, relative to one target decode (0 for a lookup).
    def proposal_cost_s(self, n: int) -> float: ...


class PromptLookup:
    """Prompt-lookup drafting: propose what followed the latest earlier occurrence of the context's last ``ngram``
    tokens (falling back to shorter n-grams down to ``min_ngram``).

    The index maps each n-gram to the position after its latest occurrence; it is kept across calls while each new
    context extends the previous one (the agent's next turn appends to the last), and rebuilt otherwise. Indexing is
    O(new tokens) per call, a proposal O(1) plus its length.

    Args:
        ngram: tokens matched (the longest tried first); 3 by default (issue 27's measurement on DR-Venus's released
            rollouts: 1.59 tokens per verification step at draft length 8).
        min_ngram: the shortest n-gram tried.
    """

    def __init__(self, *, ngram: int = 3, min_ngram: int = 2) -> None:
        if not 1 <= min_ngram <= ngram:
            raise ValueError(f"need 1 <= min_ngram <= ngram, got {min_ngram} and {ngram}")
        self.ngram, self.min_ngram = ngram, min_ngram
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> position just after its latest occurrence

    def begin(self, context: Sequence[int]) -> None:
        shared = shared_prefix_length(self.tokens, context)
        if shared < len(self.tokens):  # the context is not an extension: start over
            self.tokens, self._index = [], {}
        self.extend(context[len(self.tokens):])

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(token)
            end = len(self.tokens)
            # Index the n-grams that end one token earlier, so the latest occurrence is never the context's own
            # tail (which has nothing after it yet).
            for n in range(self.min_ngram, self.ngram + 1):
                if end - 1 >= n:
                    self._index[tuple(self.tokens[end - 1 - n: end - 1])] = end - 1

    def propose(self, max_tokens: int) -> list[int]:
        tokens = self.tokens
        for n in range(self.ngram, self.min_ngram - 1, -1):
            if len(tokens) < n:
                continue
            start = self._index.get(tuple(tokens[-n:]))
            if start is not None:
                return tokens[start: start + max_tokens]
        return []

    def proposal_cost_s(self, n: int) -> float:
        return 0.0


class DraftModel:
    """A small GGUF that drafts for a larger one with the same vocabulary, greedily, on a llama.cpp context of its
    own (its KV cache shares nothing with the target's). ``drafter(n_ctx)`` makes one ``Drafter`` per target
    context (the agent's, the visit extractor's); the weights are loaded once.

    Args:
        path: the draft GGUF.
        n_threads: llama.cpp threads (the target's).
        gpu_layers: layers offloaded to the GPU (the target's; ``LlamaCppEngine``).

    Raises:
        ModelNotFoundError, ModelLoadError: as ``LlamaCppEngine``.
    """

    def __init__(self, path: str | os.PathLike[str], *, n_threads: int, gpu_layers: int = 0) -> None:
        from llama_cpp._logger import set_verbose

        from venus_edge.engines.llama_load import load_model
        from venus_edge.engines.vocab import Vocabulary
        from venus_edge.memory.header import check_gguf_file, read_model_header

        self.path = Path(path)
        check_gguf_file(self.path)
        read_model_header(self.path)  # its values bounded before llama.cpp sees them
        self.n_threads = n_threads
        set_verbose(False)
        self.model = load_model(self.path, gpu_layers=gpu_layers)
        self.vocabulary = Vocabulary(self.model, self.model.metadata())
        self._drafters: list[ModelDrafter] = []

    def drafter(self, n_ctx: int) -> ModelDrafter:
        """A drafter on a new context of ``n_ctx`` tokens (freed by ``close``)."""
        drafter = ModelDrafter(self, n_ctx)
        self._drafters.append(drafter)
        return drafter

    def close(self) -> None:
        for drafter in self._drafters:
            drafter.close()
        self._drafters.clear()
        self.model.close()


class ModelDrafter:
    """One context of a ``DraftModel``: keeps its KV cache in step with the target's context (prefix reuse, as the
    engine's own), evaluates what joined the context lazily, and drafts greedily."""

    def __init__(self, draft: DraftModel, n_ctx: int) -> None:
        import llama_cpp
        from llama_cpp import _internals

        from venus_edge.engines.llama_load import llama_diagnostics

        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = draft.n_threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        with llama_diagnostics(draft.path):
            self._ctx = _internals.LlamaContext(model=draft.model, params=params, verbose=False)
        self._llama = llama_cpp
        self._memory = llama_cpp.llama_get_memory(self._ctx.ctx)
        self._batch = llama_cpp.llama_batch_init(512, 0, 1)
        self._sampler = llama_cpp.llama_sampler_init_greedy()
        self.n_ctx = n_ctx
        self.context: list[int] = []  # the target's context as this drafter knows it
        self._kv: list[int] = []  # what this drafter's KV cache holds
        self._token_s = 0.0  # seconds per drafted token (moving average)
        self._closed = False

    def begin(self, context: Sequence[int]) -> None:
        self.context = list(context)

    def extend(self, tokens: Sequence[int]) -> None:
        self.context.extend(tokens)

    def propose(self, max_tokens: int) -> list[int]:
        llama_cpp = self._llama
        room = self.n_ctx - len(self.context) - 1
        max_tokens = min(max_tokens, room)
        if max_tokens < 1 or not self.context:
            return []
        keep = min(shared_prefix_length(self._kv, self.context), len(self.context) - 1)
        llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1)
        del self._kv[keep:]
        self._decode(self.context[keep:])  # catching up with the context: not a cost of drafting n tokens
        start = time.perf_counter()
        draft: list[int] = []
        while True:
            token = llama_cpp.llama_sampler_sample(self._sampler, self._ctx.ctx, -1)
            draft.append(token)
            if len(draft) >= max_tokens:
                break
            self._decode([token])
        if len(draft) > 0:
            per_token = (time.perf_counter() - start) / len(draft)
            self._token_s = per_token if self._token_s == 0 else 0.8 * self._token_s + 0.2 * per_token
        return draft

    def proposal_cost_s(self, n: int) -> float:
        return self._token_s * n

    def _decode(self, tokens: Sequence[int]) -> None:
        llama_cpp, batch = self._llama, self._batch
        for begin in range(0, len(tokens), 512):
            chunk = tokens[begin: begin + 512]
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, len(self._kv) + i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = i == len(chunk) - 1
            status = llama_cpp.llama_decode(self._ctx.ctx, batch)
            if status != 0:
                raise RuntimeError(f"the draft model's llama_decode returned {status}")
            self._kv.extend(chunk)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._llama.llama_sampler_free(self._sampler)
            self._llama.llama_batch_free(self._batch)
            self._ctx.close()


def check_same_vocabulary(target: Any, draft: Any, target_path: Path, draft_path: Path) -> None:
    """Refuse a draft model whose vocabulary differs from the target's: its token ids would mean other text.

    ``target`` and ``draft`` are ``venus_edge.engines.vocab.Vocabulary`` objects; every token's bytes are compared.

    Raises:
        ModelLoadError: the sizes differ, or a token id spells other bytes (the message names the first one).
    """
    from venus_edge.errors import ModelLoadError

    if target.n_vocab != draft.n_vocab:
        raise ModelLoadError(draft_path, f"as a draft model: its vocabulary has {draft.n_vocab:,} tokens and the "
                             f"model it would draft for ({target_path.name}) has {target.n_vocab:,}; a draft model "
                             "needs the same vocabulary (for DR-Venus-4B: a Qwen3 GGUF)")
    for token in range(target.n_vocab):
        if target.token_bytes(token) != draft.token_bytes(token):
            raise ModelLoadError(draft_path, f"as a draft model: token {token} is {draft.token_bytes(token)!r} in "
                                 f"it and {target.token_bytes(token)!r} in {target_path.name}; a draft model needs "
                                 "the same vocabulary")


def expected_tokens(acceptance: float, drafted: int) -> float:
    """Tokens one verification step emits on average when each drafted token is accepted with probability
    ``acceptance`` given the ones before it were: 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a) (Leviathan et al.
    2023, equation 1)."""
    if acceptance >= 1.0:
        return float(drafted + 1)
    return (1.0 - acceptance ** (drafted + 1)) / (1.0 - acceptance)


@dataclass
class DraftLength:
    """Chooses how many tokens to draft at each step, and learns what that costs and earns on this machine.

    Verification cost: seconds of each ``llama_decode`` of n tokens (n = 1 plain, 1 + k verifying k drafts), as a
    moving average per n; the cost of n tokens relative to one, ``cost_ratio(n)``, interpolates linearly between
    measured sizes and, beyond them, assumes n tokens cost n single ones (the compute-bound worst case) until
    measured. ``calibrate`` measures a few sizes at the start.

    Acceptance: the probability that a drafted token is accepted given the ones before it were, kept apart for
    steps right after a fully accepted draft ("hot": the model is copying a span) and the rest ("cold"), as counts
    with a prior of one accepted in two.

    A step drafts the k (0..max_draft) that maximizes expected tokens / relative time, ``expected_tokens(a, k) /
    (cost_ratio(k + 1) + proposal cost)``, among the k whose score beats plain decoding (which scores 1) by the
    factor ``GAIN_MARGIN``; none does: k = 0.
    Every ``explore_every`` plain steps on which a draft was available it drafts one token anyway, so that
    acceptance that has risen is seen.

    Raises:
        ValueError: ``max_draft`` outside 1..``MAX_DRAFT``, or ``fixed`` outside 0..``max_draft``.
    """

    max_draft: int = MAX_DRAFT
    explore_every: int = 32
    #: Draft exactly this many tokens whenever the drafter has them (a benchmark's or a test's fixed length);
    #: None: choose per step.
    fixed: int | None = None
    seconds: dict[int, float] = field(default_factory=dict)
    counts: dict[str, list[int]] = field(default_factory=lambda: {"hot": [1, 2], "cold": [1, 2]})
    hot: bool = False
    _since_draft: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.max_draft <= MAX_DRAFT:
            raise ValueError(f"max_draft must be in 1..{MAX_DRAFT}, got {self.max_draft}")
        if self.fixed is not None and not 0 <= self.fixed <= self.max_draft:
            raise ValueError(f"fixed draft length must be in 0..{self.max_draft}, got {self.fixed}")

    def cost_ratio(self, n: int) -> float:
        """Time of a ``llama_decode`` of ``n`` tokens / time of one token, from the measured sizes (interpolated
        between them, one token's time per token beyond the largest). Without a measurement of one token (a
        batched engine's steps hold several), one token costs the smallest measured batch's time per token: as
        the real cost of one token is at least that, this errs towards plain decoding."""
        if not self.seconds:
            return float(n)
        smallest = min(self.seconds)
        points = {1: self.seconds[smallest] / smallest, **self.seconds}
        one = points[1]
        if one <= 0:
            return float(n)
        if n in points:
            return points[n] / one
        below = max((m for m in points if m < n), default=1)
        above = min((m for m in points if m > n), default=None)
        if above is None:
            return points[below] / one + (n - below)
        low, high = points[below] / one, points[above] / one
        return low + (high - low) * (n - below) / (above - below)

    def acceptance(self) -> float:
        accepted, drafted = self.counts["hot" if self.hot else "cold"]
        return accepted / drafted

    def choose(self, available: int, proposal_cost: float = 0.0, *, batch: int = 1) -> int:
        """Tokens to draft now, given that the drafter can propose ``available`` and proposing one costs
        ``proposal_cost`` of a single target decode.

        ``batch``: tokens the step decodes without this draft (the batched engine: one per decoding sequence).
        The score is then the step's throughput against plain decoding, ``(batch - 1 + expected_tokens(a, k)) /
        batch`` tokens for ``cost_ratio(batch + k) / cost_ratio(batch)`` of the time; with ``batch`` 1 it is the
        single-sequence score above."""
        available = min(available, self.max_draft)
        if available <= 0:
            return 0
        if self.fixed is not None:
            return min(self.fixed, available)
        accept = self.acceptance()
        plain = self.cost_ratio(batch)
        best, best_score = 0, GAIN_MARGIN  # plain decoding scores 1; a draft length must beat it by the margin
        for k in range(1, available + 1):
            tokens = (batch - 1 + expected_tokens(accept, k)) / batch
            score = tokens / (self.cost_ratio(batch + k) / plain + proposal_cost * k)
            if score > best_score:
                best, best_score = k, score
        if best == 0:
            self._since_draft += 1
            if self._since_draft >= self.explore_every:
                best = 1
        if best > 0:
            self._since_draft = 0
        return best

    def record_decode(self, n_tokens: int, seconds: float) -> None:
        previous = self.seconds.get(n_tokens)
        self.seconds[n_tokens] = seconds if previous is None else 0.9 * previous + 0.1 * seconds

    def record_verification(self, drafted: int, accepted: int) -> None:
        """``accepted`` of ``drafted`` tokens were kept (the first rejection ends the count)."""
        if drafted <= 0:
            return
        counts = self.counts["hot" if self.hot else "cold"]
        # Each drafted token up to the first rejection was a trial; the rejected one too.
        counts[0] += accepted
        counts[1] += accepted + (1 if accepted < drafted else 0)
        if counts[1] > 400:  # forget slowly: halve the counts
            counts[0], counts[1] = max(1, counts[0] // 2), max(2, counts[1] // 2)
        self.hot = accepted == drafted

    def summary(self) -> dict[str, Any]:
        return {"cost_ratio": {n: round(self.cost_ratio(n), 3) for n in sorted(self.seconds)},
                "acceptance_hot": round(self.counts["hot"][0] / self.counts["hot"][1], 3),
                "acceptance_cold": round(self.counts["cold"][0] / self.counts["cold"][1], 3)}
