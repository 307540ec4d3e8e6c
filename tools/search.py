"""The ``search`` tool: batched queries against a pluggable backend, observed as DR-Venus's search JSON.

Source: PROTOCOL.md, "Tools and observation shapes". The schema below is rendered byte-for-byte (``json.dumps``
with default separators, so key order matters) into the system prompt the model was trained on; it is the
schema of DR-Venus's SFT data (``SFT/data_clean/prepare_trajectories.py``).

The observation is ``json.dumps([{"query": q, "web_page_info_list": [{"title", "url", "snippet"}, ...]}, ...],
ensure_ascii=False)``, one object per query, top 10 results each; in the ``rl`` observation style every hit also
has a ``date`` key (``tools.observation_styles``; ``"date": ""`` when the hit has none), as in the RL rollouts. A
query whose backend fails is shown with an empty ``web_page_info_list`` (the shape the SFT cleaning gives a failed
search) and reported as a ``backend_error`` ``ToolFailure``; the tool never raises into the loop for it.

A backend that retries (the web backend falls back between engines and backs off when they rate-limit) may keep
an append-only ``attempts`` list of ``BackendAttempt``s. ``SearchTool`` reports the entries one query added as
``ToolResult.attempts`` when the query needed more than one attempt or any attempt was not ``ok``; a clean
first-try answer, a cached query and a backend without the list add nothing.

A call runs under the session's ``Deadline``: queries not searched when it passes (or is cancelled) get the empty
result list and a ``timeout`` (``cancelled``) failure, and a backend whose ``search`` takes a ``deadline`` keyword
(the web backend: no back-off sleep past it) is given it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from venus_edge.tools.base import (
    Deadline,
    ToolAttempt,
    ToolFailure,
    ToolResult,
    as_list,
    split_cut_note,
    takes_deadline,
)
from venus_edge.tools.corpus import Corpus, Hit
from venus_edge.tools.observation_styles import DEFAULT_OBSERVATION_STYLE, ObservationStyle, observation_style

__all__ = ["SEARCH_SCHEMA", "BackendAttempt", "CorpusSearchBackend", "SearchBackend", "SearchTool",
           "parse_search_observation"]

DEFAULT_TOP_K = 10

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": (
            "Perform Google web searches then returns a string of the top search results. Accepts multiple queries."
        ),
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


@runtime_checkable
class BackendAttempt(Protocol):
    """One try logged by a backend in its optional ``attempts`` list (``web_search.SearchAttempt`` is one).

    ``engine`` names what was tried, ``outcome`` is ``ok``, ``empty``, ``rate_limited``, ``timeout`` or ``error``,
    ``detail`` is a sentence, ``waited_s`` the back-off in seconds slept just before this try.
    """

    # Read-only, so that frozen records (``SearchAttempt``) are attempts too.
    @property
    def engine(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def waited_s(self) -> float: ...


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
        style (`str`, default `"inference"`): the observation style of the hits (``tools.observation_styles``).
    """

    name = "search"

    def __init__(self, backend: SearchBackend, *, top_k: int = DEFAULT_TOP_K,
                 style: ObservationStyle = DEFAULT_OBSERVATION_STYLE) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.backend = backend
        self.style = observation_style(style)
        self.top_k = top_k
        self.schema = json.loads(json.dumps(SEARCH_SCHEMA))  # a private copy: callers cannot edit the constant

    def __call__(self, arguments: dict[str, Any], *, deadline: Deadline | None = None) -> ToolResult:
        """Run every query of ``arguments["query"]`` (a list, or a bare string) and return the JSON observation; a
        query reached after ``deadline`` is not searched (an empty list and a ``timeout``/``cancelled`` failure)."""
        blocks, failures, attempts = [], [], []
        for query in as_list(arguments.get("query", [])):
            query = str(query)
            hits: Sequence[Hit]
            failure: ToolFailure | None
            tried: list[ToolAttempt]
            if deadline is not None and deadline.expired():
                hits, failure, tried = [], deadline.failure(query), []
            else:
                hits, failure, tried = self._search_one(query, deadline)
            blocks.append({"query": query, "web_page_info_list": [hit.to_dict(self.style) for hit in hits]})
            if failure is not None:
                failures.append(failure)
            attempts.extend(tried)
        return ToolResult(text=format_search_observation(blocks), failures=tuple(failures), attempts=tuple(attempts))

    def failure_result(self, arguments: dict[str, Any], failure: ToolFailure) -> ToolResult:
        """What the model sees for a call that was abandoned (``ToolRegistry.interrupted_result``): every query
        with an empty result list, the shape of a failed search."""
        queries = [str(query) for query in as_list(arguments.get("query", []))]
        blocks = [{"query": query, "web_page_info_list": []} for query in queries]
        failures = tuple(ToolFailure(failure.kind, query, failure.detail) for query in queries)
        return ToolResult(format_search_observation(blocks), failures=failures or (failure,))

    def _search_one(self, query: str, deadline: Deadline | None = None,
                    ) -> tuple[Sequence[Hit], ToolFailure | None, list[ToolAttempt]]:
        log = attempt_log(self.backend)
        seen = len(log or ())
        keywords = {"deadline": deadline} if deadline is not None and takes_deadline(self.backend.search) else {}
        try:
            hits, failure = list(self.backend.search(query, self.top_k, **keywords))[: self.top_k], None
        except Exception as exc:  # any backend fault is the web's, not ours: shown to the model, never raised
            detail = f"search backend {type(self.backend).__name__} failed: {type(exc).__name__}: {exc}"
            hits, failure = [], ToolFailure("backend_error", query, detail)
        return hits, failure, _notable_attempts(query, (log or [])[seen:])


def attempt_log(backend: SearchBackend) -> list[BackendAttempt] | None:
    """The backend's append-only ``attempts`` list, or ``None`` when it keeps none."""
    log = getattr(backend, "attempts", None)
    return log if isinstance(log, list) else None


def _notable_attempts(query: str, tried: Sequence[BackendAttempt]) -> list[ToolAttempt]:
    """The attempts of one query as ``ToolAttempt``s, or none when the first try simply succeeded.

    A lone ``ok`` attempt is the normal case and would only add noise to every search event; anything else
    (a fallback, a rate limit, a wait, an empty or failed answer) is worth showing.
    """
    if len(tried) <= 1 and all(a.outcome == "ok" for a in tried):
        return []
    return [ToolAttempt(a.engine, query, a.outcome, a.detail, float(a.waited_s)) for a in tried]


def format_search_observation(blocks: list[dict[str, Any]]) -> str:
    """The search observation text (PROTOCOL.md, "Tools and observation shapes")."""
    return json.dumps(blocks, ensure_ascii=False)


def parse_search_observation(text: str) -> list[dict[str, Any]] | None:
    """The blocks of a search observation (the text inside ``<tool_response>``; the inverse of
    ``format_search_observation``): ``[{"query": str, "web_page_info_list": [{"title", "url", "snippet"}, ...]}]``
    (a hit of the ``rl`` style also has its ``date``)
    with every hit a dict. None for any other text (a page, a notice, an error). The JSON may end with the
    ``base.cut_note`` of a result cut by a context policy."""
    try:
        blocks = json.loads(split_cut_note(text)[0])
    except ValueError:
        return None
    if not isinstance(blocks, list):
        return None
    parsed = []
    for block in blocks:
        hits = block.get("web_page_info_list") if isinstance(block, dict) else None
        if not isinstance(hits, list) or not isinstance(block.get("query"), str):
            return None
        parsed.append({"query": block["query"], "web_page_info_list": [hit for hit in hits if isinstance(hit, dict)]})
    return parsed
