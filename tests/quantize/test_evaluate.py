"""Quality gates: HF parity, quant vs reference (KL, top-1, perplexity), the agentic check, the table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from venus_edge.quantize.evaluate import (
    AGENTIC_PROMPTS,
    VerificationRow,
    VerificationTable,
    _kl_per_position,
    agentic_check,
    compare_quant,
    compare_to_hf,
)
from venus_edge.quantize.quantize import quantize_gguf

N_CTX = 64  # calibration tokens: enough to separate Q8_0 from Q4_0 on the tiny model, fast on 2 cores


@pytest.fixture(scope="module")
def quants(tiny_gguf_f16, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quants")
    return {q: quantize_gguf(tiny_gguf_f16, folder / f"{q}.gguf", q).out_path for q in ("Q8_0", "Q4_0", "Q4_K_M")}


def test_kl_matches_naive_formula():
    """The float32/float64 KL equals sum p_ref (log p_ref - log p_quant) computed naively in float64."""
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((3, 1000)).astype(np.float32)
    quant = reference + 0.05 * rng.standard_normal((3, 1000)).astype(np.float32)

    def log_softmax(x):
        x = x.astype(np.float64)
        return x - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)) - x.max(-1, keepdims=True)

    naive = (np.exp(log_softmax(reference)) * (log_softmax(reference) - log_softmax(quant))).sum(-1)
    np.testing.assert_allclose(_kl_per_position(reference, quant), naive, rtol=1e-4, atol=1e-8)


def test_identical_files_have_zero_kl(tiny_gguf_f16):
    result = compare_quant(tiny_gguf_f16, tiny_gguf_f16, n_ctx=N_CTX)
    assert result.n_tokens == N_CTX
    assert result.mean_kl < 1e-9, f"mean KL {result.mean_kl}"
    assert result.top1_agreement == 1.0
    assert result.ppl_ratio == pytest.approx(1.0, abs=1e-9)


def test_q4_0_is_worse_than_q8_0(quants, tiny_gguf_f16):
    """Fewer bits, more divergence: KL(Q4_0) > KL(Q8_0) > 0, and Q8_0 agrees on top-1 at least as often."""
    q8 = compare_quant(quants["Q8_0"], tiny_gguf_f16, n_ctx=N_CTX)
    q4 = compare_quant(quants["Q4_0"], tiny_gguf_f16, n_ctx=N_CTX)
    assert 0 < q8.mean_kl < q4.mean_kl, f"KL Q8_0 {q8.mean_kl:.3g}, Q4_0 {q4.mean_kl:.3g}"
    assert q8.top1_agreement >= q4.top1_agreement, (q8.top1_agreement, q4.top1_agreement)
    assert len(q4.worst) == 5 and q4.worst[0].kl == pytest.approx(q4.max_kl)
    assert q4.worst[0].kl >= q4.worst[-1].kl


def test_hf_parity_f32(tiny_gguf_f32, tiny_checkpoint):
    """F32 GGUF: logits within 1e-4 of transformers; llama.cpp (+ NFC) tokenizes the mixed set like HF."""
    report = compare_to_hf(tiny_gguf_f32, tiny_checkpoint)
    assert report.max_abs_logit_diff <= 1e-4, report.max_abs_logit_diff
    assert report.argmax_agreement == 1.0
    assert report.tokenization_match, report.tokenization_mismatches


def test_agentic_check_counts_malformed_turns(quants):
    """The random tiny model never writes a protocol turn: every prompt is counted as failed, with its errors."""
    report = agentic_check(quants["Q4_K_M"], max_tokens=4, n_ctx=1024)
    assert report.n_prompts == len(AGENTIC_PROMPTS)
    assert report.n_failed == sum(not r["well_formed"] for r in report.results) == report.n_prompts
    assert all(r["errors"] for r in report.results)
    assert [r["name"] for r in report.results] == [name for name, _, _ in AGENTIC_PROMPTS]


def test_table_markdown_and_json():
    table = VerificationTable(reference="m-f16.gguf", calibration_tokens=64, rows=[
        VerificationRow("m-f16.gguf", "F16", 2**20, ppl=10.0, max_abs_logit_diff=1e-3, tokenization_match=True),
        VerificationRow("m-Q4_K_M.gguf", "Q4_K_M", 2**19, mean_kl=1e-3, top1_agreement=0.9, ppl=10.5, ppl_ratio=1.05,
                        agentic_failed=1, agentic_total=4, fallbacks=["blk.0.attn_q.weight: Q4_K -> Q5_0"]),
    ])
    markdown = table.to_markdown()
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| file"))
    rows = [line for line in lines if line.startswith("| m-")]
    assert len(rows) == 2 and all(row.count("|") == header.count("|") for row in rows), markdown
    assert "| 1/4 |" in rows[1] and "1.0500" in rows[1] and "—" in rows[0]
    assert "Fallbacks in m-Q4_K_M.gguf: blk.0.attn_q.weight: Q4_K -> Q5_0" in markdown
    data = json.loads(table.to_json())
    assert data["rows"][1]["mean_kl"] == 1e-3 and data["rows"][0]["mean_kl"] is None


def test_a_nan_figure_is_null_in_the_json_table():
    """A model that does not run (rope_theta -5 was accepted) gave "mean KL nan": table.json held NaN, which strict
    JSON readers refuse for the whole file."""
    table = VerificationTable(reference="m-f16.gguf", rows=[
        VerificationRow("m-Q8_0.gguf", "Q8_0", 2**19, mean_kl=float("nan"), ppl=float("inf"), ppl_ratio=1.0)])

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    row = json.loads(table.to_json(), parse_constant=refuse)["rows"][0]
    assert row["mean_kl"] is None and row["ppl"] is None and row["ppl_ratio"] == 1.0
