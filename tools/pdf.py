"""Text of a PDF document, for ``visit`` (PDF responses) and anything else that reads PDF bytes.

Extraction is pypdf's (pure Python, maintained); pages are joined with blank lines so that
``passages.extract_passages`` sees one paragraph per page at least and splits long pages at sentence ends.
A scanned PDF (images only) gives an empty text; ``visit`` reports it as an ``empty`` page.
"""

from __future__ import annotations

import io

PDF_CONTENT_TYPES = ("application/pdf", "application/x-pdf")
PDF_MAGIC = b"%PDF-"
DEFAULT_MAX_PAGES = 300


class PdfError(ValueError):
    """The bytes are not a readable PDF (malformed, truncated, or encrypted with a password)."""


def looks_like_pdf(head: bytes) -> bool:
    """True for bytes that start (after any whitespace) with the PDF header ``%PDF-``."""
    return head.lstrip()[: len(PDF_MAGIC)] == PDF_MAGIC


def pdf_text(data: bytes, *, max_pages: int = DEFAULT_MAX_PAGES) -> str:
    """The text of the first ``max_pages`` pages of a PDF, pages separated by a blank line.

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
    return "\n\n".join(text.strip() for text in pages if text.strip())
