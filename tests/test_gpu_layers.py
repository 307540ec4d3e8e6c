"""GPU offload (``gpu_layers``): refused with a clear message where llama.cpp would ignore it without a word, and
passed to llama.cpp where it is not. The GPU itself is measured by scripts/gpu_speculative.sh on a GPU machine."""

from __future__ import annotations

import llama_cpp
import pytest

from venus_edge.engines.llama_cpp import LlamaCppEngine, check_gpu_layers


@pytest.mark.parametrize("value", [-2, -100, True, 1.5, "all", None])
def test_values_llama_cpp_does_not_define_are_refused(value):
    with pytest.raises(ValueError, match="gpu_layers must be -1"):
        check_gpu_layers(value)


@pytest.mark.skipif(llama_cpp.llama_supports_gpu_offload(), reason="this llama.cpp build has a GPU backend")
@pytest.mark.parametrize("value", [-1, 1, 99])
def test_a_build_without_gpu_backend_refuses_offload_instead_of_running_on_the_cpu(value, smollm2_gguf):
    with pytest.raises(ValueError, match=r"built without a GPU backend.*GGML_CUDA=on"):
        LlamaCppEngine(smollm2_gguf, n_ctx=512, gpu_layers=value)
    check_gpu_layers(0)  # none asked: fine on any build


def test_the_layers_reach_llama_cpp_and_the_model_facts(smollm2_gguf, monkeypatch):
    """On a CPU build llama.cpp keeps every layer on the CPU whatever it is asked, so the check is what it was
    asked: the model parameters llama-cpp-python built from ``n_gpu_layers``, for the model and its draft model."""
    with LlamaCppEngine(smollm2_gguf, n_ctx=512) as engine:
        assert engine.model_info()["gpu_layers"] == 0
        assert engine._llm.model_params.n_gpu_layers == 0
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)  # as a CUDA build answers
    with LlamaCppEngine(smollm2_gguf, n_ctx=512, gpu_layers=7, draft=smollm2_gguf) as engine:
        assert engine.model_info()["gpu_layers"] == 7
        assert engine._llm.model_params.n_gpu_layers == 7
        assert engine._draft_model is not None
        draft_params = engine._draft_model.model.params
        assert draft_params.n_gpu_layers == 7
