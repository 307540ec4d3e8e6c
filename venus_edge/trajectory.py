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
    {"record": "end", "session_id": ..., "termination": "answered", "answer": ..., "sources": [...],
     "messages": [{"role": ..., "content": ...}, ...], "elapsed_s": ..., "totals": {...}}

``messages`` in the end record is the exact conversation the model saw (system, question, then assistant turns
and ``<tool_response>`` user messages), ready for the protocol renderer. A session without an end record (a
killed run) is read back with ``termination == "incomplete"`` and messages rebuilt from its turn records.

``tool_attempts`` lists the tool's backend attempts that did not simply succeed first time (``ToolAttempt.to_dict``:
rate limits, fallbacks, back-off waits). Journals written before it existed read back with ``[]``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from venus_edge.errors import TrajectoryError

SCHEMA_VERSION = 1


@dataclass
class Trajectory:
    """One research session as read back from a journal.

    Attributes:
        session_id: unique id of the session.
        question: the user question.
        system_prompt: the system message text.
        messages: the conversation (see module docstring).
        turns: the raw turn records, in order.
        termination: the reference loop's termination reason, or ``incomplete`` for a killed run.
        answer: the final answer, if any.
        sources: URLs actually read during the session.
        header: the whole start record (model, config, tools, date).
    """

    session_id: str
    question: str
    system_prompt: str
    messages: list[dict[str, str]]
    turns: list[dict[str, Any]]
    termination: str
    answer: str | None
    sources: list[str]
    header: dict[str, Any] = field(default_factory=dict)


class TrajectoryWriter:
    """Appends one session's records to a JSONL journal, durably, as the session runs."""

    def __init__(self, path: str | os.PathLike[str], session_id: str) -> None:
        self.path = Path(path)
        self.session_id = session_id
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def start(self, **fields: Any) -> None:
        self._append({"record": "start", "schema_version": SCHEMA_VERSION, **fields})

    def turn(self, **fields: Any) -> None:
        self._append({"record": "turn", **fields})

    def end(self, **fields: Any) -> None:
        self._append({"record": "end", **fields})

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"session_id": self.session_id, **record}, ensure_ascii=False)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read every session of a journal, complete or not, in the order they started.

    A last line cut short by a crash is ignored; any other unreadable line raises.

    Raises:
        TrajectoryError: a line that is not JSON or not a record of this schema, with its line number.
    """
    path = Path(path)
    sessions: dict[str, dict[str, Any]] = {}
    for number, record in _records(path):
        session = sessions.setdefault(record["session_id"], {"start": None, "turns": [], "end": None})
        kind = record["record"]
        if kind == "start":
            if record.get("schema_version") != SCHEMA_VERSION:
                raise TrajectoryError(path, number, f"schema_version {record.get('schema_version')} is not {SCHEMA_VERSION}")
            session["start"] = record
        elif kind == "turn":
            record.setdefault("tool_attempts", [])  # absent from journals written before it was recorded
            session["turns"].append(record)
        else:
            session["end"] = record
    return [_assemble(path, session_id, parts) for session_id, parts in sessions.items()]


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise TrajectoryError(path, 0, "no such file")
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                return  # the write in flight when the process died
            raise TrajectoryError(path, number, f"not JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or record.get("record") not in ("start", "turn", "end") or "session_id" not in record:
            raise TrajectoryError(path, number, "not a trajectory record (needs 'record' and 'session_id')")
        yield number, record


def _assemble(path: Path, session_id: str, parts: dict[str, Any]) -> Trajectory:
    start, turns, end = parts["start"], parts["turns"], parts["end"]
    if start is None:
        raise TrajectoryError(path, 0, f"session {session_id} has no start record")
    if end is not None:
        messages = end["messages"]
    else:
        messages = rebuild_messages(start, turns)
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
    )


def rebuild_messages(start: dict[str, Any], turns: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation implied by a start record and its turn records (used for killed runs and resume)."""
    messages = [
        {"role": "system", "content": start["system_prompt"]},
        {"role": "user", "content": start["question"]},
    ]
    for turn in turns:
        if turn.get("replaces_last_observation") and messages[-1]["role"] == "user" and len(messages) > 2:
            messages[-1] = {"role": "user", "content": turn["replaces_last_observation"]}
        messages.append({"role": "assistant", "content": turn["content"]})
        if turn.get("observation") is not None:
            messages.append({"role": "user", "content": turn["observation"]})
    return messages


def _visited(turns: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for turn in turns:
        for url in turn.get("visited_urls", []):
            seen.setdefault(url, None)
    return list(seen)
