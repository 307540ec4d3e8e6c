"""Decode speed of LlamaCppEngine against raw llama-cpp-python on the same GGUF, threads and prompt.

    .venv/bin/python -m pytest benchmarks/bench_engine.py --benchmark-only

The reference is ``Llama.generate`` consumed token by token with the same sampler settings; the engine adds
exact per-token text, stop-string scanning and statistics on top. The ratio is printed at the end.
"""

from __future__ import annotations

import llama_cpp
import pytest

from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine, off_main_thread
from venus_edge.memory.machine import physical_cores
from venus_edge.testing import smollm2_path

PROMPT = "<|im_start|>user\nWrite a long story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n"
NEW_TOKENS = 128
RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def engine():
    with LlamaCppEngine(smollm2_path(), n_ctx=1024, n_threads=physical_cores()) as engine:
        yield engine


@pytest.fixture(scope="module")
def raw():
    llm = llama_cpp.Llama(str(smollm2_path()), n_ctx=1024, n_threads=physical_cores(), verbose=False)
    yield llm
    llm.close()


def _raw_decode(llm: llama_cpp.Llama, ids: list[int]) -> int:
    llm.reset()
    count = 0
    for _token in llm.generate(
        ids, top_k=20, top_p=0.95, min_p=0.0, temp=1.0, presence_penalty=1.1, repeat_penalty=1.0
    ):
        count += 1
        if count == NEW_TOKENS:
            break
    return count


def _engine_decode(engine: LlamaCppEngine, ids: list[int]) -> int:
    engine._llm.reset()
    sampling = SamplingParams(max_tokens=NEW_TOKENS)
    return len(engine.generate(ids, sampling=sampling, stop=["<tool_response>"], seed=0).token_ids)


def test_raw_llama_cpp_python(benchmark, raw):
    """On a worker thread, as the engine decodes (venus_edge.engines.llama_cpp.off_main_thread says why)."""
    ids = raw.tokenize(PROMPT.encode(), add_bos=False, special=True)
    benchmark.pedantic(off_main_thread, args=(_raw_decode, raw, ids), rounds=3, iterations=1)
    RESULTS["raw"] = benchmark.stats.stats.median


def test_llama_cpp_engine(benchmark, engine):
    ids = engine.tokenize(PROMPT)
    benchmark.pedantic(_engine_decode, args=(engine, ids), rounds=3, iterations=1)
    RESULTS["engine"] = benchmark.stats.stats.median
    if "raw" in RESULTS:
        ratio = RESULTS["raw"] / RESULTS["engine"]
        print(f"\nengine/raw decode speed ratio: {ratio:.3f} ({NEW_TOKENS} tokens, {physical_cores()} threads)")
