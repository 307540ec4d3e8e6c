"""The server's slots are bound by the session's time limit and cancel even while a tool call runs (issue 25,
kind 5): a tool that never returns no longer holds its worker. Real uvicorn on 127.0.0.1; order and state are
asserted (the next session finished while the first tool was still blocked), never durations."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from venus_edge.agent import AgentConfig
from venus_edge.server import ResearchService, create_app
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn, read_sse, tool_call_turn
from venus_edge.tools.base import ToolResult


class StuckTool:
    """A custom tool that never returns until the test ends (it gives up after 60 s, so that a server that waits
    for it fails the test instead of hanging)."""

    name = "nap"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {
        "name": "nap", "description": "Wait.",
        "parameters": {"type": "object", "properties": {"s": {"type": "number"}}, "required": ["s"]}}}

    def __init__(self) -> None:
        self.entered, self.release, self.returned = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        self.entered.set()
        self.release.wait(60)
        self.returned.set()
        return ToolResult("woke up")


@pytest.fixture
def stuck() -> Iterator[StuckTool]:
    tool = StuckTool()
    yield tool
    tool.release.set()


def _second_session(url: str) -> dict[str, Any]:
    """Run a session to its end over SSE; its ``session_finished`` result."""
    with httpx.stream("POST", f"{url}/v1/research", json={"question": "second"}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        events = list(read_sse(response))
    assert events[-1][0] == "session_finished", events[-1]
    result: dict[str, Any] = events[-1][2]
    return result


@pytest.mark.parametrize("how", ["delete", "disconnect"])
def test_a_cancelled_session_frees_its_slot_while_its_tool_is_still_running(how: str, stuck: StuckTool,
                                                                            tmp_path: Path) -> None:
    engine = ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("the second answer")])
    service = ResearchService([engine], [stuck], AgentConfig(), journal_path=tmp_path / "j.jsonl")
    with UvicornThread(create_app(service)) as server:
        if how == "delete":
            started = httpx.post(f"{server.url}/v1/research", json={"question": "first", "stream": False})
            assert started.status_code == 202 and stuck.entered.wait(30)
            session_id = started.json()["session_id"]
            assert httpx.delete(f"{server.url}/v1/sessions/{session_id}").status_code == 202
        else:
            with httpx.stream("POST", f"{server.url}/v1/research", json={"question": "first"}, timeout=30) as response:
                session_id = response.headers["x-session-id"]
                assert stuck.entered.wait(30)
            # leaving the block closed the connection: the server cancels the session
        result = _second_session(server.url)
        first = service.get(session_id)
        assert result["termination"] == "answered" and result["answer"] == "the second answer"
        assert not stuck.returned.is_set(), "the second session waited for the first session's tool"
        assert first is not None and first.result is not None and first.result.termination == "cancelled"
    service.close()


def test_a_tool_that_never_returns_ends_at_the_time_limit_and_the_next_session_runs(stuck: StuckTool,
                                                                                     tmp_path: Path) -> None:
    engine = ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("the second answer")])
    service = ResearchService([engine], [stuck], AgentConfig(), journal_path=tmp_path / "j.jsonl")
    with UvicornThread(create_app(service)) as server:
        with httpx.stream("POST", f"{server.url}/v1/research", json={"question": "first", "time_limit_s": 3},
                          timeout=60) as response:
            first = list(read_sse(response))
        assert first[-1][2]["termination"] == "timeout"
        failures = [data["failures"] for kind, _, data in first if kind == "tool_returned"]
        assert [[f["kind"] for f in found] for found in failures] == [["timeout"]]
        result = _second_session(server.url)
        assert result["termination"] == "answered" and not stuck.returned.is_set()
    service.close()
