"""The session's time limit and cancel bind tool calls (issue 25, kind 5): a tool that overruns is abandoned with a
typed failure, recorded on the turn and shown to the model, and the session ends; a tool that takes the deadline
stops by itself. No wall-clock bounds: the assertions are about order and state (the session ended while the
tool was still blocked on an event)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.events import ToolReturned
from venus_edge.testing import ScriptedEngine, answer_turn, collect_events, tool_call_turn
from venus_edge.tools.base import Deadline, PreparedCall, ToolRegistry, ToolResult, call_with_deadline, takes_deadline
from venus_edge.tools.errors import ToolCancelled, ToolInterrupted, ToolTimeout
from venus_edge.trajectory import read_trajectories

SCHEMA = {"type": "function", "function": {"name": "nap", "description": "Wait.", "parameters": {
    "type": "object", "properties": {"s": {"type": "number"}}, "required": ["s"]}}}


class BlockingTool:
    """A third-party tool that knows nothing of deadlines: it blocks until ``release`` is set (in a test, at its
    teardown), like a tool that never returns; after 30 s it gives up, so that a loop that waits for it fails
    instead of hanging."""

    name = "nap"
    schema = SCHEMA

    def __init__(self) -> None:
        self.entered, self.release, self.returned = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        self.entered.set()
        self.release.wait(30)
        self.returned.set()
        return ToolResult("woke up")


class PoliteTool:
    """A tool that takes the deadline: it waits for it (or its cancel) and returns what it has."""

    name = "nap"
    schema = SCHEMA

    def __init__(self) -> None:
        self.deadlines: list[Deadline] = []

    def __call__(self, arguments: dict[str, Any], *, deadline: Deadline) -> ToolResult:
        self.deadlines.append(deadline)
        stop = deadline.cancel or threading.Event()
        stop.wait(deadline.left_s())
        return ToolResult("stopped at the deadline with half a result", failures=(deadline.failure("nap"),))


@pytest.fixture
def blocking() -> Iterator[BlockingTool]:
    tool = BlockingTool()
    yield tool
    tool.release.set()  # let the abandoned thread end


def test_a_tool_that_overruns_the_time_limit_is_abandoned_and_the_session_times_out(blocking: BlockingTool,
                                                                                   tmp_path: Path) -> None:
    engine = ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("never reached")])
    # 3 s: the limit runs from the session's start (its journal record is fsync'ed), not from the tool call
    agent = Agent(engine, [blocking], config=AgentConfig(time_limit_s=3.0), trajectory_path=tmp_path / "j.jsonl")
    result, events = collect_events(agent.events("q"))
    assert result.termination == "timeout", result.termination
    assert blocking.entered.is_set() and not blocking.returned.is_set(), "the session waited for the tool to return"
    [returned] = [e for e in events if isinstance(e, ToolReturned)]
    assert [f["kind"] for f in returned.failures] == ["timeout"]
    assert "did not finish" in result.messages[-1]["content"], result.messages[-1]
    [trajectory] = read_trajectories(tmp_path / "j.jsonl")
    assert trajectory.termination == "timeout"
    assert [f["kind"] for f in trajectory.turns[0].tool_failures] == ["timeout"]


def test_cancel_abandons_a_running_tool_at_once_and_the_journal_says_cancelled(blocking: BlockingTool,
                                                                               tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Thread(target=lambda: (blocking.entered.wait(), cancel.set()), daemon=True).start()
    engine = ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("never reached")])
    agent = Agent(engine, [blocking], trajectory_path=tmp_path / "j.jsonl")  # the default limit: 9,000 s
    result = agent.run("q", cancel=cancel)
    assert result.termination == "cancelled" and not blocking.returned.is_set()
    [trajectory] = read_trajectories(tmp_path / "j.jsonl")
    assert trajectory.termination == "cancelled"
    assert [f["kind"] for f in trajectory.turns[0].tool_failures] == ["cancelled"]


def test_an_interrupt_during_a_tool_call_leaves_the_session_open_and_the_resume_makes_the_call_whole(
        blocking: BlockingTool, tmp_path: Path) -> None:
    """A server shutting down interrupts (``interrupt``, then ``cancel``): the call cut short is not recorded as a
    cancelled failure the model would read after a resume; the journal keeps the session open, and the resume
    makes the call again, whole."""
    journal = tmp_path / "j.jsonl"
    cancel, interrupt = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (blocking.entered.wait(), interrupt.set(), cancel.set()), daemon=True).start()
    engine = ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("never reached")])
    result, _ = collect_events(Agent(engine, [blocking], trajectory_path=journal).events(
        "q", cancel=cancel, interrupt=interrupt))
    assert result.termination == "interrupted" and not blocking.returned.is_set()
    [trajectory] = read_trajectories(journal)
    assert trajectory.termination == "incomplete" and trajectory.turns == []
    blocking.release.set()  # the tool answers now
    resumed = Agent(ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("rested")]), [blocking],
                    trajectory_path=journal).resume(journal)
    assert resumed.answer == "rested"
    [trajectory] = read_trajectories(journal)
    assert trajectory.termination == "answered" and trajectory.turns[0].observation is not None
    assert "woke up" in trajectory.turns[0].observation and not trajectory.turns[0].tool_failures


def test_a_tool_that_takes_the_deadline_gets_the_sessions_and_its_own_result_is_kept() -> None:
    tool = PoliteTool()
    engine = ScriptedEngine([tool_call_turn("nap", s=30), answer_turn("never reached")])
    result = Agent(engine, [tool], config=AgentConfig(time_limit_s=2.0)).run("q")  # room for a loaded machine
    assert result.termination == "timeout"
    [deadline] = tool.deadlines
    assert deadline.at_s is not None and deadline.cancel is None
    assert "stopped at the deadline with half a result" in result.messages[-1]["content"]


def test_a_call_whose_deadline_passed_is_not_started(blocking: BlockingTool) -> None:
    registry = ToolRegistry([blocking])
    with pytest.raises(ToolTimeout):
        registry.run(PreparedCall("nap", {"s": 1}), deadline=Deadline.after(-1.0))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ToolCancelled):
        registry.run(PreparedCall("nap", {"s": 1}), deadline=Deadline(cancel=cancel))
    assert not blocking.entered.is_set()


def test_errors_of_a_tool_under_a_deadline_reach_the_caller_and_results_come_back() -> None:
    class Exploding:
        name, schema = "nap", SCHEMA

        def __call__(self, arguments: dict[str, Any]) -> ToolResult:
            raise RuntimeError("backend exploded")

    with pytest.raises(RuntimeError, match="backend exploded"):
        call_with_deadline(Exploding(), {"s": 1}, Deadline.after(60))
    polite = PoliteTool()
    result = call_with_deadline(polite, {"s": 1}, Deadline.after(0.01))
    assert result.text.startswith("stopped") and [f.kind for f in result.failures] == ["timeout"]


def test_interrupted_calls_are_typed_tool_errors_and_the_tools_own_failure_text_is_used() -> None:
    class WithFailureText(BlockingTool):
        def failure_result(self, arguments: dict[str, Any], failure: Any) -> ToolResult:
            return ToolResult(f"could not nap {arguments['s']} s", failures=(failure,))

    assert issubclass(ToolTimeout, ToolInterrupted) and issubclass(ToolCancelled, ToolInterrupted)
    assert takes_deadline(PoliteTool()) and not takes_deadline(BlockingTool())
    tool = WithFailureText()
    registry = ToolRegistry([tool])
    shown = registry.interrupted_result(PreparedCall("nap", {"s": 3}), ToolTimeout("nap", "too slow"))
    assert shown.text == "could not nap 3 s" and shown.failures[0].kind == "timeout"
    plain = ToolRegistry([BlockingTool()]).interrupted_result(PreparedCall("nap", {"s": 3}),
                                                             ToolCancelled("nap", "cancelled"))
    assert plain.text.startswith("Error: the nap tool did not finish") and plain.failures[0].kind == "cancelled"
