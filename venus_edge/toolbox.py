"""The default tool set of a research session: ``search`` and ``visit`` over local corpora and the web."""

from __future__ import annotations

import os
from typing import Sequence

from venus_edge.tools.base import TextCompleter, Tool
from venus_edge.tools.corpus import Corpus, Hit
from venus_edge.tools.search import CorpusSearchBackend, SearchTool
from venus_edge.tools.visit import VisitTool


class MultiCorpusBackend:
    """Search several corpora; hits are interleaved by rank (1st of each, then 2nd of each, ...)."""

    def __init__(self, corpora: Sequence[Corpus]) -> None:
        self.backends = [CorpusSearchBackend(corpus) for corpus in corpora]

    def search(self, query: str, k: int) -> list[Hit]:
        ranked = [backend.search(query, k) for backend in self.backends]
        merged = [hits[i] for i in range(k) for hits in ranked if i < len(hits)]
        return merged[:k]


def default_tools(
    corpora: Sequence[str | os.PathLike[str]],
    *,
    completer: TextCompleter | None = None,
    allow_private: bool = False,
) -> list[Tool]:
    """``search`` over the given corpus folders and ``visit`` for their ``corpus://`` URLs and http(s) pages.

    Args:
        corpora: folders of HTML/Markdown/text documents (indexed on first use, the index cached on disk).
        completer: the local model that writes visit's evidence and summary (extractive output without it).
        allow_private: let visit fetch loopback and private addresses.

    Raises:
        ValueError: no corpus given (web search is not available yet).
        venus_edge.tools.corpus.EmptyCorpusError: a folder with no readable document.
    """
    if not corpora:
        raise ValueError("search needs at least one corpus folder (web search is not available yet)")
    opened = [Corpus.open(folder) for folder in corpora]
    search = SearchTool(CorpusSearchBackend(opened[0]) if len(opened) == 1 else MultiCorpusBackend(opened))
    visit = VisitTool(corpora=opened, completer=completer, allow_private=allow_private)
    return [search, visit]
