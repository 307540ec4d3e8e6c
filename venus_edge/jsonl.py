"""Append-only JSONL files that survive any text and any crash: the trajectory journal and eval results.

Records are separated by ``\\n`` alone (a text may hold U+2028, U+0085 or ``\\r``, which JSON keeps as they are),
written with ``ensure_ascii=False`` and fsync'ed one by one. Every line written is valid UTF-8: a string that is not
valid Unicode (a lone surrogate that got past the boundaries) is repaired by ``venus_edge.text.valid_text``, with a
warning, so no reader of the file ever meets one. A record torn by a crash is skipped by the reader and
reported with its line number, and the writer puts its next record on a line of its own.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from venus_edge.text import nesting_depth, valid_text

__all__: list[str] = []

#: Lists and objects nest at most this deep in a record read back (a trajectory record nests 5 deep; a model's tool
#: call at most ``protocol.parse.MAX_CALL_DEPTH``, 32): every walk of a record (``valid_text``, the server's JSON)
#: recurses, and ~500 levels exhaust Python's stack where the C parser still reads ~990.
MAX_RECORD_DEPTH = 64


def _line(record: Any, path: Path) -> bytes:
    text = json.dumps(record, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: stored as U+FFFD (and said so), never as an escape that reads back
        return json.dumps(valid_text(record, source=f"record for {path}"), ensure_ascii=False).encode("utf-8")


def write_records(path: Path, records: Iterable[Any]) -> int:
    """Write ``records`` as a new JSONL file (one line each, as ``append_record`` writes them), fsync'ed once at
    the end; returns how many were written. The file appears whole or not at all: it is written under a temporary
    name beside ``path`` and renamed, so a full disk or a kill leaves no torn file at ``path``.

    Raises:
        OSError: the file cannot be written (the temporary one is removed).
    """
    count = 0
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with temporary.open("wb") as handle:
            for record in records:
                handle.write(_line(record, path) + b"\n")
                count += 1
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return count


_APPEND_LOCK = threading.Lock()


def append_record(path: Path, record: Any) -> None:
    """Append ``record`` as one JSON line, written and fsync'ed; after a torn line it starts a new one.

    A lone surrogate (half an emoji from a ``"\\ud83d"`` escape, a byte of a command-line argument that is not
    UTF-8) is written as U+FFFD (``venus_edge.text.valid_text``, which logs a warning naming ``path``).

    Raises:
        OSError: the file cannot be opened or the line cannot be written whole (a full disk, a read-only or
            missing folder). The file is cut back to its size before the call, so that no torn record is left
            behind and every record saved before stays as it was.
    """
    line = _line(record, path)
    # Unbuffered: a failed write raises here, not again from a buffer flushed at close after the cut below.
    with _APPEND_LOCK, path.open("a+b", buffering=0) as handle:  # the server's sessions share a journal
        end = handle.seek(0, os.SEEK_END)
        if end > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":  # a record torn by a crash: start on a line of our own
                line = b"\n" + line
        try:
            rest = memoryview(line + b"\n")
            while rest:
                written = handle.write(rest)
                if not written:
                    raise OSError(errno.EIO, "the file took no more bytes")
                rest = rest[written:]
            os.fsync(handle.fileno())
        except OSError:
            with contextlib.suppress(OSError):  # not every file can be cut (a device): nothing more to do there
                os.ftruncate(handle.fileno(), end)
            raise


def parse_line(raw: bytes) -> tuple[Any, str, str]:
    """One JSONL line as ``(value, problem, note)``: ``(value, "", "")`` when it reads as written; ``(None, reason,
    "")`` when it is not JSON that Python can hold (torn by a crash, nested deeper than ``MAX_RECORD_DEPTH``, an
    integer of more digits than ``int`` converts); ``(value, "", note)`` when bytes that are not UTF-8 (a foreign
    editor, a damaged disk) were read as U+FFFD and the rest of the record was kept. Never raises."""
    try:
        text, note = raw.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", "replace")
        note = f"bytes that are not UTF-8 (from byte {exc.start}) read as U+FFFD"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        torn = "; a record torn by a crash?" + (" It is not UTF-8 either" if note else "")
        return None, f"not JSON ({exc.msg} at char {exc.pos}{torn})", ""
    except RecursionError:
        return None, "not JSON this reader can hold (nested deeper than Python's parser goes)", ""
    except ValueError as exc:  # an integer beyond sys.get_int_max_str_digits
        return None, f"not JSON this reader can hold ({exc})", ""
    if nesting_depth(value) > MAX_RECORD_DEPTH:
        return None, f"not JSON this reader can hold (nested deeper than {MAX_RECORD_DEPTH} levels)", ""
    return value, "", note


def iter_records(path: Path) -> Iterator[tuple[int, Any, str, str]]:
    """``(line number, record, "", note)`` for each readable line (the record is any JSON value; ``note`` is empty,
    or says what ``parse_line`` repaired), ``(line number, None, reason, "")`` for each torn or foreign one; blank
    lines are left out. The caller checks the file exists."""
    data = path.read_bytes()
    for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
        if raw.strip():
            yield number, *parse_line(raw)
