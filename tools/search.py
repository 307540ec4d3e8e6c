"""The ``search`` tool: batched queries against a pluggable backend, observed as DR-Venus's search JSON.

Source: PROTOCOL.md, "Tools and observation shapes". The schema below is rendered byte-for-byte (``json.dumps``
with default separators, so key order matters) into the system prompt the model was trained on; it is the
schema of DR-Venus's SFT data (``SFT/data_clean/prepare_trajectories.py``).

The observation is ``json.dumps([{"query": q, "web_page_info_list": [{"title", "url", "snippet"}, ...]}, ...],
ensure_ascii=False)``, one object per query, top 10 results each. A query whose backend fails is shown with an
empty ``web_page_info_list`` (the shape the SFT cleaning gives a failed search) and reported as a
``backend_error`` ``ToolFailure``; the tool never raises into the loop for it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, Sequence, runtime_checkable

from venus_edge.tools.base import ToolFailure, ToolResult, as_list
from venus_edge.tools.corpus import Corpus, Hit

DEFAULT_TOP_K = 10

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Perform Google web searches then returns a string of the top search results. Accepts multiple queries.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "array",
                    "items": {"type": "string", "description": "The search query."},
                    "minItems": 1,
                    "description": "The list of search queries.",
                }
            },
            "required": ["query"],
        },
    },
}


@runtime_checkable
class SearchBackend(Protocol):
    """Where search results come from: the web, a local corpus, a recording.

    ``search`` returns at most ``k`` hits, best first. It may raise on failure; ``SearchTool`` turns any
    exception into observation text and a ``ToolFailure``.
    """

    def search(self, query: str, k: int) -> list[Hit]: ...


class CorpusSearchBackend:
    """A ``SearchBackend`` over a local ``Corpus`` (BM25); URLs are ``corpus://`` URLs that ``visit`` reads."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def search(self, query: str, k: int) -> list[Hit]:
        return self.corpus.search(query, k=k)


class SearchTool:
    """The ``search`` tool.

    Args:
        backend (`SearchBackend`): where results come from.
        top_k (`int`, default `10`): results per query (the reference tool returns the top 10).
    """

    name = "search"

    def __init__(self, backend: SearchBackend, *, top_k: int = DEFAULT_TOP_K) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.backend = backend
        self.top_k = top_k
        self.schema = json.loads(json.dumps(SEARCH_SCHEMA))  # a private copy: callers cannot edit the constant

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        """Run every query of ``arguments["query"]`` (a list, or a bare string) and return the JSON observation."""
        blocks, failures = [], []
        for query in as_list(arguments.get("query", [])):
            query = str(query)
            hits, failure = self._search_one(query)
            blocks.append({"query": query, "web_page_info_list": [hit.to_dict() for hit in hits]})
            if failure is not None:
                failures.append(failure)
        return ToolResult(text=format_search_observation(blocks), failures=tuple(failures))

    def _search_one(self, query: str) -> tuple[Sequence[Hit], ToolFailure | None]:
        try:
            return list(self.backend.search(query, self.top_k))[: self.top_k], None
        except Exception as exc:  # any backend fault is the web's, not ours: shown to the model, never raised
            detail = f"search backend {type(self.backend).__name__} failed: {type(exc).__name__}: {exc}"
            return [], ToolFailure("backend_error", query, detail)


def format_search_observation(blocks: list[dict[str, Any]]) -> str:
    """The search observation text (PROTOCOL.md, "Tools and observation shapes")."""
    return json.dumps(blocks, ensure_ascii=False)
