"""The trajectory schema and its JSONL journal, shared by the runtime (writer) and ``venus_edge.train`` (reader).

A journal file holds one or more sessions. Each session is written as it runs, one JSON object per line,
flushed and fsync'ed after each, so a killed process loses at most the turn in flight:

    {"record": "start", "schema_version": 1, "session_id": ..., "question": ..., "system_prompt": ...,
     "tools": [schema, ...], "model": {...}, "config": {...}, "started_at": "2026-11-30T19:00:00Z"}
    {"record": "turn", "session_id": ..., "turn": 0, "content": "<think>\\n...", "token_ids": [...],
     "finish_reason": "eog", "attempts": 1, "format_errors": [...], "tool_call": {"name":..., "arguments":...},
     "observation": "<tool_response>\\n...\\n</tool_response>", "visited_urls": [...], "tool_failures": [...],
     "tool_attempts": [...], "stats": {...}}
    ...
    {"record": "compaction", "session_id": ..., "turn": 7, "policy": "keep-last-k", "tokens_before": ...,
     "tokens_after": ..., "tokens_reevaluated": ..., "detail": ..., "attempts": 0, "summary": null,
     "messages": [...], "call_keys": [...]}
    {"record": "end", "session_id": ..., "termination": "answered", "answer": ..., "sources": [...],
     "messages": [{"role": ..., "content": ...}, ...], "elapsed_s": ..., "totals": {...}}

``messages`` in the end record is the exact conversation the model saw (system, question, then assistant turns
and ``<tool_response>`` user messages), ready for the protocol renderer. A session without an end record (a
killed run) is read back with ``termination == "incomplete"`` and messages rebuilt from its turn records.

A ``compaction`` record (a context policy edited the conversation, ``venus_edge.policies``) follows the last complete
turn before it (``turn``: that turn's index, -1 before the first) and holds the whole conversation after the edit
(``messages``) and the tool-call keys the duplicate guard still holds (``call_keys``), so that ``rebuild_messages`` and
a resumed session see what the model saw; ``attempts`` counts the samples drawn since the record before it (a turn cut
at the budget, a ``summarize`` policy's notes). A turn's ``attempts`` likewise counts every sample since the record
before it.

Records are separated by ``\n`` alone: a text may hold any other line separator (U+2028, U+0085, ``\r``), which
JSON keeps as it is. A line torn by a crash (cut JSON, cut UTF-8) is skipped and reported by the reader
(``read_journal``), and the writer starts its next record on a new line, so the sessions before and after it stay
whole. A turn whose text needed leniency to parse holds the history's canonical text in ``content`` and the text
as generated in ``generated``; ``tool_call`` holds the arguments coerced to the tool's schema and
``dropped_arguments`` / ``argument_changes`` say what coercion did (absent from older journals: read back empty).

``tool_attempts`` lists the tool's backend attempts that did not simply succeed first time (``ToolAttempt.to_dict``:
rate limits, fallbacks, back-off waits). A turn record is ``Turn.to_dict()`` (``venus_edge.turn``) and reads back as a
``Turn``; fields added since schema 1 was first written (``kind``, ``logprobs``, ``tool_attempts``, ...) read back
with their empty values from older journals.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.errors import TrajectoryError
from venus_edge.jsonl import append_record, iter_records
from venus_edge.protocol import is_observation
from venus_edge.text import shown_path
from venus_edge.turn import Turn

__all__ = ["Journal", "SkippedLine", "Trajectory", "TrajectoryWriter", "read_journal", "read_trajectories"]

SCHEMA_VERSION = 1
# What each record needs to be read (field -> type); a record without it is skipped and reported.
_REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "start": {"question": str, "system_prompt": str},
    "turn": {"content": str},
    "end": {"termination": str, "messages": list},
    "compaction": {"turn": int, "messages": list},
}
logger = logging.getLogger(__name__)


@dataclass
class Trajectory:
    """One research session as read back from a journal.

    Attributes:
        session_id: unique id of the session.
        question: the user question.
        system_prompt: the system message text.
        messages: the conversation (see module docstring).
        turns: the model turns, in order.
        termination: the reference loop's termination reason, or ``incomplete`` for a killed run.
        answer: the final answer, if any.
        sources: URLs actually read during the session.
        header: the whole start record (model, config, tools, date).
        compactions: the ``compaction`` records of the session, in order (see the module docstring).
    """

    session_id: str
    question: str
    system_prompt: str
    messages: list[dict[str, str]]
    turns: list[Turn]
    termination: str
    answer: str | None
    sources: list[str]
    header: dict[str, Any] = field(default_factory=dict)
    compactions: list[dict[str, Any]] = field(default_factory=list)


class TrajectoryWriter:
    """Appends one session's records to a JSONL journal, durably, as the session runs.

    A disk that fails (full, read-only, a folder that is a file) never ends the session: the first record that
    cannot be written sets ``error`` (what was not saved, and where), that record and every later one are left out
    (so the journal never holds a session with a gap: it reads back as ``incomplete`` after its last saved turn,
    resumable from there), and the records saved before stay whole (``jsonl.append_record`` cuts a torn one).

    Attributes:
        path: the journal file.
        session_id: the session's id.
        error: None while every record was saved; else one line saying which record of which session was the first
            not saved, to which file, and why (``[Errno 28] No space left on device``).
    """

    def __init__(self, path: str | os.PathLike[str], session_id: str) -> None:
        self.path = Path(path)
        self.session_id = session_id
        self.error: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a parent that is a file, a read-only folder: the first record reports it
            self._folder_error: OSError | None = exc
        else:
            self._folder_error = None

    def start(self, **fields: Any) -> None:
        self._append({"record": "start", "schema_version": SCHEMA_VERSION, **fields})

    def turn(self, turn: Turn) -> None:
        self._append({"record": "turn", **turn.to_dict()})

    def compaction(self, **fields: Any) -> None:
        self._append({"record": "compaction", **fields})

    def end(self, **fields: Any) -> None:
        self._append({"record": "end", **fields})

    def _append(self, record: dict[str, Any]) -> None:
        if self.error is not None:
            return  # after a lost record, a later one would leave a gap that reads back as a whole session
        try:
            if self._folder_error is not None:
                raise self._folder_error
            append_record(self.path, {"session_id": self.session_id, **record})
        except OSError as exc:
            self.error = self._not_saved(record, exc)

    def _not_saved(self, record: dict[str, Any], exc: OSError) -> str:
        reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.strerror else str(exc)
        if exc.filename and Path(exc.filename) != self.path:  # a folder on the way (a file named like a folder)
            reason += f": {shown_path(exc.filename)}"
        where, kind = shown_path(self.path), record["record"]
        if kind == "start":
            return f"the trajectory of session {self.session_id} was not saved to {where} ({reason})"
        what = f"turn {record.get('turn')}" if kind == "turn" else f"{kind} record"
        return (f"the trajectory of session {self.session_id} was saved to {where} only up to before its {what} "
                f"({reason}); the records before it are intact")


@dataclass(frozen=True)
class SkippedLine:
    """A journal line that could not be read: ``line`` is 1-based; ``reason`` says why."""

    line: int
    reason: str


@dataclass
class Journal:
    """What ``read_journal`` found: the sessions, in the order they started, and the lines it had to skip."""

    trajectories: list[Trajectory]
    skipped: list[SkippedLine]


def read_journal(path: str | os.PathLike[str]) -> Journal:
    """Read every session of a journal, complete or not, and report what could not be read.

    One bad line never fails the read: a torn or foreign line is skipped (``Journal.skipped``), a session whose
    start record is missing or of another schema version is left out and reported the same way.

    Raises:
        TrajectoryError: the file does not exist.
    """
    path = Path(path)
    sessions: dict[str, dict[str, Any]] = {}
    skipped: list[SkippedLine] = []
    for number, record in _records(path, skipped):
        session = sessions.setdefault(
            record["session_id"], {"start": None, "turns": [], "compactions": [], "end": None, "line": number}
        )
        kind = record["record"]
        missing = [name for name in _REQUIRED[kind] if not isinstance(record.get(name), _REQUIRED[kind][name])]
        if missing:
            skipped.append(SkippedLine(number, f"{kind} record without {', '.join(missing)}; left out"))
        elif kind == "start":
            session["start"] = record
        elif kind == "turn":
            session["turns"].append(Turn.from_dict(record))
        elif kind == "compaction":
            session["compactions"].append(record)
        else:
            session["end"] = record
    trajectories = []
    for session_id, parts in sessions.items():
        start = parts["start"]
        if start is None:
            skipped.append(
                SkippedLine(parts["line"], f"session {session_id} has no start record; its records are left out")
            )
        elif start.get("schema_version") != SCHEMA_VERSION:
            version = start.get("schema_version")
            skipped.append(
                SkippedLine(parts["line"], f"session {session_id} has schema_version {version}, not {SCHEMA_VERSION}")
            )
        else:
            trajectories.append(_assemble(session_id, parts))
    return Journal(trajectories, sorted(skipped, key=lambda s: s.line))


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """The sessions of a journal (``read_journal``); each skipped line is logged as a warning.

    Raises:
        TrajectoryError: the file does not exist.
    """
    journal = read_journal(path)
    for line in journal.skipped:
        logger.warning("trajectory %s:%d skipped: %s", path, line.line, line.reason)
    return journal.trajectories


def _records(path: Path, skipped: list[SkippedLine]) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise TrajectoryError(path, 0, "no such file")
    for number, record, problem in iter_records(path):
        if problem:
            skipped.append(SkippedLine(number, problem))
            continue
        if (
            not isinstance(record, dict)
            or record.get("record") not in _REQUIRED
            or not isinstance(record.get("session_id"), str)
        ):
            skipped.append(SkippedLine(number, "not a trajectory record (needs 'record' and a string 'session_id')"))
            continue
        yield number, record


def _assemble(session_id: str, parts: dict[str, Any]) -> Trajectory:
    start, turns, end, compactions = parts["start"], parts["turns"], parts["end"], parts["compactions"]
    messages = end["messages"] if end is not None else rebuild_messages(start, turns, compactions)
    return Trajectory(
        session_id=session_id,
        question=start["question"],
        system_prompt=start["system_prompt"],
        messages=messages,
        turns=turns,
        termination=end["termination"] if end else "incomplete",
        answer=end.get("answer") if end else None,
        sources=end.get("sources", []) if end else _visited(turns),
        header=start,
        compactions=compactions,
    )


def rebuild_messages(
    start: dict[str, Any], turns: list[Turn], compactions: Sequence[dict[str, Any]] = ()
) -> list[dict[str, str]]:
    """The conversation implied by a start record, its turn records and its compaction records (used for killed
    runs and resume): a compaction after turn ``t`` replaces the whole conversation with its ``messages``."""
    messages = [
        {"role": "system", "content": start["system_prompt"]},
        {"role": "user", "content": start["question"]},
    ]
    pending = list(compactions)
    while pending and pending[0]["turn"] < 0:
        messages = [dict(m) for m in pending.pop(0)["messages"]]
    for turn in turns:
        if turn.replaces_last_observation:  # as the agent places a limit notice (Agent._force_answer)
            notice = {"role": "user", "content": turn.replaces_last_observation}
            if is_observation(messages[-1]["content"]) and len(messages) > 2:
                messages[-1] = notice
            else:
                messages.append(notice)
        messages.append({"role": "assistant", "content": turn.content})
        if turn.observation is not None:
            messages.append({"role": "user", "content": turn.observation})
        while pending and pending[0]["turn"] <= turn.index:
            messages = [dict(m) for m in pending.pop(0)["messages"]]
    return messages


def _visited(turns: list[Turn]) -> list[str]:
    seen: dict[str, None] = {}
    for turn in turns:
        for url in turn.visited_urls:
            seen.setdefault(url, None)
    return list(seen)
