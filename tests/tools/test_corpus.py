"""Corpus: indexing real documents, reload from disk, ranking, snippets, reading by URL, errors."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from venus_edge.tools.corpus import Corpus, DocumentNotFoundError, EmptyCorpusError, make_snippet


def test_subset_indexes_every_page(subset_corpus: Corpus, docs_subset: Path) -> None:
    """Every accepted file under the folder becomes one document with its HTML title."""
    pages = sorted(p.relative_to(docs_subset).as_posix() for p in docs_subset.rglob("*.html"))
    assert len(subset_corpus) == len(pages), (len(subset_corpus), pages)
    hit = subset_corpus.search("tomllib", k=1)[0]
    assert hit.title.startswith("tomllib — Parse TOML files"), hit.title


@pytest.mark.parametrize(
    ("query", "page"),
    [
        ("tomllib", "library/tomllib.html"),
        ("when was tomllib added", "library/tomllib.html"),
        ("default pickle protocol", "library/pickle.html"),
    ],
)
def test_right_page_ranks_first(subset_corpus: Corpus, query: str, page: str) -> None:
    hits = subset_corpus.search(query, k=5)
    assert [h.url for h in hits][:1] == [f"corpus://pydocs/{page}"], [h.url for h in hits]


def test_snippet_is_short_and_holds_query_terms(subset_corpus: Corpus) -> None:
    hit = subset_corpus.search("default pickle protocol", k=1)[0]
    assert len(hit.snippet) <= 250, len(hit.snippet)
    assert "default" in hit.snippet.lower() and "protocol" in hit.snippet.lower(), hit.snippet


def test_make_snippet_marks_cuts_and_picks_densest_window() -> None:
    text = "alpha " * 100 + "the default pickle protocol is four " + "omega " * 100
    snippet = make_snippet(text, ["default", "pickle", "protocol"], width_chars=80)
    assert snippet.startswith("...") and snippet.endswith("..."), snippet
    assert "default pickle protocol" in snippet, snippet
    assert make_snippet("short text", ["absent"]) == "short text"


def test_unknown_or_stopword_query_returns_nothing(subset_corpus: Corpus) -> None:
    assert subset_corpus.search("zzyzxqwv", k=10) == []
    assert subset_corpus.search("the of and", k=10) == []


def test_read_returns_the_raw_document(subset_corpus: Corpus, docs_subset: Path) -> None:
    url = "corpus://pydocs/library/pickle.html#data-stream-format"
    doc = subset_corpus.read(url)
    assert doc.content_type == "text/html"
    assert doc.html_or_text == (docs_subset / "library/pickle.html").read_text(encoding="utf-8")
    assert doc.title.startswith("pickle"), doc.title


@pytest.mark.parametrize(
    "url",
    [
        "corpus://pydocs/library/nope.html",
        "corpus://other/library/pickle.html",
        "corpus://pydocs/../../../etc/passwd",
        "https://docs.python.org/3/library/pickle.html",
    ],
)
def test_read_unknown_url_raises_not_found(subset_corpus: Corpus, url: str) -> None:
    with pytest.raises(DocumentNotFoundError):
        subset_corpus.read(url)


def test_second_open_reloads_from_disk_and_change_reindexes(tmp_path: Path) -> None:
    """An unchanged folder loads the saved index; a changed file (size/mtime) triggers a rebuild."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe frobnicator accepts a timeout.\n", encoding="utf-8")
    (folder / "b.txt").write_text("Bravo notes\n\nNothing about timeouts here, only widgets.\n", encoding="utf-8")
    (folder / "skip.bin").write_bytes(b"\x00")
    index = tmp_path / "index"
    first = Corpus.open(folder, index_dir=index)
    assert not first.loaded_from_cache and len(first) == 2 and first.name == "notes"
    second = Corpus.open(folder, index_dir=index)
    assert second.loaded_from_cache
    assert [h.url for h in second.search("frobnicator")] == ["corpus://notes/a.md"]
    assert second.read("corpus://notes/a.md").title == "Alpha"
    assert second.read("corpus://notes/b.txt").content_type == "text/plain"

    (folder / "b.txt").write_text("Bravo notes\n\nThe frobnicator grew a second mode.\n\n", encoding="utf-8")
    third = Corpus.open(folder, index_dir=index)
    assert not third.loaded_from_cache
    assert {h.url for h in third.search("frobnicator")} == {"corpus://notes/a.md", "corpus://notes/b.txt"}


def test_default_index_dir_is_under_the_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "x.txt").write_text("Xylophone\n", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    Corpus.open(folder)
    manifests = list((tmp_path / "cache" / "venus-edge" / "corpus").glob("*/manifest.json"))
    assert len(manifests) == 1, manifests


def test_empty_corpus_error_names_folder_and_extensions(tmp_path: Path) -> None:
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / "_sources").mkdir()
    (tmp_path / "_sources" / "page.txt").write_text("skipped: Sphinx build folder", encoding="utf-8")
    with pytest.raises(EmptyCorpusError) as info:
        Corpus.open(tmp_path, index_dir=tmp_path / "index")
    message = str(info.value)
    assert str(tmp_path) in message and ".html" in message and ".md" in message and ".txt" in message, message


def test_full_python_docs(docs_root: Path, tmp_path: Path) -> None:
    """The whole Python documentation: indexing and reload times, and the right page first."""
    start = time.perf_counter()
    corpus = Corpus.open(docs_root, index_dir=tmp_path / "index", name="pydocs")
    index_s = time.perf_counter() - start
    start = time.perf_counter()
    again = Corpus.open(docs_root, index_dir=tmp_path / "index", name="pydocs")
    reopen_s = time.perf_counter() - start
    assert again.loaded_from_cache and len(again) == len(corpus) >= 500, len(corpus)
    assert reopen_s < index_s, (reopen_s, index_s)
    for query, page in [("when was tomllib added", "library/tomllib.html"), ("default pickle protocol", "library/pickle.html")]:
        assert again.search(query, k=1)[0].url == f"corpus://pydocs/{page}", query
    print(f"\nfull docs: {len(corpus)} pages, index {index_s:.2f} s, reopen {reopen_s:.3f} s ({os.cpu_count()} cpus)")
