"""How soon the fetch layer gives up after its deadline: the times the tool tests used to bound.

Run: ``.venv/bin/python -m pytest benchmarks/bench_deadlines.py --benchmark-only -q``

``tests/tools/test_pdf.py`` and ``tests/tools/test_visit.py`` assert that each case below ends in the typed
timeout; how long that takes depends on the machine, so it is measured here (3 rounds each) instead of bounded
there. Each case's deadline is in ``extra_info`` (``deadline_s``), to read against the measured seconds.

- ``test_slow_pdf_is_stopped_at_the_deadline``: a 20 KB PDF that keeps pypdf busy for many seconds, fetched with
  ``total_timeout_s=2``; the child process reading it is killed at the deadline (expect about 2 s).
- ``test_redirect_hops_stop_at_the_total_deadline``: redirect hops that wait 0.4 s each, ``total_timeout_s=1``
  (expect 1 to 1.4 s: the deadline, or the end of the hop in flight; unbounded, 20 hops take 8 s).
- ``test_dripped_headers_stop_at_the_grace_after_the_deadline``: a header byte every 0.2 s, ``total_timeout_s=1``;
  visit leaves the read behind ``READ_GRACE_S`` later (expect about 3 s; unbounded, 20 s).

The servers and the PDF builder are the tool tests' own (``tests/tools/conftest.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "tools"))
from conftest import DOCS_ROOT, LocalServer, build_pdf

from venus_edge.tools import FetchError, FetchLimits, ToolResult
from venus_edge.tools.fetch import fetch_page
from venus_edge.tools.visit import READ_GRACE_S, VisitTool

ROUNDS = 3
# As tests/tools/test_visit.py: no single read times out, only the whole fetch does.
HOP_LIMITS = FetchLimits(read_timeout_s=1.0, total_timeout_s=1.0, max_redirects=20)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    server = LocalServer(DOCS_ROOT)
    yield server.url
    server.stop()


def test_slow_pdf_is_stopped_at_the_deadline(benchmark: Any) -> None:
    slow = build_pdf([], flate_streams=[b"BT /F1 12 Tf 72 720 Td " + b"(walrus) Tj 0 -1 Td " * 300_000 + b"ET"])
    limits = FetchLimits(total_timeout_s=2.0)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "application/pdf"}, content=slow)

    def fetch() -> FetchError:
        with httpx.Client(transport=httpx.MockTransport(handler)) as client, pytest.raises(FetchError) as info:
            fetch_page(client, "http://93.184.216.34/slow.pdf", limits, resolve=lambda host, port: [host])
        return info.value

    benchmark.extra_info["deadline_s"] = limits.total_timeout_s
    error = benchmark.pedantic(fetch, rounds=ROUNDS, iterations=1)
    assert error.kind == "not_text" and "took longer than" in error.detail


def test_redirect_hops_stop_at_the_total_deadline(benchmark: Any, server_url: str) -> None:
    def visit() -> ToolResult:
        with VisitTool(limits=HOP_LIMITS, allowed_networks=["127.0.0.1/32"]) as tool:
            return tool({"url": f"{server_url}/hop-0", "goal": "g"})

    benchmark.extra_info["deadline_s"] = HOP_LIMITS.total_timeout_s
    result = benchmark.pedantic(visit, rounds=ROUNDS, iterations=1)
    assert [f.kind for f in result.failures] == ["timeout"]


def test_dripped_headers_stop_at_the_grace_after_the_deadline(benchmark: Any, server_url: str) -> None:
    def visit() -> ToolResult:
        with VisitTool(limits=HOP_LIMITS, allowed_networks=["127.0.0.1/32"]) as tool:
            return tool({"url": f"{server_url}/drip", "goal": "g"})

    benchmark.extra_info["deadline_s"] = HOP_LIMITS.total_timeout_s + READ_GRACE_S
    result = benchmark.pedantic(visit, rounds=ROUNDS, iterations=1)
    assert [f.kind for f in result.failures] == ["timeout"]
