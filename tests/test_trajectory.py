"""The JSONL journal survives any text and any crash: records split on \\n only, torn lines skipped and reported,
the next session on a line of its own, no session before or after a tear lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from venus_edge.agent import Agent
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.tools.base import ToolResult
from venus_edge.trajectory import TrajectoryWriter, read_journal, read_trajectories
from venus_edge.turn import Turn

# Every character str.splitlines() treats as a line boundary, besides \n.
LINE_BREAKS = ["\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


class PageTool:
    name = "search"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {
        "query": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}}

    def __init__(self, text: str) -> None:
        self.text = text

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(self.text)


def session(path: Path, text: str, answer: str = "done") -> Any:
    engine = ScriptedEngine([tool_call_turn("search", query=["q"]), answer_turn(answer)])
    return Agent(engine, [PageTool(text)], trajectory_path=path).run("question")


@pytest.mark.parametrize("separator", LINE_BREAKS, ids=[hex(ord(s[0])) for s in LINE_BREAKS])
def test_any_line_separator_in_a_tool_result_keeps_the_journal_readable(tmp_path, separator):
    path = tmp_path / "runs.jsonl"
    text = f"first{separator}second{separator}"
    result = session(path, text)
    journal = read_journal(path)
    assert journal.skipped == []
    [trajectory] = journal.trajectories
    assert trajectory.messages == result.messages and trajectory.termination == "answered"
    assert text in trajectory.turns[0].observation


def _tear_last_record(path: Path, keep_bytes: int) -> None:
    """Cut the file inside its last record, as a crash during the write would (the record minus its tail)."""
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: last_start + keep_bytes])


@pytest.mark.parametrize("keep_bytes", [1, 40, -2], ids=["one byte", "mid-record", "all but its newline and brace"])
def test_a_torn_record_is_skipped_and_the_sessions_around_it_are_whole(tmp_path, keep_bytes):
    path = tmp_path / "runs.jsonl"
    first = session(path, "page one", "first answer")
    second = session(path, "page two", "second answer")
    size = len(path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[1])
    _tear_last_record(path, keep_bytes % size)
    third = session(path, "page three", "third answer")

    journal = read_journal(path)
    by_id = {t.session_id: t for t in journal.trajectories}
    assert by_id[first.session_id].termination == "answered" and by_id[first.session_id].answer == "first answer"
    assert by_id[second.session_id].termination == "incomplete", "its end record was torn"
    assert len(by_id[second.session_id].turns) == 2
    assert by_id[third.session_id].messages == third.messages and by_id[third.session_id].answer == "third answer"
    [skipped] = journal.skipped
    assert "torn" in skipped.reason and skipped.line == 8, skipped  # start, 2 turns, end: line 8


def test_a_record_torn_inside_a_utf8_character_is_skipped(tmp_path):
    path = tmp_path / "runs.jsonl"
    session(path, "中文页面" * 50)
    data = path.read_bytes()
    cut = data.index("中".encode()) + 1  # inside the three bytes of a character
    path.write_bytes(data[:cut])
    later = session(path, "after the crash")
    journal = read_journal(path)
    assert [t.session_id for t in journal.trajectories][-1] == later.session_id
    assert journal.trajectories[-1].termination == "answered"
    [torn] = journal.skipped
    assert torn.reason.startswith("not JSON") and "torn by a crash? It is not UTF-8 either" in torn.reason, torn


def test_a_session_whose_start_was_lost_is_reported_not_fatal(tmp_path, caplog):
    path = tmp_path / "runs.jsonl"
    lost = TrajectoryWriter(path, "lost")
    lost.turn(Turn(0, "answer", "c"))
    kept = session(path, "page")
    with path.open("ab") as handle:
        handle.write(b"not json at all\n[1, 2]\n")
    journal = read_journal(path)
    assert [t.session_id for t in journal.trajectories] == [kept.session_id]
    reasons = [s.reason for s in journal.skipped]
    assert reasons[0] == "session lost has no start record; its records are left out"
    assert reasons[1].startswith("not JSON") and reasons[2].startswith("not a trajectory record"), reasons
    assert [t.session_id for t in read_trajectories(path)] == [kept.session_id]
    assert "skipped" in caplog.text, "read_trajectories logs what it skipped"


def test_the_writer_starts_after_a_torn_line_on_a_new_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"record": "turn", "session_id": "x", "con')
    TrajectoryWriter(path, "s").start(question="q", system_prompt="p")
    lines = path.read_bytes().split(b"\n")
    assert json.loads(lines[1])["session_id"] == "s" and lines[2] == b""


def test_half_an_emoji_in_a_call_neither_crashes_the_session_nor_the_journal(tmp_path):
    """A model's JSON may escape half a surrogate pair ("\\ud83d"); the call runs with U+FFFD in its place."""
    path = tmp_path / "runs.jsonl"
    turn = 'x\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": ["smile \\ud83d"]}}\n</tool_call>'
    engine = ScriptedEngine([turn, answer_turn("done")])
    result = Agent(engine, [PageTool("page")], trajectory_path=path).run("question")
    assert result.termination == "answered"
    [trajectory] = read_journal(path).trajectories
    assert trajectory.turns[0].tool_call["arguments"] == {"query": ["smile \ufffd"]}


@pytest.mark.parametrize(
    "foreign, reason",
    [
        ('{"record": "turn", "session_id": ["list"], "content": "c"}', "not a trajectory record"),
        ('{"record": "turn", "session_id": {"a": 1}, "content": "c"}', "not a trajectory record"),
        ('{"record": "turn", "session_id": "KEPT", "turn": 9}', "turn record without content"),
        ('{"record": "start", "session_id": "other", "system_prompt": "p"}', "start record without question"),
    ],
)
def test_hand_edited_or_foreign_records_are_skipped_with_a_reason(tmp_path, foreign, reason):
    path = tmp_path / "runs.jsonl"
    kept = session(path, "page")
    text = path.read_text().replace("KEPT", kept.session_id)
    path.write_text("\ufeff" + text + foreign.replace("KEPT", kept.session_id) + "\n")  # a BOM, as editors write
    journal = read_journal(path)
    assert [t.session_id for t in journal.trajectories] == [kept.session_id]
    assert journal.trajectories[0].messages == kept.messages
    assert any(reason in s.reason for s in journal.skipped), journal.skipped


def test_a_turn_round_trips_through_the_journal(tmp_path):
    """What the agent records is what training reads: every field of a ``Turn`` survives the journal."""
    turn = Turn(
        index=3, kind="tool_call", content="<think>\nx\n</think>\n<tool_call>...</tool_call>", generated="raw",
        token_ids=(5, 6, 7), logprobs=(-0.5, -1.25, 0.0), finish_reason="stop", attempts=2,
        format_errors=({"code": "lenient_json", "message": "m", "fatal": False},),
        tool_call={"name": "search", "arguments": {"query": ["a"]}}, dropped_arguments=("page",),
        argument_changes=("query: a string became a list",), observation="<tool_response>\nr\n</tool_response>",
        visited_urls=("corpus://a",), tool_failures=({"kind": "x"},), tool_attempts=({"backend": "b"},),
        replaces_last_observation="notice", stats={"prompt_tokens": 10},
    )
    writer = TrajectoryWriter(tmp_path / "t.jsonl", "s")
    writer.start(question="q", system_prompt="sys")
    writer.turn(turn)
    [trajectory] = read_trajectories(tmp_path / "t.jsonl")
    assert trajectory.turns == [turn]
    assert not turn.well_formed and Turn(0, "answer", "a").well_formed
