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


# ---------------------------------------------------------------------------------------------- reading as it grows
def _mixed_journal(path: Path) -> bytes:
    """A journal with every kind of line a reader meets: whole sessions, a killed one, a torn line, a foreign one,
    a repeated turn, text that is not UTF-8 and a BOM."""
    session(path, "first page")
    killed = session(path, "second page")
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines[:-2]) + b"\n")  # the second session lost its end record
    with path.open("ab") as out:
        out.write(b'{"record": "turn", "session_id": "' + killed.session_id.encode() + b'", "turn": 0, '
                  b'"content": "again"}\n')  # a second writer's turn 0
        out.write(b'[1, 2]\n{"record": "start", "session_id": "s", "question": "caf\xe9", "system_prompt": "p", '
                  b'"schema_version": 1}\n{"record": "turn", "sess')  # a foreign line, Latin-1, a torn line
    session(path, "third page")
    return path.read_bytes()


def test_a_journal_read_as_it_grows_reads_as_a_whole_read_at_every_line(tmp_path: Path) -> None:
    """``JournalReader`` fed the file in pieces of every size (cut inside lines, inside UTF-8 characters) gives at
    each whole line what ``read_journal`` gives for the file up to there, and at the end the same journal."""
    from venus_edge.trajectory import JournalReader

    data = _mixed_journal(tmp_path / "all.jsonl")
    growing, prefix = tmp_path / "growing.jsonl", tmp_path / "prefix.jsonl"
    growing.write_bytes(b"")
    reader = JournalReader(growing)
    for cut in range(0, len(data), 97):  # a prime step: cuts land everywhere in the lines
        piece = data[cut:cut + 97]
        with growing.open("ab") as out:
            out.write(piece)
        seen = reader.read()
        whole = data[:cut + len(piece)]
        prefix.write_bytes(whole[:whole.rfind(b"\n") + 1])
        assert seen == read_journal(prefix)
    assert reader.read(last_line_done=True) == read_journal(growing)
    final = read_journal(growing)
    assert len(final.trajectories) == 4 and len(final.skipped) == 3 and final.notes  # the kinds above, all seen


def test_a_reader_parses_only_new_lines_and_rebuilds_only_the_sessions_they_touch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's history pages read the journal after every change: a read parses the lines appended since the
    last, a session no new line touched is the object handed out before, and one handed out does not change when
    its session grows later."""
    import venus_edge.trajectory as trajectory

    path = tmp_path / "j.jsonl"
    for n in range(3):
        session(path, f"page {n}")
    parsed: list[bytes] = []
    real_parse = trajectory.parse_line
    monkeypatch.setattr(trajectory, "parse_line", lambda raw: (parsed.append(raw), real_parse(raw))[1])
    reader = trajectory.JournalReader(path)
    before = reader.read()
    assert len(parsed) == len(path.read_bytes().splitlines()) == 12
    writer = TrajectoryWriter(path, "live")
    writer.start(question="q", system_prompt="p", schema_version=1)
    writer.turn(Turn(0, "search", "c0"))
    parsed.clear()
    during = reader.read()
    assert len(parsed) == 2 and during.trajectories[:3] == before.trajectories
    assert all(a is b for a, b in zip(during.trajectories[:3], before.trajectories))
    live = during.trajectories[3]
    writer.turn(Turn(1, "answer", "c1"))
    after = reader.read()
    assert [len(t.turns) for t in (live, after.trajectories[3])] == [1, 2]


@pytest.mark.parametrize("how", ["rewritten in place", "replaced by another file", "rewritten at the same size"])
def test_a_journal_rewritten_or_replaced_is_read_again_from_the_start(tmp_path: Path, how: str) -> None:
    from venus_edge.trajectory import JournalReader

    path, other = tmp_path / "j.jsonl", tmp_path / "other.jsonl"
    session(path, "first", answer="one")
    reader = JournalReader(path)
    assert [t.answer for t in reader.read().trajectories] == ["one"]
    session(other, "second", answer="two")
    session(other, "third", answer="three")  # longer than the first file: no size check alone would see it
    if how == "rewritten in place":
        path.write_bytes(other.read_bytes())
    elif how == "replaced by another file":
        other.replace(path)
    else:  # the same bytes but the question, at the same size, and its end: no size or tail check sees it
        data = path.read_bytes()
        path.write_bytes(data.replace(b'"question": "question"', b'"question": "QUESTION"'))
        assert len(path.read_bytes()) == len(data) and path.read_bytes() != data
        assert [t.question for t in reader.read().trajectories] == ["QUESTION"]
        return
    assert [t.answer for t in reader.read().trajectories] == ["two", "three"]


def test_a_reader_done_with_a_last_line_reads_on_as_a_new_reader_would(tmp_path: Path) -> None:
    from venus_edge.trajectory import JournalReader

    path = tmp_path / "j.jsonl"
    session(path, "page")
    with path.open("ab") as out:
        out.write(b'{"record": "start", "session_id": "b", "question": "q", "system_prompt": "p", "schema_version": 1}')
    reader = JournalReader(path)
    assert reader.read(last_line_done=True) == read_journal(path)
    assert reader.read(last_line_done=True) == read_journal(path)
    session(path, "later")
    assert reader.read() == read_journal(path) and len(reader.read().trajectories) == 3


def test_a_line_that_fails_as_no_check_foresaw_is_one_skipped_line(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a record makes a reader do, the journal around it reads: the line is skipped with what it raised,
    and the reader's state is that of the lines before it (a read that stopped half way took its lines again)."""
    import venus_edge.trajectory as trajectory

    path = tmp_path / "j.jsonl"
    session(path, "page")
    real_from_dict = Turn.from_dict

    def fails_once(record: dict[str, Any]) -> Turn:
        if record.get("content", "").startswith("<think>") and not failed:
            failed.append(True)
            raise RecursionError("maximum recursion depth exceeded")
        return real_from_dict(record)

    failed: list[bool] = []
    monkeypatch.setattr(trajectory.Turn, "from_dict", staticmethod(fails_once))
    reader = trajectory.JournalReader(path)
    first = reader.read()
    assert [s.reason for s in first.skipped] == ["could not be read (RecursionError: maximum recursion depth exceeded)"]
    session(path, "later")
    again = reader.read()
    assert len(again.skipped) == 1 and [len(t.turns) for t in again.trajectories] == [1, 2], again


def test_a_last_line_without_its_newline_is_read_once_it_is_whole(tmp_path: Path) -> None:
    """A record being written (or torn by a crash) is not reported as torn by a reader that reads on; read_journal,
    which reads once, reports it."""
    from venus_edge.trajectory import JournalReader

    path = tmp_path / "j.jsonl"
    session(path, "page")
    reader = JournalReader(path)
    with path.open("ab") as out:
        out.write(b'{"record": "start", "session_id": "b", "question": "q", "system_prompt": "p", "schema')
    assert reader.read().skipped == [] and len(read_journal(path).skipped) == 1
    with path.open("ab") as out:
        out.write(b'_version": 1}\n')
    assert [t.session_id for t in reader.read().trajectories][-1] == "b" and reader.read().skipped == []
