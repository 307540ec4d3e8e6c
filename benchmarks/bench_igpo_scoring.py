"""IGPO ground-truth scoring: the KV-cache prefix reuse against one forward pass per boundary.

    .venv/bin/python -m pytest benchmarks/bench_igpo_scoring.py --benchmark-only -s

A random tiny Qwen3 (hidden 128, 2 layers, 2K vocabulary, float32, CPU) scores a 12-token pseudo-answer at every
turn boundary of synthetic trajectories of 10, 50 and 100 turns (each turn: 30 sampled tokens and a 70-token tool
response after a 400-token prompt, a scaled-down DR-Venus rollout). Printed: seconds of each method, their ratio,
and the largest difference of the scores (the two must agree).
"""

from __future__ import annotations

import random
import time

import pytest

TURN_TOKENS, PROMPT_TOKENS = 100, 400
RESULTS: dict[int, tuple[float, float, float]] = {}


@pytest.fixture(scope="module")
def model():
    torch = pytest.importorskip("torch")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=32768)
    return Qwen3ForCausalLM(config).eval()


@pytest.mark.parametrize("turns", [10, 50, 100])
def test_prefix_reuse_against_one_forward_per_boundary(benchmark, model, turns):
    from venus_edge.train.igpo_scoring import PseudoAnswer, score_boundaries, score_boundaries_directly

    rng = random.Random(turns)
    sequence = [rng.randrange(2000) for _ in range(PROMPT_TOKENS + turns * TURN_TOKENS)]
    boundaries = [PROMPT_TOKENS + t * TURN_TOKENS for t in range(turns)]
    answer = PseudoAnswer(tuple(rng.randrange(2000) for _ in range(12)), 8, 11)

    def measure() -> tuple[float, float, float]:
        start = time.perf_counter()
        cached = score_boundaries(model, sequence, boundaries, answer)
        middle = time.perf_counter()
        direct = score_boundaries_directly(model, sequence, boundaries, answer)
        end = time.perf_counter()
        return middle - start, end - middle, max(abs(a - b) for a, b in zip(cached, direct))

    RESULTS[turns] = benchmark.pedantic(measure, rounds=1, iterations=1)
    _cached_s, _direct_s, difference = RESULTS[turns]
    assert difference < 1e-4
    if len(RESULTS) == 3:
        print("\n| turns | tokens | prefix reuse s | one forward per boundary s | speed-up | max |diff| |")
        print("|---|---|---|---|---|---|")
        for n, (c, d, diff) in sorted(RESULTS.items()):
            print(f"| {n} | {PROMPT_TOKENS + n * TURN_TOKENS} | {c:.2f} | {d:.2f} | {d / c:.1f}x | {diff:.1e} |")
