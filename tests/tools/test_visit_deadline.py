"""``visit`` under a deadline (issue 25, kind 5): it reads at most ``max_urls_per_call`` URLs, ends by
``max_call_s`` or the session's ``Deadline``, stops on cancel, and does not ask the completer once the time is
up. Pages come from the fixture server on 127.0.0.1 (``/drip`` sends its headers a byte every 0.2 s for 20 s).
The assertions are about what was read and why the rest was not; no durations."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from venus_edge.tools.base import Deadline, PreparedCall, ToolRegistry
from venus_edge.tools.errors import ToolTimeout
from venus_edge.tools.visit import UNREADABLE_EVIDENCE, URL_SEPARATOR, VisitTool

LOCAL = ["127.0.0.1/32"]


def test_eight_never_ending_pages_end_at_the_sessions_deadline_each_one_reported(server_url: str) -> None:
    """Before: 8 dripping pages, 4 at a time, each left behind after total_timeout_s (60 s) plus the grace: 124 s
    for a session with a 10 s limit. Now every page not read by the deadline is reported as over time."""
    urls = [f"{server_url}/drip?page={i}" for i in range(8)]
    with VisitTool(allowed_networks=LOCAL) as tool:
        result = tool({"url": urls, "goal": "g"}, deadline=Deadline.after(1.0))
    assert result.visited_urls == ()
    assert [f.target for f in result.failures] == urls
    assert {f.kind for f in result.failures} == {"timeout"}
    assert all("total_timeout_s 60" not in f.detail for f in result.failures), result.failures
    assert len(result.text.split(URL_SEPARATOR)) == 8 and result.text.count(UNREADABLE_EVIDENCE) == 8


def test_max_call_s_caps_a_call_without_a_session_deadline(server_url: str) -> None:
    urls = [f"{server_url}/drip?page={i}" for i in range(3)] + [f"{server_url}/text"]
    with VisitTool(allowed_networks=LOCAL, max_call_s=1.0, max_concurrent_reads=3) as tool:
        result = tool({"url": urls, "goal": "frobnicator"})
    assert [(f.target, f.kind) for f in result.failures] == [(url, "timeout") for url in urls]


def test_urls_past_max_urls_per_call_are_not_read(server_url: str) -> None:
    urls = [f"{server_url}/text?copy={i}" for i in range(12)]
    with VisitTool(allowed_networks=LOCAL) as tool:
        result = tool({"url": urls, "goal": "frobnicator"})
    assert result.visited_urls == tuple(urls[:10])
    assert [(f.target, f.kind) for f in result.failures] == [(url, "too_many_urls") for url in urls[10:]]
    sections = result.text.split(URL_SEPARATOR)
    assert len(sections) == 12 and all(UNREADABLE_EVIDENCE in section for section in sections[10:])
    with VisitTool(allowed_networks=LOCAL, max_urls_per_call=2) as tool:
        assert tool({"url": urls[:3], "goal": "g"}).visited_urls == tuple(urls[:2])


def test_a_cancel_stops_the_reads_of_a_call(server_url: str) -> None:
    """Cancelled while four pages drip: each is reported ``cancelled`` (without the cancel: 62 s of waiting)."""
    cancel = threading.Event()
    urls = [f"{server_url}/drip?page={i}" for i in range(4)]
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    with VisitTool(allowed_networks=LOCAL) as tool:
        result = tool({"url": urls, "goal": "g"}, deadline=Deadline(cancel=cancel))
    timer.cancel()
    assert [(f.target, f.kind) for f in result.failures] == [(url, "cancelled") for url in urls]


class _SlowCompleter:
    """Answers something unparseable, but only once ``deadline`` has passed (a model busy for too long)."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline, self.calls = deadline, 0

    def complete(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int) -> str:
        self.calls += 1
        threading.Event().wait(self.deadline.left_s() + 0.05)
        return "not JSON"


def test_the_completer_is_not_asked_again_once_the_time_is_up(server_url: str) -> None:
    deadline = Deadline.after(1.0)
    completer = _SlowCompleter(deadline)
    with VisitTool(allowed_networks=LOCAL, completer=completer, completer_attempts=3) as tool:
        result = tool({"url": f"{server_url}/text", "goal": "frobnicator"}, deadline=deadline)
    assert completer.calls == 1
    assert result.visited_urls == (f"{server_url}/text",) and "frobnicator" in result.text  # extractive evidence
    assert [f.kind for f in result.failures] == ["timeout"] and "completer was not asked" in result.failures[0].detail


def test_an_abandoned_visit_shows_the_could_not_be_accessed_text_for_each_url() -> None:
    registry = ToolRegistry([VisitTool()])
    arguments: dict[str, Any] = {"url": ["https://a.example/", "https://b.example/"], "goal": "g"}
    shown = registry.interrupted_result(PreparedCall("visit", arguments), ToolTimeout("visit", "too slow"))
    assert shown.text.count(UNREADABLE_EVIDENCE) == 2 and len(shown.text.split(URL_SEPARATOR)) == 2
    assert [(f.target, f.kind) for f in shown.failures] == [("https://a.example/", "timeout"),
                                                            ("https://b.example/", "timeout")]
