"""``LlamaCppEngine``: llama.cpp in-process, behind the ``Engine`` protocol (``venus_edge.engines.base``).

The engine is token-in, text-out. It keeps the KV cache of its last prompt and evaluates only the new suffix of
the next one, and it reports, per call, how many prompt tokens were evaluated and how many were reused from the KV
cache. Decoding is the native loop of ``venus_edge.engines.decode`` (llama.cpp's sampler chain through the
low-level API), with optional speculative decoding (``draft``; ``venus_edge.engines.speculative``).

Text is rebuilt from each token's bytes with a buffer sized to the token, because llama-cpp-python 0.3.36
detokenizes through a 32-byte buffer and cuts longer tokens (TEST_MODELS.md).

Usage:

    engine = LlamaCppEngine("model.gguf", n_ctx=8192)
    ids = engine.tokenize("<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n")
    completion = engine.generate(ids, sampling=SamplingParams(max_tokens=64), stop=["<tool_response>"])
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import llama_cpp
import numpy as np
from llama_cpp import _internals

from venus_edge.engines.base import Completion, SamplingParams, StopTextRule, TokenCallback
from venus_edge.engines.decode import KVContext, decode_loop
from venus_edge.engines.llama_load import check_gpu_layers, failure_reason, llama_diagnostics, weights_not_repacked
from venus_edge.engines.prompt_cache import PromptCache
from venus_edge.engines.speculative import Drafter, DraftLength, DraftModel, PromptLookup, check_same_vocabulary
from venus_edge.engines.vocab import Vocabulary
from venus_edge.errors import ContextOverflowError, EngineStateError, ModelLoadError
from venus_edge.memory.header import FILE_TYPES, check_gguf_file, read_model_header
from venus_edge.memory.machine import check_threads, default_threads
from venus_edge.memory.plan import KVType, MemoryPlan, engine_plan
from venus_edge.protocol import render_chat_parts, tokenize_message

__all__ = ["LlamaCppEngine"]

T = TypeVar("T")
# visit reads a page reduced to DEFAULT_REDUCE_BUDGET_TOKENS plus its prompt and answer; 8K holds them.
DEFAULT_HELPER_N_CTX = 8_192


def off_main_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a short-lived thread of its own, for llama.cpp compute outside an engine.

    llama.cpp is built with OpenMP, which keeps one team of worker threads per calling thread; a team that has run
    keeps spinning for a while after, so two threads that call llama.cpp in turn make two teams fight for the
    cores. Measured here on SmolLM2 with 2 threads: an engine decoding at 71-80 tokens/s fell to 31-41 once raw
    llama-cpp-python had decoded on the main thread, and both ran at 72-87 when the raw decode ran on the engine's
    own decode thread. Engines decode on their own threads; any other llama.cpp compute (quality gates, references
    in tests and benchmarks) goes through this, or through an engine's decode thread when it alternates with it.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-compute") as pool:
        return pool.submit(function, *args).result()


class LlamaCppEngine:
    """llama.cpp in-process through llama-cpp-python, with exact text and KV-cache reuse figures.

    Args:
        model_path: a local GGUF file (see ``venus_edge.engines.models.resolve_model`` for hub repos).
        n_ctx: context window in tokens; default: the memory planner's choice for the RAM available
            (``venus_edge.memory.plan_memory``): ``min(n_ctx_train, 32768)`` when it fits, less when not.
        n_threads: decode threads; default the physical cores.
        n_batch: prompt tokens evaluated per llama.cpp batch.
        seed: sampling seed; two engines with the same seed, model and prompts give the same text.
        kv_cache_f32: keep the KV cache in F32 (for parity checks; F16 otherwise); same as ``kv_type="f32"``.
        kv_type: KV-cache type, ``f16``, ``q8_0`` or ``q4_0`` (llama.cpp ``type_k``/``type_v``); default f16 with
            ``n_ctx`` given, else the planner's choice.
        flash_attn: llama.cpp flash attention; default off, on for a quantized KV cache (which needs it), when
            the planner needs its smaller compute buffer, or with ``gpu_layers`` (faster on the GPU measured).
        ram_bytes: the RAM budget the planner fits the context into (default: available now); with ``n_ctx``
            given, settings that do not fit are refused only when this is given.
        helper_n_ctx: context window in tokens of the second context that ``complete`` uses (``visit``'s
            evidence and summary), allocated on the first ``complete``; default 8192.
        draft: speculative decoding (``venus_edge.engines.speculative``): ``"lookup"`` (n-gram lookup in the
            session's own tokens), the path of a draft GGUF with the same vocabulary, or None / ``"off"``
            (default). Greedy output is the same with and without it; sampled output keeps the model's
            distribution. It drafts only while that is expected to be faster on this machine (``DraftLength``).
            Drafting turns ``batch_invariant`` on.
        draft_tokens: draft exactly this many tokens whenever the drafter has them (1..16; for benchmarks and
            tests); default None: the length that ``DraftLength`` expects to be fastest, 0 when none is.
        batch_invariant: load the weights in the GGUF's own layout and turn flash attention on, so that a
            position's logits are bit-identical in a batch and alone (``llama_load.weights_not_repacked``); default
            off (llama.cpp's repacked weights prefill faster), on with ``draft``.
        gpu_layers: layers whose weights and KV cache go to the GPU (llama.cpp ``n_gpu_layers``): 0 (default) none,
            -1 all; the draft model's too. Needs a llama-cpp-python built with a GPU backend (e.g.
            ``CMAKE_ARGS=-DGGML_CUDA=on``). The memory planner still plans for the CPU's RAM.
        prompt_cache_dir: a folder for the persistent prompt cache (``venus_edge.engines.prompt_cache``): the KV
            state of the system prompt up to its date line is saved there and restored by the next engine on this
            model; default None (off). The CLI uses ``default_prompt_cache_dir()``.

    Raises:
        ModelNotFoundError: no file at ``model_path``.
        ModelLoadError: the header's values are out of bounds or disagree with its tensors
            (``read_model_header``), or llama.cpp refuses the file (corrupt, truncated, unsupported architecture;
            the message holds llama.cpp's own error lines). Should llama.cpp still abort the process, its message
            is written to standard error first (``venus_edge.engines.llama_load``).
        MemoryPlanError: the planner finds no context that fits the RAM budget (the message says what would), or
            a fixed ``n_ctx`` needs more memory than the machine has (``refuse_beyond_machine``).
        ValueError: ``n_threads`` above llama.cpp's limit (``venus_edge.memory.MAX_THREADS``); ``gpu_layers``
            below -1, or above 0 on a llama.cpp build without GPU offload (``check_gpu_layers``).
        ModelLoadError: the draft GGUF's vocabulary is not the model's (``check_same_vocabulary``).
    """

    #: One llama.cpp context decodes one rollout at a time (``Engine.concurrent_rollouts``).
    concurrent_rollouts = False

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_batch: int = 512,
        seed: int = 0,
        kv_cache_f32: bool = False,
        helper_n_ctx: int = DEFAULT_HELPER_N_CTX,
        prompt_cache_dir: str | os.PathLike[str] | None = None,
        kv_type: KVType | None = None,
        flash_attn: bool | None = None,
        ram_bytes: int | None = None,
        draft: str | os.PathLike[str] | None = None,
        batch_invariant: bool | None = None,
        draft_tokens: int | None = None,
        gpu_layers: int = 0,
    ) -> None:
        self.model_path = Path(model_path)
        check_gpu_layers(gpu_layers)
        if draft_tokens is not None:
            DraftLength(fixed=draft_tokens)  # its bounds, before anything loads
        if draft not in (None, "off") and batch_invariant is False:
            raise ValueError("speculative decoding (draft) needs batch_invariant=True: a draft's verification batch "
                             "must give the logits single tokens give")
        #: Logits of a position are the same in a batch of several tokens as alone (``weights_not_repacked`` and
        #: flash attention); on with drafting.
        self.batch_invariant = bool(batch_invariant) or draft not in (None, "off")
        if self.batch_invariant or (gpu_layers and flash_attn is None):
            flash_attn = True  # on a GPU: measured faster there (README, On a GPU)
        check_gguf_file(self.model_path)
        threads = n_threads or default_threads()
        check_threads(threads)
        if kv_cache_f32 and kv_type not in (None, "f32"):
            raise ValueError(f"kv_cache_f32=True asks for an f32 KV cache, kv_type={kv_type!r} for another; pass one")
        #: The settings this engine loaded with and their memory (``venus_edge.memory.MemoryPlan``).
        self.memory_plan: MemoryPlan = engine_plan(
            read_model_header(self.model_path), n_ctx=n_ctx, kv_type="f32" if kv_cache_f32 else kv_type,
            flash_attn=flash_attn, ram_bytes=ram_bytes, n_threads=threads, n_batch=n_batch, helper_n_ctx=helper_n_ctx)
        plan = self.memory_plan
        layout = weights_not_repacked() if self.batch_invariant else contextlib.nullcontext()
        with layout, llama_diagnostics(self.model_path) as errors:
            try:
                self._llm = llama_cpp.Llama(
                    model_path=str(self.model_path),
                    n_ctx=plan.n_ctx,
                    n_batch=plan.n_batch,
                    n_ubatch=plan.n_ubatch,
                    n_threads=threads,
                    n_threads_batch=threads,
                    seed=seed,
                    verbose=False,
                    flash_attn=plan.flash_attn,
                    type_k=plan.type_k,
                    type_v=plan.type_v,
                    n_gpu_layers=gpu_layers,
                )
            except (ValueError, RuntimeError) as exc:
                raise ModelLoadError(self.model_path, failure_reason(exc, errors)) from exc
        self.n_threads = threads
        #: Layers offloaded to the GPU (llama.cpp ``n_gpu_layers``; -1 all, 0 none).
        self.gpu_layers = gpu_layers
        self.seed = seed
        self.vocabulary = Vocabulary(self._llm._model, self._llm.metadata)
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-decode")
        self._closing = threading.Event()
        self._helper: _HelperContext | None = None
        self.helper_n_ctx = helper_n_ctx
        self._closed = self._released = False
        self._helper_speculation: tuple[Drafter | None, DraftLength | None] = (None, None)
        self._draft_model: DraftModel | None = None
        self.prompt_cache = None if prompt_cache_dir is None else PromptCache(
            prompt_cache_dir, self._llm, self.model_path, self.vocabulary.token_bytes)
        self._context = KVContext(self._llm)
        #: ``lookup``, the draft GGUF's path, or None (speculative decoding off; ``venus_edge.engines.speculative``).
        self.draft = None if draft in (None, "off") else str(draft)
        self.draft_tokens = draft_tokens
        try:
            if self.draft is not None and self.draft != "lookup":
                self._draft_model = DraftModel(self.draft, n_threads=threads, gpu_layers=gpu_layers)
                check_same_vocabulary(self.vocabulary, self._draft_model.vocabulary, self.model_path,
                                      self._draft_model.path)
            self._speculation = self._speculator(self.n_ctx)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------ tokens
    @property
    def n_ctx(self) -> int:
        return _n_ctx(self._llm)

    def tokenize(self, text: str, *, parse_special: bool = True) -> list[int]:
        """Token ids of ``text`` (``Vocabulary.tokenize``: the Hugging Face tokenizer's ids)."""
        self._check_open()
        return self.vocabulary.tokenize(text, parse_special=parse_special)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``, exact for tokens of any length; a cut character becomes U+FFFD."""
        return self.vocabulary.detokenize(token_ids)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token, whatever its length."""
        return self.vocabulary.token_bytes(token_id)

    def single_token_id(self, text: str) -> int | None:
        """The id of the added token spelled ``text`` (``<tool_response>`` in Qwen3's vocabulary), or None."""
        return self.vocabulary.single_token_id(text)

    # ------------------------------------------------------------------------------------------ generate
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
        """Generate a continuation of ``prompt_ids`` on the main context (its KV cache is reused).

        Args:
            prompt_ids: the whole prompt; the part shared with the previous call's tokens is not evaluated again.
            sampling: sampling settings; ``max_tokens`` is also capped by the room left in ``n_ctx``.
            stop: stop strings (see ``Engine``): one that the vocabulary holds as a single token stops on that
                token's id only; the others stop on the text, which is cut before the first one met.
            stop_text_if: accepts a text stop given the text before it (``protocol.action_complete``); default all.
            grammar: a GBNF grammar constraining the output (llama.cpp ``LlamaGrammar``).
            on_text: called with each new piece of text as it is decoded (stop strings never leak into it).
            seed: sampling seed for this call (default: the engine's seed). The agent passes a new seed per
                attempt, since llama.cpp reseeds its sampler on every call and a retry would repeat itself.

        Raises:
            ContextOverflowError: the prompt leaves no room for a single new token.
        """
        self._check_open()
        drafter, draft_length = self._speculation
        return self._on_decode_thread(functools.partial(
            decode_loop, self.vocabulary, self._context, prompt_ids, sampling, stop=stop, stop_text_if=stop_text_if,
            grammar=grammar, on_text=on_text, seed=self.seed if seed is None else seed, cancel=self._closing,
            prompt_cache=self.prompt_cache, drafter=drafter, draft_length=draft_length))

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        """Complete a short chat on a second context that shares the weights (``TextCompleter`` protocol).

        Used by ``visit`` to write evidence and summaries; the agent's KV cache is untouched. Greedy decoding;
        a reasoning block, if the model writes one, is removed from the returned text.
        """
        self._check_open()
        if self._helper is None:
            with llama_diagnostics(self.model_path):
                self._helper = _HelperContext(self._llm, self.helper_n_ctx)
            self._helper_speculation = self._speculator(self.helper_n_ctx)
        thinking = self.vocabulary.qwen  # a Qwen3 thinking model opens its reasoning block
        # The contents are page text: control tokens written in them stay text.
        ids = [
            token
            for head, content, tail in render_chat_parts(messages, open_reasoning=thinking)
            for token in tokenize_message(self.tokenize, head, content, tail)
        ]
        room = _n_ctx(self._helper.llm) - max_tokens
        if len(ids) > room:
            raise ContextOverflowError(len(ids), _n_ctx(self._helper.llm), "shorten the extraction input")
        drafter, draft_length = self._helper_speculation
        completion = self._on_decode_thread(functools.partial(
            decode_loop, self.vocabulary, self._helper.context, ids, SamplingParams(
                temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=max_tokens),
            cancel=self._closing, drafter=drafter, draft_length=draft_length))
        text = completion.text
        return text.split("</think>")[-1].strip() if thinking or "</think>" in text else text.strip()

    def model_info(self) -> dict[str, Any]:
        """Facts about the loaded model for trajectories and reports."""
        meta = self._llm.metadata
        return {
            "path": str(self.model_path),
            "name": meta.get("general.name", self.model_path.stem),
            "architecture": meta.get("general.architecture"),
            "file_type": FILE_TYPES.get(int(meta.get("general.file_type", -1)), meta.get("general.file_type")),
            "size_bytes": self.model_path.stat().st_size,
            "n_params": self._llm._model.n_params(),
            "n_ctx": self.n_ctx,
            "n_ctx_train": self._llm._model.n_ctx_train(),
            "n_threads": self.n_threads,
            "gpu_layers": self.gpu_layers,
            "kv_type": self.memory_plan.kv_type,
            "flash_attn": self.memory_plan.flash_attn,
            "draft": self.draft,
            "batch_invariant": self.batch_invariant,
            "memory_plan": self.memory_plan.to_dict(),
        }

    def set_threads(self, n_threads: int) -> None:
        """Decode and prefill with ``n_threads`` CPU threads from the next call on (``ThreadControl``; pacing lowers
        them on a hot device): ``llama_set_n_threads`` on the agent's context and visit's helper context (and on
        the helper made later). Runs on the decode thread, so never during a decode. A draft model's context keeps
        its threads.

        Raises:
            ValueError: ``n_threads`` below 1 or above llama.cpp's limit (``MAX_THREADS``).
            EngineStateError: the engine is closed.
        """
        check_threads(n_threads)
        self._check_open()

        def apply() -> None:
            params = self._llm.context_params  # a helper made later copies these (``_HelperContext``)
            params.n_threads = params.n_threads_batch = n_threads
            self._llm.n_threads = self._llm.n_threads_batch = n_threads
            contexts = [self._llm] + ([self._helper.llm] if self._helper is not None else [])
            for llm in contexts:
                llama_cpp.llama_set_n_threads(llm._ctx.ctx, n_threads, n_threads)

        self._on_decode_thread(apply)
        self.n_threads = n_threads

    def close(self) -> None:
        """Stop any decode in flight, free the contexts and the model. Further calls raise ``EngineStateError``."""
        if getattr(self, "_released", True):
            return
        self._released = self._closed = True
        self._closing.set()  # a decode left running (the caller was interrupted) stops at its next token
        self._decoder.shutdown(wait=True)
        if self._helper is not None:
            self._helper.close()
        if self._draft_model is not None:
            self._draft_model.close()
        self._llm.close()

    def _speculator(self, n_ctx: int) -> tuple[Drafter | None, DraftLength | None]:
        """A drafter and its draft-length rule for one context of ``n_ctx`` tokens (none with drafting off)."""
        if self.draft is None:
            return None, None
        drafter: Drafter = PromptLookup() if self._draft_model is None else self._draft_model.drafter(n_ctx)
        return drafter, DraftLength(fixed=self.draft_tokens)

    def _on_decode_thread(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function`` on the engine's decode thread, never the main one (see ``off_main_thread``)."""
        return self._decoder.submit(function, *args).result()

    def __enter__(self) -> LlamaCppEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineStateError(f"engine for {self.model_path} is closed; create a new LlamaCppEngine")


class _HelperContext:
    """A second llama.cpp context on the main model's weights, driven by the same ``Llama`` code.

    A second ``Llama`` would load and repack the weights again (345 MB more for a 253 MB Q4_K_M file, measured
    in TEST_MODELS.md); a context on the same ``llama_model`` costs only its KV cache and buffers. The clone
    shares ``_model`` and owns a new context, batch and token buffers under its own exit stack, so closing it
    never frees the shared model.
    """

    def __init__(self, main: llama_cpp.Llama, n_ctx: int) -> None:
        params = type(main.context_params).from_buffer_copy(main.context_params)
        params.n_ctx = n_ctx
        clone = llama_cpp.Llama.__new__(llama_cpp.Llama)
        clone.__dict__.update(main.__dict__)
        clone._stack = contextlib.ExitStack()
        clone.context_params = params
        clone._ctx = clone._stack.enter_context(
            contextlib.closing(_internals.LlamaContext(model=main._model, params=params, verbose=False))
        )
        clone._batch = clone._stack.enter_context(
            contextlib.closing(_internals.LlamaBatch(n_tokens=main.n_batch, embd=0, n_seq_max=1, verbose=False))
        )
        clone._n_ctx = n_ctx
        clone.n_tokens = 0
        clone._requires_eval = True
        clone._sampler = None
        clone.input_ids = np.ndarray((n_ctx,), dtype=np.intc)
        clone.scores = np.ndarray((main.n_batch, main._n_vocab), dtype=np.single)
        clone._candidates = _internals.LlamaTokenDataArray(n_vocab=main._n_vocab)
        self.llm = clone
        self.context = KVContext(clone)

    def close(self) -> None:
        self.llm._stack.close()


def _n_ctx(llm: llama_cpp.Llama) -> int:
    """The usable window: llama.cpp may round the context up, but llama-cpp-python's token buffer keeps the
    requested size."""
    return min(llm.n_ctx(), len(llm.input_ids))
