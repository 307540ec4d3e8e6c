"""The default tool set: corpora and the web merged in one search, record then replay of a whole session."""

from __future__ import annotations

import json

import pytest

from venus_edge.agent import Agent
from venus_edge.testing import ScriptedEngine, answer_turn, tool_call_turn
from venus_edge.toolbox import MergedSearchBackend, default_tools
from venus_edge.tools.corpus import Hit
from venus_edge.tools.replay import RecordingTool, ReplayTool
from venus_edge.tools.search import SearchTool
from venus_edge.tools.web_search import DdgsSearchBackend, SearchAttempt

TOMLLIB = "corpus://pydocs/library/tomllib.html"


class FixedBackend:
    """Answers every query with the same hits, or raises ``error``; logs attempts like the web backend when asked."""

    def __init__(self, urls: list[str], error: Exception | None = None, log: bool = False) -> None:
        self.hits = [Hit(url.rsplit("/", 1)[-1], url, "snippet") for url in urls]
        self.error = error
        if log:
            self.attempts: list[SearchAttempt] = []

    def search(self, query: str, k: int) -> list[Hit]:
        if hasattr(self, "attempts"):
            self.attempts.append(SearchAttempt(query, "fixed", "rate_limited" if self.error else "ok", "x"))
        if self.error:
            raise self.error
        return self.hits[:k]


def test_merged_backend_interleaves_by_rank_and_drops_repeated_urls() -> None:
    corpus = FixedBackend(["c/1", "c/2", "shared"])
    web = FixedBackend(["w/1", "shared", "w/3"])
    merged = MergedSearchBackend([corpus, web])
    assert [h.url for h in merged.search("q", 10)] == ["c/1", "w/1", "c/2", "shared", "w/3"]
    assert [h.url for h in merged.search("q", 3)] == ["c/1", "w/1", "c/2"]


def test_merged_backend_survives_a_failing_backend_and_keeps_its_attempts() -> None:
    merged = MergedSearchBackend([FixedBackend(["c/1"]), FixedBackend([], RuntimeError("429"), log=True)])
    result = SearchTool(merged)({"query": ["q"]})
    assert '"url": "c/1"' in result.text and result.failures == ()
    assert [(a.backend, a.outcome) for a in result.attempts] == [("fixed", "rate_limited")]
    everything_down = MergedSearchBackend([FixedBackend([], RuntimeError("down")), FixedBackend([], KeyError("x"))])
    with pytest.raises(RuntimeError, match="down"):
        everything_down.search("q", 5)


def test_web_search_joins_the_corpus(docs_corpus) -> None:
    search, _visit = default_tools([docs_corpus], web=True)
    assert isinstance(search.backend, MergedSearchBackend)
    assert isinstance(search.backend.backends[-1], DdgsSearchBackend)
    [web_only, _] = default_tools(web=True)
    assert isinstance(web_only.backend, DdgsSearchBackend)


def test_default_tools_needs_a_source_and_one_mode() -> None:
    with pytest.raises(ValueError, match="corpus folder"):
        default_tools()
    with pytest.raises(ValueError, match="exclude"):
        default_tools(record_dir="a", replay_dir="b")


def test_a_recorded_session_replays_with_identical_observations(docs_corpus, tmp_path) -> None:
    """The same scripted turns, first against live tools that record, then against the records alone (no
    corpus): every observation the model sees is identical, and a call never made is answered, not raised."""
    turns = [tool_call_turn("search", query=["tomllib"]), tool_call_turn("visit", url=[TOMLLIB], goal="version"),
             answer_turn("3.11")]
    recording_tools = default_tools([docs_corpus], record_dir=tmp_path / "records")
    assert all(isinstance(tool, RecordingTool) for tool in recording_tools)
    live = Agent(ScriptedEngine(list(turns)), recording_tools).run("When was tomllib added?")
    replay_tools = default_tools(replay_dir=tmp_path / "records")
    assert all(isinstance(tool, ReplayTool) for tool in replay_tools)
    replayed = Agent(ScriptedEngine(list(turns)), replay_tools).run("When was tomllib added?")
    assert replayed.messages == live.messages and replayed.sources == live.sources == [TOMLLIB]

    other = [tool_call_turn("search", query=["never searched"]), answer_turn("?")]
    unrecorded = Agent(ScriptedEngine(other), replay_tools).run("q")
    assert "No recorded result for this search call" in unrecorded.messages[-2]["content"]


def test_visit_budget_is_counted_with_the_completers_tokenizer(docs_corpus) -> None:
    class Completer:
        def tokenize(self, text: str) -> list[int]:
            return list(range(len(text.split())))  # one token per word

        def complete(self, messages, *, max_tokens: int) -> str:
            return '{"rational": "r", "evidence": "e", "summary": "s"}'

    _, visit = default_tools([docs_corpus], completer=Completer())
    assert visit.count_tokens("three little words") == 3
    _, extractive = default_tools([docs_corpus])
    assert extractive.count_tokens("three little words") == 5  # ceil(18 / 4) without a tokenizer


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--corpus", "/nonexistent/docs"], "--corpus /nonexistent/docs: not a directory"),
        (["--replay", "/nonexistent/records"], "--replay /nonexistent/records: not a directory"),
        (["--record", "a", "--replay", "b"], "exclude each other"),
        ([], "give at least one --corpus DIR, --web, or --replay DIR"),
    ],
)
def test_cli_refuses_bad_tool_flags_before_loading_a_model(flags, message, capsys) -> None:
    """The model path does not exist either: the tool flags are checked first, so the user hears about them."""
    from venus_edge.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["research", "q", "--model", "/nonexistent/model.gguf", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_merged_backend_logs_a_failing_backend_and_takes_iterators() -> None:
    class Broken:
        def search(self, query, k):
            raise OSError("index gone")

    class Lazy:
        def search(self, query, k):
            return iter([Hit("t", "lazy/1", "s")])

    merged = MergedSearchBackend([Broken(), Lazy()])
    result = SearchTool(merged)({"query": ["q"]})
    assert '"url": "lazy/1"' in result.text
    assert [(a.backend, a.outcome, a.detail) for a in result.attempts] == [("Broken", "error", "OSError: index gone")]


def test_two_folders_with_the_same_name_get_distinct_corpus_names(tmp_path) -> None:
    for parent in ("a", "b"):
        (tmp_path / parent / "docs").mkdir(parents=True)
        (tmp_path / parent / "docs" / "note.md").write_text(f"# Note {parent}\n\nwidget {parent}\n", encoding="utf-8")
    search, visit = default_tools([tmp_path / "a" / "docs", tmp_path / "b" / "docs"])
    assert sorted(visit.corpora) == ["docs", "docs-2"]
    blocks = json.loads(search({"query": ["widget"]}).text)
    urls = [hit["url"] for block in blocks for hit in block["web_page_info_list"]]
    assert sorted(urls) == ["corpus://docs-2/note.md", "corpus://docs/note.md"]
    assert visit({"url": ["corpus://docs-2/note.md"], "goal": "widget"}).visited_urls == ("corpus://docs-2/note.md",)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--corpus", "EMPTY"], "no readable documents"),
        (["--corpus", "DOCS", "--allow-network", "10.0.0.0/33"], "10.0.0.0/33"),
    ],
)
def test_cli_reports_tool_errors_before_loading_a_model(flags, message, tmp_path, docs_corpus, capsys) -> None:
    from venus_edge.cli import EXIT_ERROR, main

    (tmp_path / "empty").mkdir()
    flags = [{"EMPTY": str(tmp_path / "empty"), "DOCS": str(docs_corpus)}.get(flag, flag) for flag in flags]
    assert main(["research", "q", "--model", "/nonexistent/model.gguf", *flags]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert message in err and "model" not in err, err
