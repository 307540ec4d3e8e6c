"""The research server under load: 20 concurrent SSE clients against one model, on a scripted engine.

    .venv/bin/python -m pytest benchmarks/bench_server.py --benchmark-only -s

Each client asks its own question and reads its session's events over SSE (``POST /v1/research``). The scripted
engine answers instantly (3 turns: two tool calls and an answer, streamed in 4-character pieces), so the time is
the server's: the agent loop, the event fan-out, JSON and SSE framing, uvicorn, and the clients' parsing. The
reference, measured in the same run, is the same 20 sessions run in this process through ``Agent.events`` with
no server. Reported: events per session, the server's wall time against the reference's (ratio), and the
server's overhead per event in microseconds ((server - reference) / events).

Checked on every run (the load test): no event lost or reordered (SSE ids 0..n-1 per session, the same event
types as the reference session), none mixed up (every event of a stream belongs to its session, and the answer
is that question's), and the journal holds every session with its answer.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.server import ResearchService, create_app
from venus_edge.testing import (
    ScriptedEngine,
    UvicornThread,
    answer_turn,
    collect_events,
    read_sse,
    tool_call_turn,
)
from venus_edge.tools.base import ToolResult
from venus_edge.trajectory import read_journal

CLIENTS = 20
PIECE_CHARS = 4


class LookupTool:
    """A tool that answers at once: the load is the server's, not a corpus's."""

    name = "lookup"
    schema: ClassVar[dict[str, Any]] = {"type": "function", "function": {
        "name": "lookup", "description": "Look a key up.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(f"value of {arguments['key']}: " + "lorem ipsum " * 40)


def researcher(prompt: str) -> str:
    """Two lookups, then the question's number as the answer (so a mixed-up stream shows)."""
    number = prompt.split("Question number ", 1)[1][:3]
    calls = prompt.count("<tool_response>")
    if calls < 2:
        return tool_call_turn("lookup", key=f"{number}-{calls}")
    return answer_turn(f"answer {number}")


def question(n: int) -> str:
    return f"Question number {n:03d}: what is the value?"


def engine() -> ScriptedEngine:
    return ScriptedEngine(researcher, piece_chars=PIECE_CHARS)


def run_reference() -> tuple[float, list[list[str]]]:
    agent = Agent(engine(), [LookupTool()], config=AgentConfig())
    start = time.perf_counter()
    kinds = []
    for n in range(CLIENTS):
        _, events = collect_events(agent.events(question(n)))
        kinds.append([event.type for event in events])
    return time.perf_counter() - start, kinds


def run_server(journal: Path) -> tuple[float, dict[int, list[tuple[str, str, dict[str, Any]]]]]:
    service = ResearchService([engine()], [LookupTool()], AgentConfig(), journal_path=journal, max_queue=CLIENTS)
    streams: dict[int, list[tuple[str, str, dict[str, Any]]]] = {}
    failures: list[BaseException] = []

    def client(n: int, url: str) -> None:
        try:
            with httpx.stream("POST", f"{url}/v1/research", json={"question": question(n)}, timeout=120) as response:
                response.raise_for_status()
                streams[n] = list(read_sse(response))
        except BaseException as exc:  # reported after the run
            failures.append(exc)

    with UvicornThread(create_app(service)) as server:
        threads = [threading.Thread(target=client, args=(n, server.url)) for n in range(CLIENTS)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
    service.close()
    assert not failures, failures
    return elapsed, streams


def check(streams: dict[int, list[tuple[str, str, dict[str, Any]]]], reference: list[list[str]],
          journal: Path) -> int:
    """The load test's assertions; returns the number of events served."""
    assert sorted(streams) == list(range(CLIENTS))
    total = 0
    for n, messages in streams.items():
        assert [int(index) for _, index, _ in messages] == list(range(len(messages))), f"session {n}: lost events"
        assert [kind for kind, _, _ in messages] == reference[n], f"session {n}: events differ from the reference"
        started, finished = messages[0][2], messages[-1][2]
        assert started["question"] == question(n) and finished["answer"] == f"answer {n:03d}"
        assert finished["session_id"] == started["session_id"]
        total += len(messages)
    trajectories = read_journal(journal).trajectories
    assert len(trajectories) == CLIENTS
    assert sorted((t.question, t.answer) for t in trajectories) == [(question(n), f"answer {n:03d}")
                                                                    for n in range(CLIENTS)]
    return total


@pytest.mark.benchmark(group="server")
def test_twenty_concurrent_clients(benchmark: Any, tmp_path: Path) -> None:
    reference_s, reference_kinds = run_reference()
    rounds: list[tuple[float, int]] = []

    def one_round() -> None:
        journal = tmp_path / f"journal-{len(rounds)}.jsonl"
        elapsed, streams = run_server(journal)
        rounds.append((elapsed, check(streams, reference_kinds, journal)))

    benchmark.pedantic(one_round, rounds=3, iterations=1)
    server_s = min(elapsed for elapsed, _ in rounds)
    events = rounds[0][1]
    overhead_us = (server_s - reference_s) / events * 1e6
    benchmark.extra_info.update(events=events, reference_s=round(reference_s, 3), server_s=round(server_s, 3),
                                ratio=round(server_s / reference_s, 2), overhead_us_per_event=round(overhead_us, 1))
    print(f"\n{CLIENTS} clients, {events} events ({events // CLIENTS} per session): in-process {reference_s:.2f} s, "
          f"server {server_s:.2f} s ({server_s / reference_s:.2f}x), overhead {overhead_us:.0f} us per event")
