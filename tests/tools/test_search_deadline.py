"""``search`` under the session's ``Deadline`` (issue 25, kind 5): queries reached after it are not searched, a
backend that takes the deadline gets it, and an abandoned call shows the failed-search shape. The web backend's
own deadline handling (no back-off past it) is tested in test_web_search.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from venus_edge.toolbox import MergedSearchBackend
from venus_edge.tools.base import Deadline, PreparedCall, ToolRegistry
from venus_edge.tools.corpus import Hit
from venus_edge.tools.errors import ToolCancelled
from venus_edge.tools.replay import RecordingTool
from venus_edge.tools.search import SearchTool


class _CancellingBackend:
    """Answers a query, then cancels the session (as a user pressing Stop during the first query)."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel, self.queries, self.deadlines = cancel, [], []

    def search(self, query: str, k: int, *, deadline: Deadline | None = None) -> list[Hit]:
        self.queries.append(query)
        self.deadlines.append(deadline)
        self.cancel.set()
        return [Hit("A page", f"https://example.org/{query}", "a snippet")]


def test_queries_reached_after_the_deadline_are_not_searched() -> None:
    cancel = threading.Event()
    backend = _CancellingBackend(cancel)
    deadline = Deadline.after(60.0, cancel)
    result = SearchTool(backend)({"query": ["first", "second", "third"]}, deadline=deadline)
    assert backend.queries == ["first"] and backend.deadlines == [deadline]
    blocks = json.loads(result.text)
    assert [len(block["web_page_info_list"]) for block in blocks] == [1, 0, 0]
    assert [(f.target, f.kind) for f in result.failures] == [("second", "cancelled"), ("third", "cancelled")]


def test_a_merged_backend_passes_the_deadline_on() -> None:
    cancel = threading.Event()
    inner = _CancellingBackend(cancel)
    deadline = Deadline(cancel=cancel)
    SearchTool(MergedSearchBackend([inner]))({"query": ["q"]}, deadline=deadline)
    assert inner.deadlines == [deadline]


def test_an_abandoned_search_shows_empty_result_lists() -> None:
    registry = ToolRegistry([SearchTool(_CancellingBackend(threading.Event()))])
    shown = registry.interrupted_result(PreparedCall("search", {"query": ["a", "b"]}), ToolCancelled("search", "x"))
    assert json.loads(shown.text) == [{"query": "a", "web_page_info_list": []},
                                      {"query": "b", "web_page_info_list": []}]
    assert [(f.target, f.kind) for f in shown.failures] == [("a", "cancelled"), ("b", "cancelled")]


def test_a_recording_wrapper_passes_the_deadline_to_the_live_tool(tmp_path: Path) -> None:
    cancel = threading.Event()
    backend = _CancellingBackend(cancel)
    deadline = Deadline(cancel=cancel)
    RecordingTool(SearchTool(backend), tmp_path)({"query": ["q"]}, deadline=deadline)
    assert backend.deadlines == [deadline]
