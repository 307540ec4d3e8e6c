"""Journals under faults (issue 25, kinds 1, 2 (reading), 6 and 7): one writer per session, turn indices that
continue, records validated by type when read, messages that say what was found, and an end record for every way
a session ends that agrees with what the client was told. Real files, real processes, a real server on
127.0.0.1; the model is the scripted engine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from venus_edge.agent import Agent, AgentConfig, resumable_session
from venus_edge.cli import main
from venus_edge.errors import SessionLockedError, TrajectoryError
from venus_edge.server import ResearchService, create_app
from venus_edge.session_lock import SessionLock, lock_path
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn, read_sse, tool_call_turn
from venus_edge.tools.base import ToolResult
from venus_edge.trajectory import read_journal

CALLS = 3  # tool calls the scripted researcher makes before it answers


class EchoTool:
    """A tool that answers each query with ``echo-result <query>`` (what the scripted researcher counts)."""

    name = "echo"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {"name": "echo", "parameters": {
        "type": "object", "properties": {"query": {"type": "array", "items": {"type": "string"}}},
        "required": ["query"]}}}

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult("echo-result " + " ".join(arguments["query"]))


def researcher(prompt: str) -> str:
    """Calls ``echo`` CALLS times (q0, q1, ...), one call per turn, then answers: a function of the prompt, so that
    it goes on from any point, in any process."""
    made = prompt.count("echo-result ")
    return tool_call_turn("echo", query=[f"q{made}"]) if made < CALLS else answer_turn(f"{made} results")


def make_agent(journal: Path | None = None, turns: Any = researcher, **config: Any) -> Agent:
    return Agent(ScriptedEngine(turns), [EchoTool()], config=AgentConfig(**config), trajectory_path=journal)


def killed_after(journal: Path, records: int) -> str:
    """A journal whose one session was killed after its first ``records`` records (start, turns); its id."""
    make_agent(journal).run("What do the queries say?")
    lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
    journal.write_text("".join(lines[:records]), encoding="utf-8")
    return str(json.loads(lines[0])["session_id"])


def cli_resume(journal: Path, tmp_path: Path) -> int:
    """``venus-edge research --resume journal`` with a model that is never loaded: refusals come before it."""
    return main(["research", "--resume", str(journal), "--corpus", str(tmp_path),
                 "--model", str(tmp_path / "never-loaded.gguf")])


def turn_indices(journal: Path) -> list[int]:
    return [r["turn"] for r in map(json.loads, journal.read_text().splitlines()) if r["record"] == "turn"]


def end_records(journal: Path) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, journal.read_text().splitlines()) if r["record"] == "end"]


# ---------------------------------------------------------------------------------------------- kind 1: one writer
# The child resumes the session with a researcher that stops to sleep inside its KILL_AT-th generation, saying so in
# a marker file: while it sleeps, it holds the session's lock.
CHILD = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_journal_faults import make_agent, researcher
    journal, marker = sys.argv[1:3]
    calls = []

    def slow(prompt):
        calls.append(prompt)
        if len(calls) == 1:
            Path(marker).write_text("generating")
            time.sleep(300)
        return researcher(prompt)

    make_agent(None, slow).resume(Path(journal))
''')


def test_two_resumes_of_one_session_at_once_the_second_is_refused_naming_the_first(tmp_path, capsys):
    """The issue's reproduction: two ``research --resume J`` of one session both ran and the journal held turns
    [0, 1, 1, 2, 2, 3, 3]. Now the second is refused at once, by the API and the CLI (before any model loads), with
    the holder's pid, host and command; once the holder dies (SIGKILL: the kernel drops its lock, its lock file
    stays) the session resumes and the journal holds each turn once and one end record."""
    journal, marker = tmp_path / "j.jsonl", tmp_path / "marker"
    session_id = killed_after(journal, 3)  # start, turns 0 and 1
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(Path(__file__).parent)), str(journal),
                              str(marker)])
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, "the first writer ended before it held the session"
            assert time.monotonic() < deadline, "the first writer never started its turn"
            time.sleep(0.05)
        with pytest.raises(SessionLockedError, match=f"session {session_id} is being written by pid {child.pid} "
                                                     f"on {os.uname().nodename}") as refused:
            make_agent().resume(journal)
        assert "test_journal_faults" not in refused.value.holder["command"] or refused.value.holder["pid"] == child.pid
        assert refused.value.lock_path == lock_path(journal, session_id)
        assert cli_resume(journal, tmp_path) == 3
        assert f"is being written by pid {child.pid}" in capsys.readouterr().err
        assert turn_indices(journal) == [0, 1], "the refused writers wrote nothing"
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    assert lock_path(journal, session_id).exists(), "a killed holder leaves its (unlocked) lock file"
    result = make_agent().resume(journal)
    assert result.answer == f"{CALLS} results" and result.session_id == session_id
    assert turn_indices(journal) == list(range(CALLS + 1)) and len(end_records(journal)) == 1
    assert not lock_path(journal, session_id).parent.exists(), "the lock folder is removed once no one writes"


def test_two_threads_writing_one_session_the_second_is_refused(tmp_path):
    """The server's workers are threads of one process: the lock excludes them as it excludes processes."""
    journal = tmp_path / "j.jsonl"
    first = make_agent(journal).events("q", session_id="same")
    next(first)  # session_started: the first writer holds the session
    second = make_agent(journal).events("q", session_id="same")
    with pytest.raises(SessionLockedError, match=f"pid {os.getpid()} .*thread MainThread"):
        next(second)
    for _ in first:
        pass
    assert turn_indices(journal) == list(range(CALLS + 1)) and len(end_records(journal)) == 1
    result = make_agent(journal).run("q")  # the lock was given back: a new session (another id) runs
    assert result.termination == "answered"
    with SessionLock(journal, "x"), pytest.raises(SessionLockedError):
        SessionLock(journal, "x").acquire()
    odd = SessionLock(journal, "../../etc/passwd")  # an id from a hand-written journal stays inside the folder
    assert odd.path.parent == Path(f"{journal}.locks") and len(odd.path.stem) == 64


def test_a_resume_reads_the_journal_again_once_it_holds_the_lock(tmp_path):
    """A writer that ends the session between another writer's read and its lock: the late one is refused as
    ended, it does not write the session again."""
    journal = tmp_path / "j.jsonl"
    session_id = killed_after(journal, 2)
    stream = make_agent().resume_events(journal)  # read now; the lock is taken when it starts
    make_agent().resume(journal)  # another writer finishes the session meanwhile
    with pytest.raises(TrajectoryError, match=f"session {session_id} ended \\(answered\\)"):
        next(stream)
    assert turn_indices(journal) == list(range(CALLS + 1)) and len(end_records(journal)) == 1


# ---------------------------------------------------------------------------------------------- turn indices
def test_a_repeated_turn_is_read_once_and_reported_and_resume_refuses_it(tmp_path):
    """The journal two writers made ([0, 1, 1, 2, 2, 3, 3] and two end records) reads back as the first writer's
    4 turns and one end, each repeat reported with its line; it used to read as 7 turns."""
    journal = tmp_path / "j.jsonl"
    make_agent(journal).run("q")
    start, *turns, end = journal.read_text().splitlines(keepends=True)
    doubled = [start] + [line for turn in turns for line in (turn, turn)] + [end, end]
    journal.write_text("".join(doubled))
    read = read_journal(journal)
    [trajectory] = read.trajectories
    assert [t.index for t in trajectory.turns] == [0, 1, 2, 3] and trajectory.termination == "answered"
    assert [(s.line, s.reason.split(" (")[0]) for s in read.skipped] == [
        (3, "turn record: turn 0 of session " + trajectory.session_id + " again"),
        (5, "turn record: turn 1 of session " + trajectory.session_id + " again"),
        (7, "turn record: turn 2 of session " + trajectory.session_id + " again"),
        (9, "turn record: turn 3 of session " + trajectory.session_id + " again"),
        (11, "end record: after the session's end record"),
    ]
    assert "(line 2 has it)" in read.skipped[0].reason

    journal.write_text("".join(doubled[:4]))  # start, turn 0, turn 0 again, turn 1: killed, then resumed twice
    with pytest.raises(TrajectoryError, match=r"j\.jsonl:3: session \w+ cannot be resumed: turn record: turn 0 of "
                                              r"session \w+ again \(line 2 has it\)"):
        make_agent().resume(journal)


def test_a_gap_in_the_turn_indices_is_noted_and_resume_refuses_it(tmp_path):
    journal = tmp_path / "j.jsonl"
    killed_after(journal, 4)
    start, turn0, _, turn2 = journal.read_text().splitlines(keepends=True)
    journal.write_text(start + turn0 + turn2)
    read = read_journal(journal)
    assert [t.index for t in read.trajectories[0].turns] == [0, 2] and not read.skipped  # kept: both are real
    assert [n.line for n in read.notes] == [3] and "turns 1..1 are missing" in read.notes[0].reason
    with pytest.raises(TrajectoryError, match=r"j\.jsonl:3: .*cannot be resumed: turn 2 of session \w+ follows "
                                              r"turn 0: turns 1..1 are missing"):
        resumable_session(journal)


# ---------------------------------------------------------------------------------------------- kind 6: shapes
def _set(kind: str, field: str, value: Any, *, index: int = 0) -> Callable[[list[dict[str, Any]]], int]:
    """Set ``field`` of the ``index``-th record of ``kind``; returns its line number."""
    def change(records: list[dict[str, Any]]) -> int:
        line = [i for i, r in enumerate(records) if r["record"] == kind][index]
        records[line][field] = value
        return line + 1
    return change


def _add_compaction(**fields: Any) -> Callable[[list[dict[str, Any]]], int]:
    def change(records: list[dict[str, Any]]) -> int:
        records.append({"record": "compaction", "session_id": records[0]["session_id"], **fields})
        return len(records)
    return change


WRONG_SHAPES = {
    "visited_urls 7": (_set("turn", "visited_urls", 7, index=1), "visited_urls is 7, not a list of strings"),
    "token_ids of text": (_set("turn", "token_ids", ["a"]), "token_ids is ['a'], not a list of integers"),
    "turn index as text": (_set("turn", "turn", "1", index=1), "turn is '1', not an integer"),
    "tool_call a string": (_set("turn", "tool_call", "echo"), "tool_call is 'echo', not null or {name"),
    "stats of text": (_set("turn", "stats", {"tokens_decoded": "many"}), "not an object of numeric figures"),
    "logprobs a string": (_set("turn", "logprobs", "x"), "logprobs is 'x', not a list of numbers or null"),
    "format_errors of numbers": (_set("turn", "format_errors", [1]), "format_errors is [1], not a list of objects"),
    "observation a number": (_set("turn", "observation", 5), "observation is 5, not a string or null"),
    "compaction messages": (_add_compaction(turn=1, messages="garbage"), "messages is 'garbage', not a list of"),
    "compaction turn": (_add_compaction(turn="1", messages=[]), "turn is '1', not an integer"),
    "compaction call_keys": (_add_compaction(turn=1, messages=[], call_keys=3), "call_keys is 3, not a list"),
    "compaction out of place": (_add_compaction(turn=7, messages=[]), "a compaction after turn 7, but the session's "
                                                                     "last turn is 1"),
}
WRONG_STARTS = {
    "config garbage": (_set("start", "config", "garbage"), "config is 'garbage', not an object"),
    "tools none": (_set("start", "tools", "none"), "tools is 'none', not a list of objects"),
    "model a list": (_set("start", "model", [1]), "model is [1], not an object"),
    "question a number": (_set("start", "question", 42), "question is 42, not a string"),
}


def _damaged(journal: Path, change: Callable[[list[dict[str, Any]]], int]) -> int:
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    line = change(records)
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    return line


def _served(journal: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``GET /v1/sessions`` and each ``GET /v1/sessions/{id}`` of a server just started on ``journal``."""
    service = ResearchService([ScriptedEngine([])], [EchoTool()], AgentConfig(), journal_path=journal)
    try:
        with UvicornThread(create_app(service)) as server:
            listed = httpx.get(f"{server.url}/v1/sessions")
            assert listed.status_code == 200, listed.text
            views = [httpx.get(f"{server.url}/v1/sessions/{s['session_id']}") for s in listed.json()["sessions"]]
            assert [v.status_code for v in views] == [200] * len(views), [v.text for v in views]
    finally:
        service.close()
    return listed.json(), [v.json() for v in views]


@pytest.mark.parametrize("change, reason", WRONG_SHAPES.values(), ids=list(WRONG_SHAPES))
def test_a_record_of_the_wrong_shape_is_skipped_with_its_line_by_every_reader(tmp_path, change, reason, capsys):
    """Each reader of a journal (resume, train clean, the server's history) meets a wrongly typed field as a
    skipped record with its line and reason, never as a traceback; resume refuses the session, naming the line."""
    journal = tmp_path / "j.jsonl"
    killed_after(journal, 3)
    line = _damaged(journal, change)
    read = read_journal(journal)
    [skipped] = read.skipped
    assert skipped.line == line and reason in skipped.reason, skipped
    with pytest.raises(TrajectoryError, match=rf"j\.jsonl:{line}: session \w+ cannot be resumed: .*"):
        make_agent().resume(journal)
    assert cli_resume(journal, tmp_path) == 3
    assert f"j.jsonl:{line}: session" in capsys.readouterr().err
    listed, [view] = _served(journal)
    assert listed["skipped_lines"] == [{"line": line, "reason": skipped.reason}]
    assert view["state"] == "incomplete" and len(view["turns"]) == len(read.trajectories[0].turns)
    assert main(["train", "clean", str(journal), "--out", str(tmp_path / "clean.jsonl")]) == 1  # no answered session
    assert f"j.jsonl:line {line}: broken record: {skipped.reason}" in capsys.readouterr().out


@pytest.mark.parametrize("change, reason", WRONG_STARTS.values(), ids=list(WRONG_STARTS))
def test_a_start_record_of_the_wrong_shape_leaves_its_session_out_with_the_reason(tmp_path, change, reason, capsys):
    journal = tmp_path / "j.jsonl"
    killed_after(journal, 3)
    line = _damaged(journal, change)
    read = read_journal(journal)
    assert read.trajectories == [] and reason in read.skipped[0].reason and read.skipped[0].line == line
    assert "has no start record" in read.skipped[1].reason
    expected = f"nothing to resume: the journal holds no readable session: 2 line(s) skipped, the first at line 1: " \
               f"start record: {reason}"
    with pytest.raises(TrajectoryError, match=re.escape(expected)):
        make_agent().resume(journal)
    listed, views = _served(journal)
    assert listed["sessions"] == [] and views == [] and len(listed["skipped_lines"]) == 2


@pytest.mark.parametrize("config, problem", [
    ({"max_turns": "many"}, "max_turns is 'many', not a int"),
    ({"sampling": "hot"}, "sampling is 'hot', not a SamplingParams"),
    ({"sampling": {"temperature": "hot"}}, "temperature is 'hot', not a float"),
    ({"strict": 1}, "strict is 1, not a bool"),
    ({"today": "yesterday"}, "Invalid isoformat string"),
])
def test_a_recorded_config_of_the_wrong_types_is_refused_by_resume_with_the_field(tmp_path, config, problem):
    journal = tmp_path / "j.jsonl"
    killed_after(journal, 2)
    _damaged(journal, _set("start", "config", config))
    with pytest.raises(TrajectoryError, match="its config cannot be read") as refused:
        make_agent().resume(journal)
    assert problem in str(refused.value)


# ---------------------------------------------------------------------------------------------- messages
def test_resume_says_what_the_journal_holds(tmp_path):
    """Empty, garbage only, no such session, every session ended: each its own message (the first two used to say
    'every session in the journal ended')."""
    journal = tmp_path / "j.jsonl"
    journal.write_text("")
    with pytest.raises(TrajectoryError, match="nothing to resume: the journal is empty"):
        resumable_session(journal)
    journal.write_text("garbage\n{\"a\": 1}\n")
    with pytest.raises(TrajectoryError, match=r"nothing to resume: the journal holds no readable session: 2 line\(s\) "
                                              r"skipped, the first at line 1: not JSON"):
        resumable_session(journal)
    done = make_agent(journal).run("q")
    with pytest.raises(TrajectoryError, match=f"no session nope in the journal; it holds 1 session\\(s\\), 1 ended "
                                              f"\\(the last: {done.session_id}\\)"):
        resumable_session(journal, "nope")
    with pytest.raises(TrajectoryError, match="every session in the journal ended; nothing to resume \\(it holds 1"):
        resumable_session(journal)
    with pytest.raises(TrajectoryError, match="no such file"):
        resumable_session(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------------------------------- kind 2: reading
def test_a_lone_surrogate_in_a_record_is_read_as_u_fffd_and_the_history_pages_answer(tmp_path):
    """A record holding ``"\\ud800"`` (valid JSON, no valid text) made every history page answer 500, also after a
    restart. It reads back with U+FFFD in its place, noted with its line, on the running server and a new one; a
    NaN or infinity (JSON has neither) is served as null."""
    journal = tmp_path / "j.jsonl"
    service = ResearchService([ScriptedEngine([answer_turn("fine")])], [EchoTool()], AgentConfig(),
                              journal_path=journal)
    try:
        with UvicornThread(create_app(service)) as server:
            posted = httpx.post(f"{server.url}/v1/research", json={"question": "good", "stream": False})
            assert posted.status_code == 202
            service.get(posted.json()["session_id"]).wait(30)
            with journal.open("a", encoding="utf-8") as out:  # a session with lone surrogates, as older writers left
                out.write('{"record": "start", "schema_version": 1, "session_id": "bad", "question": "why \\ud800?", '
                          '"system_prompt": "p", "started_at": "2026-01-01T00:00:00+00:00"}\n')
                out.write('{"record": "turn", "session_id": "bad", "turn": 0, "content": "c", '
                          '"tool_call": {"name": "echo", "arguments": {"query": ["\\udfff"], "n": NaN}}, '
                          '"tool_failures": [{"waited_s": Infinity}], '
                          '"observation": "<tool_response>\\nx \\ud83d\\n</tool_response>"}\n')
            listed = httpx.get(f"{server.url}/v1/sessions")
            view = httpx.get(f"{server.url}/v1/sessions/bad")
    finally:
        service.close()
    assert listed.status_code == view.status_code == 200, (listed.text, view.text)
    assert {s["question"] for s in listed.json()["sessions"]} == {"good", "why \ufffd?"}
    assert view.json()["turns"][0]["tool_call"]["arguments"] == {"query": ["\ufffd"], "n": None}  # JSON has no NaN
    assert view.json()["turns"][0]["tool_failures"] == [{"waited_s": None}]
    relisted, views = _served(journal)  # a restart: a new service and app on the same journal
    assert len(relisted["sessions"]) == 2 and "x \ufffd" in next(v for v in views if v["session_id"] == "bad")[
        "turns"][0]["observation"]
    read = read_journal(journal)
    assert [n.line for n in read.notes] == [len(journal.read_text().splitlines()) - 1,
                                           len(journal.read_text().splitlines())]
    assert "not valid Unicode" in read.notes[0].reason


FOREIGN_LINES = {
    "record a list": b'{"record": [], "session_id": "x"}',
    "record an object": b'{"record": {}, "session_id": "x"}',
    "record a number": b'{"record": 1.5, "session_id": "x"}',
    "record null": b'{"record": null, "session_id": "x"}',
    "session_id a list": b'{"record": "turn", "session_id": ["x"], "content": "c"}',
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "nested 600 deep": b'{"record": "turn", "session_id": "x", "turn": 0, "content": "c", "tool_call": {"name": "n", '
                       b'"arguments": {"a": ' + b"[" * 600 + b"]" * 600 + b"}}}",  # the C parser reads it; walks fail
    "an int of 5,000 digits": b'{"record": "turn", "session_id": "x", "turn": ' + b"7" * 5000 + b"}",
    "a list": b"[1, 2]",
}


@pytest.mark.parametrize("line", FOREIGN_LINES.values(), ids=list(FOREIGN_LINES))
def test_a_foreign_line_is_one_skipped_line_and_the_session_around_it_stays_whole(tmp_path, line, capsys):
    """A line that is JSON but no record (a list or an object where the kind belongs: unhashable, it raised
    TypeError), or JSON Python cannot hold (nested past the recursion limit, an integer past int()'s digit limit:
    RecursionError, ValueError) made the history pages 500 and resume and train clean print a traceback. It is one
    skipped line, with its number, and the session around it reads, serves and resumes whole."""
    journal = tmp_path / "j.jsonl"
    session_id = killed_after(journal, 3)
    with journal.open("ab") as out:
        out.write(line + b"\n")
    read = read_journal(journal)
    [skipped] = read.skipped
    assert skipped.line == 4 and skipped.session_id is None, skipped
    assert [t.session_id for t in read.trajectories] == [session_id] and len(read.trajectories[0].turns) == 2
    listed, [view] = _served(journal)
    assert listed["skipped_lines"] == [{"line": 4, "reason": skipped.reason}]
    assert view["session_id"] == session_id and len(view["turns"]) == 2
    assert main(["train", "clean", str(journal), "--out", str(tmp_path / "clean.jsonl")]) == 1  # no answered session
    assert f"j.jsonl:line 4: broken record: {skipped.reason}" in capsys.readouterr().out
    resumed = make_agent(journal).resume(journal)
    assert resumed.answer == f"{CALLS} results" and resumed.session_id == session_id


def test_bytes_that_are_not_utf8_cost_those_bytes_not_the_session(tmp_path):
    """Latin-1 bytes in a start record (an editor, a damaged disk) used to drop the record, and with it the whole
    session: its turns and end record were no longer read, served or resumable. The record is read with U+FFFD
    for those bytes and a note on its line; the history pages serve the session."""
    journal = tmp_path / "j.jsonl"
    make_agent(journal).run("What do the caf\u00e9 queries say?")
    data = journal.read_bytes()
    assert data.count("caf\u00e9".encode()) >= 1
    journal.write_bytes(data.replace("caf\u00e9".encode(), b"caf\xe9"))
    read = read_journal(journal)
    [session] = read.trajectories
    assert read.skipped == [] and session.question == "What do the caf\ufffd queries say?"
    assert session.termination == "answered" and len(session.turns) == CALLS + 1
    assert read.notes and all("bytes that are not UTF-8" in note.reason for note in read.notes)
    listed, [view] = _served(journal)
    assert listed["sessions"][0]["question"] == "What do the caf\ufffd queries say?" and view["state"] == "finished"


def test_concurrent_history_requests_after_a_change_share_one_read_of_the_new_lines(tmp_path, monkeypatch):
    """12 history requests at once after each change to a 50 MB journal each parsed all of it (15 s, 1.8 GB). They
    now wait for one read, which parses only the appended lines, and get the same journal."""
    journal = tmp_path / "j.jsonl"
    for _ in range(3):
        make_agent(journal).run("What do the queries say?")
    service = ResearchService([ScriptedEngine([])], [EchoTool()], AgentConfig(), journal_path=journal)
    reads: list[int] = []
    real_read = service._history_reader.read

    def slow_read(**kwargs: Any) -> Any:
        reads.append(journal.stat().st_size)
        time.sleep(0.3)  # long enough that every request arrives while it runs
        return real_read(**kwargs)

    monkeypatch.setattr(service._history_reader, "read", slow_read)
    try:
        with UvicornThread(create_app(service)) as server:
            for round_ in range(2):
                if round_:
                    make_agent(journal).run("One more?")
                results: list[Any] = []

                def ask(into: list[Any] = results) -> None:
                    into.append(httpx.get(f"{server.url}/v1/sessions"))

                threads = [threading.Thread(target=ask) for _ in range(12)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                assert [r.status_code for r in results] == [200] * 12
                assert {len(r.json()["sessions"]) for r in results} == {3 + round_}
    finally:
        service.close()
    assert len(reads) == 2, reads  # one read per change, shared by the 12 requests


# ---------------------------------------------------------------------------------------------- kind 7: end records
def test_an_engine_that_raises_mid_session_ends_it_in_the_journal_as_the_client_was_told(tmp_path):
    """The client got ``error`` and ``session_finished(error)``; the journal had no end record, so after a restart
    the session showed as ``incomplete``. Now the journal says ``error`` (with the exception) too."""
    journal = tmp_path / "j.jsonl"
    engine = ScriptedEngine([tool_call_turn("echo", query=["a"]), RuntimeError("the accelerator fell off")])
    service = ResearchService([engine], [EchoTool()], AgentConfig(), journal_path=journal)
    try:
        with UvicornThread(create_app(service)) as server, httpx.stream(
                "POST", f"{server.url}/v1/research", json={"question": "q"}, timeout=30) as response:
            messages = list(read_sse(response))
    finally:
        service.close()
    kinds = [kind for kind, _, _ in messages]
    assert kinds[-2:] == ["error", "session_finished"] and messages[-1][2]["termination"] == "error"
    [end] = end_records(journal)
    assert end["termination"] == "error" and end["error"] == "RuntimeError: the accelerator fell off"
    listed, [view] = _served(journal)
    assert [(s["state"], s["termination"]) for s in listed["sessions"]] == [("finished", "error")]
    assert view["termination"] == "error" and len(view["turns"]) == 1


def test_every_way_a_session_ends_writes_the_end_record_the_caller_got(tmp_path):
    """Answered, a tool that raises (the session goes on), cancel, the time limit, an engine that raises: the
    journal's termination is the result's (or, for the raise, the one the server reports)."""
    class Broken(EchoTool):
        def __call__(self, arguments: dict[str, Any]) -> ToolResult:
            raise KeyError("a tool's own bug")

    cases: dict[str, Any] = {}
    journal = tmp_path / "answered.jsonl"
    cases["answered"] = (make_agent(journal).run("q"), journal)
    journal = tmp_path / "tool.jsonl"
    agent = Agent(ScriptedEngine([tool_call_turn("echo", query=["a"]), answer_turn("without it")]), [Broken()],
                  trajectory_path=journal)
    cases["tool raises"] = (agent.run("q"), journal)
    journal, cancel = tmp_path / "cancelled.jsonl", threading.Event()
    cancel.set()
    cases["cancelled"] = (make_agent(journal).run("q", cancel=cancel), journal)
    journal = tmp_path / "timeout.jsonl"
    cases["time limit"] = (make_agent(journal, time_limit_s=1e-9).run("q"), journal)
    for name, (result, path) in cases.items():
        [end] = end_records(path)
        assert end["termination"] == result.termination, name
        assert read_journal(path).trajectories[0].termination == result.termination, name
    assert [cases[n][0].termination for n in cases] == ["answered", "answered", "cancelled", "timeout"]

    journal = tmp_path / "raises.jsonl"
    with pytest.raises(ZeroDivisionError):
        make_agent(journal, [tool_call_turn("echo", query=["a"]), ZeroDivisionError("engine bug")]).run("q")
    [end] = end_records(journal)
    assert end["termination"] == "error" and "ZeroDivisionError: engine bug" in end["error"]
    assert end["turns"] == 1 and not Path(f"{journal}.locks").exists()


def test_a_client_that_disconnects_leaves_a_cancelled_end_record_a_restart_shows(tmp_path):
    journal = tmp_path / "j.jsonl"
    engine = ScriptedEngine([answer_turn("y" * 2_000)], piece_chars=8, delay_s=0.01)
    service = ResearchService([engine], [EchoTool()], AgentConfig(), journal_path=journal)
    try:
        with UvicornThread(create_app(service)) as server:
            with httpx.stream("POST", f"{server.url}/v1/research", json={"question": "q"}, timeout=30) as response:
                session_id = response.headers["x-session-id"]
                next(kind for kind, _, _ in read_sse(response) if kind == "text")  # then the client leaves
            handle = service.get(session_id)
            assert handle is not None and handle.wait(30)
    finally:
        service.close()
    assert handle.result is not None and handle.result.termination == "cancelled"
    assert [e["termination"] for e in end_records(journal)] == ["cancelled"]
    listed, _ = _served(journal)
    assert [(s["state"], s["termination"]) for s in listed["sessions"]] == [("finished", "cancelled")]
