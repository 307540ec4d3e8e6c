"""Logits of the converted GGUF in llama.cpp against the same checkpoint in transformers (the reference)."""

from __future__ import annotations

import llama_cpp
import numpy as np
import torch
from transformers import Qwen3ForCausalLM

from venus_edge.engines.llama_cpp import off_main_thread

PROMPT_IDS = [151644, 872, 198, 9707, 11, 1879, 0, 220, 108386, 151645, 198, 151644, 77091, 198, 151667, 198]


def _llama_cpp_logits(gguf_path, token_ids) -> np.ndarray:
    """(T, vocab) logits with an F32 KV cache (type_k = type_v = 0, GGML_TYPE_F32)."""
    llm = llama_cpp.Llama(
        model_path=str(gguf_path), n_ctx=256, logits_all=True, type_k=0, type_v=0, verbose=False,
    )
    off_main_thread(llm.eval, token_ids)
    return np.array(llm.scores[: len(token_ids)], dtype=np.float32)


def _transformers_logits(checkpoint, token_ids) -> np.ndarray:
    model = Qwen3ForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0].numpy()  # (T, vocab)


def test_logits_match_transformers(tiny_checkpoint, tiny_gguf_f32, tiny_gguf_f16):
    """F32 GGUF within 1e-4 of transformers' logits; F16 GGUF within 2e-2; the same argmax at every position, but
    for a near-tie (random weights: two logits within the F32 tolerance may rank the other way on another CPU)."""
    reference = _transformers_logits(tiny_checkpoint, PROMPT_IDS)
    f32 = _llama_cpp_logits(tiny_gguf_f32, PROMPT_IDS)
    f16 = _llama_cpp_logits(tiny_gguf_f16, PROMPT_IDS)
    f32_diff, f16_diff = float(np.abs(f32 - reference).max()), float(np.abs(f16 - reference).max())
    assert f32_diff <= 1e-4, f"F32 max abs logit diff {f32_diff:.3g} (logit std {reference.std():.3g})"
    assert f16_diff <= 2e-2, f"F16 max abs logit diff {f16_diff:.3g}"
    picked = reference[np.arange(len(PROMPT_IDS)), f32.argmax(-1)]
    assert np.all(picked >= reference.max(-1) - 2e-4), (f32.argmax(-1), reference.argmax(-1))


def test_greedy_decode_matches_transformers(tiny_checkpoint, tiny_gguf_f32, real_model_run):
    """Free-running greedy decoding: every token the runtime engine picks on the F32 GGUF (F32 KV cache) is the one
    transformers picks after the same ids, up to 24 tokens. Compared on the engine's own ids: with random weights
    two logits within the F32 tolerance are a near-tie that may rank the other way on another CPU, after which
    two free runs part (a near-tie is within 2e-4 here)."""
    from dataclasses import replace

    from venus_edge.engines.base import GREEDY
    from venus_edge.engines.llama_cpp import LlamaCppEngine

    with LlamaCppEngine(tiny_gguf_f32, n_ctx=256, kv_cache_f32=True, **real_model_run.engine_args()) as engine:
        ours = engine.generate(PROMPT_IDS, sampling=replace(GREEDY, max_tokens=24))
    assert ours.finish_reason == "eog" or len(ours.token_ids) == 24, ours  # the engine stops at an end token
    logits = _transformers_logits(tiny_checkpoint, PROMPT_IDS + ours.token_ids)[len(PROMPT_IDS) - 1 : -1]
    picked = logits[np.arange(len(ours.token_ids)), ours.token_ids]
    assert np.all(picked >= logits.max(-1) - 2e-4), (ours.token_ids, logits.argmax(-1).tolist())
