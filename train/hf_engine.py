"""A transformers model behind the runtime's ``Engine`` protocol, token in and token out, for RL rollouts.

The agent loop sends token ids and gets token ids back; the engine samples from the model's distribution, keeps the
log-probability of every sampled token (end-of-turn and stop tokens included) and records each call, so that the
training sequence is built from the exact ids the policy produced, never re-tokenized from text
(``igpo_rollout.assemble``). The KV cache of the previous call is reused up to the shared prefix, as llama.cpp does.

The runtime never imports this module (it needs torch); it lives in ``train/``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from venus_edge.engines.base import (
    Completion,
    FinishReason,
    GenerationStats,
    SamplingParams,
    StopStream,
    StopTextRule,
    TokenCallback,
    room_left,
)
from venus_edge.protocol import IM_END

__all__ = ["GenerationCall", "TransformersEngine"]


@dataclass(frozen=True)
class GenerationCall:
    """One ``generate`` call as the policy made it.

    Attributes:
        prompt_ids: the context, exactly as sent.
        sampled_ids: every sampled token, the one that ended generation (end of turn, stop token) included.
        logprobs: the policy's log-probability of each sampled token (log-softmax of the raw logits, natural log).
    """

    prompt_ids: tuple[int, ...]
    sampled_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


class TransformersEngine:
    """``Engine`` over a transformers causal LM and its tokenizer.

    Args:
        model: a causal LM (its own device and dtype; sampled without gradient).
        tokenizer: its Hugging Face tokenizer (ChatML added tokens as single tokens).
        n_ctx: the context limit in tokens the agent budgets against.

    Attributes:
        calls: every ``generate`` call since the last ``reset_calls()``, in order.
    """

    #: One KV cache, one rollout at a time (``Engine.concurrent_rollouts``).
    concurrent_rollouts = False

    def __init__(self, model: Any, tokenizer: Any, *, n_ctx: int = 8192) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._n_ctx = n_ctx
        self.calls: list[GenerationCall] = []
        vocab = tokenizer.get_vocab()
        self._end_ids = {vocab[t] for t in (IM_END, "<|endoftext|>") if t in vocab}
        if tokenizer.eos_token_id is not None:
            self._end_ids.add(int(tokenizer.eos_token_id))
        self._vocab = vocab
        from venus_edge.train.igpo_scoring import cache_keyword

        self._cache_argument = cache_keyword(model)  # read once: the decode loop passes it every token
        self._cache: Any = None
        self._cached_ids: list[int] = []
        self._last_logits: Any = None

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=not parse_special)["input_ids"])

    def detokenize(self, token_ids: Sequence[int]) -> str:
        text: str = self.tokenizer.decode(list(token_ids), skip_special_tokens=False,
                                          clean_up_tokenization_spaces=False)
        return text

    def model_info(self) -> dict[str, Any]:
        config = self.model.config
        return {"engine": "transformers", "model": getattr(config, "_name_or_path", "") or type(self.model).__name__,
                "n_ctx": self._n_ctx, "dtype": str(next(self.model.parameters()).dtype)}

    def reset_calls(self) -> list[GenerationCall]:
        """Return the recorded calls and start a new record (one rollout's worth)."""
        calls, self.calls = self.calls, []
        return calls

    def forget_cache(self) -> None:
        """Drop the KV cache (the weights changed: cached keys and values are stale)."""
        self._cache, self._cached_ids, self._last_logits = None, [], None

    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        sampling: SamplingParams,
        stop: Sequence[str] = (),
        stop_text_if: StopTextRule | None = None,
        grammar: str | None = None,
        on_text: TokenCallback | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Sample a completion (``Engine.generate``); a grammar is not supported (rollouts are unconstrained).

        Raises:
            ContextOverflowError: the prompt leaves no room in ``n_ctx``.
            ValueError: a grammar was given.
        """
        import torch

        if grammar is not None:
            raise ValueError("TransformersEngine samples without a grammar: RL rollouts are unconstrained")
        prompt = list(prompt_ids)
        room = room_left(len(prompt), self._n_ctx)
        device = next(self.model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(seed if seed is not None else 0)
        start = time.perf_counter()
        try:
            return self._generate(prompt, room, sampling, stop, stop_text_if, on_text, generator, start)
        except BaseException:
            self.forget_cache()  # a forward that failed part-way leaves the cache in an unknown state
            raise

    def _generate(self, prompt: list[int], room: int, sampling: SamplingParams, stop: Sequence[str],
                  stop_text_if: StopTextRule | None, on_text: TokenCallback | None, generator: Any,
                  start: float) -> Completion:
        import torch

        reused = self._prefill(prompt)
        first = time.perf_counter()
        stop_ids = {self._vocab[text]: text for text in stop if text in self._vocab}
        stream = StopStream([text for text in stop if text not in stop_ids], on_text, stop_text_if)
        max_tokens = min(sampling.max_tokens, room)
        sampled: list[int] = []
        logprobs: list[float] = []
        finish: FinishReason = "length"
        text = ""
        with torch.no_grad():
            logits = self._last_logits
            while True:
                token, logprob = _sample(logits, sampling, sampled, generator)
                sampled.append(token)
                logprobs.append(logprob)
                if token in self._end_ids:
                    finish = "eog"
                    break
                if token in stop_ids:
                    finish, stream.stop_hit = "stop", stop_ids[token]
                    break
                decoded = self.detokenize(sampled)
                if not decoded.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for its next byte
                    if stream.feed(decoded[len(text):]):
                        finish = stream.finish_reason
                        text = decoded
                        break
                    text = decoded
                if len(sampled) >= max_tokens:
                    break
                logits = self._step(token)
        kept = sampled if finish in ("length", "stop") and stream.stop_hit not in stop_ids.values() else sampled[:-1]
        if finish != "stop" or stream.stop_hit in stop_ids.values():
            full = self.detokenize(kept)  # a character still incomplete at the end is written as U+FFFD
            if len(full) > len(text):
                stream.feed(full[len(text):])
            stream.flush()
        if stream.cancelled:  # also when the cancel came with the final flush
            finish = "cancelled"
        end = time.perf_counter()
        self.calls.append(GenerationCall(tuple(prompt), tuple(sampled), tuple(logprobs)))
        stats = GenerationStats(prompt_tokens=len(prompt), prompt_tokens_evaluated=len(prompt) - reused,
                                prompt_tokens_reused=reused, tokens_decoded=len(sampled), prefill_s=first - start,
                                decode_s=end - first)
        ended = len(kept) < len(sampled)
        return Completion(stream.text, kept, finish, stream.stop_hit, stats,
                          logprobs[:len(kept)] if sampling.logprobs else None, sampled[-1] if ended else None,
                          logprobs[-1] if ended and sampling.logprobs else None)

    # ------------------------------------------------------------------------------------------- KV cache
    def _prefill(self, prompt: list[int]) -> int:
        """Bring the cache to ``prompt`` (its last token's logits ready); returns the tokens reused."""
        import torch
        from transformers import DynamicCache

        shared = 0
        limit = min(len(prompt) - 1, len(self._cached_ids))  # the last prompt token is always run for its logits
        while shared < limit and self._cached_ids[shared] == prompt[shared]:
            shared += 1
        if self._cache is None or shared == 0:
            self._cache, self._cached_ids = DynamicCache(), []
            shared = 0
        elif len(self._cached_ids) > shared:
            self._cache.crop(shared - len(self._cached_ids))
            self._cached_ids = self._cached_ids[:shared]
        device = next(self.model.parameters()).device
        with torch.no_grad():
            chunk = torch.tensor([prompt[shared:]], device=device)
            out = self.model(input_ids=chunk, use_cache=True, logits_to_keep=1,
                             **{self._cache_argument: self._cache})
        self._cached_ids = list(prompt)
        self._last_logits = out.logits[0, -1]
        return shared

    def _step(self, token: int) -> Any:
        import torch

        device = next(self.model.parameters()).device
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([[token]], device=device), use_cache=True,
                             **{self._cache_argument: self._cache})
        self._cached_ids.append(token)
        return out.logits[0, -1]


def _sample(logits: Any, sampling: SamplingParams, generated: Sequence[int], generator: Any) -> tuple[int, float]:
    """One token from ``logits`` (presence penalty, temperature, top-k, top-p, as ``SamplingParams`` defines) and
    its log-probability under the raw distribution."""
    import torch

    raw = torch.log_softmax(logits.float(), dim=-1)
    scores = logits.float().clone()
    if sampling.presence_penalty and generated:
        scores[torch.tensor(sorted(set(generated)))] -= sampling.presence_penalty
    if sampling.temperature == 0:
        token = int(scores.argmax())
        return token, float(raw[token])
    scores = scores / sampling.temperature
    if sampling.top_k and sampling.top_k < scores.shape[0]:
        threshold = torch.topk(scores, sampling.top_k).values[-1]
        scores = scores.masked_fill(scores < threshold, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        outside = torch.cumsum(ordered, dim=-1) - ordered > sampling.top_p
        probs = probs.clone()
        probs[order[outside]] = 0.0
        probs = probs / probs.sum()
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(raw[token])
