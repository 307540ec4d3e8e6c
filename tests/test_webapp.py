"""The research page as an installable web app (``venus_edge.server.webapp``), over real HTTP on a keyed server:
the manifest parses and names icons that are served with their types, and the service worker's cache list is the
page shell, open without the key, with no API path in it. The worker registering in a browser is in
tests/test_page.py."""

from __future__ import annotations

import io
import json
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from venus_edge.agent import AgentConfig
from venus_edge.server import ResearchService, create_app
from venus_edge.server.app import PUBLIC_ROUTES
from venus_edge.server.webapp import ICON_SIZES, SHELL_PATHS, icon_png
from venus_edge.testing import ScriptedEngine, UvicornThread

#: Paths that hold data or act: none may be in the worker's cache list.
API_PREFIXES = ("/v1", "/health", "/metrics", "/pair", "/mcp")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[UvicornThread]:
    service = ResearchService([ScriptedEngine([])], [], AgentConfig(), journal_path=tmp_path / "journal.jsonl")
    with UvicornThread(create_app(service, api_key="k")) as running:
        yield running
    service.close()


def test_the_manifest_parses_and_its_icons_are_served_with_their_types(server: UvicornThread) -> None:
    response = httpx.get(f"{server.url}/manifest.webmanifest")  # no key
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/manifest+json"
    assert response.headers["x-content-type-options"] == "nosniff"
    manifest = json.loads(response.text)
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/" and manifest["scope"] == "/"
    assert manifest["name"] and manifest["short_name"] == "venus-edge"
    assert re.fullmatch(r"#[0-9a-f]{6}", manifest["theme_color"])
    declared = {(icon["src"], icon["type"]) for icon in manifest["icons"]}
    assert {f"/icon-{size}.png" for size in ICON_SIZES} | {"/icon.svg"} == {src for src, _ in declared}
    for src, kind in declared:
        icon = httpx.get(f"{server.url}{src}")
        assert icon.status_code == 200 and icon.headers["content-type"] == kind, src
    svg = httpx.get(f"{server.url}/icon.svg").text
    assert svg.startswith("<svg ") and 'viewBox="0 0 100 100"' in svg


@pytest.mark.parametrize("size", ICON_SIZES)
def test_each_png_icon_is_a_valid_png_of_its_size(size: int) -> None:
    data = icon_png(size)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        kind, body = data[offset + 4:offset + 8], data[offset + 8:offset + 8 + length]
        assert struct.unpack(">I", data[offset + 8 + length:offset + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = body
        offset += 12 + length
    assert struct.unpack(">IIBB", chunks[b"IHDR"][:10]) == (size, size, 8, 2)
    pixels = zlib.decompress(chunks[b"IDAT"])
    assert len(pixels) == size * (1 + 3 * size)
    image = pytest.importorskip("PIL.Image")
    with image.open(io.BytesIO(data)) as opened:
        opened.load()
        assert opened.size == (size, size)
        centre, corner = opened.getpixel((size // 2 - size // 10, size // 2 + size // 10)), opened.getpixel((2, 2))
    assert corner == (0x27, 0x54, 0xC5) and centre == (255, 255, 255)  # the accent, and the lit side of the planet
    with pytest.raises(ValueError, match="sizes are"):
        icon_png(64)


def test_the_workers_cache_list_is_the_open_shell_and_holds_no_api_path(server: UvicornThread) -> None:
    response = httpx.get(f"{server.url}/sw.js")  # no key: the browser fetches it without the page's cookie too
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    match = re.search(r"^const SHELL = (\[.*\]);$", response.text, re.MULTILINE)
    assert match, response.text[:500]
    shell = json.loads(match.group(1))
    assert shell == list(SHELL_PATHS) and "/" in shell
    for path in shell:
        assert not path.startswith(API_PREFIXES), path
        assert ("GET", path) in PUBLIC_ROUTES
        assert httpx.get(f"{server.url}{path}").status_code == 200, path  # the worker's addAll needs no key
    assert "caches.open(CACHE).then((cache) => cache.put(" in response.text  # the one put, after the shell check
    assert response.text.index("!SHELL.includes(url.pathname)") < response.text.index("cache.put(")
    assert httpx.get(f"{server.url}/v1/sessions").status_code == 401  # the shell is open, the data is not


def test_the_page_links_its_manifest_and_allows_only_its_own_worker(server: UvicornThread) -> None:
    page = httpx.get(f"{server.url}/").text
    assert '<link rel="manifest" href="/manifest.webmanifest">' in page
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', page)
    assert policy is not None
    directives = dict(part.strip().split(" ", 1) for part in policy.group(1).split(";") if part.strip())
    assert directives["worker-src"] == "'self'" and directives["manifest-src"] == "'self'"
    assert directives["connect-src"] == "'self'" and directives["default-src"] == "'none'"
    assert 'navigator.serviceWorker.register("/sw.js")' in page


def test_the_page_listens_for_every_event_the_server_streams(server: UvicornThread) -> None:
    """The page subscribes to SSE events by name: an event type missing from its list never reaches it."""
    from venus_edge import events

    page = httpx.get(f"{server.url}/").text
    listed = re.search(r"const EVENT_TYPES = \[([^\]]*)\]", page)
    assert listed is not None, "the page names the events it follows in EVENT_TYPES"
    streamed = {cls.type for cls in vars(events).values()
                if isinstance(cls, type) and issubclass(cls, events.Event) and cls is not events.Event}
    assert set(re.findall(r'"(\w+)"', listed.group(1))) == streamed
