"""Fixtures for the tool tests: real Python docs (Debian's python3.11-doc), a real HTTP server on 127.0.0.1,
a corpus index built once per session, and a scripted completer standing in for the local model."""

from __future__ import annotations

import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import pytest

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


class _Handler(BaseHTTPRequestHandler):
    """Routes: /docs/<path> (Python docs), /403, /404 (unknown path), /slow, /huge, /huge-declared, /loop,
    /redirect-to-docs, /redirect-private, /binary, /octet, /empty, /text."""

    docs_root: Path = DOCS_ROOT
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
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
            "/text": lambda: self._send(200, "text/plain; charset=utf-8", _PLAIN_TEXT.encode()),
        }
        routes.get(path, lambda: self._send(404, "text/html", b"<html><body>Not found</body></html>"))()

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

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


@pytest.fixture(scope="session")
def server_url(docs_root: Path) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:<port>``) of a threaded HTTP server running for the session."""
    handler = type("Handler", (_Handler,), {"docs_root": docs_root})
    server = _QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def scripted_completer() -> type[ScriptedCompleter]:
    """The ``ScriptedCompleter`` class, for tests to build with their own replies."""
    return ScriptedCompleter
