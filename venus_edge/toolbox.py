"""The default tool set of a research session: ``search`` and ``visit`` over local corpora and the web, live,
recorded or replayed."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence

from venus_edge.engines.base import TextCompleter
from venus_edge.tools.base import Deadline, Tool, takes_deadline
from venus_edge.tools.corpus import Corpus, Hit
from venus_edge.tools.observation_styles import DEFAULT_OBSERVATION_STYLE, ObservationStyle
from venus_edge.tools.replay import RecordingTool, ReplayTool
from venus_edge.tools.search import (
    DEFAULT_TOP_K,
    SEARCH_SCHEMA,
    BackendAttempt,
    CorpusSearchBackend,
    SearchBackend,
    SearchTool,
    attempt_log,
)
from venus_edge.tools.visit import VISIT_SCHEMA, VisitTool
from venus_edge.tools.web_search import SearchAttempt

__all__ = ["MergedSearchBackend", "close_tools", "default_tools"]


class MergedSearchBackend:
    """Search several backends (corpora, the web); hits are interleaved by rank (1st of each, then 2nd of each).

    A backend that fails is left out of the merge while another one answers, and its failure is logged as an
    ``error`` attempt; when all fail, the first error is raised (``SearchTool`` shows it as a failed search). The
    ``attempts`` of backends that keep a log (the web backend) are gathered into this backend's own
    ``attempts`` as well, so ``SearchTool`` reports them all as ``tool_attempt`` events.
    """

    def __init__(self, backends: Sequence[SearchBackend]) -> None:
        if not backends:
            raise ValueError("MergedSearchBackend needs at least one backend")
        self.backends = list(backends)
        self.attempts: list[BackendAttempt] = []

    def search(self, query: str, k: int, *, deadline: Deadline | None = None) -> list[Hit]:
        """The merged hits; ``deadline`` goes to the backends that take one (the web's back-off)."""
        ranked, errors = [], []
        for backend in self.backends:
            log = attempt_log(backend)
            seen = len(log or ())
            keywords = {"deadline": deadline} if deadline is not None and takes_deadline(backend.search) else {}
            try:
                ranked.append(list(backend.search(query, k, **keywords)))
            except Exception as exc:  # one backend down (the web rate-limited): the others still answer
                errors.append(exc)
                if log is None:  # a backend with a log has logged its own failure
                    detail = f"{type(exc).__name__}: {exc}"
                    self.attempts.append(SearchAttempt(query, type(backend).__name__, "error", detail))
            if log is not None:
                self.attempts.extend(log[seen:])
        if errors and not ranked:
            raise errors[0]
        merged, seen_urls = [], set()
        for i in range(k):
            for hits in ranked:
                if i < len(hits) and hits[i].url not in seen_urls:
                    seen_urls.add(hits[i].url)
                    merged.append(hits[i])
        return merged[:k]


def token_counter(completer: object) -> Callable[[str], int] | None:
    """Count tokens with the completer's own tokenizer when it has one (``LlamaCppEngine.tokenize``), so visit's
    reduction budget is in the model's tokens; ``None`` (visit's ``len / 4`` estimate) otherwise."""
    tokenize = getattr(completer, "tokenize", None)
    if not callable(tokenize):
        return None
    return lambda text: len(tokenize(text))


def default_tools(
    corpora: Sequence[str | os.PathLike[str]] = (),
    *,
    web: bool = False,
    completer: TextCompleter | None = None,
    allow_private: bool = False,
    allowed_networks: Sequence[str] = (),
    record_dir: str | os.PathLike[str] | None = None,
    replay_dir: str | os.PathLike[str] | None = None,
    search_results: int = DEFAULT_TOP_K,
    observation_style: ObservationStyle = DEFAULT_OBSERVATION_STYLE,
) -> list[Tool]:
    """``search`` over the given corpus folders and/or the web, and ``visit`` for ``corpus://`` and http(s) URLs.

    Args:
        corpora: folders of HTML/Markdown/text/PDF documents (indexed on first use, the index cached on disk).
        web: also search the web (``DdgsSearchBackend``: ddgs's engines with back-off and fallback; needs the
            ``web`` extra). Results of the corpora and the web are interleaved.
        completer: the local model that writes visit's evidence and summary (extractive output without it); its
            ``tokenize``, if it has one, counts visit's reduction budget.
        allow_private: let visit fetch loopback and private addresses.
        allowed_networks: CIDR networks visit may fetch although not public (an intranet), the rest stays refused.
        record_dir: record every call's result under this folder (``tools.replay``), to replay the session later.
        replay_dir: answer every call from the records in this folder, with no corpus, web or network at all;
            ``corpora`` and ``web`` are then ignored. A call that was not recorded gets a ``not_recorded`` text.
        search_results: results per query (the reference shows 10).
        observation_style: how search and visit render their observations (``tools.observation_styles``):
            ``inference`` (the authors' inference code) or ``rl`` (the RL rollouts). Replayed records are shown as
            they were recorded.

    Raises:
        ValueError: neither a corpus, nor ``web``, nor ``replay_dir``; or ``record_dir`` with ``replay_dir``.
        ImportError: ``web`` without the ddgs package (the message gives the pip command).
        venus_edge.tools.corpus.EmptyCorpusError: a folder with no readable document.
    """
    if replay_dir is not None:
        if record_dir is not None:
            raise ValueError("record_dir and replay_dir exclude each other: a replay makes no live call to record")
        return [ReplayTool("search", SEARCH_SCHEMA, replay_dir), ReplayTool("visit", VISIT_SCHEMA, replay_dir)]
    if not corpora and not web:
        raise ValueError("search needs a corpus folder, the web (web=True) or a recording to replay (replay_dir)")
    opened: list[Corpus] = []
    for folder in corpora:
        corpus = Corpus.open(folder)
        base, suffix = corpus.name, 2
        while corpus.name in {c.name for c in opened}:  # two folders called "docs": the second is docs-2
            corpus.name, suffix = f"{base}-{suffix}", suffix + 1
        opened.append(corpus)
    backends: list[SearchBackend] = [CorpusSearchBackend(corpus) for corpus in opened]
    if web:
        from venus_edge.tools.web_search import INSTALL_HINT, DdgsSearchBackend

        if importlib.util.find_spec("ddgs") is None:  # fail now, not at the model's first search
            raise ImportError(INSTALL_HINT)
        backends.append(DdgsSearchBackend())
    search = SearchTool(backends[0] if len(backends) == 1 else MergedSearchBackend(backends), top_k=search_results,
                        style=observation_style)
    visit = VisitTool(
        corpora=opened,
        completer=completer,
        allow_private=allow_private,
        allowed_networks=allowed_networks,
        count_tokens=token_counter(completer),
        style=observation_style,
    )
    tools: list[Tool] = [search, visit]
    if record_dir is not None:
        tools = [RecordingTool(tool, record_dir) for tool in tools]
    return tools


def close_tools(tools: Sequence[Tool]) -> None:
    """Close every tool that holds resources (visit's HTTP client, which also ends any read still running)."""
    for tool in tools:
        close = getattr(tool, "close", None)
        if callable(close):
            close()
