"""Tool-layer benchmarks on the Python docs (Debian python3.11-doc, 530 pages).

Run: ``.venv/bin/python -m pytest benchmarks/bench_tools.py --benchmark-only -q``

Measures: a cold index of the whole docs, a second open that reloads the index from disk, a re-index after one
page changed (only that page is read again), one search query, one extractive visit of a large page
(trafilatura + BM25 reduction), and the same visit replayed from a recording (``tools/replay.py``). Nothing
leaves the machine.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from venus_edge.tools.corpus import Corpus
from venus_edge.tools.replay import RecordingTool, ReplayTool
from venus_edge.tools.search import CorpusSearchBackend, SearchTool
from venus_edge.tools.visit import VisitTool

DOCS_ROOT = Path("/usr/share/doc/python3.11/html")

pytestmark = pytest.mark.skipif(not DOCS_ROOT.is_dir(), reason=f"python3.11-doc not installed at {DOCS_ROOT}")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bench-index")
    Corpus.open(DOCS_ROOT, index_dir=folder, name="pydocs")
    return folder


def test_index_full_docs_cold(benchmark, tmp_path: Path) -> None:
    def cold() -> Corpus:
        shutil.rmtree(tmp_path / "index", ignore_errors=True)
        return Corpus.open(DOCS_ROOT, index_dir=tmp_path / "index", name="pydocs")

    corpus = benchmark.pedantic(cold, rounds=3, iterations=1)
    assert len(corpus) >= 500


def test_open_full_docs_from_disk(benchmark, index_dir: Path) -> None:
    corpus = benchmark(Corpus.open, DOCS_ROOT, index_dir=index_dir, name="pydocs")
    assert corpus.loaded_from_cache


def test_search_query(benchmark, index_dir: Path) -> None:
    tool = SearchTool(CorpusSearchBackend(Corpus.open(DOCS_ROOT, index_dir=index_dir, name="pydocs")))
    result = benchmark(tool, {"query": ["default pickle protocol"]})
    assert "library/pickle.html" in result.text


def test_visit_extractive_large_page(benchmark, index_dir: Path) -> None:
    tool = VisitTool(corpora=[Corpus.open(DOCS_ROOT, index_dir=index_dir, name="pydocs")])
    arguments = {"url": ["corpus://pydocs/library/stdtypes.html"], "goal": "How does str.split handle maxsplit?"}
    result = benchmark(tool, arguments)
    assert result.visited_urls


def test_visit_replayed_from_recording(benchmark, index_dir: Path, tmp_path: Path) -> None:
    live = VisitTool(corpora=[Corpus.open(DOCS_ROOT, index_dir=index_dir, name="pydocs")])
    arguments = {"url": ["corpus://pydocs/library/stdtypes.html"], "goal": "How does str.split handle maxsplit?"}
    recorded = RecordingTool(live, tmp_path)(arguments)
    result = benchmark(ReplayTool.like(live, tmp_path), arguments)
    assert result == recorded


def test_reindex_after_one_page_changed(benchmark, tmp_path: Path) -> None:
    """Incremental indexing: one page of the copied docs changes; only it is read again, the BM25 index rebuilt."""
    folder = tmp_path / "html"
    shutil.copytree(DOCS_ROOT, folder, ignore=shutil.ignore_patterns("_*"))
    index = tmp_path / "index"
    Corpus.open(folder, index_dir=index, name="pydocs")
    page = folder / "library" / "tomllib.html"
    original = page.read_text(encoding="utf-8")

    def change_one_page_and_reopen() -> Corpus:
        page.write_text(original + f"<!-- edit {time.perf_counter_ns()} -->", encoding="utf-8")
        return Corpus.open(folder, index_dir=index, name="pydocs")

    corpus = benchmark.pedantic(change_one_page_and_reopen, rounds=3, iterations=1)
    assert corpus.stats.extracted == 1 and corpus.stats.reused == len(corpus) - 1
