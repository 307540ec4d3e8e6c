"""Line breaks are text: ``<br>`` (any spelling), ``\\n`` in ``<pre>`` and ``<wbr>`` (as nothing), wherever they
stand, read as the lines a browser shows, by visit (through a real HTTP server on 127.0.0.1), the corpus index and
the recall pass. Before, lines ran together (``tonightBravo``) or lost their breaks."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from line_break_pages import LINE_BREAK_PAGES

from venus_edge.tools.charset import decode_text
from venus_edge.tools.corpus import Corpus, extract_fields
from venus_edge.tools.passages import extract_passages, parse_page
from venus_edge.tools.recall import page_lines, restore_dropped_text
from venus_edge.tools.visit import VisitTool

LOOPBACK = ["127.0.0.1/32"]
GOAL = {"Alpha": "harbour fishermen gulls", "Альфа": "гавани рыбаки чайки"}


def _page_text(name: str) -> tuple[str, str]:
    content_type, body, _ = LINE_BREAK_PAGES[name]
    return decode_text(body, content_type, markup=True), content_type.split(";")[0]


@pytest.mark.parametrize("name", LINE_BREAK_PAGES)
def test_visit_reads_each_line_apart(server_url: str, name: str) -> None:
    """Extractive visit (no completer): the evidence is the page's lines, one per line, first and last kept."""
    lines = LINE_BREAK_PAGES[name][2]
    url = f"{server_url}/lines/{quote(name)}"
    with VisitTool(allowed_networks=LOOPBACK) as visit:
        result = visit({"url": [url], "goal": GOAL[lines[0].split()[0]]})
    evidence = result.text.split("Evidence in page: \n", 1)[1].split("\n\nSummary:", 1)[0]
    assert not result.failures and evidence == "\n".join(lines), result.text


@pytest.mark.parametrize("name", LINE_BREAK_PAGES)
def test_passages_are_the_lines(name: str) -> None:
    text, content_type = _page_text(name)
    assert extract_passages(text, content_type) == ["\n".join(LINE_BREAK_PAGES[name][2])]


@pytest.mark.parametrize("name", LINE_BREAK_PAGES)
def test_corpus_index_keeps_words_apart(tmp_path: Path, name: str) -> None:
    """The index pass reads ``tonight Bravo``, not ``tonightBravo``: the second and third lines' first words are
    terms that find the document."""
    _, body, lines = LINE_BREAK_PAGES[name]
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "page.html").write_bytes(body)
    corpus = Corpus.open(folder, index_dir=tmp_path / "index", name="docs")
    _, text, _ = extract_fields(decode_text(body, markup=True), Path("page.html"))
    assert " ".join(lines) in text, text  # (a page's footer follows: its block boundary is not a <br>)
    for line in lines[1:]:
        hits = corpus.search(line.split()[0], k=1)
        assert [hit.url for hit in hits] == ["corpus://docs/page.html"], line.split()[0]


@pytest.mark.parametrize("name", LINE_BREAK_PAGES)
def test_recall_pass_reads_the_lines_and_restores_a_dropped_first_line(name: str) -> None:
    """The recall pass sees the page's lines as a browser breaks them; when the main pass dropped the first line
    and ran the others together with spaces, it puts the first back and the others apart."""
    text, _ = _page_text(name)
    lines = list(LINE_BREAK_PAGES[name][2])
    tree = parse_page(text)
    assert tree is not None
    assert page_lines(tree)[: len(lines)] == lines
    assert restore_dropped_text(tree, [" ".join(lines[1:])]) == [lines[0], "\n".join(lines[1:])]


@pytest.mark.parametrize(
    ("html", "passages"),
    [
        ("<html><body><p>foo<br>bar</p></body></html>", ["foo\nbar"]),
        ("<html><body>foo<br>bar</body></html>", ["foo\nbar"]),
        ("<html><body><p>super<wbr>cali<wbr>fragilistic</p></body></html>", ["supercalifragilistic"]),
    ],
    ids=["in p", "in body", "wbr"],
)
def test_a_tiny_page_read_without_main_content_keeps_its_lines(html: str, passages: list[str]) -> None:
    """trafilatura finds no main content in a page this small; the page's own lines stand in."""
    assert extract_passages(html, "text/html") == passages
