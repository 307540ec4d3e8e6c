"""What every engine shares, without loading any of them: the ``Engine`` protocol, ``SamplingParams``,
``Completion`` and ``GenerationStats``, the stop-string stream (``StopStream``), ``stream_generation``, the room
check (``room_left``) and the abilities ``TextCompleter`` and ``ThreadControl``.

This module imports neither llama.cpp nor torch, so code that only speaks to an engine (the agent loop, the
scripted test engine, the transformers engine of ``train/``) loads no backend. The engines themselves live
beside it: ``llama_cpp`` (in-process), ``batched`` (several sequences on one llama.cpp context), ``openai``
(an OpenAI-compatible server).

Usage:

    completion = engine.generate(ids, sampling=SamplingParams(max_tokens=64), stop=["<tool_response>"])
    for piece in stream_generation(engine, ids, sampling=GREEDY):
        print(piece, end="")
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from venus_edge.errors import ContextOverflowError, GenerationCancelled

__all__ = [
    "Completion", "Engine", "GenerationStats", "SamplingParams", "StopStream", "TextCompleter", "ThreadControl",
    "stream_generation",
]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings for one generation call.

    Defaults are the DR-Venus inference defaults (PROTOCOL.md, "Decoding and limits"; Inference/run_demo.py).

    Attributes:
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus mass kept.
        top_k: candidates kept before top_p.
        presence_penalty: subtracted once from the logit of every token already generated in this call (all of
            them, as vLLM does; not a window of the last 64 as llama-cpp-python's default).
        max_tokens: new tokens at most in this call.
        logprobs: also return each generated token's log-probability under the model (``Completion.logprobs``):
            the log-softmax of the raw logits, before penalties, temperature and truncation.
    """

    temperature: float = 1.0
    top_p: float = 0.95
    top_k: int = 20
    presence_penalty: float = 1.1
    max_tokens: int = 15_000
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0)


@dataclass(frozen=True)
class GenerationStats:
    """What one ``generate`` call cost.

    Attributes:
        prompt_tokens: tokens in the prompt.
        prompt_tokens_evaluated: prompt tokens run through the model in this call (prefill).
        prompt_tokens_reused: prompt tokens whose KV entries were kept from the previous call.
        tokens_decoded: tokens sampled (the end-of-generation token included).
        prefill_s: seconds from the call to the first sampled token.
        decode_s: seconds from the first sampled token to the end.
        drafted_tokens: tokens proposed by speculative decoding's drafter and verified (``venus_edge.engines.
            speculative``); 0 without drafting.
        accepted_tokens: drafted tokens the model kept (each one a token that cost no decode step of its own).
        verify_steps: decode steps of a call that drafted (each one ``llama_decode`` of the pending token and its
            draft, if any); 0 without drafting.
    """

    prompt_tokens: int
    prompt_tokens_evaluated: int
    prompt_tokens_reused: int
    tokens_decoded: int
    prefill_s: float
    decode_s: float
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int = 0

    @property
    def decode_tokens_per_s(self) -> float:
        """Decode speed; the first token belongs to prefill, so it is left out."""
        return (self.tokens_decoded - 1) / self.decode_s if self.tokens_decoded > 1 and self.decode_s > 0 else 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens_evaluated / self.prefill_s if self.prefill_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "decode_tokens_per_s": round(self.decode_tokens_per_s, 3)}


FinishReason = Literal["stop", "eog", "length", "cancelled"]


@dataclass(frozen=True)
class Completion:
    """The result of one ``generate`` call.

    Attributes:
        text: generated text, cut before the stop string that ended it.
        token_ids: generated token ids, end-of-generation token excluded.
        finish_reason: ``stop`` (a stop string), ``eog`` (end-of-generation token), ``length``, or ``cancelled``
            (``on_text`` raised ``GenerationCancelled``).
        stop_string: the stop string met, if any.
        stats: timing and KV-cache figures.
        logprobs: with ``SamplingParams.logprobs``, the log-probability of each of ``token_ids`` (natural log).
        end_token: the sampled token that ended generation and is not in ``token_ids`` (an end-of-generation
            token, or a stop string the vocabulary holds as one token), where the engine saw it; None otherwise.
            RL rollouts train on it.
        end_logprob: its log-probability, with ``SamplingParams.logprobs`` and where the engine has it.
    """

    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    stop_string: str | None
    stats: GenerationStats
    logprobs: list[float] | None = None
    end_token: int | None = None
    end_logprob: float | None = None


TokenCallback = Callable[[str], None]
#: Called with the text generated before a stop string met as text; False means that occurrence is text, not a stop.
StopTextRule = Callable[[str], bool]


class Engine(Protocol):
    """What the agent needs from a model. ``LlamaCppEngine`` is the runtime's; training plugs in others.

    Stop semantics every engine follows: a stop string that the vocabulary holds as one token (an added token
    such as Qwen3's ``<tool_response>``) stops generation only when that token is sampled, never when the same
    characters are spelled by other tokens; any other stop string stops on the text, where ``stop_text_if``
    (when given) accepts the text before it. The stop token or string is not part of the completion.

    ``on_text`` receives the text as it is decoded, whole characters only, never a stop string; when it raises
    ``GenerationCancelled`` the engine stops at that token and returns with ``finish_reason == "cancelled"``
    (feeding the text through a ``StopStream`` gives both). An engine that evaluates a long prompt in batches may
    call ``on_text("")`` between them and once after the prompt (``StopStream.poll``; ``LlamaCppEngine`` and the
    batched engine do, the OpenAI engine does not): no text, a point at which to cancel, so that a cancel does
    not wait for the whole prompt (minutes of prefill for a 4B model on a CPU). ``stream_generation`` turns any
    engine's ``generate`` into an iterator of text pieces.

    Abilities are declared, not probed: ``concurrent_rollouts`` says whether several agents may call ``generate``
    at the same time (a model server batches concurrent requests; an in-process context decodes one at a time).
    """

    @property
    def concurrent_rollouts(self) -> bool: ...

    @property
    def n_ctx(self) -> int: ...

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]: ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...

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
    ) -> Completion: ...

    def model_info(self) -> dict[str, Any]: ...


_END_OF_STREAM = object()


def stream_generation(
    engine: Engine, prompt_ids: Sequence[int], *, cancel: threading.Event | None = None, **generate_args: Any
) -> Generator[str, None, Completion]:
    """``engine.generate(prompt_ids, **generate_args)`` as a generator of text pieces, yielded as they are decoded;
    its return value (``StopIteration.value``, or ``yield from``) is the ``Completion``.

    The generation runs on a thread of its own. Setting ``cancel``, or closing the generator (a consumer that
    leaves early), stops it at its next token (``GenerationCancelled`` through ``on_text``; ``finish_reason`` is
    then ``cancelled``); closing waits for the engine to be free again. Errors of ``generate`` are raised here.
    """
    pieces: queue.SimpleQueue[Any] = queue.SimpleQueue()
    stopped = threading.Event()
    outcome: dict[str, Any] = {}

    def on_text(text: str) -> None:
        if stopped.is_set() or (cancel is not None and cancel.is_set()):
            raise GenerationCancelled("the generation was cancelled")
        if text:  # "" is an engine asking whether to go on (StopStream.poll)
            pieces.put(text)

    def work() -> None:
        try:
            outcome["completion"] = engine.generate(prompt_ids, on_text=on_text, **generate_args)
        except BaseException as exc:  # handed to the consumer, raised there
            outcome["error"] = exc
        finally:
            pieces.put(_END_OF_STREAM)

    thread = threading.Thread(target=work, name="generate", daemon=True)
    thread.start()
    try:
        while (piece := pieces.get()) is not _END_OF_STREAM:
            yield piece
    finally:
        stopped.set()
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    completion: Completion = outcome["completion"]
    return completion


def shared_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common prefix of two token sequences (what a KV cache holding ``a`` can keep of ``b``)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def room_left(prompt_tokens: int, n_ctx: int) -> int:
    """Tokens left for generation after a prompt of ``prompt_tokens`` in a window of ``n_ctx`` tokens: every
    engine's check before it generates (``max_tokens`` is then capped by it).

    Raises:
        ContextOverflowError: the prompt is empty or leaves no room for a single new token.
    """
    room = n_ctx - prompt_tokens
    if room < 1 or prompt_tokens == 0:
        raise ContextOverflowError(prompt_tokens, n_ctx, "raise {n_ctx} or use the force-answer {context_policy}")
    return room


@runtime_checkable
class TextCompleter(Protocol):
    """An engine's ability to complete a short chat and return the text (``visit``'s evidence, a judge, answer
    aggregation).

    Satisfied by ``LlamaCppEngine`` (on a second context that shares the weights) and ``OpenAIEngine``.
    ``messages`` are ``{"role": ..., "content": ...}`` dicts; the return value is the assistant text with any
    reasoning block removed. The tool layer declares the same shape as a protocol of its own
    (``venus_edge.tools.base.TextCompleter``), so that it imports no engine.
    """

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str: ...


@runtime_checkable
class ThreadControl(Protocol):
    """An engine's ability to change its CPU decode threads between calls (pacing a hot device,
    ``venus_edge.pacing``).

    Satisfied by ``LlamaCppEngine`` (``llama_set_n_threads`` on its contexts) and the scripted test engine; not by a
    model server (its threads are the server's) nor by the sequences of a batched engine (one context serves them
    all). ``n_threads`` is the count in use now.
    """

    @property
    def n_threads(self) -> int: ...

    def set_threads(self, n_threads: int) -> None: ...


@dataclass
class StopStream:
    """Accumulates decoded text, finds text stop strings, and streams only text that cannot start one; every
    engine's decode loop feeds its pieces through one (``Engine``'s stop semantics).

    An occurrence that ``accept`` rejects (given the text before it) is text; it is judged once. When ``on_text``
    raises ``GenerationCancelled`` the stream is ``cancelled``: ``feed`` returns True (end the generation), nothing
    more is passed on, and ``text`` ends with the last piece ``on_text`` took.
    """

    stops: Sequence[str]
    on_text: TokenCallback | None
    accept: StopTextRule | None = None
    text: str = ""
    emitted: int = 0
    stop_hit: str | None = None
    cancelled: bool = False
    _longest: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._longest = max((len(s) for s in self.stops), default=0)

    def feed(self, piece: str) -> bool:
        """Add text; return True when a stop string has been met (the text is then cut before it)."""
        before = len(self.text)
        self.text += piece
        # Occurrences that end in the new piece; older ones were judged already.
        hits = sorted(
            (pos, stop)
            for stop in self.stops
            for pos in _occurrences(self.text, stop, max(0, before - len(stop) + 1))
        )
        for pos, stop in hits:
            if self.accept is None or self.accept(self.text[:pos]):
                self.stop_hit, self.text = stop, self.text[:pos]
                self.flush()
                return True
        held = max((n for s in self.stops for n in range(len(s) - 1, 0, -1) if self.text.endswith(s[:n])), default=0)
        self._emit(len(self.text) - held)
        return self.cancelled

    @property
    def finish_reason(self) -> FinishReason:
        """Why ``feed`` returned True: ``cancelled`` or ``stop``."""
        return "cancelled" if self.cancelled else "stop"

    def flush(self) -> None:
        self._emit(len(self.text))

    def poll(self) -> bool:
        """Ask ``on_text`` whether to go on while no text comes (a prompt being evaluated): it is called with ``""``
        and may raise ``GenerationCancelled``; True when the stream is cancelled."""
        if self.on_text is not None and not self.cancelled:
            try:
                self.on_text("")
            except GenerationCancelled:
                self.cancelled = True
        return self.cancelled

    def _emit(self, upto: int) -> None:
        if upto > self.emitted:
            if self.on_text is not None and not self.cancelled:
                try:
                    self.on_text(self.text[self.emitted: upto])
                except GenerationCancelled:  # the text ends with what the consumer took
                    self.cancelled, self.text = True, self.text[: self.emitted]
                    return
            self.emitted = upto


def _occurrences(text: str, needle: str, start: int) -> list[int]:
    positions = []
    while (pos := text.find(needle, start)) != -1:
        positions.append(pos)
        start = pos + 1
    return positions
