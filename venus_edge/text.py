"""Valid text: the one place where text from outside is made fit to store, send and tokenize.

A Python ``str`` may hold code points that have no UTF-8 form: lone surrogates (U+D800..U+DFFF). They arrive from
a JSON ``"\\ud800"`` escape (an HTTP body, an MCP call, a model's tool call, a dataset line), from command-line
arguments and environment variables whose bytes are not UTF-8 (Python decodes byte 0xFF as U+DCFF with
``surrogateescape``), and from files read with ``surrogateescape`` or ``surrogatepass``. Written as they are, they
fail every UTF-8 writer (a journal, an HTTP response, stdout) or poison what reads them later.

``valid_text`` replaces each lone surrogate with U+FFFD (REPLACEMENT CHARACTER), as a UTF-8 decoder with
``errors="replace"`` does for a bad byte; a high and a low surrogate that stand side by side are one character
split in two (UTF-16) and are joined instead. With ``source`` it logs one warning saying what it replaced and
where. File-system paths are not text: they keep their bytes (``os.fsencode``) and are not passed through here.
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any, TypeVar

__all__: list[str] = []  # used inside the package; not part of its public API

#: What ``valid_text`` puts in place of each code point that has no UTF-8 form.
REPLACEMENT_CHARACTER = "\ufffd"

_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")
_T = TypeVar("_T")
logger = logging.getLogger(__name__)


def valid_text(value: _T, *, source: str | None = None) -> _T:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD and every split surrogate pair joined;
    lists, tuples and dict keys and values are walked, other values returned as they are.

    Args:
        value: a string, or a JSON-like value holding strings.
        source: where the value came from (``"the question"``, ``"journal runs.jsonl"``); when given and something
            was replaced, one warning is logged: ``"<source>: 2 characters that are not valid Unicode (lone
            surrogates, or bytes that are not UTF-8) replaced with U+FFFD"``.

    Returns:
        The value itself when it holds nothing to replace, else a repaired copy.
    """
    repaired, replaced, _ = _repair(value)
    if replaced and source:
        logger.warning("%s: %d character%s that %s not valid Unicode (lone surrogates, or bytes that are not UTF-8) "
                       "replaced with U+FFFD", source, replaced, "s" * (replaced != 1), "are" if replaced != 1 else
                       "is")
    return repaired  # type: ignore[no-any-return]


def finite_json(value: Any) -> Any:
    """``value`` (lists, dicts, scalars) with each NaN or infinity as None: strict JSON has no such numbers, and
    ``json.dumps`` writes them as ``NaN``, which other readers (browsers, jq) refuse for the whole document."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    return value


def nesting_depth(value: Any) -> int:
    """How deep lists, tuples and dicts nest in ``value`` (a scalar is 0), walked without recursion: a value from
    outside (a journal line, a data row, a model's tool call) may nest deeper than any recursive walk of it can go
    (Python's C JSON parser reads ~990 levels; ``valid_text`` and ``json.dumps`` recurse at ~500)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` as text for a message or stdout: the bytes of its name that are not UTF-8 as ``\\xNN`` escapes
    (a path is bytes; it is shown, never repaired, so that the user can still find the file)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _repair(value: Any) -> tuple[Any, int, bool]:
    """``(repaired value, lone surrogates replaced, whether anything changed)``."""
    if isinstance(value, str):
        if _SURROGATES.search(value) is None:
            return value, 0, False
        replaced = 0

        def one(match: re.Match[str]) -> str:
            nonlocal replaced
            found = match.group()
            if len(found) == 2:  # a pair split over two code points: the character it encodes
                return found.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
            replaced += 1
            return REPLACEMENT_CHARACTER

        return _SURROGATES.sub(one, value), replaced, True
    if isinstance(value, (list, tuple)):
        items = [_repair(item) for item in value]
        if not any(changed for _, _, changed in items):
            return value, 0, False
        repaired = [item for item, _, _ in items]
        return (repaired if isinstance(value, list) else tuple(repaired)), sum(n for _, n, _ in items), True
    if isinstance(value, dict):
        pairs = [(_repair(key), _repair(item)) for key, item in value.items()]
        if not any(k[2] or v[2] for k, v in pairs):
            return value, 0, False
        return {k[0]: v[0] for k, v in pairs}, sum(k[1] + v[1] for k, v in pairs), True
    return value, 0, False
