"""The ddgs web search backend with the network replaced at its HTTP boundary only.

ddgs sends every request through ``primp.Client.request`` (``ddgs/http_client.py``). ``FakeWeb`` takes that
class's place and answers from canned search-result pages per host; everything above it is ddgs's real code
(payload building, its ``HttpClient`` wrapper, lxml parsing with each engine's XPaths, URL and text
normalization) and ours (status checks, back-off, fallback, cache).
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("ddgs", reason="the web extra is not installed: pip install 'venus-edge[web]'")

from venus_edge.tools.base import Deadline, ToolAttempt
from venus_edge.tools.errors import WebSearchError
from venus_edge.tools.search import BackendAttempt, SearchTool
from venus_edge.tools.web_search import DdgsSearchBackend, SearchAttempt, region_for, split_snippet_date

DDG_HOST, BRAVE_HOST, MOJEEK_HOST = "html.duckduckgo.com", "search.brave.com", "www.mojeek.com"


def ddg_page(results: list[tuple[str, str, str]]) -> str:
    """A DuckDuckGo HTML results page (``html.duckduckgo.com/html/``) as its markup nests results."""
    items = "".join(
        f'<div class="result results_links web-result"><div class="links_main links_deep result__body">'
        f'<h2 class="result__title"><a class="result__a" href="{url}">{title}</a></h2>'
        f'<a class="result__snippet" href="{url}">{snippet}</a></div></div>'
        for title, url, snippet in results
    )
    return f"<html><body><div id='links'>{items}</div></body></html>"


def brave_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f'<div data-type="web" class="snippet"><a href="{url}"><div class="title">{title}</div></a>'
        f'<div class="snippet-description"><div class="content">{snippet}</div></div></div>'
        for title, url, snippet in results
    )
    return f"<html><body><main>{items}</main></body></html>"


def mojeek_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f'<li><h2><a href="{url}">{title}</a></h2><p class="s">{snippet}</p></li>' for title, url, snippet in results
    )
    return f'<html><body><ul class="results-standard">{items}</ul></body></html>'


TOML = [
    ("tomllib — Parse TOML files", "https://docs.python.org/3/library/tomllib.html", "Parse TOML 1.0.0 &amp; more."),
    ("TOML: Tom's Obvious Minimal Language", "https://toml.io/en/", "A config file format for “humans”."),
]
PICKLE = [("pickle — Python object serialization", "https://docs.python.org/3/library/pickle.html", "Protocols.")]


@dataclass
class FakeResponse:
    status_code: int
    text: str

    @property
    def content(self) -> bytes:
        return self.text.encode()


class FakeWeb:
    """The network: canned answers per host (served in order, the last one repeated) and a log of requests."""

    def __init__(self) -> None:
        self.routes: dict[str, list[FakeResponse]] = {}
        self.requests: list[tuple[str, str, dict[str, Any]]] = []

    def serve(self, host: str, *answers: tuple[int, str]) -> None:
        self.routes[host] = [FakeResponse(status, body) for status, body in answers]

    def answer(self, method: str, url: str, kwargs: dict[str, Any]) -> FakeResponse:
        host = urlsplit(url).hostname or ""
        self.requests.append((method, host, kwargs))
        if host not in self.routes:
            raise ConnectionError(f"no route to {host} (the test network serves {sorted(self.routes)})")
        answers = self.routes[host]
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def hosts(self) -> list[str]:
        return [host for _, host, _ in self.requests]


@pytest.fixture
def web(monkeypatch: pytest.MonkeyPatch) -> FakeWeb:
    """Replace ``primp.Client`` (ddgs's HTTP layer) with a client that talks to a ``FakeWeb``."""
    import ddgs.http_client

    fake_web = FakeWeb()

    class FakePrimpClient:
        def __init__(self, **kwargs: Any) -> None:
            self.options = kwargs
            self.cookies: dict[str, dict[str, str]] = {}

        def headers_update(self, headers: dict[str, str]) -> None:
            pass

        def set_cookies(self, url: str, cookies: dict[str, str]) -> None:
            self.cookies[url] = dict(cookies)

        def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
            return fake_web.answer(method, url, kwargs)

    monkeypatch.setattr(ddgs.http_client.primp, "Client", FakePrimpClient)
    return fake_web


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def backend(**kwargs: Any) -> DdgsSearchBackend:
    options: dict[str, Any] = {"engines": ("duckduckgo", "brave", "mojeek"), "sleep": SleepRecorder()}
    options["rng"] = random.Random(0)
    options.update(kwargs)
    return DdgsSearchBackend(**options)


def outcomes(b: DdgsSearchBackend) -> list[tuple[str, str]]:
    return [(a.engine, a.outcome) for a in b.attempts]


def test_observation_shape_is_exact_through_ddgs_parsing(web: FakeWeb) -> None:
    """Real ddgs parsing of a DuckDuckGo page ends in PROTOCOL.md's JSON, entities and quotes decoded."""
    web.serve(DDG_HOST, (200, ddg_page(TOML)))
    result = SearchTool(backend())({"query": ["python toml"]})
    assert result.text == (
        '[{"query": "python toml", "web_page_info_list": ['
        '{"title": "tomllib — Parse TOML files", "url": "https://docs.python.org/3/library/tomllib.html", '
        '"snippet": "Parse TOML 1.0.0 & more."}, '
        '{"title": "TOML: Tom\'s Obvious Minimal Language", "url": "https://toml.io/en/", '
        '"snippet": "A config file format for “humans”."}]}]'
    ), result.text
    assert result.failures == ()
    method, host, kwargs = web.requests[0]
    assert (method, host, kwargs["data"]["q"], kwargs["data"]["l"]) == ("POST", DDG_HOST, "python toml", "us-en")


@pytest.mark.parametrize("status", [202, 403, 429])
def test_rate_limit_falls_back_to_the_next_engine_at_once(web: FakeWeb, status: int) -> None:
    """A throttling answer moves on to the next engine without sleeping; that engine then goes first."""
    web.serve(DDG_HOST, (status, "<html>slow down</html>"))
    web.serve(BRAVE_HOST, (200, brave_page(PICKLE)))
    b = backend()
    hits = b.search("pickle", 10)
    assert [h.url for h in hits] == ["https://docs.python.org/3/library/pickle.html"]
    assert outcomes(b) == [("duckduckgo", "rate_limited"), ("brave", "ok")]
    assert b.sleep.delays == []
    b.search("another query", 10)
    assert outcomes(b)[-1] == ("brave", "ok") and web.hosts()[-1] == BRAVE_HOST, "the engine that answered goes first"


def test_all_engines_rate_limited_backs_off_then_recovers(web: FakeWeb) -> None:
    """When every engine throttles, the backend sleeps (exponential, jittered) and tries the round again."""
    web.serve(DDG_HOST, (429, ""), (429, ""), (200, ddg_page(TOML)))
    web.serve(BRAVE_HOST, (429, ""))
    web.serve(MOJEEK_HOST, (202, ""))
    b = backend(base_backoff_s=1.0, max_backoff_s=8.0)
    hits = b.search("toml", 10)
    assert len(hits) == 2
    assert outcomes(b) == [
        ("duckduckgo", "rate_limited"),
        ("brave", "rate_limited"),
        ("mojeek", "rate_limited"),
    ] * 2 + [("duckduckgo", "ok")]
    first, second = b.sleep.delays
    assert 0.5 <= first < 1.0 and 1.0 <= second < 2.0, b.sleep.delays


def test_gives_up_after_max_rounds_with_capped_backoff(web: FakeWeb) -> None:
    """Throttled forever: max_rounds rounds, sleeps capped at max_backoff_s, then a backend_error observation."""
    for host in (DDG_HOST, BRAVE_HOST, MOJEEK_HOST):
        web.serve(host, (429, ""))
    b = backend(max_rounds=5, base_backoff_s=2.0, max_backoff_s=5.0)
    with pytest.raises(WebSearchError, match="after 5 round"):
        b.search("q", 10)
    caps = [2.0, 4.0, 5.0, 5.0]
    assert all(cap / 2 <= d < cap for d, cap in zip(b.sleep.delays, caps, strict=True)), b.sleep.delays
    assert len(web.requests) == 15

    result = SearchTool(backend(max_rounds=1))({"query": ["q"]})
    assert result.text == '[{"query": "q", "web_page_info_list": []}]'
    assert [f.kind for f in result.failures] == ["backend_error"] and "rate_limited" in result.failures[0].detail


def test_errors_fall_back_without_sleeping(web: FakeWeb) -> None:
    """A server error, an unreachable host and an unparseable page are not throttling: fall back, never sleep."""
    web.serve(DDG_HOST, (500, "oops"))
    web.serve(BRAVE_HOST, (200, " \n "))  # lxml cannot parse a document of whitespace
    # mojeek has no route: the fake network raises, ddgs wraps it in DDGSException
    b = backend()
    with pytest.raises(WebSearchError) as info:
        b.search("q", 10)
    assert outcomes(b) == [("duckduckgo", "error"), ("brave", "error"), ("mojeek", "error")]
    assert "HTTP 500" in str(info.value) and "no route to www.mojeek.com" in str(info.value)
    assert b.sleep.delays == []


def test_no_results_is_an_answer_not_a_failure(web: FakeWeb) -> None:
    web.serve(DDG_HOST, (200, ddg_page([])))
    web.serve(BRAVE_HOST, (200, brave_page([])))
    web.serve(MOJEEK_HOST, (200, mojeek_page([])))
    b = backend()
    assert b.search("xyzzy plugh", 10) == []
    assert outcomes(b) == [("duckduckgo", "empty"), ("brave", "empty"), ("mojeek", "empty")]
    assert b.search("xyzzy plugh", 10) == [] and len(web.requests) == 3, "an empty answer is cached too"


def test_session_cache_and_top_k(web: FakeWeb) -> None:
    """A repeated query is served from the cache (no request); k cuts the cached list."""
    web.serve(DDG_HOST, (200, ddg_page(TOML)))
    b = backend()
    assert len(b.search("toml", 10)) == 2
    assert [h.title for h in b.search("toml", 1)] == ["tomllib — Parse TOML files"]
    assert len(web.requests) == 1


def test_chinese_queries_use_a_chinese_region(web: FakeWeb) -> None:
    """Region per the reference: Chinese ideographs -> cn-zh (in each engine's own parameter), else us-en."""
    web.serve(DDG_HOST, (429, ""))
    web.serve(MOJEEK_HOST, (200, mojeek_page(PICKLE)))
    web.serve(BRAVE_HOST, (429, ""))
    b = backend(engines=("duckduckgo", "mojeek"))
    b.search("北京 天气", 10)
    assert web.requests[0][2]["data"]["l"] == "cn-zh"
    mojeek = b._engine("mojeek")
    assert mojeek.http_client.client.cookies["https://www.mojeek.com"] == {"arc": "cn", "lb": "zh"}
    assert [region_for(q) for q in ("北京", "東京タワー", "서울", "weather in Paris")] == [
        "cn-zh",
        "cn-zh",
        "us-en",
        "us-en",
    ]


def test_configuration_errors_name_the_choices(web: FakeWeb) -> None:
    with pytest.raises(ValueError, match=r"available: .*duckduckgo"):
        backend(engines=("duckduckgo", "altavista")).search("q", 10)
    with pytest.raises(ValueError, match="max_rounds"):
        DdgsSearchBackend(max_rounds=0)
    assert json.loads(SearchTool(backend(engines=("altavista",)))({"query": "q"}).text)[0]["web_page_info_list"] == []


def test_search_tool_reports_fallbacks_as_tool_attempts(web: FakeWeb) -> None:
    """A throttled engine and the fallback that answered come back as ToolAttempts; clean or cached queries add none."""
    web.serve(DDG_HOST, (429, "<html>slow down</html>"))
    web.serve(BRAVE_HOST, (200, brave_page(PICKLE)))
    tool = SearchTool(backend())
    result = tool({"query": ["pickle"]})
    assert result.attempts == (
        ToolAttempt("duckduckgo", "pickle", "rate_limited", "duckduckgo answered HTTP 429 (rate limited)", 0.0),
        ToolAttempt("brave", "pickle", "ok", "1 result(s)", 0.0),
    ), result.attempts
    assert result.failures == ()
    again = tool({"query": ["pickle", "pickle protocols"]})  # cached, then a first-try answer from brave
    assert again.attempts == () and len(web.requests) == 3, (again.attempts, web.hosts())
    assert isinstance(SearchAttempt("q", "brave", "ok", "1 result(s)"), BackendAttempt)


def test_backoff_wait_is_carried_by_the_first_attempt_after_the_sleep(web: FakeWeb) -> None:
    """Every engine throttled in round 0, DuckDuckGo answers in round 1: the sleep is on round 1's first attempt."""
    web.serve(DDG_HOST, (429, ""), (200, ddg_page(TOML)))
    web.serve(BRAVE_HOST, (429, ""))
    web.serve(MOJEEK_HOST, (403, ""))
    b = backend(base_backoff_s=1.0, max_backoff_s=8.0)
    result = SearchTool(b)({"query": ["toml"]})
    [slept] = b.sleep.delays
    assert [(a.backend, a.outcome, a.waited_s) for a in result.attempts] == [
        ("duckduckgo", "rate_limited", 0.0),
        ("brave", "rate_limited", 0.0),
        ("mojeek", "rate_limited", 0.0),
        ("duckduckgo", "ok", slept),
    ], (result.attempts, slept)
    assert 0.5 <= slept < 1.0 and {a.target for a in result.attempts} == {"toml"}
    assert [a.waited_s for a in b.attempts] == [0.0, 0.0, 0.0, slept]


def test_a_failed_search_still_reports_its_attempts(web: FakeWeb) -> None:
    """When every round fails, the attempts (with each wait) come back next to the backend_error failure."""
    for host in (DDG_HOST, BRAVE_HOST):
        web.serve(host, (429, ""))
    b = backend(engines=("duckduckgo", "brave"), max_rounds=2)
    result = SearchTool(b)({"query": "q"})
    assert [f.kind for f in result.failures] == ["backend_error"]
    throttled = [("duckduckgo", "rate_limited"), ("brave", "rate_limited")]
    assert [(a.backend, a.outcome) for a in result.attempts] == throttled * 2
    assert [a.waited_s for a in result.attempts] == [0.0, 0.0, b.sleep.delays[0], 0.0]
    assert result.attempts[0].to_dict() == {
        "backend": "duckduckgo",
        "target": "q",
        "outcome": "rate_limited",
        "detail": "duckduckgo answered HTTP 429 (rate limited)",
        "waited_s": 0.0,
    }


@pytest.mark.parametrize(
    "engine_host, page, snippet, date",
    [
        (DDG_HOST, ddg_page, "Mar 5, 2024 · Python 3.12.2 is out.", "Mar 5, 2024"),
        (BRAVE_HOST, brave_page, "5 March 2024 - Python 3.12.2 is out.", "5 March 2024"),
        (MOJEEK_HOST, mojeek_page, "2024-03-05 — Python 3.12.2 is out.", "2024-03-05"),
        (DDG_HOST, ddg_page, "3 days ago ... Python 3.12.2 is out.", "3 days ago"),
    ],
)
def test_an_engines_snippet_date_becomes_date_published(web: FakeWeb, engine_host, page, snippet, date) -> None:
    """Engines write the page's date at the start of the snippet; the observation shows it as the reference
    does: ``Date published: ...`` and a blank line, then the snippet."""
    engine = {DDG_HOST: "duckduckgo", BRAVE_HOST: "brave", MOJEEK_HOST: "mojeek"}[engine_host]
    web.serve(engine_host, (200, page([("Python 3.12.2", "https://www.python.org/downloads/", snippet)])))
    result = SearchTool(backend(engines=(engine,)))({"query": ["python release"]})
    [hit] = json.loads(result.text)[0]["web_page_info_list"]
    assert hit["snippet"] == f"Date published: {date}\n\nPython 3.12.2 is out."


@pytest.mark.parametrize(
    "snippet",
    [
        "Marvel 5, 2024 - movie news",
        "Mayor 12, 2024 - council",
        "10 years ago - he wrote",
        "Dec 25, 2023 -x",
        "2024 was a year",
    ],
)
def test_prose_that_looks_like_a_date_is_not_one(snippet) -> None:
    assert split_snippet_date(snippet) == (None, snippet)


def test_a_snippet_without_a_leading_date_is_unchanged(web: FakeWeb) -> None:
    web.serve(DDG_HOST, (200, ddg_page(TOML)))
    result = SearchTool(backend(engines=("duckduckgo",)))({"query": ["toml"]})
    snippets = [hit["snippet"] for hit in json.loads(result.text)[0]["web_page_info_list"]]
    assert snippets == ["Parse TOML 1.0.0 & more.", "A config file format for “humans”."]


def test_no_back_off_sleep_or_engine_try_goes_past_the_calls_deadline(web: FakeWeb) -> None:
    """Throttled, with 2 s of back-off ahead and a deadline 1 s away: the query fails at once, uncached, without
    sleeping; a deadline already past (or cancelled) tries no engine at all."""
    for host in (DDG_HOST, BRAVE_HOST, MOJEEK_HOST):
        web.serve(host, (429, ""))
    b = backend(max_rounds=3, base_backoff_s=4.0, max_backoff_s=8.0)
    with pytest.raises(WebSearchError, match="before the call's deadline"):
        b.search("q", 10, deadline=Deadline.after(1.0))
    assert b.sleep.delays == [] and len(web.requests) == 3
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(WebSearchError, match="cancelled"):
        b.search("q", 10, deadline=Deadline(cancel=cancel))
    assert len(web.requests) == 3, "an engine was tried after the cancel"
    web.serve(DDG_HOST, (200, ddg_page(TOML)))
    assert len(b.search("q", 10)) == 2, "a query that ran out of time is not cached as failed"
