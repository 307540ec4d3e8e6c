"""Record and replay: a session recorded against a real local server and corpus replays identically offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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


class CountingTool:
    """A live tool that answers ``answer <n>`` for its n-th call."""

    name = "search"
    schema = json.loads(json.dumps(SEARCH_SCHEMA))

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        self.calls += 1
        return ToolResult(f"answer {self.calls}", visited_urls=("https://example.org/a",))


def _damage(record: Path, how: str) -> None:
    data = json.loads(record.read_text(encoding="ascii"))
    if how == "edited":
        data["result"]["text"] = "answer X"  # valid JSON, one character changed: only the checksum sees it
        record.write_text(json.dumps(data), encoding="ascii")
    elif how == "truncated":
        record.write_bytes(record.read_bytes()[:40])
    elif how == "wrong types":
        data["result"]["failures"] = "none"
        record.write_text(json.dumps(data), encoding="ascii")
    else:
        record.write_bytes(b"\xff\xfe not ascii")


@pytest.mark.parametrize("how", ["edited", "truncated", "wrong types", "not ascii"])
def test_a_damaged_record_is_never_served_and_is_recorded_again(tmp_path: Path, how: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """The tool cache's records carry a checksum of their content: a damaged record is not served (no traceback,
    no edited text as evidence); a recording tool calls the live tool and rewrites it; a replay says the record
    is damaged."""
    live = CountingTool()
    recording = RecordingTool(live, tmp_path / "cache", reuse=True)
    assert recording({"query": "q"}).text == "answer 1"
    assert recording({"query": "q"}).text == "answer 1" and live.calls == 1
    (record,) = (tmp_path / "cache").glob("search/*/*.json")
    _damage(record, how)
    replayed = ReplayTool.like(live, tmp_path / "cache")({"query": "q"})
    assert [f.kind for f in replayed.failures] == ["not_recorded"] and "is damaged" in replayed.failures[0].detail
    assert "is damaged" in caplog.text
    assert recording({"query": "q"}).text == "answer 2" and live.calls == 2
    assert ReplayTool.like(live, tmp_path / "cache")({"query": "q"}).text == "answer 2"


def test_records_of_the_format_before_checksums_are_still_read(tmp_path: Path) -> None:
    cache = ToolCache(tmp_path)
    path = cache.put("search", {"query": ["q"]}, ToolResult("old answer"))
    record = json.loads(path.read_text(encoding="ascii"))
    record["version"] = 1
    del record["sha256"]
    path.write_text(json.dumps(record), encoding="ascii")
    assert cache.get("search", {"query": ["q"]}) == ToolResult("old answer")
