"""A type that lies (issue 25, kind 8): ``visit`` reads a body's first bytes before trusting its ``Content-Type``.

A real HTTP server on 127.0.0.1 serves the same bodies under declared types that lie: a PDF as ``text/html``,
``text/plain``, with no type or with a wrong charset is read as the PDF it is; an archive, image, audio, video or
program as ``text/html`` is a ``not_text`` failure, never evidence and never a visited source; an
``application/octet-stream`` holding HTML is read as HTML.
"""

from __future__ import annotations

import bz2
import gzip
import io
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from venus_edge.tools import VisitTool
from venus_edge.tools.pdf import looks_like_pdf
from venus_edge.tools.sniff import binary_kind, looks_like_html
from venus_edge.tools.visit import UNREADABLE_EVIDENCE

GOAL = "boiling point of the sample in kelvin"
EVIDENCE = "The measured boiling point of the sample was 412 kelvin"
HTML_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Sample notes</title></head><body><main><p>"
             b"The measured boiling point of the sample was 412 kelvin, as the field notes record in detail."
             b"</p></main></body></html>")


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("page.html", HTML_PAGE)
    return buffer.getvalue()


BINARIES = {  # name -> (body, what the failure says it is)
    "gzip": (gzip.compress(HTML_PAGE), "a gzip archive"),  # compressed, but no Content-Encoding: not text
    "zip": (_zip(), "a zip archive"),
    "bzip2": (bz2.compress(HTML_PAGE), "a bzip2 archive"),
    "png": (b"\x89PNG\r\n\x1a\n" + b"IHDR" * 50, "a PNG image"),
    "jpeg": (b"\xff\xd8\xff\xe0" + b"JFIF" * 50, "a JPEG image"),
    "gif": (b"GIF89a" + b"\x01" * 100, "a GIF image"),
    "webp": (b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x01" * 100, "a WebP image"),
    "mp4": (b"\x00\x00\x00\x18ftypmp42" + b"\x01" * 100, "an MP4 or other ISO media file"),
    "elf": (b"\x7fELF\x02\x01\x01" + b"\x01" * 100, "an ELF executable"),
}
PDF_ROUTES = {  # a PDF under types that lie
    "/pdf-as-html": "text/html",
    "/pdf-as-html-utf8": "text/html; charset=utf-8",
    "/pdf-as-text": "text/plain",
    "/pdf-wrong-charset": "text/html; charset=utf-16",
    "/pdf-untyped": None,
}
ROUTES: dict[str, tuple[str | None, bytes]] = {
    **{f"/{name}-as-html": ("text/html; charset=utf-8", body) for name, (body, _) in BINARIES.items()},
    "/gzip-untyped": (None, gzip.compress(HTML_PAGE)),
    "/png-as-octet": ("application/octet-stream", BINARIES["png"][0]),
    "/html-as-octet": ("application/octet-stream", HTML_PAGE),
    "/html-as-octet-bom": ("application/octet-stream", b"\xef\xbb\xbf  <!-- generated -->\n" + HTML_PAGE),
    "/prose-as-octet": ("application/octet-stream", b"The measured boiling point was 412 kelvin. " * 10),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path not in ROUTES:
            self.send_error(404)
            return
        content_type, body = ROUTES[self.path]
        self.send_response(200)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def lying_server(report_pdf: bytes) -> Iterator[str]:
    ROUTES.update({path: (content_type, report_pdf) for path, content_type in PDF_ROUTES.items()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _visit(url: str):
    with VisitTool(allow_private=True) as tool:
        return tool({"url": url, "goal": GOAL})


@pytest.mark.parametrize("path", list(PDF_ROUTES))
def test_a_pdf_under_any_declared_type_is_read_as_a_pdf(lying_server: str, path: str) -> None:
    """The issue's case: a PDF served as text/html became evidence as raw ``%PDF-1.4 1 0 obj ...``."""
    result = _visit(f"{lying_server}{path}")
    assert result.failures == () and result.visited_urls == (f"{lying_server}{path}",), result.failures
    assert EVIDENCE in result.text and "%PDF" not in result.text and "obj" not in result.text, result.text[:400]


@pytest.mark.parametrize("path, kind", [
    *[(f"/{name}-as-html", kind) for name, (_, kind) in BINARIES.items()],
    ("/gzip-untyped", "a gzip archive"),
    ("/png-as-octet", "a PNG image"),
])
def test_a_binary_under_a_text_type_is_a_typed_failure_never_evidence(lying_server: str, path: str,
                                                                       kind: str) -> None:
    result = _visit(f"{lying_server}{path}")
    assert result.visited_urls == () and UNREADABLE_EVIDENCE in result.text, result.text[:400]
    assert [(f.kind, f.target) for f in result.failures] == [("not_text", f"{lying_server}{path}")]
    assert f"the body is {kind} by its first bytes" in result.failures[0].detail, result.failures[0].detail


@pytest.mark.parametrize("path", ["/html-as-octet", "/html-as-octet-bom"])
def test_html_served_as_octet_stream_is_read_as_html(lying_server: str, path: str) -> None:
    result = _visit(f"{lying_server}{path}")
    assert result.failures == () and result.visited_urls == (f"{lying_server}{path}",), result.failures
    assert EVIDENCE in result.text and "<html>" not in result.text, result.text[:400]


def test_an_octet_stream_that_is_neither_pdf_nor_html_stays_refused(lying_server: str) -> None:
    result = _visit(f"{lying_server}/prose-as-octet")
    assert result.visited_urls == () and [f.kind for f in result.failures] == ["not_text"]


def test_signatures_never_match_text() -> None:
    """No text document is taken for a binary: prose that starts with a signature's letters stays text."""
    texts = [b"ID3 tags hold the title of a song.", b"GIF images are small.", b"PK is a common abbreviation.",
             b"BZh is not bzip2 without its block magic.", b"RIFF in music is a repeated phrase.",
             b"\xef\xbb\xbf<p>text</p>", HTML_PAGE, b"%PDF is discussed below"]
    assert [binary_kind(text) for text in texts] == [None] * len(texts)
    assert looks_like_pdf(b"\n %PDF-1.7") and not looks_like_html(b"<p>no document start</p>")
