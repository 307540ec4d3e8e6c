"""Pages and files decode as a browser decodes them: BOM, then the Content-Type header, then <meta charset> /
http-equiv (or an XML declaration), then detection; one decoder for visit and the corpus."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from charset_pages import CHARSET_CASES, GERMAN

from venus_edge.tools.charset import decode_text
from venus_edge.tools.corpus import Corpus
from venus_edge.tools.fetch import FetchLimits, fetch_page
from venus_edge.tools.visit import VisitTool

LOOPBACK = ["127.0.0.1/32"]


@pytest.mark.parametrize("name", CHARSET_CASES)
def test_a_fetched_page_reads_as_a_browser_shows_it(server_url, name):
    _, _, shown = CHARSET_CASES[name]
    with httpx.Client() as client:
        page = fetch_page(client, f"{server_url}/charset/{name}", FetchLimits(), allowed_networks=LOOPBACK)
    assert shown in page.text, page.text[:200]
    assert "\ufffd" not in page.text


@pytest.mark.parametrize("name", [n for n, (kind, _, _) in CHARSET_CASES.items() if "charset=" not in kind])
def test_a_corpus_file_reads_with_the_same_decoder(tmp_path: Path, name):
    """A file has no header: BOM, its own declaration, then detection, as for a page without a charset."""
    content_type, body, shown = CHARSET_CASES[name]
    suffix = ".txt" if content_type.startswith("text/plain") else ".html"
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / f"page{suffix}").write_bytes(body)
    corpus = Corpus.open(folder, index_dir=tmp_path / "index", name="docs")
    assert shown in corpus.read(f"corpus://docs/page{suffix}").html_or_text
    term = shown.split()[2] if " " in shown else shown[:2]
    assert corpus.search(term, k=1), "the decoded words are indexed"


def test_visit_reads_a_windows_1252_page_declared_only_in_meta(server_url):
    """The fault report's page: windows-1252 declared only in <meta>, which read as 'f\\ufffdr' before."""
    with VisitTool(allowed_networks=LOOPBACK) as visit:
        result = visit({"url": [f"{server_url}/charset/meta-charset-1252"], "goal": "Grüße für Müller"})
    assert not result.failures and "Grüße für Müller" in result.text and "\ufffd" not in result.text


@pytest.mark.parametrize("encoding", ["cp1252", "utf-8", "koi8-r", "shift_jis", "gb18030", "utf-16"])
def test_decode_text_without_any_declaration(encoding):
    text = {"cp1252": GERMAN, "utf-8": GERMAN, "koi8-r": CHARSET_CASES["meta-single-quoted"][2],
            "shift_jis": CHARSET_CASES["meta-shift-jis"][2], "gb18030": CHARSET_CASES["meta-gbk"][2],
            "utf-16": GERMAN}[encoding]
    assert text in decode_text(f"<p>{text}</p>".encode(encoding), markup=True)


@pytest.mark.parametrize("label", ["undefined", "hex", "base64", "rot13", "zlib", "idna", "cp037", "utf8mb4", "none"])
@pytest.mark.parametrize("where", ["header", "meta"])
def test_labels_browsers_ignore_are_ignored(label, where):
    """A label that names no web encoding (a template's 'undefined', a Python-only codec, EBCDIC) does not decide
    the encoding and never raises: the page falls through to detection, as in a browser."""
    body = _page("Grüße für Müller", f'<meta charset="{label}">' if where == "meta" else "").encode("utf-8")
    header = f"text/html; charset={label}" if where == "header" else "text/html"
    assert "Grüße für Müller" in decode_text(body, header, markup=True)


def test_a_utf16_meta_on_a_page_without_a_bom_means_utf8():
    body = _page("深度研究 Grüße", '<meta charset="utf-16">').encode("utf-8")
    assert "深度研究 Grüße" in decode_text(body, "text/html", markup=True)


WESTERN = {
    "fr": "Le château de Versailles a été construit à la demande de Louis XIV ; les jardins s'étendent au loin.",
    "de": "Die Universität München wurde 1472 gegründet und ist für ihre Forschung bekannt.",
    "es": "La señora Peña vivió en Cádiz durante años y escribió canciones sobre el mar.",
    "pt": "A inauguração da ponte ocorreu em março; a população comemorou com música.",
    "en": "He said “this is the end” — and then, after a pause, left. It’s 5 € per ticket.",
    "short": "café",
}


@pytest.mark.parametrize("text", WESTERN.values(), ids=WESTERN.keys())
@pytest.mark.parametrize("markup", [False, True])
def test_undeclared_western_text_reads_as_windows_1252(text, markup):
    """charset-normalizer tells the Western code pages apart poorly (German comes back as cp775, Spanish as
    cp1250, 'café' as UTF-16); Latin-script text is windows-1252, the browser's fallback."""
    body = (_page(text) if markup else text).encode("cp1252")
    assert text in decode_text(body, None, markup=markup)


def test_detection_looks_where_the_non_ascii_bytes_are():
    body = ("plain ascii line\n" * 20_000 + "Grüße aus München").encode("cp1252")
    assert decode_text(body, None, markup=False).endswith("Grüße aus München")


def _page(text: str, head: str = "") -> str:
    return f"<html><head>{head}<title>t</title></head><body><p>{text}</p></body></html>"


def test_a_file_with_a_bogus_charset_does_not_stop_the_corpus(tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bogus.html").write_bytes(_page("Grüße aus Köln", '<meta charset="undefined">').encode("utf-8"))
    (folder / "plain.html").write_bytes(_page("tomllib parses TOML").encode("utf-8"))
    corpus = Corpus.open(folder, index_dir=tmp_path / "index", name="docs")
    assert len(corpus) == 2 and not corpus.skipped
    assert "Grüße aus Köln" in corpus.read("corpus://docs/bogus.html").html_or_text
