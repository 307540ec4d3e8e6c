"""The native decode loop of the in-process engines: llama.cpp's sampler chain driven through the low-level API,
with optional speculative decoding (``venus_edge.engines.speculative``).

Per emitted token the Python work is one ``llama_sampler_sample`` (the chain samples from the context's logits in
C: no copy of the logits row into Python), one ``llama_decode`` of the token (or of the token and a draft), and the
stop and stream checks. Log-probabilities are computed only when asked for.

The sampler chain is the one llama-cpp-python builds for ``Llama.generate`` (``Llama._init_sampler`` in
llama_cpp/llama.py 0.3.36), with the same order and arguments, so the same seed gives the same text as before:
the presence penalty over the whole turn (penalty window = ``max_tokens``, as vLLM applies it; PROTOCOL.md,
"Decoding and limits"), the grammar, then greedy, or top-k, typical (1.0: off), top-p, min-p (0.0: off),
temperature and a draw seeded with the call's seed.

With a drafter, each step feeds the pending token and up to k drafted tokens in one ``llama_decode`` with logits at
every position, samples the chain at each position in order, and keeps drafted tokens while they equal what was
sampled; the first sampled token that differs is the next pending token, and the KV cache is cut back past it
(``llama_memory_seq_rm``). The chain samples (and accepts into its penalty and grammar state) exactly the emitted
tokens, in order, as without drafts, so the output is the target model's (module docstring of ``speculative``).
"""

from __future__ import annotations

import codecs
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from venus_edge.engines.base import (
    Completion,
    FinishReason,
    GenerationStats,
    SamplingParams,
    StopStream,
    StopTextRule,
    TokenCallback,
    room_left,
    shared_prefix_length,
)
from venus_edge.engines.prompt_cache import PromptCache
from venus_edge.engines.speculative import Drafter, DraftLength
from venus_edge.engines.vocab import Vocabulary

__all__ = ["KVContext", "decode_loop", "sampler_chain"]


def sampler_chain(vocab: Any, sampling: SamplingParams, *, grammar: str | None, seed: int,
                  penalty_window: int) -> Any:
    """A llama.cpp sampler chain for ``sampling`` (module docstring): free it with ``llama_sampler_free``.

    Args:
        vocab: the model's ``llama_vocab`` pointer.
        grammar: GBNF text with a ``root`` rule, or None.
        seed: the draw's seed (only the low 32 bits are used, as llama.cpp's ``uint32_t``).
        penalty_window: tokens the presence penalty looks back over (the call's ``max_tokens``).

    Raises:
        ValueError: llama.cpp cannot parse the grammar.
    """
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    add(chain, llama_cpp.llama_sampler_init_penalties(n_vocab, penalty_window, 1.0, 0.0, sampling.presence_penalty))
    if grammar:
        compiled = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not compiled:
            llama_cpp.llama_sampler_free(chain)
            raise ValueError("llama.cpp could not parse the grammar")
        add(chain, compiled)
    if sampling.temperature == 0:
        add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    add(chain, llama_cpp.llama_sampler_init_top_k(sampling.top_k))
    add(chain, llama_cpp.llama_sampler_init_typical(1.0, 1))
    add(chain, llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
    add(chain, llama_cpp.llama_sampler_init_min_p(0.0, 1))
    add(chain, llama_cpp.llama_sampler_init_temp(sampling.temperature))
    add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


class KVContext:
    """One llama.cpp context (sequence 0) and the tokens its KV cache holds, as a ``llama_cpp.Llama`` keeps them
    (``input_ids[:n_tokens]``; ``venus_edge.engines.prompt_cache`` reads and writes the same fields).

    Args:
        llm: the ``Llama`` (or a ``_HelperContext`` clone) whose context, batch and token record are used.
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.ctx = llm._ctx.ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llm._batch.batch
        self.n_batch: int = llm.n_batch
        self.n_vocab: int = llm._n_vocab

    @property
    def n_ctx(self) -> int:
        """The usable window: llama.cpp may round the context up; the token record keeps the requested size."""
        return min(int(llama_cpp.llama_n_ctx(self.ctx)), len(self.llm.input_ids))

    @property
    def tokens(self) -> list[int]:
        return [int(t) for t in self.llm.input_ids[: self.llm.n_tokens]]

    def reusable_prefix(self, prompt: Sequence[int]) -> int:
        """Prompt tokens whose KV entries can stay: the prefix shared with the cache, less one when that is the
        whole prompt (its last token is evaluated again for fresh logits)."""
        return min(shared_prefix_length(self.llm.input_ids[: self.llm.n_tokens].tolist(), prompt), len(prompt) - 1)

    def truncate(self, n_tokens: int) -> None:
        """Drop the KV entries from position ``n_tokens`` on."""
        if n_tokens < self.llm.n_tokens:
            llama_cpp.llama_memory_seq_rm(self.memory, -1, n_tokens, -1)
            self.llm.n_tokens = n_tokens
        self.llm._requires_eval = True

    def evaluate(self, tokens: Sequence[int], *, all_logits: bool = False,
                 stop: Callable[[], bool] | None = None) -> float:
        """Append ``tokens`` to the KV cache (``n_batch`` at a time), with logits for the last one, or for every
        one with ``all_logits`` (then ``tokens`` must fit in one batch). Returns the seconds ``llama_decode`` took.
        ``stop`` is asked before each batch after the first; when it says True the rest is left out (the KV cache
        holds the batches evaluated: ``llm.n_tokens`` says how many tokens).

        Raises:
            RuntimeError: llama.cpp refused the batch (``llama_decode`` status; 1: no room in the KV cache).
        """
        batch, spent = self.batch, 0.0
        for begin in range(0, len(tokens), self.n_batch):
            if begin and stop is not None and stop():
                break
            chunk = tokens[begin: begin + self.n_batch]
            n_past = self.llm.n_tokens
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, n_past + i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = all_logits or i == len(chunk) - 1
            start = time.perf_counter()
            status = llama_cpp.llama_decode(self.ctx, batch)
            spent += time.perf_counter() - start
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status} at position {n_past} of {self.n_ctx}")
            self.llm.input_ids[n_past: n_past + len(chunk)] = chunk
            self.llm.n_tokens = n_past + len(chunk)
        self.llm._requires_eval = False
        return spent

    def logprob(self, row: int, token: int) -> float:
        """log softmax(logits of batch row ``row``)[token], natural log, before penalties and temperature."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,))
        top = float(logits.max())
        return float(logits[token]) - top - math.log(float(np.exp(logits - top, dtype=np.float64).sum()))


class _Emitter:
    """The checks every emitted token goes through: end of generation, stop tokens, stop text, length, cancel."""

    def __init__(self, vocabulary: Vocabulary, stream: StopStream, stop_ids: dict[int, str], max_tokens: int,
                 cancel: threading.Event | None, logprobs: bool) -> None:
        self.vocabulary, self.stream, self.stop_ids = vocabulary, stream, stop_ids
        self.max_tokens, self.cancel = max_tokens, cancel
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.token_ids: list[int] = []
        self.logprobs: list[float] | None = [] if logprobs else None
        self.finish: FinishReason = "length"
        self.sampled = 0

    def emit(self, token: int, logprob: float | None) -> bool:
        """Take one sampled token; True when the generation ends with it."""
        self.sampled += 1
        if self.vocabulary.is_end_of_generation(token):
            self.finish = "eog"
            return True
        if token in self.stop_ids:
            self.finish, self.stream.stop_hit = "stop", self.stop_ids[token]
            return True
        self.token_ids.append(token)
        if self.logprobs is not None and logprob is not None:
            self.logprobs.append(logprob)
        if self.stream.feed(self.decoder.decode(self.vocabulary.token_bytes(token))):
            self.finish = self.stream.finish_reason
            return True
        return len(self.token_ids) >= self.max_tokens or (self.cancel is not None and self.cancel.is_set())

    def close(self) -> None:
        stream = self.stream
        if self.finish != "stop" or stream.stop_hit in self.stop_ids.values():
            stream.feed(self.decoder.decode(b"", final=True))
            stream.flush()
        if stream.cancelled:  # also when the cancel came with the final flush
            self.finish = "cancelled"


def decode_loop(
    vocabulary: Vocabulary,
    context: KVContext,
    prompt_ids: Sequence[int],
    sampling: SamplingParams,
    *,
    stop: Sequence[str] = (),
    stop_text_if: StopTextRule | None = None,
    grammar: str | None = None,
    on_text: TokenCallback | None = None,
    seed: int = 0,
    cancel: threading.Event | None = None,
    prompt_cache: PromptCache | None = None,
    drafter: Drafter | None = None,
    draft_length: DraftLength | None = None,
) -> Completion:
    """Generate a continuation of ``prompt_ids`` on ``context`` (its KV cache is reused and left holding the prompt
    and the emitted tokens but the last, as plain decoding leaves it).

    Args:
        prompt_cache: restores the prompt's stable prefix from disk, or evaluates and saves it
            (``PromptCache.prepare``); tokens it restored count as reused, tokens it evaluated as evaluated.
        drafter, draft_length: speculative decoding (module docstring); ``draft_length`` decides k per step.
        Other arguments: ``Engine.generate``'s.

    Raises:
        ContextOverflowError: the prompt leaves no room for a single new token.
        ValueError: llama.cpp cannot parse the grammar.
        RuntimeError: ``llama_decode`` failed.
    """
    prompt_ids = list(prompt_ids)
    room = room_left(len(prompt_ids), context.n_ctx)
    max_tokens = min(sampling.max_tokens, room)
    stop_ids = {token: text for text in stop if (token := vocabulary.single_token_id(text)) is not None}
    stream = StopStream([text for text in stop if text not in stop_ids.values()], on_text, stop_text_if)
    emitter = _Emitter(vocabulary, stream, stop_ids, max_tokens, cancel, sampling.logprobs)
    start = time.perf_counter()
    reused = not_evaluated = context.reusable_prefix(prompt_ids)
    if prompt_cache is not None:
        not_evaluated = prompt_cache.prepare(prompt_ids, reused)
        reused = context.reusable_prefix(prompt_ids)
    context.truncate(reused)
    chain = sampler_chain(vocabulary._vocab, sampling, grammar=grammar, seed=seed, penalty_window=max_tokens)
    drafted = accepted = steps = 0
    try:
        def stopped() -> bool:  # a cancel while the prompt is evaluated: the engine closing, or the consumer's
            return (cancel is not None and cancel.is_set()) or stream.poll()

        context.evaluate(prompt_ids[reused:], stop=stopped)
        evaluated_to = min(context.llm.n_tokens, len(prompt_ids))
        first = time.perf_counter()
        done = context.llm.n_tokens < len(prompt_ids) or stopped()
        token = -1  # the pending token: none until one is sampled
        if done:  # nothing sampled; the KV cache keeps the prompt's batches evaluated, for the next call to reuse
            emitter.finish = "cancelled"
        else:
            if drafter is not None:
                drafter.begin(prompt_ids)
            token = llama_cpp.llama_sampler_sample(chain, context.ctx, -1)
            done = emitter.emit(token, context.logprob(-1, token) if sampling.logprobs else None)
        while not done:
            # room: the pending token and the draft must fit in the window and in one batch
            space = min(context.n_ctx - context.llm.n_tokens - 1, context.n_batch - 1,
                        max_tokens - len(emitter.token_ids))
            draft: list[int] = []
            if drafter is not None:
                drafter.extend([token])  # the pending token joins the context the drafter continues
                if draft_length is not None and space > 0:
                    one = draft_length.seconds.get(1)
                    want = draft_length.choose(space, drafter.proposal_cost_s(1) / one if one else 0.0)
                    draft = drafter.propose(want) if want > 0 else []
            spent = context.evaluate([token, *draft], all_logits=bool(draft))
            steps += 1
            if draft_length is not None:
                draft_length.record_decode(1 + len(draft), spent)
            kept = 0
            for row in range(len(draft) + 1):
                sampled = llama_cpp.llama_sampler_sample(chain, context.ctx, row if draft else -1)
                done = emitter.emit(sampled, context.logprob(row if draft else -1, sampled)
                                    if sampling.logprobs else None)
                matched = row < len(draft) and sampled == draft[row]
                if matched:
                    kept += 1
                token = sampled
                if done or not matched:
                    break
            if draft:
                drafted += len(draft)
                accepted += kept
                if draft_length is not None:
                    draft_length.record_verification(len(draft), kept)
                if drafter is not None:
                    drafter.extend(draft[:kept])  # emitted; the token sampled after them is the next pending one
                # The KV cache keeps the pending token and the accepted drafts; the rest goes.
                context.truncate(context.llm.n_tokens - len(draft) + kept)
    finally:
        llama_cpp.llama_sampler_free(chain)
    # Plain decoding leaves the prompt and every emitted token but the last in the KV cache; so does this.
    context.truncate(min(len(prompt_ids) + emitter.sampled - 1, context.llm.n_tokens))
    emitter.close()
    end = time.perf_counter()
    stats = GenerationStats(
        prompt_tokens=len(prompt_ids),
        prompt_tokens_evaluated=evaluated_to - min(reused, not_evaluated),
        prompt_tokens_reused=min(reused, not_evaluated),
        tokens_decoded=emitter.sampled,
        prefill_s=first - start,
        decode_s=end - first,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        verify_steps=steps if drafted else 0,
    )
    return Completion(stream.text, emitter.token_ids, emitter.finish, stream.stop_hit, stats, emitter.logprobs)
