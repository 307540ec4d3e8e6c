"""``venus-edge mcp`` driven by the official MCP SDK's clients: the real server process (SmolLM2, ``--strict``) on
a few pages of the Python documentation, over stdio and streamable HTTP."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from venus_edge.trajectory import read_journal

pytestmark = pytest.mark.slow

QUESTION = "When was the tomllib module added to Python?"
CANCELLED_QUESTION = "What does os.path.join do?"


# --max-tokens 1200: a strict turn (256 characters of reasoning, up to three strings of 100) is at most ~1,150
# characters, so in ASCII no turn is cut by max_tokens whatever SmolLM2 writes (and each turn completes).
def _command(model: Path, corpus: Path, journal: Path, run_args: list[str], *extra: str) -> list[str]:
    """``run_args``: the seed and threads of this run (``real_model_run.cli_args()``)."""
    return ["-m", "venus_edge.cli", "mcp", "--model", str(model), "--corpus", str(corpus), "--journal",
            str(journal), "--strict", "--min-tool-calls", "1", "--extractive-visit", "--max-turns", "3",
            "--n-ctx", "4096", "--max-tokens", "1200", "--threads", "1", "--no-prompt-cache",
            *run_args, *extra]


def _environment() -> dict[str, str]:
    """What the server process needs beyond the SDK's default environment (HOME, PATH, ...): the test's cache
    folder (conftest's ``isolated_cache``) and no hub access."""
    return {name: os.environ[name] for name in ("XDG_CACHE_HOME", "HF_HUB_OFFLINE") if name in os.environ}


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def test_stdio_session_lists_tools_searches_and_researches_with_progress(smollm2_gguf, docs_corpus, tmp_path,
                                                                         real_model_run):
    journal = tmp_path / "journal.jsonl"
    server = StdioServerParameters(command=sys.executable, args=_command(smollm2_gguf, docs_corpus, journal,
                                                                         real_model_run.cli_args()),
                                   env=_environment())
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def session() -> tuple[Any, Any, Any]:
        # a guard against a hang, not a time limit: how long two strict turns take depends on what is sampled and on
        # the machine (with VENUS_TEST_SEED=2 on two busy cores, SmolLM2 decoded 1.3 tokens/s and 240 s ran out)
        with (tmp_path / "server.log").open("w") as errlog, anyio.fail_after(600):
            async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                search = await client.call_tool("search", {"query": "tomllib"})
                research = await client.call_tool("research", {"question": QUESTION, "max_turns": 2},
                                                  progress_callback=on_progress)
                await cancel_a_research(client)
                return tools, search, research

    async def cancel_a_research(client: ClientSession) -> None:
        """Start a second session and cancel its request once its first turn is decoding."""
        started = anyio.Event()

        async def on_start(value: float, total: float | None, message: str | None) -> None:
            started.set()

        async with anyio.create_task_group() as group:
            group.start_soon(lambda: client.call_tool("research", {"question": CANCELLED_QUESTION},
                                                      progress_callback=on_start))
            await started.wait()
            group.cancel_scope.cancel()  # the SDK sends notifications/cancelled for the request
        assert not (await client.call_tool("search", {"query": "json"})).is_error  # the server goes on
        with anyio.fail_after(30):  # the session ends as cancelled now, not when the server closes
            while not any(t.question == CANCELLED_QUESTION and t.termination == "cancelled"
                          for t in read_journal(journal).trajectories):
                await anyio.sleep(0.2)

    try:
        tools, search, research = anyio.run(session)
    finally:
        print((tmp_path / "server.log").read_text(), file=sys.stderr)  # shown when the test fails

    assert set(tools) == {"research", "search", "visit"}
    assert tools["research"].input_schema["required"] == ["question"]
    assert {"question", "max_turns"} <= set(tools["research"].input_schema["properties"])
    assert "ctx" not in tools["research"].input_schema["properties"]
    assert set(tools["research"].output_schema["properties"]) >= {"answer", "sources", "unvisited_citations",
                                                                  "termination", "session_id"}
    assert tools["search"].input_schema["required"] == ["query"]
    assert sorted(tools["visit"].input_schema["required"]) == ["goal", "url"]

    assert not search.is_error
    assert "corpus://" in _text(search) and "tomllib" in _text(search)  # the corpus's hits, as the agent sees them

    assert not research.is_error, _text(research)
    output = research.structured_content
    assert output["termination"] != "error"
    assert output["answer"] or output["termination"] in ("max_steps", "token_limit_no_answer")
    assert _text(research).startswith(output["answer"] or "(no answer")
    assert len(progress) >= 3  # turn 1 starts, its tool call, its return (a tool call is required first)
    values = [value for value, _, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)  # strictly rising, as MCP requires
    assert all(total is not None and total >= 2 for _, total, _ in progress)
    messages = [message or "" for _, _, message in progress]
    assert messages[0] == "turn 1: thinking"
    assert any(re.match(r'turn 1: (search|visit) \{"', message) for message in messages), messages
    assert any(re.match(r"turn 1: (search|visit) returned [\d,]+ characters", message) for message in messages)

    sessions = {t.session_id: t for t in read_journal(journal).trajectories}
    assert output["session_id"] in sessions
    assert sessions[output["session_id"]].question == QUESTION
    assert sessions[output["session_id"]].termination == output["termination"]
    cancelled = [t for t in sessions.values() if t.question == CANCELLED_QUESTION]
    assert [t.termination for t in cancelled] == ["cancelled"]  # the cancelled request stopped its session


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_streamable_http_serves_the_same_tools(smollm2_gguf, docs_corpus, tmp_path, real_model_run):
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, *_command(smollm2_gguf, docs_corpus, tmp_path / "journal.jsonl", real_model_run.cli_args(),
                                   "--transport", "http", "--port", str(port))],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env={**os.environ, **_environment()},
    )

    async def session() -> tuple[list[str], str]:
        with anyio.fail_after(120):
            return await _http_session()

    async def _http_session() -> tuple[list[str], str]:
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            names = [tool.name for tool in (await client.list_tools()).tools]
            visit = await client.call_tool("visit", {"url": "corpus://pydocs/library/tomllib.html",
                                                     "goal": "when tomllib was added"})
            return names, _text(visit)

    try:
        deadline = time.monotonic() + 90
        while True:  # the model loads and the corpus is indexed before the port opens
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not open its port"
                time.sleep(0.2)
        names, visited = anyio.run(session)
    finally:
        process.terminate()
        stdout, _ = process.communicate(timeout=30)
        log.close()
    assert sorted(names) == ["research", "search", "visit"]
    assert "3.11" in visited  # tomllib's page says it is new in 3.11
    assert stdout == b""  # over HTTP too, nothing but logs (on stderr)


def test_a_non_loopback_host_is_refused_before_anything_loads(docs_corpus, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "venus_edge.cli", "mcp", "--model", str(tmp_path / "absent.gguf"), "--corpus",
         str(docs_corpus), "--transport", "http", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "--host 0.0.0.0 can be reached from other machines" in done.stderr
    assert "loopback only" in done.stderr
    assert done.stdout == ""
