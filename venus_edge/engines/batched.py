"""``BatchedLlamaCppEngine``: N sequences decoded together in one llama.cpp context, for test-time scaling (N
rollouts of a question) and the server.

One model, one context whose KV cache holds N sequences (``kv_unified``: the sequences share its cells). Each
sequence is an ``Engine`` of its own (``sequence(i)``), which an agent drives from its own thread; a scheduler
thread gathers what every sequence needs and runs it as one ``llama_decode``: one token for each sequence that is
decoding, plus prompt chunks of sequences that are prefilling, up to ``n_batch`` tokens. One read of the weights
then serves every sequence's token, so N sequences cost less than N sequential rollouts (how much less depends on
the cores; TEST_MODELS.md measures 1.2-1.7x aggregate tokens/s at N = 2-8 on 2 cores).

A prompt is compared with what the KV cache already holds for its own sequence and for the others: the longest
shared prefix is kept (its own) or copied (another sequence's, ``llama_memory_seq_cp``, which with a unified cache
only marks the cells as shared), so the system prompt and question of N rollouts are prefilled once. A request
whose prefix another sequence is prefilling right now waits for it, then copies it.

Each sequence samples with its own llama.cpp sampler chain (``decode.sampler_chain``: the presence penalty over its
turn, grammar, top-k, top-p, temperature, its own seed), as ``LlamaCppEngine`` does, and follows ``Engine``'s stop
rules. Visit's
completions (``complete``) run on one extra sequence, one at a time. A cancel (``on_text`` raising
``GenerationCancelled``) stops a sequence at its next token, a prompt at its next chunk (``StopStream.poll`` before
each), and a request still waiting for another sequence's prefix at once; the chunks evaluated stay cached.

With ``draft="lookup"`` each sequence drafts by prompt lookup in its own tokens (``speculative.PromptLookup``) and
the step verifies the drafts with everything else in the batch, as ``decode.decode_loop`` does for one sequence:
the sequence's pending token and its draft go in with logits on every row, its sampler chain samples each row in
turn while the sampled token equals the drafted one, and the KV cells past the accepted tokens are removed. Every
row is sampled as plain decoding would sample it, so the output keeps plain decoding's distribution (and, with a
seed, consumes the chain's random numbers in the same order). Each sequence keeps its own acceptance estimate; the
cost of a step by its token count is measured once for all (``DraftLength.choose(batch=...)``).

Usage::

    engine = BatchedLlamaCppEngine("model.gguf", n_seq=4, n_ctx=16384)
    agents = [Agent(engine.sequence(i), tools, config=replace(config, seed=i)) for i in range(4)]
    with ThreadPoolExecutor(4) as pool:              # one thread per agent; venus_edge.session.rollouts does this
        results = list(pool.map(lambda agent: agent.run(question), agents))
"""

from __future__ import annotations

import codecs
import math
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals
from llama_cpp._logger import set_verbose

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
from venus_edge.engines.decode import sampler_chain
from venus_edge.engines.llama_cpp import DEFAULT_HELPER_N_CTX
from venus_edge.engines.llama_load import check_gpu_layers, llama_diagnostics, load_model
from venus_edge.engines.speculative import DraftLength, PromptLookup
from venus_edge.engines.vocab import Vocabulary
from venus_edge.errors import ContextOverflowError, EngineStateError
from venus_edge.memory.header import ModelHeader, check_gguf_file, read_model_header
from venus_edge.memory.machine import check_threads, default_threads
from venus_edge.memory.plan import KVType, MemoryPlan, estimate_memory, refuse_beyond_machine
from venus_edge.protocol import render_chat_parts, tokenize_message

__all__ = ["BatchedLlamaCppEngine", "SequenceEngine"]


@dataclass(eq=False)  # a request is itself: ``active.remove`` must not compare prompts
class _Request:
    """One ``generate`` call of one sequence, from admission to its completion."""

    seq: int
    prompt: list[int]
    sampling: SamplingParams
    stop_ids: dict[int, str]
    stream: StopStream
    grammar: str | None
    seed: int
    max_tokens: int
    done: threading.Event = field(default_factory=threading.Event)
    result: Completion | None = None
    error: BaseException | None = None
    # scheduler state
    sampler: Any = None
    to_prefill: list[int] = field(default_factory=list)
    evaluated: int = 0  # prompt tokens evaluated (a cancel during the prefill leaves some not evaluated)
    reused: int = 0  # prompt tokens found in the KV cache at admission
    pending_token: int | None = None  # sampled, not yet in the KV cache
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    decoded: int = 0
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    started: float = field(default_factory=time.perf_counter)
    first: float = 0.0
    draft: list[int] = field(default_factory=list)  # proposed this step, verified after the decode
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0  # decode steps (each verifies the draft, if any, with the pending token)


class BatchedLlamaCppEngine:
    """N sequences of one llama.cpp model decoded in shared batches (see the module docstring).

    Args:
        model_path: a local GGUF file.
        n_seq: sequences (rollouts) decoded together; one more is kept for ``complete``.
        n_ctx: the KV cache's size in tokens, shared by all sequences; each sequence's window (``n_ctx`` of its
            handle) is this divided by ``n_seq`` (prefixes shared between sequences take no extra room).
        n_threads: CPU threads (default: the physical cores).
        n_batch: tokens per ``llama_decode`` at most (decode tokens first, then prompt chunks).
        kv_cache_f32: keep the KV cache in F32 (parity checks).
        draft: ``"lookup"``: speculative decoding by prompt lookup, each sequence in its own tokens (module
            docstring); None or ``"off"``: none. A draft model is the single-sequence engine's (``LlamaCppEngine``).
        draft_tokens: draft exactly this many tokens whenever a sequence has them (benchmarks, tests); None: the
            length adapts to this machine's cost of a batch and each sequence's acceptance.
        gpu_layers: layers on the GPU, as ``LlamaCppEngine``'s (-1 all, 0 none); with any, flash attention is on.
        helper_n_ctx: the window of the extra sequence that ``complete`` uses (visit's evidence), in KV cells of its
            own on top of ``n_ctx`` (default: ``LlamaCppEngine``'s helper window, at most a sequence's window). Its
            cells stay cached after a completion; sharing the sequences' cells, a long page read while every
            sequence was near its window filled the cache and failed every sequence's decode.

    Raises:
        ModelNotFoundError, ModelLoadError, MemoryPlanError: as ``LlamaCppEngine``.
        ValueError: as ``LlamaCppEngine``; a ``draft`` other than ``"lookup"``, ``"off"`` or None.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        n_seq: int,
        n_ctx: int = 8_192,
        n_threads: int | None = None,
        n_batch: int = 512,
        kv_cache_f32: bool = False,
        draft: str | None = None,
        draft_tokens: int | None = None,
        gpu_layers: int = 0,
        helper_n_ctx: int | None = None,
    ) -> None:
        check_gpu_layers(gpu_layers)
        if n_seq < 1:
            raise ValueError(f"n_seq must be >= 1, got {n_seq}")
        if draft not in (None, "off", "lookup"):
            raise ValueError(f"the batched engine drafts by prompt lookup only (draft='lookup'), got {draft!r}; a "
                             "draft model runs in the engine of one sequence (LlamaCppEngine)")
        self.draft = "lookup" if draft == "lookup" else None
        if draft_tokens is not None:
            DraftLength(fixed=draft_tokens)  # its bounds, before anything loads
        # One measured cost table (seconds by decode batch size) for all; each sequence its own acceptance.
        batch_seconds: dict[int, float] = {}
        self._drafters = [PromptLookup() for _ in range(n_seq + 1)] if self.draft else []
        self._draft_lengths = [DraftLength(fixed=draft_tokens, seconds=batch_seconds)
                               for _ in range(n_seq + 1)] if self.draft else []
        self.model_path = Path(model_path)
        check_gguf_file(self.model_path)
        self.n_seq = n_seq
        self.n_threads = n_threads or default_threads()
        check_threads(self.n_threads)
        self.n_batch = min(n_batch, n_ctx)
        self.helper_n_ctx = helper_window(n_ctx, n_seq) if helper_n_ctx is None else helper_n_ctx
        if self.helper_n_ctx < 1:
            raise ValueError(f"helper_n_ctx must be at least 1, got {self.helper_n_ctx}")
        header = read_model_header(self.model_path)  # its values bounded before llama.cpp sees them
        refuse_beyond_machine(header, self.memory_plan(
            header, n_seq=n_seq, n_ctx=n_ctx, helper_n_ctx=self.helper_n_ctx,
            kv_type="f32" if kv_cache_f32 else "f16", n_batch=self.n_batch, n_threads=self.n_threads))
        set_verbose(False)  # llama.cpp logs through llama-cpp-python's logger, as LlamaCppEngine(verbose=False) sets it
        self.gpu_layers = gpu_layers
        self._model = load_model(self.model_path, gpu_layers=gpu_layers)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx + self.helper_n_ctx, self.n_batch, self.n_batch
        params.n_seq_max, params.kv_unified = n_seq + 1, True
        params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if gpu_layers  # as LlamaCppEngine
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.n_threads = params.n_threads_batch = self.n_threads
        if kv_cache_f32:
            params.type_k = params.type_v = 0
        with llama_diagnostics(self.model_path):
            self._ctx = _internals.LlamaContext(model=self._model, params=params, verbose=False)
        self._memory = llama_cpp.llama_get_memory(self._ctx.ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, n_seq + 1)
        self._n_vocab = self._model.n_vocab()
        self.n_ctx_total = n_ctx
        self.vocabulary = Vocabulary(self._model, self._model.metadata())
        self._kv_tokens: list[list[int]] = [[] for _ in range(n_seq + 1)]  # what the cache holds, per sequence
        self._incoming: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()  # None: closed
        self._helper_lock = threading.Lock()
        self._closed = False
        self._scheduler = threading.Thread(target=self._run, name="batched-llama", daemon=True)
        self._scheduler.start()

    #: Several agents may drive this engine's sequences at the same time.
    concurrent_rollouts = True

    @staticmethod
    def memory_plan(header: ModelHeader, *, n_seq: int, n_ctx: int, helper_n_ctx: int | None = None,
                    kv_type: KVType = "f16", n_batch: int = 512, n_threads: int | None = None) -> MemoryPlan:
        """The resident memory of an engine of these settings (arguments as the constructor's): one KV cache of
        ``n_ctx`` cells for the sequences and ``helper_n_ctx`` for ``complete``'s (``estimate_memory``)."""
        helper = helper_window(n_ctx, n_seq) if helper_n_ctx is None else helper_n_ctx
        return estimate_memory(header, n_ctx=n_ctx + helper, kv_type=kv_type, n_batch=min(n_batch, n_ctx),
                               n_threads=n_threads)

    def _window(self, seq: int) -> int:
        """The most tokens sequence ``seq`` may hold: its share of ``n_ctx``, or the helper's window."""
        return self.helper_n_ctx if seq == self.n_seq else self.n_ctx_total // self.n_seq

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return self.vocabulary.tokenize(text, parse_special=parse_special)

    def sequence(self, index: int) -> SequenceEngine:
        """The ``Engine`` of sequence ``index`` (0 <= index < n_seq); one agent at a time drives it."""
        if not 0 <= index < self.n_seq:
            raise ValueError(f"sequence {index} does not exist; this engine has {self.n_seq} (0..{self.n_seq - 1})")
        return SequenceEngine(self, index)

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        """Complete a short chat greedily on the extra sequence (visit's evidence, a judge); one at a time."""
        thinking = self.vocabulary.qwen
        ids = [token for head, content, tail in render_chat_parts(messages, open_reasoning=thinking)
               for token in tokenize_message(self.vocabulary.tokenize, head, content, tail)]
        sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=max_tokens)
        with self._helper_lock:
            text = self.submit(self.n_seq, ids, sampling, (), None, None, None, 0).text
        return text.split("</think>")[-1].strip() if thinking or "</think>" in text else text.strip()

    def model_info(self) -> dict[str, Any]:
        meta = self._model.metadata()
        return {"path": str(self.model_path), "name": meta.get("general.name", self.model_path.stem),
                "architecture": meta.get("general.architecture"), "n_ctx": self.n_ctx_total // self.n_seq,
                "n_seq": self.n_seq, "n_threads": self.n_threads, "gpu_layers": self.gpu_layers, "draft": self.draft}

    def close(self) -> None:
        """Stop the scheduler and free the context and the model. Further calls raise ``EngineStateError``."""
        if self._closed:
            return
        self._closed = True
        self._incoming.put(None)  # wakes the scheduler
        self._scheduler.join()
        llama_cpp.llama_batch_free(self._batch)
        self._ctx.close()
        self._model.close()

    def __enter__(self) -> BatchedLlamaCppEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ requests
    def submit(
        self,
        seq: int,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        stop: Sequence[str],
        stop_text_if: StopTextRule | None,
        grammar: str | None,
        on_text: TokenCallback | None,
        seed: int,
    ) -> Completion:
        """Queue one generation for sequence ``seq`` and wait for it (the handles' ``generate``)."""
        if self._closed:
            raise EngineStateError(f"batched engine for {self.model_path} is closed")
        prompt = list(prompt_ids)
        room = room_left(len(prompt), self._window(seq))
        stop_ids = {token: text for text in stop if (token := self.vocabulary.single_token_id(text)) is not None}
        stream = StopStream([text for text in stop if text not in stop_ids.values()], on_text, stop_text_if)
        request = _Request(seq, prompt, sampling, stop_ids, stream, grammar, seed,
                           max_tokens=min(sampling.max_tokens, room))
        self._incoming.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    # ------------------------------------------------------------------------------------------ scheduler
    def _run(self) -> None:
        """The scheduler thread; a fault in it fails every request in flight instead of leaving them waiting."""
        waiting: list[_Request] = []
        active: list[_Request] = []
        try:
            self._schedule(waiting, active)
        except Exception as exc:  # a bug or a llama.cpp fault: every caller gets it, nobody hangs
            self._closed = True
            self._fail_all([*waiting, *active], EngineStateError(f"the batched engine failed: {exc!r}"))
            while True:  # answer whatever arrives later the same way
                request = self._incoming.get()
                if request is None:
                    return
                self._fail_all([request], EngineStateError(f"the batched engine failed: {exc!r}"))

    def _schedule(self, waiting: list[_Request], active: list[_Request]) -> None:
        """Admit requests, build one batch of decode tokens and prompt chunks, decode, sample; until closed."""
        while True:
            block = not (waiting or active)
            try:
                while True:
                    request = self._incoming.get(block=block)
                    block = False
                    if request is None:
                        self._fail_all([*waiting, *active], EngineStateError("the batched engine was closed"))
                        return
                    waiting.append(request)
            except queue.Empty:
                pass
            for request in list(waiting):
                if request.stream.poll():  # cancelled while it waited for another sequence's prefix
                    waiting.remove(request)
                    self._finish(active, request, finish="cancelled")
                    continue
                try:
                    admitted = self._admit(request, active)
                except (ValueError, RuntimeError) as exc:  # a grammar llama.cpp refuses: this request fails
                    waiting.remove(request)
                    self._fail_all([request], exc)
                    continue
                if admitted:
                    waiting.remove(request)
                    active.append(request)
            if active:
                self._step(active)

    def _admit(self, request: _Request, active: list[_Request]) -> bool:
        """Keep or copy the longest cached prefix of the request's prompt; False to wait for a sequence that is
        prefilling that prefix now."""
        prompt, own = request.prompt, self._kv_tokens[request.seq]
        keep = shared_prefix_length(own, prompt)
        source = max(range(len(self._kv_tokens)), key=lambda s: shared_prefix_length(self._kv_tokens[s], prompt))
        cached = max(keep, shared_prefix_length(self._kv_tokens[source], prompt))
        if any(shared_prefix_length(other.prompt, prompt) > cached for other in active if other.to_prefill):
            return False  # another sequence is prefilling more of this prompt: copy it once it is in the cache
        if shared_prefix_length(self._kv_tokens[source], prompt) > keep and source != request.seq:
            keep = shared_prefix_length(self._kv_tokens[source], prompt)
            llama_cpp.llama_memory_seq_rm(self._memory, request.seq, -1, -1)
            llama_cpp.llama_memory_seq_cp(self._memory, source, request.seq, 0, keep)
            self._kv_tokens[request.seq] = prompt[:keep]
        keep = min(keep, len(prompt) - 1)  # the last prompt token is evaluated again for its logits
        llama_cpp.llama_memory_seq_rm(self._memory, request.seq, keep, -1)
        del self._kv_tokens[request.seq][keep:]
        request.to_prefill = prompt[keep:]
        request.evaluated, request.reused = len(request.to_prefill), keep
        request.sampler = sampler_chain(self._model.vocab, request.sampling, grammar=request.grammar,
                                        seed=request.seed, penalty_window=request.max_tokens)
        if self._drafters:
            self._drafters[request.seq].begin(prompt)
        return True

    def _step(self, active: list[_Request]) -> None:
        """One ``llama_decode`` over the active requests, then one sampled token (or a verified draft) for each that
        is due one."""
        batch, rows = self._batch, []  # rows: (request, batch index of its first row with logits)
        batch.n_tokens = 0
        decoding = [request for request in active if request.pending_token is not None]
        for request in decoding:
            pending, request.pending_token = request.pending_token, None
            assert pending is not None
            request.verify_steps += 1
            request.draft = self._propose(request, pending, len(decoding), batch.n_tokens)
            last = self._add(request, [pending, *request.draft], logits_on_last=True, all_logits=bool(request.draft))
            rows.append((request, last - len(request.draft)))
        prefilling = False
        for request in list(active):
            room = self.n_batch - batch.n_tokens
            if request.to_prefill and room > 0:
                if request.stream.poll():  # a cancel stops a long prompt at its next chunk, as LlamaCppEngine's
                    request.evaluated -= len(request.to_prefill)  # the chunks evaluated stay cached for the next call
                    self._finish(active, request, finish="cancelled")
                    continue
                prefilling = True
                chunk, request.to_prefill = request.to_prefill[:room], request.to_prefill[room:]
                index = self._add(request, chunk, logits_on_last=not request.to_prefill)
                if not request.to_prefill:
                    rows.append((request, index))
        if batch.n_tokens == 0:  # every request of this step was cancelled
            return
        started = time.perf_counter()
        status = llama_cpp.llama_decode(self._ctx.ctx, batch)
        if self._draft_lengths and not prefilling and status == 0:  # the cost table: decode-only steps
            self._draft_lengths[0].record_decode(batch.n_tokens, time.perf_counter() - started)
        if status != 0:
            error = ContextOverflowError(
                sum(len(t) for t in self._kv_tokens), self.n_ctx_total,
                f"the shared KV cache is full (llama_decode returned {status}); raise {{n_ctx}}")
            for request in list(active):
                self._finish(active, request, error=error)
            return
        for request, index in rows:
            self._verify(active, request, index)

    def _propose(self, request: _Request, pending: int, decoding: int, in_batch: int) -> list[int]:
        """The draft that goes into this step after ``request``'s pending token ([] without drafting): as many
        tokens as its ``DraftLength`` chooses for a step of ``decoding`` sequences, within the batch, the
        sequence's window and its ``max_tokens``."""
        if not self._drafters:
            return []
        drafter = self._drafters[request.seq]
        drafter.extend([pending])  # the pending token joins the context the drafter continues
        space = min(self.n_batch - in_batch - 1 - (decoding - 1),  # room for the other sequences' tokens
                    self._window(request.seq) - len(self._kv_tokens[request.seq]) - 1,
                    request.max_tokens - len(request.token_ids) - 1)
        want = self._draft_lengths[request.seq].choose(space, batch=decoding) if space > 0 else 0
        return drafter.propose(want) if want > 0 else []

    def _verify(self, active: list[_Request], request: _Request, first: int) -> None:
        """Sample ``request``'s rows from batch index ``first`` on: its pending token's row, then each drafted
        token's while the sampled token equals it; then drop the KV cells of the rejected draft."""
        draft, request.draft = request.draft, []
        request.drafted += len(draft)  # counted as they happen: a request that finishes here reports them
        kept = 0
        for row in range(len(draft) + 1):
            token = self._sample(active, request, first + row)
            if token is None or row == len(draft) or token != draft[row]:
                break
            kept += 1
            request.accepted += 1
        if draft:
            self._draft_lengths[request.seq].record_verification(len(draft), kept)
            self._drafters[request.seq].extend(draft[:kept])
            keep = len(self._kv_tokens[request.seq]) - len(draft) + kept
            llama_cpp.llama_memory_seq_rm(self._memory, request.seq, keep, -1)
            del self._kv_tokens[request.seq][keep:]

    def _add(self, request: _Request, tokens: list[int], *, logits_on_last: bool, all_logits: bool = False) -> int:
        """Append ``tokens`` of ``request``'s sequence to the batch at their positions; the index of the last.
        Logits are computed for the last token (``logits_on_last``) or every one (``all_logits``)."""
        batch, kv = self._batch, self._kv_tokens[request.seq]
        for offset, token in enumerate(tokens):
            i = batch.n_tokens
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, len(kv), 1
            batch.seq_id[i][0] = request.seq
            batch.logits[i] = all_logits or (logits_on_last and offset == len(tokens) - 1)
            batch.n_tokens += 1
            kv.append(token)
        last: int = batch.n_tokens - 1
        return last

    def _sample(self, active: list[_Request], request: _Request, index: int) -> int | None:
        """Sample batch row ``index`` for ``request``: the token, which is now its pending one; None when the
        request finished with it."""
        token: int = llama_cpp.llama_sampler_sample(request.sampler, self._ctx.ctx, index)
        request.decoded += 1
        if request.decoded == 1:
            request.first = time.perf_counter()
        vocabulary = self.vocabulary
        if vocabulary.is_end_of_generation(token):
            self._finish(active, request, finish="eog")
            return None
        if token in request.stop_ids:
            request.stream.stop_hit = request.stop_ids[token]
            self._finish(active, request, finish="stop")
            return None
        request.token_ids.append(token)
        if request.sampling.logprobs:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx.ctx, index), shape=(self._n_vocab,))
            top = float(logits.max())
            request.logprobs.append(float(logits[token]) - top - math.log(float(np.exp(logits - top).sum())))
        if request.stream.feed(request.decoder.decode(vocabulary.token_bytes(token))):
            self._finish(active, request, finish=request.stream.finish_reason)
            return None
        if len(request.token_ids) >= request.max_tokens:
            self._finish(active, request, finish="length")
            return None
        request.pending_token = token
        return token

    def _finish(self, active: list[_Request], request: _Request, *, finish: FinishReason = "length",
                error: BaseException | None = None) -> None:
        if request in active:  # a request cancelled while waiting was never admitted
            active.remove(request)
        if request.sampler is not None:
            llama_cpp.llama_sampler_free(request.sampler)
        if error is None:
            stream = request.stream
            if finish != "stop" or stream.stop_hit in request.stop_ids.values():
                stream.feed(request.decoder.decode(b"", final=True))
                stream.flush()
            if stream.cancelled:  # also when the cancel came with the final flush
                finish = "cancelled"
            end = time.perf_counter()
            first = request.first or end
            stats = GenerationStats(len(request.prompt), request.evaluated, request.reused,
                                    request.decoded, first - request.started, end - first,
                                    drafted_tokens=request.drafted, accepted_tokens=request.accepted,
                                    verify_steps=request.verify_steps if request.drafted else 0)
            request.result = Completion(stream.text, request.token_ids, finish, stream.stop_hit, stats,
                                        request.logprobs if request.sampling.logprobs else None)
        request.error = error
        request.done.set()

    def _fail_all(self, requests: list[_Request], error: BaseException) -> None:
        for request in requests:
            request.error = error
            request.done.set()


def helper_window(n_ctx: int, n_seq: int) -> int:
    """The default window of a batched engine's ``complete`` sequence: ``LlamaCppEngine``'s helper window
    (``DEFAULT_HELPER_N_CTX``), at most one sequence's share of ``n_ctx``."""
    return max(1, min(DEFAULT_HELPER_N_CTX, n_ctx // n_seq))


class SequenceEngine:
    """One sequence of a ``BatchedLlamaCppEngine``, as an ``Engine`` (what one agent drives).

    ``n_ctx`` is the sequence's share of the cache; tokenization, text and ``complete`` are the shared engine's.
    """

    #: One agent at a time drives a sequence; the batched engine's other sequences run beside it.
    concurrent_rollouts = False

    def __init__(self, batched: BatchedLlamaCppEngine, index: int) -> None:
        self.batched = batched
        self.index = index

    @property
    def n_ctx(self) -> int:
        return self.batched.n_ctx_total // self.batched.n_seq

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        return self.batched.vocabulary.tokenize(text, parse_special=parse_special)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.batched.vocabulary.detokenize(token_ids)

    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        sampling: SamplingParams = SamplingParams(),
        stop: Sequence[str] = (),
        stop_text_if: StopTextRule | None = None,
        grammar: str | None = None,
        on_text: TokenCallback | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Generate on this sequence, batched with the others (``Engine.generate``; ``on_text`` is called from
        the scheduler thread)."""
        return self.batched.submit(self.index, prompt_ids, sampling, stop, stop_text_if, grammar, on_text,
                                   self.index if seed is None else seed)

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        return self.batched.complete(messages, max_tokens=max_tokens)

    def model_info(self) -> dict[str, Any]:
        return {**self.batched.model_info(), "sequence": self.index}
