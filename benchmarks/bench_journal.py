"""A server's history read after a change to a large journal: read on as it grows (``JournalReader``) against
reading it whole (``read_journal``, what every change cost before).

    .venv/bin/python -m pytest benchmarks/bench_journal.py --benchmark-only -s

The journal is the shipped recorded session (``venus_edge/bench/data/session.jsonl``, 5 turns of real search and
visit results) copied under new session ids to ``JOURNAL_MB`` megabytes, as a server that ran for weeks keeps it.
Each round appends one turn record to a live session (not timed) and times one read of the journal after it; the
whole read is timed the same way on its own copy. The ratio whole / as-it-grows is printed.
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from venus_edge.bench import shipped_session_path
from venus_edge.trajectory import JournalReader, TrajectoryWriter, read_journal
from venus_edge.turn import Turn

JOURNAL_MB = 50
ROUNDS = 5
_times: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def journal_bytes() -> bytes:
    lines = shipped_session_path().read_text(encoding="utf-8").splitlines()
    recorded = json.loads(lines[0])["session_id"]
    parts, size = [], 0
    while size < JOURNAL_MB * 10**6:
        text = "".join(line.replace(recorded, uuid.uuid4().hex) + "\n" for line in lines).encode()
        parts.append(text)
        size += len(text)
    return b"".join(parts)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if {"whole", "growing"} <= set(_times):
        whole, growing = statistics.median(_times["whole"]), statistics.median(_times["growing"])
        print(f"\nhistory read after one new turn, {JOURNAL_MB} MB journal: whole {whole:.3f} s, as it grows "
              f"{growing * 1000:.1f} ms; whole / as it grows {whole / growing:.0f}x")


def _rounds(benchmark: Any, path: Path, read: Any, name: str) -> None:
    writer = TrajectoryWriter(path, "live")
    writer.start(question="q", system_prompt="p", schema_version=1)
    turn = iter(range(10**6))

    def append_one() -> tuple[tuple[()], dict[str, Any]]:
        writer.turn(Turn(next(turn), "search", "a new turn"))
        return (), {}

    read()  # the reader's first read is whole too; what is timed is a read after a change
    benchmark.pedantic(read, setup=append_one, rounds=ROUNDS, iterations=1)
    _times[name] = list(benchmark.stats.stats.data)


def test_whole_read(benchmark: Any, journal_bytes: bytes, tmp_path: Path) -> None:
    path = tmp_path / "whole.jsonl"
    path.write_bytes(journal_bytes)
    _rounds(benchmark, path, lambda: read_journal(path), "whole")


def test_read_as_it_grows(benchmark: Any, journal_bytes: bytes, tmp_path: Path) -> None:
    path = tmp_path / "growing.jsonl"
    path.write_bytes(journal_bytes)
    reader = JournalReader(path)
    _rounds(benchmark, path, reader.read, "growing")
