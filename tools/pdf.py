"""Text of a PDF document, for ``visit`` (PDF responses) and anything else that reads PDF bytes.

Extraction is pypdf's (pure Python, maintained); pages are joined with blank lines so that
``passages.extract_passages`` sees one paragraph per page at least and splits long pages at sentence ends.
A scanned PDF (images only) gives an empty text; ``visit`` reports it as an ``empty`` page.

pypdf is pure Python, and a crafted PDF of a few kilobytes can keep it busy for minutes (a content stream of
hundreds of thousands of text operators). ``pdf_text_isolated`` therefore reads PDFs from the web in a child
process that is killed at a deadline; a local corpus, whose files the user
chose, is read in process with ``pdf_text``.
"""

from __future__ import annotations

import io
import subprocess
import sys

from venus_edge.text import valid_text
from venus_edge.tools.errors import PdfError

__all__: list[str] = []

PDF_CONTENT_TYPES = ("application/pdf", "application/x-pdf")
PDF_MAGIC = b"%PDF-"
DEFAULT_MAX_PAGES = 300


def looks_like_pdf(head: bytes) -> bool:
    """True for bytes that start (after any whitespace) with the PDF header ``%PDF-``."""
    return head.lstrip()[: len(PDF_MAGIC)] == PDF_MAGIC


def pdf_text(data: bytes, *, max_pages: int = DEFAULT_MAX_PAGES) -> str:
    """The text of the first ``max_pages`` pages of a PDF, pages separated by a blank line; a lone surrogate that
    pypdf decoded from a broken font map is U+FFFD (``venus_edge.text.valid_text``).

    Raises:
        PdfError: the PDF cannot be parsed, or it is encrypted with a non-empty password.
    """
    from pypdf import PdfReader  # a base dependency; imported here to keep ``import venus_edge.tools`` light

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise PdfError("the PDF is encrypted with a password")
        pages = [page.extract_text() or "" for page in reader.pages[:max_pages]]
    except PdfError:
        raise
    except Exception as exc:  # pypdf raises its own errors and, on malformed input, KeyError/ValueError/...
        raise PdfError(f"the PDF could not be read: {type(exc).__name__}: {exc}") from None
    return valid_text("\n\n".join(text.strip() for text in pages if text.strip()))


def pdf_text_isolated(data: bytes, *, timeout_s: float, max_pages: int = DEFAULT_MAX_PAGES) -> str:
    """``pdf_text`` in a child process that is killed after ``timeout_s`` seconds (about 0.5 s of start-up).

    The child gets this process's ``sys.path``, so it imports the same ``venus_edge`` whatever its working
    folder. Without an interpreter to start (a frozen application) it falls back to ``pdf_text`` in process.

    Raises:
        PdfError: what ``pdf_text`` raises, the reading took longer than ``timeout_s``, or the child failed.
    """
    if getattr(sys, "frozen", False) or not sys.executable:
        return pdf_text(data, max_pages=max_pages)
    code = (
        f"import sys; sys.path[:] = {sys.path!r}; "
        f"from venus_edge.tools.pdf import _child_main; _child_main({int(max_pages)})"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise PdfError(f"reading the PDF took longer than {timeout_s:.1f} s; stopped") from None
    except OSError as exc:  # the interpreter cannot be started
        raise PdfError(f"the PDF reader process could not start: {exc}") from None
    if done.returncode == _EXIT_PDF_ERROR:
        raise PdfError(done.stdout.decode("utf-8", "replace").strip())
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        raise PdfError(f"the PDF reader process failed (exit {done.returncode}): {' '.join(tail)}")
    return done.stdout.decode("utf-8", "surrogatepass")


_EXIT_PDF_ERROR = 2


def _child_main(max_pages: int) -> None:
    """The child of ``pdf_text_isolated``: PDF bytes on stdin; the text (exit 0) or the error (exit 2) on stdout."""
    import logging

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # the error message says what went wrong, once
    try:
        text = pdf_text(sys.stdin.buffer.read(), max_pages=max_pages)
    except PdfError as exc:
        sys.stdout.write(str(exc))
        sys.exit(_EXIT_PDF_ERROR)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
