"""Evaluation data: question/answer rows from JSONL, JSON, CSV or parquet, and the published formats people have
on disk (BrowseComp's encrypted CSV, GAIA's ``metadata.jsonl``), all as ``EvalExample``s.

Formats, detected from the file and its columns:

- generic rows: a question column (``question``, ``problem``, ``query``, ``prompt``, ``Question``) and an answer
  column (``answer``, ``answers``, ``gt``, ``ground_truth``, ``golden_answers``, ``Final answer``); accepted
  aliases in one string are split by ``<|answer_split|>`` (DR-Venus's RL data, ``Zchu/REDSearcher_RL_1K``), a
  list column gives one alias per item;
- BrowseComp (``browse_comp_test_set.csv``, openai/simple-evals): ``problem`` and ``answer`` are XOR-encrypted
  with a key derived from the row's ``canary`` (SHA-256 of it, repeated), base64-encoded; they are decrypted as
  its authors describe (``browsecomp_eval.py``, ``decrypt``);
- GAIA (``metadata.jsonl``): ``task_id``, ``Question``, ``Final answer``; rows that need an attached file
  (``file_name``) are skipped, which leaves the text-only subset DR-Venus reports ("GAIA text").

A row that cannot be used (no question, no answer, broken JSON, a failed decryption) is skipped and reported
in ``LoadReport.skipped`` with its row number and reason; loading never fails on one bad row.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from venus_edge.jsonl import MAX_RECORD_DEPTH, iter_records
from venus_edge.text import nesting_depth, valid_text

logger = logging.getLogger(__name__)

__all__ = ["ANSWER_SPLIT", "EvalExample", "LoadReport", "load_examples", "read_data_rows", "split_answers"]

#: Separates accepted answers in one string (DR-Venus RL data, PROTOCOL.md "Training facts").
ANSWER_SPLIT = "<|answer_split|>"
#: Built-in sets shipped with the package, by name.
BUILTIN_SETS = {"pydocs": "pydocs.jsonl"}
QUESTION_FIELDS = ("question", "problem", "query", "prompt", "Question")
ANSWER_FIELDS = ("answer", "answers", "gt", "ground_truth", "golden_answers", "Final answer", "final_answer")
ID_FIELDS = ("id", "task_id", "qid", "uid")


@dataclass(frozen=True)
class EvalExample:
    """One question with its accepted answers.

    Attributes:
        id: a stable identifier (from the data, else ``{file stem}-{row:04d}``); results are keyed by it.
        question: the question as the agent receives it.
        answers: accepted answers, the canonical one first.
        metadata: everything else the row carried (source URLs, level, topic), for reports.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class LoadReport:
    """What ``load_examples`` read: the examples, the detected format, and the rows it skipped with why."""

    examples: list[EvalExample]
    format: str
    skipped: list[tuple[int, str]] = field(default_factory=list)


def load_examples(source: str | os.PathLike[str], *, limit: int | None = None) -> LoadReport:
    """Read an evaluation set: a built-in name (``pydocs``) or a ``.jsonl``/``.json``/``.csv``/``.parquet`` file.

    Args:
        source: the set's name or path.
        limit: keep only the first ``limit`` usable examples.

    Raises:
        FileNotFoundError: no such file (and no built-in set of that name).
        ValueError: a file type that is not supported, or no usable example at all.
    """
    path = _resolve(source)
    report = LoadReport([], "generic")
    for number, row in read_data_rows(path):
        if isinstance(row, str):  # a line that was not a JSON object
            report.skipped.append((number, row))
            continue
        try:
            example, kind = _example(row, number, path.stem)
        except _SkipRow as skip:
            report.skipped.append((number, str(skip)))
            continue
        report.format = kind
        report.examples.append(example)
        if limit is not None and len(report.examples) >= limit:
            break
    if not report.examples:
        reasons = "; ".join(f"row {n}: {why}" for n, why in report.skipped[:3]) or "the file is empty"
        raise ValueError(f"{path}: no usable question/answer row ({reasons})")
    return report


def read_data_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """The rows of a ``.jsonl``/``.json``/``.csv``/``.parquet`` file as ``(row number, row)``; a row that is not a
    JSON object comes as ``(row number, reason)``, so one broken line never stops the reading (``venus_edge.train``
    reads its data files with this too). Text in a row that is not valid Unicode (a ``"\\ud800"`` escape, a CSV
    byte that is not UTF-8) comes as U+FFFD, with a warning naming the file and row (``venus_edge.text.valid_text``).

    Raises:
        ValueError: a file type that is not supported, or a ``.json`` file that is not JSON.
        ImportError: a parquet file without pyarrow installed.
    """
    suffix = path.suffix.lower()
    readers = {".jsonl": _json_rows, ".json": _json_rows, ".csv": _csv_rows, ".parquet": _parquet_rows}
    if suffix not in readers:
        raise ValueError(f"{path}: unsupported data file type {suffix!r}; use .jsonl, .json, .csv or .parquet")
    return ((number, valid_text(row, source=f"{path} row {number}")) for number, row in readers[suffix](path))


class _SkipRow(Exception):
    """A row that cannot be used; the message is the reason."""


def _resolve(source: str | os.PathLike[str]) -> Path:
    name = str(source)
    if name in BUILTIN_SETS and not Path(name).exists():
        return Path(str(resources.files("venus_edge.eval") / "datasets" / BUILTIN_SETS[name]))
    path = Path(source)
    if not path.is_file():
        builtin = ", ".join(BUILTIN_SETS)
        raise FileNotFoundError(f"no evaluation data at {path} (built-in sets: {builtin})")
    return path


def _json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_bytes().decode("utf-8-sig"))
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, too deep, an int of too many digits
            raise ValueError(f"{path}: not a JSON file ({exc}); a file of one JSON object per line is .jsonl") from None
        if isinstance(data, dict):  # {"data": [rows]} as some sets ship, or a file of one row
            data = data["data"] if isinstance(data.get("data"), list) else [data]
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json data file holds a list of rows, got a {type(data).__name__}")
        items = data
        for number, row in enumerate(items, start=1):
            if nesting_depth(row) > MAX_RECORD_DEPTH:
                yield number, f"nested deeper than {MAX_RECORD_DEPTH} levels"
                continue
            yield number, row if isinstance(row, dict) else "not a JSON object"
        return
    # split on b"\n" alone and decode line by line: a stray byte or a U+2028 in one row spoils only that row
    for number, row, problem, note in iter_records(path):
        if note:  # as a CSV byte that is not UTF-8: the row is kept, its bytes read as U+FFFD
            logger.warning("%s row %d: %s", path, number, note)
        yield number, problem or (row if isinstance(row, dict) else "not a JSON object")


def _csv_rows(path: Path) -> Iterator[tuple[int, Any]]:
    # surrogateescape: a byte that is not UTF-8 spoils only its field (U+FFFD, reported), not the whole file
    with path.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as handle:
        yield from enumerate(csv.DictReader(handle), start=2)  # row 1 is the header


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("reading parquet needs pyarrow: pip install 'venus-edge[eval]'") from exc
    yield from enumerate(pq.read_table(path).to_pylist(), start=1)


def _example(row: Mapping[str, Any], number: int, stem: str) -> tuple[EvalExample, str]:
    kind = "generic"
    row = dict(row)
    if "canary" in row and "problem" in row:
        kind = "browsecomp"
        try:
            row["problem"] = decrypt(row["problem"], row["canary"])
            row["answer"] = decrypt(row["answer"], row["canary"])
        except (ValueError, UnicodeDecodeError) as exc:
            raise _SkipRow(f"BrowseComp fields do not decrypt with the row's canary ({exc})") from None
    elif "Final answer" in row and "Question" in row:
        kind = "gaia"
        if row.get("file_name"):
            raise _SkipRow(f"GAIA task needs the attached file {row['file_name']!r} (text-only evaluation)")
    question = next((row[f] for f in QUESTION_FIELDS if isinstance(row.get(f), str) and row[f].strip()), None)
    if question is None:
        raise _SkipRow(f"no question (looked for {', '.join(QUESTION_FIELDS)})")
    answers = split_answers(next((row[f] for f in ANSWER_FIELDS if row.get(f) not in (None, "", [])), None))
    if not answers:
        raise _SkipRow(f"no answer (looked for {', '.join(ANSWER_FIELDS)})")
    identifier = next((str(row[f]) for f in ID_FIELDS if row.get(f) not in (None, "")), f"{stem}-{number:04d}")
    used = {*QUESTION_FIELDS, *ANSWER_FIELDS, *ID_FIELDS}
    metadata = {key: value for key, value in row.items() if key not in used}
    return EvalExample(identifier, question.strip(), answers, metadata), kind


def split_answers(value: Any) -> tuple[str, ...]:
    """Accepted answers from a string (aliases split by ``ANSWER_SPLIT``) or a list of them, stripped, unique."""
    items = value if isinstance(value, (list, tuple)) else [value] if value is not None else []
    answers = [part.strip() for item in items for part in str(item).split(ANSWER_SPLIT)]
    return tuple(dict.fromkeys(answer for answer in answers if answer))


def derive_key(password: str, length: int) -> bytes:
    """BrowseComp's key: SHA-256 of the password, repeated to ``length`` bytes (simple-evals ``derive_key``)."""
    digest = hashlib.sha256(password.encode()).digest()
    return digest * (length // len(digest)) + digest[: length % len(digest)]


def decrypt(ciphertext_b64: str, password: str) -> str:
    """Decrypt a BrowseComp field: base64-decode, XOR with ``derive_key(password)`` (simple-evals ``decrypt``)."""
    encrypted = base64.b64decode(ciphertext_b64, validate=True)
    key = derive_key(password, len(encrypted))
    return bytes(a ^ b for a, b in zip(encrypted, key)).decode("utf-8")


def encrypt(plaintext: str, password: str) -> str:
    """The inverse of ``decrypt`` (to write BrowseComp-format files of one's own questions, and for tests)."""
    data = plaintext.encode("utf-8")
    key = derive_key(password, len(data))
    return base64.b64encode(bytes(a ^ b for a, b in zip(data, key))).decode("ascii")
