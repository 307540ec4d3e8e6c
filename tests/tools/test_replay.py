"""Record and replay: a session recorded against a real local server and corpus replays identically offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from venus_edge.tools import Tool, ToolRegistry, ToolResult, VisitTool
from venus_edge.tools.base import call_key, coerce_arguments
from venus_edge.tools.corpus import Corpus
from venus_edge.tools.replay import RecordingTool, ReplayTool, ToolCache
from venus_edge.tools.search import SEARCH_SCHEMA, CorpusSearchBackend, SearchTool


def session_calls(base_url: str) -> list[tuple[str, dict]]:
    """A short research session: searches, a visit of two pages, failures (403, refused file URL), a bare string."""
    return [
        ("search", {"query": ["tomllib parse toml", "pickle protocol"]}),
        ("visit", {"url": [f"{base_url}/docs/library/tomllib.html", f"{base_url}/text"], "goal": "toml parsing"}),
        ("visit", {"url": f"{base_url}/403", "goal": "anything"}),
        ("visit", {"url": "file:///etc/passwd", "goal": "secrets"}),
        ("search", {"query": "shelve persistence ünïcode “quotes” \ud800"}),
        ("visit", {"url": "corpus://pydocs/library/json.html", "goal": "json.dumps ensure_ascii"}),
    ]


def test_recorded_session_replays_identically_after_the_server_is_gone(
    local_server: Any, subset_corpus: Corpus, tmp_path: Path
) -> None:
    """Every call's ToolResult (text, visited URLs, typed failures) replays equal, with the server shut down.

    ``local_server`` is conftest's ``LocalServer``: a fixture server of this test's own that it can stop."""
    cache_dir = tmp_path / "records"
    calls = session_calls(local_server.url)
    with VisitTool(corpora=[subset_corpus], allow_private=True) as visit:
        live: list[Tool] = [SearchTool(CorpusSearchBackend(subset_corpus)), visit]
        recording = ToolRegistry([RecordingTool(tool, cache_dir) for tool in live])
        recorded = [recording.call(name, arguments) for name, arguments in calls]
    assert recorded[1].visited_urls == (calls[1][1]["url"][0], calls[1][1]["url"][1])
    assert [f.kind for f in recorded[2].failures] == ["blocked"]
    assert [f.kind for f in recorded[3].failures] == ["refused_address"]
    assert len(ToolCache(cache_dir)) == len(calls)

    local_server.stop()
    with VisitTool(allow_private=True) as offline:
        gone = offline({"url": calls[1][1]["url"][0], "goal": "toml parsing"})
    assert [f.kind for f in gone.failures] == ["unreachable"], "the server must really be gone"

    replay = ToolRegistry([ReplayTool.like(tool, cache_dir) for tool in live])
    assert replay.schemas == recording.schemas
    for (name, arguments), expected in zip(calls, recorded, strict=True):
        replayed = replay.call(name, arguments)
        assert replayed == expected, f"{name} {arguments} replayed differently"
        assert replayed.text.encode("utf-8", "surrogatepass") == expected.text.encode("utf-8", "surrogatepass")


def test_bare_values_and_lists_are_one_call_and_other_goals_are_not(tmp_path: Path) -> None:
    """Normalization follows the schema: ``"q"`` == ``["q"]``; list order and other properties still matter."""
    calls: list[dict] = []

    class Echo:
        name = "search"
        schema = json.loads(json.dumps(SEARCH_SCHEMA))

        def __call__(self, arguments: dict) -> ToolResult:
            calls.append(arguments)
            return ToolResult(f"answer {len(calls)}")

    tool = RecordingTool(Echo(), tmp_path, reuse=True)
    assert tool({"query": "q"}).text == "answer 1"
    assert tool({"query": ["q"]}).text == "answer 1", "a bare string and a one-item list are the same call"
    assert tool({"query": ["q", "r"]}).text == "answer 2"
    assert tool({"query": ["r", "q"]}).text == "answer 3", "query order is part of the call"
    assert len(calls) == 3

    assert coerce_arguments(Echo.schema, {"query": "q"}).arguments == {"query": ["q"]}
    assert call_key("search", {"query": ["q"]}) != call_key("visit", {"query": ["q"]})

    always = RecordingTool(Echo(), tmp_path)  # reuse=False: the live tool answers and the record is replaced
    assert always({"query": "q"}).text == "answer 4"
    assert ReplayTool.like(Echo(), tmp_path)({"query": ["q"]}).text == "answer 4"


def test_a_call_never_recorded_gets_an_observation_not_an_exception(tmp_path: Path) -> None:
    replay = ReplayTool("search", json.loads(json.dumps(SEARCH_SCHEMA)), tmp_path / "empty")
    result = replay({"query": "never asked"})
    assert result.text.startswith("No recorded result for this search call"), result.text
    assert '{"query": ["never asked"]}' in result.text
    assert [(f.kind, f.target) for f in result.failures] == [("not_recorded", '{"query": ["never asked"]}')]
    assert result.visited_urls == ()
