"""The MCP server in-process, driven by the official ``mcp`` client (``mcp.Client`` over its in-memory transport):
what it announces, and how it answers arguments its tools' schemas refuse. The agent runs on a ``ScriptedEngine``
with the real corpus ``search`` tool; ``tests/test_mcp.py`` runs the real server process on a real model."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from venus_edge.agent import AgentConfig
from venus_edge.server.mcp import create_mcp_server
from venus_edge.server.service import ResearchService
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.toolbox import close_tools, default_tools


@pytest.fixture
def server(docs_corpus: Path, tmp_path: Path) -> Iterator[Any]:
    tools = default_tools([docs_corpus], completer=None)
    service = ResearchService([ScriptedEngine([answer_turn("Use tomllib.")])], tools, AgentConfig(),
                              journal_path=tmp_path / "journal.jsonl")
    yield create_mcp_server(service)
    service.close()
    close_tools(tools)


def _calls(server: Any, calls: list[tuple[str, dict[str, Any]]]) -> tuple[Any, list[Any]]:
    """Connect, then make ``calls`` in order: (the server's announced identity, each result)."""
    async def session() -> tuple[Any, list[Any]]:
        async with Client(server) as client:
            return client.server_info, [await client.call_tool(name, arguments) for name, arguments in calls]
    return anyio.run(session)


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def test_the_server_announces_the_package_version(server: Any) -> None:
    info, _ = _calls(server, [])
    assert (info.name, info.version) == ("venus-edge", version("venus-edge"))
    assert info.version  # the SDK's default is the empty string


@pytest.mark.parametrize(("tool", "arguments", "expected"), [
    ("research", {}, "research: argument question is required"),
    ("research", {"question": 5}, "research: argument question should be a valid string (got 5)"),
    ("research", {"question": "q", "max_turns": 0},
     "research: argument max_turns should be greater than or equal to 1 (got 0)"),
    ("research", {"question": "q", "max_turns": "many"},
     "research: argument max_turns should be a valid integer, unable to parse string as an integer (got 'many')"),
    ("research", {"max_turns": 0}, "research: argument question is required; "
                                   "argument max_turns should be greater than or equal to 1 (got 0)"),
    ("search", {"query": ["a", "list"]}, "search: argument query should be a valid string (got ['a', 'list'])"),
    ("visit", {"url": "corpus://pydocs/library/tomllib.html"}, "visit: argument goal is required"),
], ids=["missing", "wrong-type", "out-of-range", "not-a-number", "two-problems", "search-type", "visit-missing"])
def test_arguments_a_schema_refuses_come_back_as_one_readable_line(server: Any, tool: str,
                                                                   arguments: dict[str, Any], expected: str) -> None:
    """Each refused argument is named with what is wrong and the value given, on one line: no pydantic report, no
    documentation URL. The server goes on: a good call after the bad one works."""
    _, (refused, fine) = _calls(server, [(tool, arguments), ("research", {"question": "How to parse TOML?"})])
    assert refused.is_error
    assert _text(refused) == expected
    assert "\n" not in _text(refused) and "pydantic" not in _text(refused)
    assert not fine.is_error and _text(fine).startswith("Use tomllib.")


def test_a_research_without_an_answer_says_why_in_the_words_of_the_page(docs_corpus: Path, tmp_path: Path) -> None:
    """The text of a session that ended without an answer names the reason as the page and the CLI word it
    (``venus_edge.result.TERMINATIONS``), with the termination itself."""
    tools = default_tools([docs_corpus], completer=None)
    turns = [tool_call_turn("search", query=["tomllib"]), tool_call_turn("search", query=["toml parsing"])]
    service = ResearchService([ScriptedEngine(turns)], tools, AgentConfig(max_turns=1),
                              journal_path=tmp_path / "journal.jsonl")
    try:
        _, (result,) = _calls(create_mcp_server(service), [("research", {"question": "How to parse TOML?"})])
    finally:
        service.close()
        close_tools(tools)
    assert not result.is_error
    assert result.structured_content["termination"] == "max_steps"
    assert _text(result).startswith("(no answer: turn limit; termination 'max_steps')")
