"""The trajectory schema and its JSONL journal, shared by the runtime (writer) and ``venus_edge.train`` (reader).

A journal file holds one or more sessions. Each session is written as it runs, one JSON object per line,
flushed and fsync'ed after each, so a killed process loses at most the turn in flight:

    {"record": "start", "schema_version": 1, "session_id": ..., "question": ..., "system_prompt": ...,
     "tools": [schema, ...], "model": {...}, "config": {...}, "started_at": "2026-11-30T19:00:00Z"}
    {"record": "turn", "session_id": ..., "turn": 0, "content": "<think>\\n...", "token_ids": [...],
     "finish_reason": "eog", "attempts": 1, "format_errors": [...], "tool_call": {"name":..., "arguments":...},
     "observation": "<tool_response>\\n...\\n</tool_response>", "visited_urls": [...], "tool_failures": [...],
     "tool_attempts": [...], "tool_s": 0.4, "stats": {...}}
    ...
    {"record": "compaction", "session_id": ..., "turn": 7, "policy": "keep-last-k", "tokens_before": ...,
     "tokens_after": ..., "tokens_reevaluated": ..., "detail": ..., "attempts": 0, "summary": null,
     "messages": [...], "call_keys": [...]}
    {"record": "end", "session_id": ..., "termination": "answered", "answer": ..., "sources": [...],
     "messages": [{"role": ..., "content": ...}, ...], "elapsed_s": ..., "totals": {...}}

A ``pace`` record (``venus_edge.pacing``: threads lowered, a pause, a battery stop, a sensor that could not be read)
holds the fields of the ``Paced`` event, before the turn it names (``turn``); a session that pacing stopped for its
battery has no end record and reads back as ``incomplete``, resumable.

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

One process writes a session at a time: the agent holds the session's lock (``venus_edge.session_lock``) while it
writes, so two resumes of one session cannot both append turns. Reading checks what every reader relies on: each
record's fields by type (a record of another shape is skipped, with its line and reason), turn indices that continue
0, 1, 2, ... (a repeat is skipped, a gap noted), nothing after the end record; a lone surrogate (a ``"\ud800"``
escape) reads as U+FFFD. A reader therefore never fails on one record, and ``Agent.resume`` refuses a session with
any such line, naming it.

``tool_attempts`` lists the tool's backend attempts that did not simply succeed first time (``ToolAttempt.to_dict``:
rate limits, fallbacks, back-off waits). A turn record is ``Turn.to_dict()`` (``venus_edge.turn``) and reads back as a
``Turn``; fields added since schema 1 was first written (``kind``, ``logprobs``, ``tool_attempts``, ...) read back
with their empty values from older journals.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from venus_edge.errors import TrajectoryError, missing_file_reason
from venus_edge.jsonl import append_record, parse_line
from venus_edge.protocol import is_observation
from venus_edge.text import shown_path
from venus_edge.turn import Turn

__all__ = ["Journal", "JournalReader", "SkippedLine", "Trajectory", "TrajectoryWriter", "read_journal",
           "read_trajectories"]

SCHEMA_VERSION = 1
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
        paces: the ``pace`` records of the session, in order (what pacing did between turns).
        end: the whole end record (``elapsed_s``, ``totals``, ``turns``, ...), or {} for an incomplete session.
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
    end: dict[str, Any] = field(default_factory=dict)
    paces: list[dict[str, Any]] = field(default_factory=list)


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

    def pace(self, **fields: Any) -> None:
        self._append({"record": "pace", **fields})

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
    """A journal line that could not be read as written: ``line`` is 1-based; ``reason`` says why;
    ``session_id`` names its session when the line was a readable record of one (None for a torn or foreign line).
    """

    line: int
    reason: str
    session_id: str | None = None


@dataclass
class Journal:
    """What ``read_journal`` found: the sessions, in the order they started, the lines it had to skip, and the
    lines it kept with a caveat (``notes``: a gap in a session's turn indices, text that was not valid Unicode).
    """

    trajectories: list[Trajectory]
    skipped: list[SkippedLine]
    notes: list[SkippedLine] = field(default_factory=list)

    def problems(self, session_id: str) -> list[SkippedLine]:
        """The skipped lines and notes of one session, in line order (a session with any cannot be resumed)."""
        return sorted((s for s in self.skipped + self.notes if s.session_id == session_id), key=lambda s: s.line)


# ---------------------------------------------------------------------------------------------- record shapes
# What every reader of a record uses, by type (the agent's resume, training, the server's history pages): a record
# whose field has another type is skipped and reported, so that no reader meets a value it cannot use.
_Check = tuple[str, Callable[[Any], bool]]  # (what is expected, in words; the test)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _list_of(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, list) and all(test(item) for item in value)


def _or_null(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or test(value)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and isinstance(value.get("content"), str)


def _is_tool_call(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str) and isinstance(value.get("arguments"), dict)


_STATS_FIGURES = ("prompt_tokens_evaluated", "prompt_tokens_reused", "tokens_decoded", "prefill_s", "decode_s")


def _is_stats(value: Any) -> bool:
    return isinstance(value, dict) and all(_is_number(value[name]) for name in _STATS_FIGURES if name in value)


STRING: _Check = ("a string", lambda v: isinstance(v, str))
STRING_OR_NULL: _Check = ("a string or null", _or_null(lambda v: isinstance(v, str)))
INTEGER: _Check = ("an integer", _is_int)
NUMBER: _Check = ("a number", _is_number)
NUMBER_OR_NULL: _Check = ("a number or null", _or_null(_is_number))
INTEGER_OR_NULL: _Check = ("an integer or null", _or_null(_is_int))
OBJECT: _Check = ("an object", lambda v: isinstance(v, dict))
STRINGS: _Check = ("a list of strings", _list_of(lambda v: isinstance(v, str)))
OBJECTS: _Check = ("a list of objects", _list_of(lambda v: isinstance(v, dict)))
MESSAGES: _Check = ("a list of {role, content} strings", _list_of(_is_message))

# record kind -> (fields it must have, fields it may have); null is allowed only where the check says so.
_SHAPES: dict[str, tuple[dict[str, _Check], dict[str, _Check]]] = {
    "start": ({"question": STRING, "system_prompt": STRING},
              {"schema_version": INTEGER, "tools": OBJECTS, "model": OBJECT, "config": OBJECT, "started_at": STRING}),
    "turn": ({"content": STRING}, {
        "turn": INTEGER, "kind": STRING, "generated": STRING_OR_NULL,
        "token_ids": ("a list of integers", _list_of(_is_int)),
        "logprobs": ("a list of numbers or null", _or_null(_list_of(_is_number))),
        "finish_reason": STRING, "attempts": INTEGER, "format_errors": OBJECTS,
        "tool_call": ("null or {name: string, arguments: object}", _or_null(_is_tool_call)),
        "dropped_arguments": STRINGS, "argument_changes": STRINGS, "observation": STRING_OR_NULL,
        "visited_urls": STRINGS, "tool_failures": OBJECTS, "tool_attempts": OBJECTS,
        "tool_s": ("a number or null", _or_null(_is_number)), "replaces_last_observation": STRING_OR_NULL,
        "stats": ("an object of numeric figures", _is_stats)}),
    "compaction": ({"turn": INTEGER, "messages": MESSAGES}, {
        "policy": STRING, "tokens_before": INTEGER, "tokens_after": INTEGER, "tokens_reevaluated": INTEGER,
        "detail": STRING_OR_NULL, "attempts": INTEGER, "summary": STRING_OR_NULL, "call_keys": STRINGS}),
    "pace": ({"turn": INTEGER, "action": STRING}, {
        "detail": STRING, "celsius": NUMBER_OR_NULL, "zone": STRING_OR_NULL, "battery_pct": INTEGER_OR_NULL,
        "n_threads": INTEGER_OR_NULL, "waited_s": NUMBER_OR_NULL}),
    "end": ({"termination": STRING, "messages": MESSAGES}, {
        "answer": STRING_OR_NULL, "sources": STRINGS, "unvisited_citations": STRINGS, "elapsed_s": NUMBER,
        "totals": OBJECT, "turns": INTEGER, "error": STRING}),
}


def _shape_problem(kind: str, record: dict[str, Any]) -> str | None:
    """What is wrong with a record's fields, as ``"turn record without content"`` or ``"turn record: visited_urls
    is 7, not a list of strings"``; None when every field a reader uses is there and has its type."""
    required, optional = _SHAPES[kind]
    missing = [name for name in required if name not in record]
    wrong = [f"{name} is {_shown(record[name])}, not {expected}"
             for name, (expected, test) in {**required, **optional}.items()
             if name in record and not test(record[name])]
    if not missing and not wrong:
        return None
    return f"{kind} record" + (f" without {', '.join(missing)}" if missing else "") + (
        f": {'; '.join(wrong)}" if wrong else "")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_text(value: Any) -> tuple[Any, bool]:
    """``value`` with every lone surrogate (a ``"\\ud800"`` JSON escape, which no UTF-8 text can hold) replaced by
    U+FFFD, and whether any was; strings are searched in lists and objects, keys included."""
    if isinstance(value, str):
        repaired, count = _SURROGATE.subn("\ufffd", value)  # json.loads joins an escaped pair: these are lone
        return repaired, count > 0
    if isinstance(value, list):
        items = [_valid_text(item) for item in value]
        return [item for item, _ in items], any(changed for _, changed in items)
    if isinstance(value, dict):
        pairs = [(_valid_text(key), _valid_text(item)) for key, item in value.items()]
        return {key: item for (key, _), (item, _) in pairs}, any(a or b for (_, a), (_, b) in pairs)
    return value, False


# ---------------------------------------------------------------------------------------------- reading
def read_journal(path: str | os.PathLike[str]) -> Journal:
    """Read every session of a journal, complete or not, and report what could not be read.

    One bad line never fails the read. Skipped and reported (``Journal.skipped``, with the line and reason): a torn
    or foreign line; a record whose fields a reader uses have another type (``visited_urls: 7``); a turn record
    that repeats an index the session already has (a second writer of the session: the first one is kept); a
    compaction that does not follow the session's last turn; a record after the session's end record; a session
    whose start record is missing or of another schema version. Kept with a note (``Journal.notes``): a turn
    whose index skips one or more (the turns around the gap are real); a record whose text held a lone surrogate
    or bytes that are not UTF-8 (read with U+FFFD in their place, so that it can be served as JSON and encoded as
    UTF-8; ``jsonl.parse_line``).

    Raises:
        TrajectoryError: the file does not exist.
    """
    return JournalReader(path).read(last_line_done=True)


class JournalReader:
    """A journal read as it grows: each ``read`` parses only the lines appended since the one before, and builds
    again only the sessions those lines touched (``read_journal`` reads once, all of it).

    A server's history pages read the journal after every change; parsing the whole file each time cost 2.7 s and
    ~300 MB for a 50 MB journal, at every new turn. The lines already read are trusted while the file is the same
    file (device and inode), no shorter, and still begins with the 4 KiB and holds the 64 bytes before where the
    last read stopped that it held then; otherwise it is read again from the start. That is a check for a journal
    replaced or cut, not a proof: a file rewritten in place between those bytes, at the same size or longer, is not
    seen (the writer only appends; ``read_journal`` reads the file as it is). A line that fails in a way no check
    foresaw is one skipped line, so the reader's state stays that of the lines before it. Not thread-safe: one
    reader per thread, or a lock around ``read``.

    Args:
        path: the journal file.
    """

    _CHECK_BYTES = 64  # the bytes before the last read's end, compared again at the next read
    _HEAD_BYTES = 4096  # the file's first bytes, compared again at the next read

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._restart(None)

    def _restart(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity
        self._offset = 0  # bytes of whole lines read
        self._line = 0  # lines read (blank ones too)
        self._check = b""  # the last _CHECK_BYTES bytes read
        self._head = b""  # the first _HEAD_BYTES bytes read
        self._sessions: dict[str, _Parts] = {}
        self._skipped: list[SkippedLine] = []
        self._notes: list[SkippedLine] = []
        self._built: dict[str, tuple[int, Trajectory]] = {}  # session -> (its records' count when built, the session)

    def read(self, *, last_line_done: bool = False) -> Journal:
        """The journal as it is now (``read_journal``'s ``Journal``).

        A last line without its newline is a record being written, or one torn by a crash: it is read once its
        newline comes (the writer starts its next record on a new line after a torn one), or now with
        ``last_line_done`` (nothing writes the file any more; the reader's next read starts over).

        Raises:
            TrajectoryError: the file does not exist (or is not a file).
        """
        if not self.path.is_file():
            raise TrajectoryError(self.path, 0, missing_file_reason(self.path, ".jsonl"))
        with self.path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            identity = (info.st_dev, info.st_ino)
            head = handle.read(self._HEAD_BYTES)
            start = self._offset - len(self._check)
            handle.seek(start)
            data = handle.read()
            same = (identity == self._identity and info.st_size >= self._offset
                    and head.startswith(self._head) and data.startswith(self._check))
            if same:
                data = data[len(self._check):]
            else:  # another file, cut or rewritten: from the start
                self._restart(identity)
                if start:  # what was read began past the start (a first read has the whole file already)
                    handle.seek(0)
                    data = handle.read()
        whole = data.rfind(b"\n") + 1
        for raw in data[:whole].split(b"\n")[:-1]:
            self._take(raw)
        if whole:
            self._offset += whole
            self._check = (self._check + data[:whole])[-self._CHECK_BYTES:]
            self._head = head[:min(self._offset, self._HEAD_BYTES)]
        partial = data[whole:]
        if last_line_done and partial.strip():
            self._take(partial)
            journal = self._journal()
            self._restart(None)  # that line was taken without its newline: nothing can be read on from here
            return journal
        return self._journal()

    def _take(self, raw: bytes) -> None:
        """One line: parsed, checked and added to its session, or skipped with its reason."""
        self._line += 1
        number = self._line
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw.strip():
            return
        try:
            self._take_record(number, raw)
        except Exception as exc:  # whatever a line does, it is one skipped line, not a failed read
            self._skipped.append(SkippedLine(number, f"could not be read ({type(exc).__name__}: {exc})"))

    def _take_record(self, number: int, raw: bytes) -> None:
        record, unreadable, note = parse_line(raw)
        if unreadable:
            self._skipped.append(SkippedLine(number, unreadable))
            return
        kind = record.get("record") if isinstance(record, dict) else None
        if not isinstance(kind, str) or kind not in _SHAPES or not isinstance(record.get("session_id"), str):
            self._skipped.append(SkippedLine(number, "not a trajectory record (needs 'record' and a string "
                                                     "'session_id')"))
            return
        session_id = record["session_id"]
        if note:
            self._notes.append(SkippedLine(number, f"{kind} record holds {note}", session_id))
        wrong_shape = _shape_problem(kind, record)
        if wrong_shape:
            self._skipped.append(SkippedLine(number, f"{wrong_shape}; left out", session_id))
            return
        record, repaired = _valid_text(record)
        if repaired:
            self._notes.append(SkippedLine(number, f"{kind} record holds text that is not valid Unicode (a lone "
                                                   "surrogate); read with U+FFFD in its place", session_id))
        parts = self._sessions.setdefault(session_id, _Parts(number))
        out_of_place = parts.add(kind, record, number, self._notes)
        if out_of_place:
            self._skipped.append(SkippedLine(number, f"{kind} record: {out_of_place}; left out", session_id))

    def _journal(self) -> Journal:
        skipped = list(self._skipped)
        trajectories = []
        for session_id, parts in self._sessions.items():
            start = parts.start
            if start is None:
                skipped.append(SkippedLine(parts.first_line, f"session {session_id} has no start record; its "
                                                             "records are left out", session_id))
            elif start.get("schema_version") != SCHEMA_VERSION:
                version = start.get("schema_version")
                skipped.append(SkippedLine(parts.first_line, f"session {session_id} has schema_version {version}, "
                                                             f"not {SCHEMA_VERSION}", session_id))
            else:
                built = self._built.get(session_id)
                if built is None or built[0] != parts.records:
                    built = self._built[session_id] = (parts.records, _assemble(session_id, parts))
                trajectories.append(built[1])
        return Journal(trajectories, sorted(skipped, key=lambda s: s.line), sorted(self._notes, key=lambda s: s.line))


@dataclass
class _Parts:
    """One session's records as read so far, with the line of each, checked for order as they come."""

    first_line: int
    start: dict[str, Any] | None = None
    start_line: int = 0
    turns: list[Turn] = field(default_factory=list)
    turn_lines: dict[int, int] = field(default_factory=dict)  # turn index -> its line
    compactions: list[dict[str, Any]] = field(default_factory=list)
    paces: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    end_line: int = 0
    records: int = 0  # records taken: the session changed when this did

    def add(self, kind: str, record: dict[str, Any], line: int, notes: list[SkippedLine]) -> str | None:
        """Take one record of the session; a reason when it is left out instead."""
        problem = self._add(kind, record, line, notes)
        if problem is None:
            self.records += 1
        return problem

    def _add(self, kind: str, record: dict[str, Any], line: int, notes: list[SkippedLine]) -> str | None:
        session_id = record["session_id"]
        if self.end is not None:
            return f"after the session's end record (line {self.end_line}): a second writer of the session?"
        if kind == "start":
            if self.start is not None:
                return f"a second start record of session {session_id} (line {self.start_line} has the first)"
            self.start, self.start_line = record, line
        elif kind == "turn":
            turn = Turn.from_dict(record)
            if turn.index in self.turn_lines or (self.turns and turn.index < self.turns[-1].index):
                first = self.turn_lines.get(turn.index)
                where = f"line {first} has it" if first else f"it comes after turn {self.turns[-1].index}"
                return f"turn {turn.index} of session {session_id} again ({where}): a second writer of the session?"
            expected = self.turns[-1].index + 1 if self.turns else 0
            if turn.index != expected:
                notes.append(SkippedLine(line, f"turn {turn.index} of session {session_id} follows turn "
                                               f"{expected - 1}: turns {expected}..{turn.index - 1} are missing",
                                         session_id))
            self.turns.append(turn)
            self.turn_lines[turn.index] = line
        elif kind == "compaction":
            last = self.turns[-1].index if self.turns else -1
            if record["turn"] != last:
                return f"a compaction after turn {record['turn']}, but the session's last turn is {last}"
            self.compactions.append(record)
        elif kind == "pace":
            self.paces.append(record)
        else:
            self.end, self.end_line = record, line
        return None


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """The sessions of a journal (``read_journal``); each skipped line and note is logged as a warning.

    Raises:
        TrajectoryError: the file does not exist.
    """
    journal = read_journal(path)
    for line in journal.skipped:
        logger.warning("trajectory %s:%d skipped: %s", path, line.line, line.reason)
    for line in journal.notes:
        logger.warning("trajectory %s:%d: %s", path, line.line, line.reason)
    return journal.trajectories


def _assemble(session_id: str, parts: _Parts) -> Trajectory:
    # copies: a JournalReader's parts grow after this session was handed out
    start, turns, end, compactions = parts.start, list(parts.turns), parts.end, list(parts.compactions)
    assert start is not None
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
        end=end or {},
        paces=list(parts.paces),
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
