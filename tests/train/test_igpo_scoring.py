"""Ground-truth scoring at turn boundaries: the KV-cache path agrees with one forward per boundary to 1e-5, on a
real rendered trajectory and a tiny Qwen3, and the pseudo-answer's answer span is found by offsets."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from venus_edge.protocol import GENERATION_PROMPT  # noqa: E402
from venus_edge.train.igpo import PSEUDO_ANSWER_PREFIX, information_gains  # noqa: E402
from venus_edge.train.igpo_scoring import (  # noqa: E402
    pseudo_answer,
    score_boundaries,
    score_boundaries_directly,
)
from venus_edge.train.tokenize import tokenize_messages  # noqa: E402


@pytest.fixture(scope="module")
def model_and_trajectory(tmp_path_factory, make_toy):
    out = tmp_path_factory.mktemp("igpo-score")
    make_toy(out, people=12, seed=3)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "base")
    model = transformers.AutoModelForCausalLM.from_pretrained(out / "base", dtype=torch.float32).eval()
    rows = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
    longest = max(rows, key=lambda row: len(row["messages"]))
    return model, tokenizer, longest


def _turn_starts(ids: list[int], tokenizer) -> list[int]:
    """Context lengths before each assistant turn: just after each generation prompt."""
    prompt = tokenizer(GENERATION_PROMPT, add_special_tokens=False)["input_ids"]
    return [i + len(prompt) for i in range(len(ids)) if ids[i:i + len(prompt)] == prompt]


def test_cached_scoring_agrees_with_one_forward_per_boundary(model_and_trajectory):
    model, tokenizer, row = model_and_trajectory
    sample = tokenize_messages(row["messages"], tokenizer)
    ids = list(sample.input_ids)
    boundaries = _turn_starts(ids, tokenizer)
    assert len(boundaries) >= 3  # a two-hop trajectory: search, visit, search, visit, answer
    answer = pseudo_answer(row.get("answer") or "Bromdeok", tokenizer)
    cached = score_boundaries(model, ids, boundaries, answer)
    direct = score_boundaries_directly(model, ids, boundaries, answer)
    assert cached == pytest.approx(direct, abs=1e-5)
    assert all(score < 0 for score in cached)
    # unordered and repeated boundaries give the same values in the order asked
    shuffled = [boundaries[2], boundaries[0], boundaries[2]]
    assert score_boundaries(model, ids, shuffled, answer) == pytest.approx([cached[2], cached[0], cached[2]], abs=1e-5)
    gains = information_gains(cached)
    assert gains[0] is None and gains[1] == pytest.approx(cached[1] - cached[0])


def test_the_answer_span_is_found_by_offsets(model_and_trajectory):
    _, tokenizer, _ = model_and_trajectory
    answer = pseudo_answer("1862", tokenizer)
    text = tokenizer.decode(list(answer.token_ids[answer.start:answer.end]))
    assert text == "1862"  # digits are split one by one, and all four are the span
    assert tokenizer.decode(list(answer.token_ids[:answer.start])) == PSEUDO_ANSWER_PREFIX
    spaced = pseudo_answer("Bromdeok Valley", tokenizer)
    assert tokenizer.decode(list(spaced.token_ids[spaced.start:spaced.end])).strip() == "Bromdeok Valley"
    with pytest.raises(ValueError, match="empty"):
        pseudo_answer("  ", tokenizer)


def test_boundaries_outside_the_sequence_are_refused(model_and_trajectory):
    model, tokenizer, _ = model_and_trajectory
    answer = pseudo_answer("x", tokenizer)
    with pytest.raises(ValueError, match="outside a sequence of 3"):
        score_boundaries(model, [1, 2, 3], [4], answer)
    with pytest.raises(ValueError, match="boundary 0"):
        score_boundaries_directly(model, [1, 2, 3], [0], answer)
