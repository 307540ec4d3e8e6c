"""PDF pages in ``visit``: a hand-written two-page PDF served by the local server, declared or sniffed."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from venus_edge.tools import FetchError, FetchLimits, VisitTool
from venus_edge.tools.errors import PdfError
from venus_edge.tools.fetch import fetch_page
from venus_edge.tools.pdf import looks_like_pdf, pdf_text, pdf_text_isolated
from venus_edge.tools.visit import UNREADABLE_EVIDENCE

EVIDENCE = "The measured boiling point of the sample was 412 kelvin at sea level pressure (the (corrected) value)."
GOAL = "boiling point of the sample in kelvin"


@pytest.mark.parametrize("path", ["/pdf", "/pdf-octet"])
def test_fetch_returns_the_pdf_text(server_url: str, path: str) -> None:
    """Declared application/pdf and an octet-stream starting with %PDF- both come back as the PDF's text."""
    with httpx.Client() as client:
        page = fetch_page(client, f"{server_url}{path}", FetchLimits(), allow_private=True)
    assert page.content_type == "application/pdf"
    assert page.text.startswith("Field report on sample KX-7 (draft)\n"), page.text[:80]
    assert f"\n\nMeasurements\n{EVIDENCE}\n" in page.text, "pages are separated by a blank line"


def test_visit_finds_the_evidence_on_page_two(server_url: str) -> None:
    with VisitTool(allow_private=True) as tool:
        result = tool({"url": f"{server_url}/pdf", "goal": GOAL})
    assert result.failures == () and result.visited_urls == (f"{server_url}/pdf",)
    evidence = result.text.split("Evidence in page: \n", 1)[1].split("\n\nSummary: \n", 1)[0]
    assert EVIDENCE in evidence and "spring campaign" not in evidence, evidence


@pytest.mark.parametrize(
    ("path", "kind", "detail"),
    [("/pdf-broken", "not_text", "PDF could not be read"), ("/pdf-scan", "empty", "no readable text")],
)
def test_unreadable_pdfs_give_the_fixed_text_and_a_typed_failure(
    server_url: str, path: str, kind: str, detail: str
) -> None:
    with VisitTool(allow_private=True) as tool:
        result = tool({"url": f"{server_url}{path}", "goal": GOAL})
    assert UNREADABLE_EVIDENCE in result.text and result.visited_urls == ()
    assert [(f.kind, detail in f.detail) for f in result.failures] == [(kind, True)], result.failures


def test_pdf_over_the_byte_cap_is_too_large(server_url: str) -> None:
    with httpx.Client() as client, pytest.raises(FetchError) as info:
        fetch_page(client, f"{server_url}/pdf", FetchLimits(max_bytes=500), allow_private=True)
    assert info.value.kind == "too_large"


def test_pdf_text_limits_pages_and_rejects_non_pdfs(server_url: str) -> None:
    data = httpx.get(f"{server_url}/pdf").content
    assert looks_like_pdf(data[:16]) and not looks_like_pdf(b"<html>%PDF-")
    assert pdf_text(data, max_pages=1).endswith("until the measurements began in April.")
    with pytest.raises(PdfError, match="could not be read"):
        pdf_text(b"<html>not a pdf</html>")


def test_a_pdf_that_is_slow_to_read_is_stopped_at_the_deadline(slow_pdf: Callable[[int], bytes]) -> None:
    """The PDF is read in a child process that is killed at the fetch's deadline; the text of a small one of
    the same shape comes back whole. Unbounded, pypdf would finish and return the text: "took longer than" says
    the deadline stopped it (how soon after the deadline: benchmarks/bench_deadlines.py)."""
    assert pdf_text_isolated(slow_pdf(3), timeout_s=30) == "walrus" * 3
    slow = slow_pdf(300_000)
    assert len(slow) < 20_000

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "application/pdf"}, content=slow)

    limits = FetchLimits(total_timeout_s=2.0)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client, pytest.raises(FetchError) as info:
        fetch_page(client, "http://93.184.216.34/slow.pdf", limits, resolve=lambda host, port: [host])
    assert info.value.kind == "not_text" and "took longer than" in info.value.detail
