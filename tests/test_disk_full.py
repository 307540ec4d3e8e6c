"""A full or unwritable disk: the answer still reaches the user (the result, stdout, the HTTP client), one line says
what was not saved and where, and nothing already saved in the journal is damaged.

The faults are real: ``/dev/full`` answers every write with ENOSPC; ``RLIMIT_FSIZE`` (in a child process, with
SIGXFSZ ignored) cuts a write part way, as a disk that fills up in the middle of a record does; a folder that is a
file fails the journal's ``mkdir``. None needs root, and root cannot get around them (a read-only folder it can).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.cli import summary_heading
from venus_edge.result import TERMINATIONS
from venus_edge.server import ResearchService, create_app
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn, read_sse
from venus_edge.tools.base import ToolResult
from venus_edge.trajectory import read_journal

DEV_FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full on this system")
needs_rlimit = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")


class EchoTool:
    """A tool whose observation is its argument, so that the test knows each record's size."""

    name = "echo"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {
        "name": "echo", "description": "echo",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}

    def __call__(self, arguments: dict[str, object]) -> ToolResult:
        return ToolResult(str(arguments["text"]))


@needs_dev_full
def test_a_full_disk_loses_the_journal_not_the_answer() -> None:
    result = Agent(ScriptedEngine([answer_turn("42")]), [], trajectory_path=DEV_FULL).run("q")
    assert result.answer == "42" and result.termination == "answered"
    assert result.journal_error == (f"the trajectory of session {result.session_id} was not saved to /dev/full "
                                    "([Errno 28] No space left on device)")


def test_a_journal_folder_that_is_a_file_loses_the_journal_not_the_answer(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("a file, not a folder")
    result = Agent(ScriptedEngine([answer_turn("42")]), [], trajectory_path=tmp_path / "runs" / "j.jsonl").run("q")
    assert result.answer == "42"
    assert result.journal_error is not None and f"{tmp_path / 'runs'}" in result.journal_error, result.journal_error


# The child: one session already in the journal, then a second one whose records stop fitting after its start
# record (RLIMIT_FSIZE: a write past the limit is cut part way, then fails with EFBIG).
_CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    sys.path[:0] = {test_dir!r}
    from test_disk_full import EchoTool
    from venus_edge.agent import Agent
    from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
    journal = Path(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death, as a full disk gives ENOSPC
    limit = journal.stat().st_size + int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    turns = [tool_call_turn("echo", text="x" * 5_000), answer_turn("the answer")]
    result = Agent(ScriptedEngine(turns), [EchoTool()], trajectory_path=journal).run("second question")
    print(json.dumps({{"answer": result.answer, "error": result.journal_error, "id": result.session_id,
                      "limit": limit}}))
""")


@needs_rlimit
def test_a_record_torn_by_a_full_disk_is_cut_and_the_sessions_around_it_stay_whole(tmp_path: Path) -> None:
    """The disk fills up in the middle of a turn record: the torn bytes are cut, no later record is written
    (a gap would read back as a whole session), the session before is untouched, and the next session written
    when there is room again is whole too."""
    journal = tmp_path / "runs.jsonl"
    first = Agent(ScriptedEngine([answer_turn("first")]), [], trajectory_path=journal).run("first question")
    saved = journal.read_bytes()
    # room for the second session's start record (about 4 kB) but not its turn (content, observation and token ids
    # of 5,000 characters each: over 20 kB)
    room = 8_000
    child = subprocess.run([sys.executable, "-c", _CHILD.format(test_dir=[str(Path(__file__).parent)]),
                            str(journal), str(room)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    outcome = json.loads(child.stdout)
    assert outcome["answer"] == "the answer"
    assert outcome["error"] == (f"the trajectory of session {outcome['id']} was saved to {journal} only up to "
                                "before its turn 0 ([Errno 27] File too large); the records before it are intact")
    assert journal.read_bytes().startswith(saved) and journal.stat().st_size < outcome["limit"]
    assert journal.read_bytes().endswith(b"}\n"), "no torn record left at the end"
    third = Agent(ScriptedEngine([answer_turn("third")]), [], trajectory_path=journal).run("third question")
    read = read_journal(journal)
    assert read.skipped == []
    assert [(t.session_id, t.termination, len(t.turns)) for t in read.trajectories] == [
        (first.session_id, "answered", 1), (outcome["id"], "incomplete", 0), (third.session_id, "answered", 1)]


@needs_dev_full
def test_the_server_sends_the_answer_and_says_the_journal_was_not_saved() -> None:
    service = ResearchService([ScriptedEngine([answer_turn("42")])], [], AgentConfig(), journal_path=DEV_FULL)
    with UvicornThread(create_app(service)) as server, httpx.stream(
            "POST", f"{server.url}/v1/research", json={"question": "q"}, timeout=30) as response:
        events = list(read_sse(response))
    service.close()
    kind, _, finished = events[-1]
    assert kind == "session_finished" and finished["answer"] == "42"
    assert "was not saved to /dev/full ([Errno 28] No space left on device)" in finished["journal_error"]


def _research(model: Path, corpus: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    """``venus-edge research`` as its own process on SmolLM2, short: one strict turn that must answer."""
    command: list[str | bytes] = [
        sys.executable, "-m", "venus_edge.cli", "research", *args, "--model", str(model), "--corpus", str(corpus),
        "--strict", "--max-turns", "1", "--max-tokens", "400", "--n-ctx", "4096", "--threads", "1",
        "--no-prompt-cache", "--quiet"]
    return subprocess.run(command, capture_output=True, timeout=300)


@needs_dev_full
def test_cli_research_on_a_full_disk_prints_its_answer_one_line_and_exits_4(smollm2_gguf: Path,
                                                                              tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("tomllib was added in Python 3.11.")
    done = _research(smollm2_gguf, tmp_path / "docs", "When was tomllib added?", "--out", str(DEV_FULL))
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 4, stderr
    headings = {summary_heading(name, answered=answered) for name in TERMINATIONS for answered in (True, False)}
    assert stdout.splitlines()[0] in headings and "Trajectory: /dev/full" in stdout
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: the trajectory of session "), stderr
    assert lines[0].endswith("was not saved to /dev/full ([Errno 28] No space left on device)"), stderr


def test_cli_research_with_an_argument_that_is_not_utf8_stores_it_valid(smollm2_gguf: Path, tmp_path: Path) -> None:
    """``venus-edge research $'\\xff\\xfe question'``: the question is researched and journaled with U+FFFD for
    each byte, the journal stays UTF-8, and stderr says what was replaced."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("tomllib was added in Python 3.11.")
    journal = tmp_path / "runs.jsonl"
    done = _research(smollm2_gguf, tmp_path / "docs", b"\xff\xfe question", "--out", str(journal))
    assert done.returncode in (0, 1), done.stderr.decode()
    assert "the question argument: 2 characters that are not valid Unicode" in done.stderr.decode()
    [trajectory] = read_journal(journal).trajectories
    assert trajectory.question == "\ufffd\ufffd question"
    journal.read_bytes().decode("utf-8")
