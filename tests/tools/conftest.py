"""Fixtures for the tool tests: real Python docs (Debian's python3.11-doc), a real HTTP server on 127.0.0.1,
a corpus index built once per session, and a scripted completer standing in for the local model."""

from __future__ import annotations

import gzip
import shutil
import ssl
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest
from charset_pages import CHARSET_PAGES  # tests/tools is on sys.path (pytest's prepend import mode)
from line_break_pages import LINE_BREAK_PAGES

from venus_edge.tools.corpus import Corpus

DOCS_ROOT = Path("/usr/share/doc/python3.11/html")
# A small slice of the docs: the pages the ranking tests expect first, and pages that compete with them.
SUBSET_PAGES = (
    "library/tomllib.html",
    "library/pickle.html",
    "library/shelve.html",
    "library/marshal.html",
    "library/json.html",
    "library/copyreg.html",
    "library/configparser.html",
    "library/fileformats.html",
    "library/asyncio-task.html",
    "library/os.path.html",
    "library/pathlib.html",
    "library/functools.html",
    "tutorial/inputoutput.html",
    "whatsnew/3.11.html",
    "faq/library.html",
)
SLOW_S = 2.0  # the /slow endpoint sleeps this long; tests use read timeouts of 0.5 s
HUGE_BYTES = 2_000_000  # /huge streams this many bytes; tests use max_bytes of 100_000


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback requests must not go through a proxy from the environment (as httpx's own conftest does)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def docs_root() -> Path:
    if not (DOCS_ROOT / "library" / "tomllib.html").is_file():
        pytest.skip(f"Debian's python3.11-doc is not installed (expected {DOCS_ROOT}); apt-get install python3.11-doc")
    return DOCS_ROOT


@pytest.fixture(scope="session")
def docs_subset(docs_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``SUBSET_PAGES`` in a temporary folder (so tests may also modify it)."""
    folder = tmp_path_factory.mktemp("pydocs-subset")
    for page in SUBSET_PAGES:
        (folder / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(docs_root / page, folder / page)
    return folder


@pytest.fixture(scope="session")
def subset_corpus(docs_subset: Path, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return Corpus.open(docs_subset, index_dir=tmp_path_factory.mktemp("subset-index"), name="pydocs")


class ScriptedCompleter:
    """Stands in for the local model: returns canned replies in order and records every call."""

    def __init__(self, replies: Sequence[str | Exception]) -> None:
        self.replies = list(replies)
        self.calls: list[list[dict[str, str]]] = []

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        self.calls.append([dict(m) for m in messages])
        reply = self.replies[min(len(self.calls), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply


def build_pdf(pages: Sequence[Sequence[str]], *, flate_streams: Sequence[bytes] = ()) -> bytes:
    """A minimal valid PDF 1.4 written by hand: one Helvetica text line per string, real xref offsets.

    ``pages`` holds each page's lines (ASCII); a page with no lines has an empty content stream (like a scan).
    ``flate_streams`` are raw content streams of further pages, written FlateDecode-compressed.
    """
    contents = [_page_stream(lines) for lines in pages]
    contents += [(b" /Filter /FlateDecode", zlib.compress(raw, 9)) for raw in flate_streams]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(contents)))
    bodies = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(contents)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, (filters, stream) in enumerate(contents):
        bodies.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {5 + 2 * i} 0 R >>".encode()
        )
        bodies.append(b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(stream), filters, stream))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(bodies, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(bodies) + 1, xref)
    return bytes(out)


def _page_stream(lines: Sequence[str]) -> tuple[bytes, bytes]:
    """(no filter, the content stream showing ``lines``); empty for a page without lines."""
    if not lines:
        return b"", b""
    escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
    return b"", ("BT /F1 11 Tf 14 TL 72 740 Td " + " T* ".join(f"({line}) Tj" for line in escaped) + " ET").encode()


# A two-page report; the tests' goal ("boiling point of the sample") is answered on page 2 only.
REPORT_PAGES = (
    (
        "Field report on sample KX-7 (draft)",
        "This report describes the handling of sample KX-7 in the laboratory during the spring campaign.",
        "The sample arrived sealed and was stored at four degrees until the measurements began in April.",
    ),
    (
        "Measurements",
        "The measured boiling point of the sample was 412 kelvin at sea level pressure (the (corrected) value).",
        "Its density at room temperature was 1.3 grams per cubic centimetre, slightly above the estimate.",
    ),
)
REPORT_PDF = build_pdf(REPORT_PAGES)


# A single-page-app shell as create-react-app writes it: a title, scripts, a noscript notice, an empty root.
JS_SHELL_HTML = b"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Acme dashboard</title>
<script defer src="/static/js/main.3f2a9c.js"></script><link href="/static/css/main.css" rel="stylesheet"></head>
<body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div>
<script>window.__INITIAL_STATE__={"user":null,"items":[1,2,3]};</script></body></html>"""
GZIP_PAGE = gzip.compress(b"<html><body><p>The frobnicator was compressed with gzip for transport.</p></body></html>")
GZIP_BOMB = gzip.compress(b"\0" * 40_000_000, compresslevel=9)
TOGETHER_PARTIES = 3
TOGETHER_TIMEOUT_S = 5.0


class _Handler(BaseHTTPRequestHandler):
    """Routes: /docs/<path> (Python docs), /403, /404 (unknown path), /slow, /huge, /huge-declared, /loop,
    /redirect-to-docs, /redirect-private, /binary, /octet, /empty, /js-shell (a single-page-app shell), /text, /pdf,
    /pdf-octet (a PDF sent as application/octet-stream), /pdf-broken, /pdf-scan (a page without text),
    /together-<name> (answers only once ``TOGETHER_PARTIES`` such requests are in flight at the same time),
    /charset/<name> (``CHARSET_PAGES``: pages in other encodings, declared in other places), /gzip (a gzip-encoded
    page), /lines/<name> (``LINE_BREAK_PAGES``: lines separated by <br> and its siblings), /gzip-bomb (40 KB of gzip
    that inflate to 40 MB), /gzip-twice (two stacked layers), /gzip-broken (declared
    gzip, not gzip), /drip (headers sent a byte every 0.2 s), /hop-<n> (waits 0.4 s, then redirects to /hop-<n+1>)."""

    docs_root: Path = DOCS_ROOT
    protocol_version = "HTTP/1.1"
    together = threading.Barrier(TOGETHER_PARTIES, timeout=TOGETHER_TIMEOUT_S)

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.startswith("/docs/"):
            file = (self.docs_root / path[len("/docs/") :]).resolve()
            if file.is_file() and self.docs_root in file.parents:
                return self._send(200, "text/html; charset=utf-8", file.read_bytes())
        routes = {
            "/403": lambda: self._send(403, "text/html", b"<html><body>Forbidden</body></html>"),
            "/slow": self._slow,
            "/huge": self._huge,
            "/huge-declared": lambda: self._send(200, "text/html", b"x" * HUGE_BYTES),
            "/loop": lambda: self._redirect("/loop"),
            "/redirect-to-docs": lambda: self._redirect("/docs/library/tomllib.html"),
            "/redirect-private": lambda: self._redirect("http://10.0.0.1/secret"),
            "/binary": lambda: self._send(200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4),
            "/octet": lambda: self._send(200, "", b"\x00\x01\x02binary\x00" * 100),
            "/empty": lambda: self._send(200, "text/html", b"<html><head></head><body></body></html>"),
            "/js-shell": lambda: self._send(200, "text/html; charset=utf-8", JS_SHELL_HTML),
            "/gzip": lambda: self._send(200, "text/html", GZIP_PAGE, encoding="gzip"),
            "/gzip-bomb": lambda: self._send(200, "text/html", GZIP_BOMB, encoding="gzip"),
            "/gzip-twice": lambda: self._send(200, "text/html", gzip.compress(GZIP_PAGE), encoding="gzip, gzip"),
            "/gzip-broken": lambda: self._send(200, "text/html", b"this is not gzip at all" * 10, encoding="gzip"),
            "/drip": self._drip,
            "/text": lambda: self._send(200, "text/plain; charset=utf-8", _PLAIN_TEXT.encode()),
            "/pdf": lambda: self._send(200, "application/pdf", REPORT_PDF),
            "/pdf-octet": lambda: self._send(200, "application/octet-stream", REPORT_PDF),
            "/pdf-broken": lambda: self._send(200, "application/pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Cat"),
            "/pdf-scan": lambda: self._send(200, "application/pdf", build_pdf([[]])),
        }
        if path.startswith("/charset/") and path[len("/charset/"):] in CHARSET_PAGES:
            content_type, body = CHARSET_PAGES[path[len("/charset/"):]]
            return self._send(200, content_type, body)
        if path.startswith("/lines/") and unquote(path[len("/lines/"):]) in LINE_BREAK_PAGES:
            content_type, body, _ = LINE_BREAK_PAGES[unquote(path[len("/lines/"):])]
            return self._send(200, content_type, body)
        if path.startswith("/together-"):
            return self._together(path)
        if path.startswith("/hop-"):
            time.sleep(0.4)
            return self._redirect(f"/hop-{int(path[len('/hop-'):]) + 1}")
        routes.get(path, lambda: self._send(404, "text/html", b"<html><body>Not found</body></html>"))()

    def _send(self, status: int, content_type: str, body: bytes, encoding: str = "") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _together(self, path: str) -> None:
        """Wait for the other parties; a request that arrives alone times out and gets a 503."""
        try:
            self.together.wait()
        except threading.BrokenBarrierError:
            self.together.reset()
            return self._send(503, "text/plain", b"the other requests never came")
        body = f"<html><body><p>{path[len('/together-'):]} arrived together with the others.</p></body></html>"
        self._send(200, "text/html", body.encode())

    def _drip(self) -> None:
        """Status line, then header bytes one at a time: every read is quick, the whole never ends in time."""
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            for _ in range(100):
                self.wfile.write(b"a")
                self.wfile.flush()
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _slow(self) -> None:
        time.sleep(SLOW_S)
        self._send(200, "text/html", b"<html><body><p>late</p></body></html>")

    def _huge(self) -> None:
        """A chunked body with no Content-Length: only counting while streaming catches it."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"y" * 65536
        try:
            for _ in range(HUGE_BYTES // len(chunk)):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


_PLAIN_TEXT = """Release notes

The frobnicator now accepts a timeout in seconds.

Unrelated paragraph about the weather, which is sunny with a light breeze from the west today.
"""


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up (timeout, size limit) leaves a broken pipe here; that is expected."""


class LocalServer:
    """The fixture HTTP server on 127.0.0.1 in a thread; ``stop()`` shuts it down and frees the port.

    With ``tls`` (an ``ssl.SSLContext`` holding the server certificate) it serves HTTPS instead.
    """

    def __init__(self, docs_root: Path, tls: ssl.SSLContext | None = None) -> None:
        handler = type("Handler", (_Handler,), {"docs_root": docs_root})
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.port = self._server.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self.running = False


@pytest.fixture(scope="session")
def server_url(docs_root: Path) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:<port>``) of a threaded HTTP server running for the session."""
    server = LocalServer(docs_root)
    yield server.url
    server.stop()


@pytest.fixture
def local_server(docs_root: Path) -> Iterator[LocalServer]:
    """A server of the test's own, which the test may stop (to prove that nothing reaches the network after)."""
    server = LocalServer(docs_root)
    yield server
    server.stop()


@pytest.fixture
def scripted_completer() -> type[ScriptedCompleter]:
    """The ``ScriptedCompleter`` class, for tests to build with their own replies."""
    return ScriptedCompleter


@pytest.fixture(scope="session")
def report_pdf() -> bytes:
    """A two-page PDF with text (``REPORT_PAGES``)."""
    return REPORT_PDF


@pytest.fixture
def pdf_samples() -> dict[str, bytes]:
    """PDF bytes: ``report`` (two pages, text), ``scan`` (a page without text), ``broken`` (truncated)."""
    return {"report": REPORT_PDF, "scan": build_pdf([[]]), "broken": b"%PDF-1.4\n1 0 obj\n<< /Type /Cat"}


@pytest.fixture
def slow_pdf() -> Callable[[int], bytes]:
    """``slow_pdf(n)``: a one-page PDF whose compressed content stream holds ``n`` text operators (a few KB
    that keep pypdf busy for seconds when ``n`` is in the hundreds of thousands)."""
    return lambda operators: build_pdf(
        [], flate_streams=[b"BT /F1 12 Tf 72 720 Td " + b"(walrus) Tj 0 -1 Td " * operators + b"ET"]
    )


@pytest.fixture
def tls_server(docs_root: Path, tmp_path: Path) -> Iterator[tuple[LocalServer, ssl.SSLContext]]:
    """An HTTPS server on 127.0.0.1 whose self-signed certificate names only ``docs.example``, and a client TLS
    context that trusts that certificate. Needs the ``openssl`` command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=docs.example",
         "-addext", "subjectAltName=DNS:docs.example", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server = LocalServer(docs_root, tls=server_context)
    yield server, ssl.create_default_context(cafile=str(cert))
    server.stop()
