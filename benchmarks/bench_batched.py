"""Test-time scaling on one device: aggregate decode speed of N rollouts decoded as one llama.cpp batch.

    .venv/bin/python -m pytest benchmarks/bench_batched.py --benchmark-only -s
    VENUS_BENCH_GGUF=/path/model.gguf .venv/bin/python -m pytest benchmarks/bench_batched.py --benchmark-only -s

For N = 1, 2, 4, 8 sequences on the same GGUF and threads (SmolLM2-135M by default), all greedy from one prompt
whose KV entries are already in the cache:

- ``raw``: llama.cpp's batch API driven directly (one ``llama_decode`` of N tokens per step, a greedy sampler per
  sequence), the reference the engine must keep up with (>= 0.95x);
- ``batched``: ``BatchedLlamaCppEngine``, N sequences driven from N threads, as N agents drive it;
- ``sequential``: ``LlamaCppEngine``, the N rollouts one after another.

Printed at the end: aggregate decoded tokens/s of each, the ratios batched/raw and batched/sequential, and the KV
cache the batched engine holds (the shared prompt is stored once).

Every arm runs off the main thread, as the engines decode (``venus_edge.engine.off_main_thread``: llama.cpp is built
with OpenMP, and once the main thread has run OpenMP work, other threads' parallel regions run about 3x slower;
here the batched engine at N = 1 fell from 95 to 35 tokens/s after a raw run on the main thread).
"""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import llama_cpp
import pytest
from llama_cpp import _internals
from llama_cpp._logger import set_verbose

from venus_edge.batched import BatchedLlamaCppEngine
from venus_edge.engine import GREEDY, LlamaCppEngine, off_main_thread, physical_cores
from venus_edge.testing import smollm2_path

PROMPT = "<|im_start|>user\nWrite a long story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n"
NEW_TOKENS = 96
SEQUENCES = (1, 2, 4, 8)
REPEATS = 5  # each arm reports its best of these runs (the machine's other work only ever slows one down)
N_CTX = 4096
RESULTS: dict[tuple[str, int], float] = {}  # (arm, N) -> aggregate decoded tokens per second


def _model() -> Path:
    return Path(os.environ.get("VENUS_BENCH_GGUF") or smollm2_path())


def _raw_tokens_per_s(n_seq: int) -> float:
    """llama.cpp's batch API with nothing around it: prompt prefilled into sequence 0, copied to the others, then
    NEW_TOKENS steps of one batch holding one token per sequence, each sampled greedily."""
    set_verbose(False)
    model = _internals.LlamaModel(path_model=str(_model()), params=llama_cpp.llama_model_default_params(), verbose=False)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max, params.kv_unified = N_CTX, 512, 512, n_seq, True
    params.n_threads = params.n_threads_batch = physical_cores()
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    context = _internals.LlamaContext(model=model, params=params, verbose=False)
    batch = llama_cpp.llama_batch_init(512, 0, n_seq)
    memory = llama_cpp.llama_get_memory(context.ctx)
    samplers = [llama_cpp.llama_sampler_init_greedy() for _ in range(n_seq)]
    try:
        prompt = model.tokenize(PROMPT.encode(), add_bos=False, special=True)
        _fill(batch, [(token, position, 0, position == len(prompt) - 1) for position, token in enumerate(prompt)])
        assert llama_cpp.llama_decode(context.ctx, batch) == 0
        for seq in range(1, n_seq):
            llama_cpp.llama_memory_seq_cp(memory, 0, seq, 0, len(prompt))
        first = llama_cpp.llama_sampler_sample(samplers[0], context.ctx, len(prompt) - 1)
        best = 0.0
        for _ in range(REPEATS):
            for seq in range(n_seq):  # back to the prompt
                llama_cpp.llama_memory_seq_rm(memory, seq, len(prompt), -1)
            tokens = [first] * n_seq
            start = time.perf_counter()
            for step in range(NEW_TOKENS - 1):
                _fill(batch, [(tokens[seq], len(prompt) + step, seq, True) for seq in range(n_seq)])
                assert llama_cpp.llama_decode(context.ctx, batch) == 0
                tokens = [llama_cpp.llama_sampler_sample(samplers[seq], context.ctx, seq) for seq in range(n_seq)]
            best = max(best, n_seq * (NEW_TOKENS - 1) / (time.perf_counter() - start))
        return best
    finally:
        for sampler in samplers:
            llama_cpp.llama_sampler_free(sampler)
        llama_cpp.llama_batch_free(batch)
        context.close()
        model.close()


def _fill(batch: llama_cpp.llama_batch, rows: list[tuple[int, int, int, bool]]) -> None:
    batch.n_tokens = len(rows)
    for i, (token, position, seq, logits) in enumerate(rows):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, position, 1, logits
        batch.seq_id[i][0] = seq


def _batched_tokens_per_s(n_seq: int) -> tuple[float, int]:
    """(aggregate decoded tokens/s, KV cache bytes) of N sequences of the batched engine, each its own thread."""
    greedy = dataclasses.replace(GREEDY, max_tokens=NEW_TOKENS)
    with BatchedLlamaCppEngine(_model(), n_seq=n_seq, n_ctx=N_CTX * n_seq) as engine:
        prompt = engine.tokenize(PROMPT)
        warm = [engine.sequence(s) for s in range(n_seq)]
        best = 0.0
        with ThreadPoolExecutor(n_seq) as pool:  # prefill every sequence once (a copy of sequence 0's prompt)
            list(pool.map(lambda s: s.generate(prompt, sampling=dataclasses.replace(greedy, max_tokens=1)), warm))
            for _ in range(REPEATS):
                outputs = list(pool.map(lambda s: s.generate(prompt, sampling=greedy), warm))
                elapsed = max(o.stats.decode_s for o in outputs)  # from the first token on: the decode
                best = max(best, sum(len(o.token_ids) - 1 for o in outputs) / elapsed)
        kv_bytes = llama_cpp.llama_state_get_size(engine._ctx.ctx)
    return best, kv_bytes


def _sequential_tokens_per_s(n_seq: int) -> float:
    greedy = dataclasses.replace(GREEDY, max_tokens=NEW_TOKENS)
    with LlamaCppEngine(_model(), n_ctx=N_CTX) as engine:
        prompt = engine.tokenize(PROMPT)
        engine.generate(prompt, sampling=dataclasses.replace(greedy, max_tokens=1))
        best = 0.0
        for _ in range(REPEATS):
            decoded = seconds = 0.0
            for _ in range(n_seq):
                output = engine.generate(prompt, sampling=greedy)
                decoded += len(output.token_ids) - 1
                seconds += output.stats.decode_s
            best = max(best, decoded / seconds)
    return best


@pytest.mark.parametrize("n_seq", SEQUENCES)
def test_raw_llama_cpp_batch(benchmark, n_seq):
    RESULTS[("raw", n_seq)] = benchmark.pedantic(off_main_thread, args=(_raw_tokens_per_s, n_seq), rounds=1,
                                                 iterations=1)


@pytest.mark.parametrize("n_seq", SEQUENCES)
def test_batched_engine(benchmark, n_seq):
    tokens_per_s, kv_bytes = benchmark.pedantic(off_main_thread, args=(_batched_tokens_per_s, n_seq), rounds=1,
                                                iterations=1)
    RESULTS[("batched", n_seq)] = tokens_per_s
    RESULTS[("state_mib", n_seq)] = kv_bytes / 2**20


@pytest.mark.parametrize("n_seq", SEQUENCES)
def test_sequential_rollouts(benchmark, n_seq):
    RESULTS[("sequential", n_seq)] = benchmark.pedantic(off_main_thread, args=(_sequential_tokens_per_s, n_seq),
                                                        rounds=1, iterations=1)
    if n_seq == SEQUENCES[-1]:
        _report()


def _report() -> None:
    print(f"\n{_model().name}, {physical_cores()} threads, {NEW_TOKENS} greedy tokens per sequence")
    print("| N | raw tok/s | batched tok/s | sequential tok/s | batched/raw | batched/sequential | state MiB |")
    print("|---|---|---|---|---|---|---|")
    for n in SEQUENCES:
        raw, batched, sequential = RESULTS[("raw", n)], RESULTS[("batched", n)], RESULTS[("sequential", n)]
        print(f"| {n} | {raw:.1f} | {batched:.1f} | {sequential:.1f} | {batched / raw:.3f} | "
              f"{batched / sequential:.2f} | {RESULTS[('state_mib', n)]:.0f} |")
