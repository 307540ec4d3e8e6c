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
    ├── WebSearchError           no search engine answered a query
    ├── SandboxUnavailable       the Python tool's sandbox cannot isolate code on this machine (also a RuntimeError)
    └── ToolInterrupted          a call stopped at its deadline; ``kind`` is a ``ToolFailure`` kind
        ├── ToolTimeout              the session's time limit (or the call's own cap) passed
        └── ToolCancelled            the session was cancelled

None of these but ``ToolInterrupted`` reaches the agent loop (``ToolRegistry.run`` raises it when a call overruns
its ``Deadline``; the loop records it as the turn's ``ToolFailure`` and shows the tool's failure text): a tool
turns what the model or the web did wrong into observation text and a typed ``ToolFailure`` (``tools.base``).
They reach a program that uses the pieces directly (``Corpus.open``, ``fetch_page``) and the CLI, which reports
any ``ToolError`` before the model loads.
"""

from __future__ import annotations

from venus_edge.errors import VenusEdgeError

__all__ = [
    "CorpusError",
    "DocumentNotFoundError",
    "EmptyCorpusError",
    "FetchError",
    "PdfError",
    "SandboxUnavailable",
    "ToolArgumentError",
    "ToolCancelled",
    "ToolError",
    "ToolInterrupted",
    "ToolTimeout",
    "UnreadableDocumentError",
    "WebSearchError",
]


class ToolError(VenusEdgeError):
    """Base class of every error the tool layer raises on purpose."""


class ToolArgumentError(ToolError, ValueError):
    """Raised by ``validate_arguments`` when a call's arguments do not fit the tool's schema.

    The message is written for the model: it names the tool and the valid choices.
    """


class SandboxUnavailable(ToolError, RuntimeError):
    """Raised by ``PythonInterpreterTool`` when this machine cannot make the sandbox's namespaces and the user did not
    pass ``--python-unsandboxed-network``; the message says why and what to pass."""


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
        kind: ``refused_address``, ``unreachable``, ``timeout``, ``cancelled``, ``too_many_redirects``,
            ``blocked``, ``http_error``, ``too_large`` or ``not_text``.
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


class ToolInterrupted(ToolError):
    """A tool call stopped before it finished, at its ``Deadline`` (``tools.base``): raised by ``ToolRegistry.run``
    when the call is abandoned, and by our own tools' pieces (a fetch, a search back-off) when they stop early.

    Attributes:
        kind: the ``ToolFailure`` kind, ``timeout`` or ``cancelled``.
        tool: the tool's name (or the piece that stopped, ``fetch``).
        detail: a sentence saying what stopped and when.
    """

    kind = "timeout"

    def __init__(self, tool: str, detail: str) -> None:
        super().__init__(f"{tool}: {detail}")
        self.tool = tool
        self.detail = detail


class ToolTimeout(ToolInterrupted):
    """The call ran past the session's time limit (``AgentConfig.time_limit_s``) or its own cap plus the grace."""

    kind = "timeout"


class ToolCancelled(ToolInterrupted):
    """The session was cancelled (its cancel event set: server DELETE, a client gone, MCP cancel, the Python API)."""

    kind = "cancelled"
