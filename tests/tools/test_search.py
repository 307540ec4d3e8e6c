"""The search tool: exact schema, exact observation shape, bare-string queries, backend failures."""

from __future__ import annotations

import json

from venus_edge.tools import Tool, ToolRegistry, VisitTool, validate_arguments
from venus_edge.tools.corpus import Corpus, Hit
from venus_edge.tools.search import CorpusSearchBackend, SearchBackend, SearchTool, parse_search_observation

# The schema string as DR-Venus's training data writes it (SFT/data_clean/prepare_trajectories.py).
SEARCH_SCHEMA_TEXT = (
    '{"type": "function", "function": {"name": "search", "description": "Perform Google web searches then returns '
    'a string of the top search results. Accepts multiple queries.", "parameters": {"type": "object", "properties": '
    '{"query": {"type": "array", "items": {"type": "string", "description": "The search query."}, "minItems": 1, '
    '"description": "The list of search queries."}}, "required": ["query"]}}}'
)


class FixedBackend:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.calls: list[tuple[str, int]] = []

    def search(self, query: str, k: int) -> list[Hit]:
        self.calls.append((query, k))
        return self.hits


class BrokenBackend:
    def search(self, query: str, k: int) -> list[Hit]:
        raise ConnectionError("search engine unreachable")


def test_schema_renders_byte_for_byte() -> None:
    tool = SearchTool(FixedBackend([]))
    assert json.dumps(tool.schema) == SEARCH_SCHEMA_TEXT
    assert tool.name == "search" and isinstance(CorpusSearchBackend, type)
    assert isinstance(FixedBackend([]), SearchBackend)
    assert isinstance(tool, Tool) and isinstance(VisitTool(), Tool)


def test_observation_shape_is_exact() -> None:
    hits = [Hit("Ünïcode title", "https://example.org/a", "a “quoted” snippet"), Hit("B", "https://example.org/b", "")]
    backend = FixedBackend(hits)
    result = SearchTool(backend)({"query": ["first", "second"]})
    expected = (
        '[{"query": "first", "web_page_info_list": [{"title": "Ünïcode title", "url": "https://example.org/a", '
        '"snippet": "a “quoted” snippet"}, {"title": "B", "url": "https://example.org/b", "snippet": ""}]}, '
        '{"query": "second", "web_page_info_list": [{"title": "Ünïcode title", "url": "https://example.org/a", '
        '"snippet": "a “quoted” snippet"}, {"title": "B", "url": "https://example.org/b", "snippet": ""}]}]'
    )
    assert result.text == expected
    assert backend.calls == [("first", 10), ("second", 10)]
    assert result.failures == () and result.visited_urls == ()


def test_bare_string_query_and_top_10_cap() -> None:
    backend = FixedBackend([Hit(f"t{i}", f"https://example.org/{i}", "s") for i in range(15)])
    blocks = json.loads(SearchTool(backend)({"query": "just one"}).text)
    assert [b["query"] for b in blocks] == ["just one"]
    assert len(blocks[0]["web_page_info_list"]) == 10


def test_backend_failure_becomes_observation_and_failure() -> None:
    result = SearchTool(BrokenBackend())({"query": ["q1", "q2"]})
    assert result.text == '[{"query": "q1", "web_page_info_list": []}, {"query": "q2", "web_page_info_list": []}]'
    assert [(f.kind, f.target) for f in result.failures] == [("backend_error", "q1"), ("backend_error", "q2")]
    assert "search engine unreachable" in result.failures[0].detail


def test_corpus_backend_through_the_registry(subset_corpus: Corpus) -> None:
    """The corpus backend end to end: registry validation, real BM25 ranking, corpus URLs in the observation."""
    registry = ToolRegistry([SearchTool(CorpusSearchBackend(subset_corpus))])
    result = registry.call("search", {"query": ["tomllib", "default pickle protocol"]})
    blocks = json.loads(result.text)
    assert [b["web_page_info_list"][0]["url"] for b in blocks] == [
        "corpus://pydocs/library/tomllib.html",
        "corpus://pydocs/library/pickle.html",
    ]
    for block in blocks:
        for info in block["web_page_info_list"]:
            assert list(info) == ["title", "url", "snippet"] and info["snippet"], info
    validate_arguments(registry.get("search").schema, {"query": "bare string"})


DATED_PAGES = {
    "og.html": '<meta property="article:published_time" content="2024-03-05T10:00:00+00:00">',
    "schema.html": '<meta itemprop="datePublished" content="2023/11/2">',
    "dc.html": '<meta name="DC.date.issued" content="2022-07-14">',
    "time.html": '<time itemprop="datePublished" datetime="2021-01-09">Jan 9</time>',
    "citation.html": '<meta name="citation_publication_date" content="2020/5/1">',
    "undated.html": "",
    "bad-date.html": '<meta name="date" content="2024-13-45"><meta name="date" content="1709596800">',
    "empty-first.html": '<meta property="article:published_time" content=""><meta name="date" content="2019-02-03">',
}


def test_corpus_results_carry_the_date_a_page_declares(tmp_path) -> None:
    """A page's declared publication date (Open Graph, schema.org, Dublin Core, Highwire, <time>) is shown as
    ``Date published: YYYY-MM-DD`` and a blank line before the snippet; an undated page's snippet is unchanged."""
    folder = tmp_path / "news"
    folder.mkdir()
    for name, head in DATED_PAGES.items():
        body = f"<p>The frobnicator release {name} brings faster widgets to everyone.</p>"
        (folder / name).write_text(f"<html><head>{head}<title>{name}</title></head><body>{body}</body></html>")
    corpus = Corpus.open(folder, index_dir=tmp_path / "index", name="news")
    result = SearchTool(CorpusSearchBackend(corpus))({"query": ["frobnicator release widgets"]})
    snippets = {hit["title"]: hit["snippet"] for hit in json.loads(result.text)[0]["web_page_info_list"]}
    expected = {"og.html": "2024-03-05", "schema.html": "2023-11-02", "dc.html": "2022-07-14",
                "time.html": "2021-01-09", "citation.html": "2020-05-01", "empty-first.html": "2019-02-03"}
    for title, date in expected.items():
        head, _, snippet = snippets[title].partition("\n\n")
        assert head == f"Date published: {date}" and "frobnicator release" in snippet, snippets[title]
    for undated in ("undated.html", "bad-date.html"):
        assert "Date published" not in snippets[undated] and "frobnicator release" in snippets[undated]


def test_an_observation_parses_back_into_its_blocks() -> None:
    """``parse_search_observation`` inverts the tool's observation, and says None for anything else."""
    hits = [Hit("tomllib — Parse TOML files", "corpus://docs/tomllib.html", "New in version 3.11.")]
    result = SearchTool(FixedBackend(hits))({"query": ["tomllib", "toml"]})
    assert parse_search_observation(result.text) == [
        {"query": "tomllib", "web_page_info_list": [hit.to_dict() for hit in hits]},
        {"query": "toml", "web_page_info_list": [hit.to_dict() for hit in hits]},
    ]
    for other in ("The useful information in corpus://docs/x.html ...", "[1, 2]", '{"query": "q"}', "[]x",
                  '[{"query": 3, "web_page_info_list": []}]'):
        assert parse_search_observation(other) is None, other
