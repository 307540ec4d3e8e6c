"""Every error the tool layer raises, in one tree under the package's root ``VenusEdgeError``, so a caller catches
one class.

    ToolError
    ├── ToolArgumentError        a call's arguments do not fit the tool's schema (also a ValueError)
    ├── CorpusError              a local corpus
    │   ├── EmptyCorpusError         the folder holds no readable document
    │   ├── DocumentNotFoundError    a URL that names no document of the corpus (also a LookupError)
    │   └── UnreadableDocumentError  a document that can no longer be read (a PDF broken since indexing)
    ├── FetchError               a page could not be fetched; ``kind`` is a ``ToolFailure`` kind
    ├── PdfError                 bytes that are not a readable PDF (also a ValueError)
    └── WebSearchError           no search engine answered a query

None of these reaches the agent loop: a tool turns what the model or the web did wrong into observation text
and a typed ``ToolFailure`` (``tools.base``). They reach a program that uses the pieces directly (``Corpus.open``,
``fetch_page``) and the CLI, which reports any ``ToolError`` before the model loads.
"""

from __future__ import annotations

from venus_edge.errors import VenusEdgeError

__all__ = [
    "CorpusError",
    "DocumentNotFoundError",
    "EmptyCorpusError",
    "FetchError",
    "PdfError",
    "ToolArgumentError",
    "ToolError",
    "UnreadableDocumentError",
    "WebSearchError",
]


class ToolError(VenusEdgeError):
    """Base class of every error the tool layer raises on purpose."""


class ToolArgumentError(ToolError, ValueError):
    """Raised by ``validate_arguments`` when a call's arguments do not fit the tool's schema.

    The message is written for the model: it names the tool and the valid choices.
    """


class CorpusError(ToolError):
    """Base class of the corpus errors."""


class EmptyCorpusError(CorpusError):
    """Raised by ``Corpus.open`` when the folder holds no document with an accepted extension."""


class DocumentNotFoundError(CorpusError, LookupError):
    """Raised by ``Corpus.read`` for a URL that names no document of this corpus."""


class UnreadableDocumentError(CorpusError):
    """Raised by ``Corpus.read`` when an indexed document can no longer be read as text (a PDF broken since)."""


class FetchError(ToolError):
    """A page could not be fetched; ``kind`` is a ``ToolFailure`` kind (see ``tools.fetch``).

    Attributes:
        kind: ``refused_address``, ``unreachable``, ``timeout``, ``too_many_redirects``, ``blocked``,
            ``http_error``, ``too_large`` or ``not_text``.
        url: the URL (the redirect hop) that failed.
        detail: a sentence saying what was seen and what was allowed.
    """

    def __init__(self, kind: str, url: str, detail: str) -> None:
        super().__init__(f"{kind}: {url}: {detail}")
        self.kind = kind
        self.url = url
        self.detail = detail


class PdfError(ToolError, ValueError):
    """The bytes are not a readable PDF (malformed, truncated, or encrypted with a password)."""


class WebSearchError(ToolError):
    """No engine gave results for a query within ``max_rounds``; the message lists each engine's last outcome."""
