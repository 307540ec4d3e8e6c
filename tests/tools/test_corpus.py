"""Corpus: indexing real documents, reload from disk, ranking, snippets, reading by URL, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from venus_edge.tools.corpus import (
    Corpus,
    DocumentNotFoundError,
    EmptyCorpusError,
    IndexStats,
    UnreadableDocumentError,
    make_snippet,
)
from venus_edge.tools.visit import VisitTool


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


@pytest.mark.parametrize("texts", [{"a.md": "# x"}, {"a.txt": "the a an", "b.txt": "1 2 3\n4"}, {"c.txt": "?!"}])
def test_documents_without_a_word_to_search_are_an_empty_corpus(tmp_path: Path, texts: dict[str, str]) -> None:
    """Readable documents that hold no term (a one-letter title, stop words, numbers alone: bm25s cannot index them)
    are refused with the folder and the files named, and nothing is cached; one document with a word is enough."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(EmptyCorpusError, match=r"has a word to search for") as info:
        Corpus.open(folder, index_dir=tmp_path / "index")
    assert str(folder) in str(info.value) and all(name in str(info.value) for name in texts)
    (folder / "z.txt").write_text("tomllib parses TOML", encoding="utf-8")
    corpus = Corpus.open(folder, index_dir=tmp_path / "index")
    assert corpus.search("tomllib")[0].url.endswith("z.txt")


def test_full_python_docs(docs_root: Path, tmp_path: Path) -> None:
    """The whole Python documentation: indexed once, reopened from disk without reading a page, the right page
    first (times are in benchmarks/bench_tools.py)."""
    corpus = Corpus.open(docs_root, index_dir=tmp_path / "index", name="pydocs")
    again = Corpus.open(docs_root, index_dir=tmp_path / "index", name="pydocs")
    assert corpus.stats.extracted == len(corpus) >= 500, corpus.stats
    assert again.loaded_from_cache and again.stats.extracted == 0 and len(again) == len(corpus)
    expected_pages = [("when was tomllib added", "library/tomllib.html"),
                      ("default pickle protocol", "library/pickle.html")]
    for query, page in expected_pages:
        assert again.search(query, k=1)[0].url == f"corpus://pydocs/{page}", query


def test_pdfs_are_indexed_read_and_broken_ones_skipped(tmp_path: Path, pdf_samples: dict[str, bytes]) -> None:
    """A PDF is searchable and readable as text; a broken or text-less PDF is listed in ``skipped``, not fatal."""
    folder = tmp_path / "papers"
    folder.mkdir()
    for name, data in pdf_samples.items():
        (folder / f"{name}.pdf").write_bytes(data)
    (folder / "notes.md").write_text("# Notes\n\nNothing about kelvin here.\n", encoding="utf-8")
    corpus = Corpus.open(folder, index_dir=tmp_path / "index")
    assert len(corpus) == 2 and set(corpus.skipped) == {"broken.pdf", "scan.pdf"}, corpus.skipped
    assert "no text layer" in corpus.skipped["scan.pdf"] and "could not be read" in corpus.skipped["broken.pdf"]
    hits = corpus.search("measured boiling point in kelvin")
    assert hits[0].url == "corpus://papers/report.pdf" and "412 kelvin" in hits[0].snippet, hits
    assert hits[0].title == "Field report on sample KX-7 (draft)"
    document = corpus.read(hits[0].url)
    assert document.content_type == "application/pdf" and "412 kelvin" in document.html_or_text
    with pytest.raises(UnreadableDocumentError, match=r"broken\.pdf cannot be read: the PDF could not be read"):
        corpus.read("corpus://papers/broken.pdf")

    # visit reads the PDF's second page for the goal, and a PDF broken after indexing is a typed failure
    result = VisitTool(corpora=[corpus])({"url": [hits[0].url], "goal": "boiling point of the sample"})
    assert result.visited_urls == (hits[0].url,) and "412 kelvin" in result.text
    (folder / "report.pdf").write_bytes(b"%PDF-1.4 truncated")
    broken = VisitTool(corpora=[corpus])({"url": [hits[0].url], "goal": "boiling point"})
    assert [f.kind for f in broken.failures] == ["not_text"] and broken.visited_urls == ()


def test_reindex_extracts_only_new_and_changed_files(tmp_path: Path) -> None:
    """Incremental indexing: unchanged files keep their saved text, skipped files are not retried."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(5):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nwidget number {i}\n", encoding="utf-8")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 broken")
    index = tmp_path / "index"
    first = Corpus.open(folder, index_dir=index)
    assert first.stats == IndexStats(extracted=6, reused=0, removed=0, skipped=1)

    (folder / "n1.md").write_text("# Note 1\n\nthe frobnicator moved here\n", encoding="utf-8")
    (folder / "n4.md").unlink()
    (folder / "new.txt").write_text("New\n\nanother frobnicator\n", encoding="utf-8")
    second = Corpus.open(folder, index_dir=index)
    assert not second.loaded_from_cache
    assert second.stats == IndexStats(extracted=2, reused=4, removed=1, skipped=1)
    assert {h.url for h in second.search("frobnicator")} == {"corpus://notes/n1.md", "corpus://notes/new.txt"}
    assert second.search("widget number 4") and all("n4.md" not in h.url for h in second.search("widget"))

    third = Corpus.open(folder, index_dir=index)
    assert third.loaded_from_cache and third.stats.extracted == 0 and third.skipped == second.skipped


def test_folder_of_only_unreadable_files_is_an_empty_corpus(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.4 broken")
    with pytest.raises(EmptyCorpusError, match=r"a\.pdf"):
        Corpus.open(tmp_path, index_dir=tmp_path / "index")


def test_links_pipes_and_odd_file_names_do_not_break_the_corpus(tmp_path: Path) -> None:
    """A dangling link and a FIFO named like documents are passed over; a file name that is not UTF-8 gets a URL
    that reads back."""
    folder = tmp_path / "c#notes"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nThe frobnicator is here.\n", encoding="utf-8")
    (folder / "dead.txt").symlink_to(tmp_path / "nowhere.txt")
    os.mkfifo(folder / "pipe.txt")
    odd = os.fsencode(folder) + b"/caf\xe9.txt"
    with open(odd, "wb") as out:
        out.write(b"Cafe notes\n\nThe frobnicator also visits the cafe.\n")
    corpus = Corpus.open(folder, index_dir=tmp_path / "index")
    assert corpus.name == "c-notes" and len(corpus) == 2
    urls = sorted(hit.url for hit in corpus.search("frobnicator"))
    assert urls == ["corpus://c-notes/caf%E9.txt", "corpus://c-notes/good.md"]
    assert "visits the cafe" in corpus.read(urls[0]).html_or_text
    with pytest.raises(ValueError, match="URL host"):
        Corpus.open(folder, index_dir=tmp_path / "index", name="bad name")


def test_a_link_out_of_the_folder_is_never_indexed_searched_or_read(tmp_path: Path) -> None:
    """A document is a file under the folder. A link to a file outside it (a secret, ``/proc/self/environ``) is
    listed as skipped and its text is in no search, no read and no saved index; a link inside the folder is
    followed; a document that becomes a link after indexing is refused at read."""
    outside = tmp_path / "secret.txt"
    outside.write_text("The passphrase is zanzibarquokka.\n", encoding="utf-8")
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "real.md").write_text("# Real\n\nThe frobnicator lives here.\n", encoding="utf-8")
    (folder / "good.md").write_text("# Good\n\nThe frobnicator is fine.\n", encoding="utf-8")
    (folder / "inner.txt").symlink_to(folder / "sub" / "real.md")
    (folder / "leak.txt").symlink_to(outside)
    (folder / "env.txt").symlink_to("/proc/self/environ")
    index = tmp_path / "index"
    corpus = Corpus.open(folder, index_dir=index)
    assert sorted(corpus.skipped) == ["env.txt", "leak.txt"]
    assert all("outside the corpus folder" in why for why in corpus.skipped.values()), corpus.skipped
    assert corpus.search("zanzibarquokka") == [] and len(corpus) == 3
    assert {hit.url for hit in corpus.search("frobnicator")} == {
        "corpus://docs/good.md", "corpus://docs/inner.txt", "corpus://docs/sub/real.md"}
    for name in ("leak.txt", "env.txt"):
        with pytest.raises(UnreadableDocumentError, match="outside the corpus folder"):
            corpus.read(f"corpus://docs/{name}")
    assert b"zanzibarquokka" not in b"".join(path.read_bytes() for path in index.rglob("*") if path.is_file())
    (folder / "good.md").unlink()
    (folder / "good.md").symlink_to(outside)
    with pytest.raises(UnreadableDocumentError, match="outside the corpus folder"):
        corpus.read("corpus://docs/good.md")


def test_a_loop_of_links_is_a_file_that_cannot_be_read_not_an_error_of_the_corpus(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("The frobnicator is in a.\n", encoding="utf-8")
    (folder / "b.txt").write_text("The frobnicator is in b.\n", encoding="utf-8")
    corpus = Corpus.open(folder, index_dir=tmp_path / "index")
    (folder / "a.txt").unlink()
    (folder / "a.txt").symlink_to("a.txt")  # a loop made after indexing
    with pytest.raises(DocumentNotFoundError, match=r"cannot read corpus://docs/a\.txt"):
        corpus.read("corpus://docs/a.txt")
    (folder / "b.txt").rename(folder / "b.bak")
    os.mkfifo(folder / "b.txt")  # a pipe in a document's place: a read would wait for a writer forever
    with pytest.raises(UnreadableDocumentError, match="not a regular file"):
        corpus.read("corpus://docs/b.txt")
    (folder / "b.txt").unlink()
    (folder / "b.bak").rename(folder / "b.txt")
    (folder / "c.txt").symlink_to("d.txt")
    (folder / "d.txt").symlink_to("c.txt")  # a loop seen at indexing: the manifest's stat passes it over
    again = Corpus.open(folder, index_dir=tmp_path / "index")
    assert [hit.url for hit in again.search("frobnicator")] == ["corpus://docs/b.txt"]


def test_a_file_the_system_refused_is_read_again_at_the_next_open(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Permission denied (``chmod 000``, then ``chmod 644``: neither mtime nor size changes), an I/O error: the
    refusal says nothing of the content, so the next open reads the file again; a broken PDF is not retried."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("The frobnicator is in a.\n", encoding="utf-8")
    (folder / "b.txt").write_text("Nothing to see in b.\n", encoding="utf-8")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 broken")
    index = tmp_path / "index"
    real_read = Path.read_bytes

    def refused(self: Path) -> bytes:
        if self.name == "a.txt":  # as for a file this user may not read (the tests run as root, which may)
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", refused)
    first = Corpus.open(folder, index_dir=index)
    assert "Permission denied" in first.skipped["a.txt"] and first.search("frobnicator") == []
    still = Corpus.open(folder, index_dir=index)  # tried again; still refused: the saved index stands, not rebuilt
    assert still.loaded_from_cache and "Permission denied" in still.skipped["a.txt"]
    monkeypatch.setattr(Path, "read_bytes", real_read)
    second = Corpus.open(folder, index_dir=index)
    assert "a.txt" not in second.skipped and [h.url for h in second.search("frobnicator")] == ["corpus://docs/a.txt"]
    assert not second.loaded_from_cache and second.stats.extracted == 1  # a.txt only; broken.pdf stays skipped
    assert "broken.pdf" in second.skipped
    third = Corpus.open(folder, index_dir=index)
    assert third.loaded_from_cache and third.stats.extracted == 0


def test_a_damaged_or_unwritable_cache_never_stops_the_corpus(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(4):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nkeyword{i} lives here\n", encoding="utf-8")
    index = tmp_path / "index"
    Corpus.open(folder, index_dir=index)
    lines = (index / "documents.jsonl").read_text(encoding="utf-8").splitlines()
    (index / "documents.jsonl").write_text("\n".join(lines[:1] + lines[2:]) + "\n", encoding="utf-8")  # one lost
    reopened = Corpus.open(folder, index_dir=index)
    assert not reopened.loaded_from_cache
    assert [hit.url for hit in reopened.search("keyword3")] == ["corpus://notes/n3.md"]
    for array in (index / "bm25").glob("*.npy"):
        array.write_bytes(b"")
    assert [hit.url for hit in Corpus.open(folder, index_dir=index).search("keyword1")] == ["corpus://notes/n1.md"]

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be", encoding="utf-8")
    corpus = Corpus.open(folder, index_dir=blocked / "index")
    assert len(corpus) == 4 and "could not be saved" in caplog.text


def test_search_matches_other_forms_of_a_word(tmp_path: Path) -> None:
    """Stemming: a query for "herd" finds "herds", "giraffe" finds "giraffes", and the snippet shows the word."""
    (tmp_path / "zoo.md").write_text("# Zoo\n\nThe giraffes graze in large herds near the river.\n", encoding="utf-8")
    (tmp_path / "other.md").write_text("# Other\n\nNothing about animals at all.\n", encoding="utf-8")
    corpus = Corpus.open(tmp_path, index_dir=tmp_path / "index", name="zoo")
    for query in ("herd", "giraffe", "grazing giraffe herd"):
        hits = corpus.search(query)
        assert [hit.url for hit in hits] == ["corpus://zoo/zoo.md"], query
        assert "giraffes graze in large herds" in hits[0].snippet


def test_chinese_documents_answer_chinese_queries(tmp_path: Path) -> None:
    """CJK text has no spaces: each character is a term, so a Chinese query finds the Chinese page."""
    (tmp_path / "toml.md").write_text(
        "# tomllib\n\ntomllib 模块在 Python 3.11 中被添加，用于解析 TOML 文件。\n", encoding="utf-8"
    )
    (tmp_path / "pickle.md").write_text("# pickle\n\npickle 模块的默认协议版本是 4。\n", encoding="utf-8")
    corpus = Corpus.open(tmp_path, index_dir=tmp_path / "index", name="zh")
    first = corpus.search("哪个版本添加了 tomllib 模块", k=1)[0]
    assert first.url == "corpus://zh/toml.md" and "被添加" in first.snippet
    assert corpus.search("默认协议", k=1)[0].url == "corpus://zh/pickle.md"


def test_html_without_a_charset_declaration_is_read_as_utf8(tmp_path: Path) -> None:
    (tmp_path / "zh.html").write_bytes("<html><body><p>长城在中国北方。𠮷野家 crème brûlée</p></body></html>".encode())
    (tmp_path / "other.md").write_text("# Other\n\nnothing\n", encoding="utf-8")
    corpus = Corpus.open(tmp_path, index_dir=tmp_path / "index", name="zh")
    for query in ("长城", "crème", "𠮷"):
        assert [hit.url for hit in corpus.search(query)] == ["corpus://zh/zh.html"], query


def _swap(first: Path, second: Path) -> None:
    swap = first.with_suffix(".swap")
    first.rename(swap)
    second.rename(first)
    swap.rename(second)


@pytest.mark.parametrize("damage", ["swap arrays", "edit texts", "drop checksums"])
def test_a_saved_index_that_fails_its_checksums_is_rebuilt_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                 damage: str) -> None:
    """Issue 25: two arrays of the same size swapped in the saved bm25 index loaded "from cache" and every search
    failed with IndexError, on every start. The manifest holds each file's SHA-256; a file that does not match it
    (arrays swapped, a text edited in place with its length kept, a manifest of an older version without checksums)
    makes the corpus rebuild, save a good index over the damaged one, and the next start load that."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(4):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nkeyword{i} lives here, with shared words\n", encoding="utf-8")
    index = tmp_path / "index"
    Corpus.open(folder, index_dir=index)
    bm25 = index / "bm25"
    data, indices = bm25 / "data.csc.index.npy", bm25 / "indices.csc.index.npy"
    assert data.stat().st_size == indices.stat().st_size  # same size: bm25s loads them swapped without a word
    if damage == "swap arrays":
        _swap(data, indices)
    elif damage == "edit texts":
        texts = index / "documents.jsonl"
        texts.write_text(texts.read_text(encoding="utf-8").replace("keyword2", "keyword9"), encoding="utf-8")
    else:
        manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
        del manifest["sha256"]
        (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    reopened = Corpus.open(folder, index_dir=index)
    assert not reopened.loaded_from_cache and "does not match its checksums" in caplog.text
    assert [hit.url for hit in reopened.search("keyword2")] == ["corpus://notes/n2.md"]
    again = Corpus.open(folder, index_dir=index)
    assert again.loaded_from_cache
    assert [hit.url for hit in again.search("keyword2")] == ["corpus://notes/n2.md"]


def test_files_are_read_as_their_bytes_say_not_as_their_suffix(tmp_path: Path, pdf_samples: dict[str, bytes]) -> None:
    """The local corpus's sibling of a type that lies: a PDF named ``.html`` is indexed and read as a PDF (never as
    raw ``%PDF-`` text), an image or archive named ``.html`` / ``.txt`` is skipped with what it is."""
    folder = tmp_path / "lying"
    folder.mkdir()
    (folder / "report.html").write_bytes(pdf_samples["report"])
    (folder / "photo.html").write_bytes(b"\x89PNG\r\n\x1a\n" + b"IHDR" * 50)
    (folder / "backup.txt").write_bytes(b"PK\x03\x04" + b"\x14" * 60)
    (folder / "notes.md").write_text("# Notes\n\nNothing about kelvin here.\n", encoding="utf-8")
    corpus = Corpus.open(folder, index_dir=tmp_path / "index")
    assert len(corpus) == 2 and set(corpus.skipped) == {"photo.html", "backup.txt"}, corpus.skipped
    assert "a PNG image by its first bytes" in corpus.skipped["photo.html"]
    assert "a zip archive by its first bytes" in corpus.skipped["backup.txt"]
    hits = corpus.search("measured boiling point in kelvin")
    assert hits[0].url == "corpus://lying/report.html" and "%PDF" not in hits[0].snippet, hits
    assert hits[0].title == "Field report on sample KX-7 (draft)"
    document = corpus.read(hits[0].url)
    assert document.content_type == "application/pdf" and "412 kelvin" in document.html_or_text
    assert "obj" not in document.html_or_text
    with pytest.raises(UnreadableDocumentError, match="a PNG image by its first bytes"):
        corpus.read("corpus://lying/photo.html")
