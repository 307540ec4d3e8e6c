"""The research page at ``/`` in a real browser: Debian's chromium driven by playwright (its own browser download
is not reachable here, so it is pointed at the system executable), against the real server (uvicorn on
127.0.0.1) running the real agent loop on a ``ScriptedEngine`` that streams its turns slowly, with real
``search`` and ``visit`` tools over a few pages of the Python documentation."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from venus_edge.agent import AgentConfig
from venus_edge.pacing import PaceConfig
from venus_edge.result import NO_SOURCES, TERMINATIONS
from venus_edge.server.app import create_app
from venus_edge.server.pairing import PairingTokens
from venus_edge.server.service import ResearchService
from venus_edge.testing import ScriptedEngine, UvicornThread, answer_turn, tool_call_turn
from venus_edge.toolbox import close_tools, default_tools

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium executable on PATH (Debian: apt install chromium)"
)

#: A page of ``docs_corpus`` (conftest): its folder is ``pydocs``, so its corpus URL is this.
TOML_PAGE = "corpus://pydocs/library/tomllib.html"
NEVER_READ = "https://example.org/toml-spec"
QUESTION = "How do I parse a TOML file in Python?"
WAIT_MS = 20_000


def thinking(words: str, times: int) -> str:
    """Reasoning to stream before a turn's action, so that the turn is visibly in progress for a while."""
    return " ".join([words] * times) + "\n"


@pytest.fixture(scope="module")
def tools(docs_corpus: Path) -> Iterator[list[Any]]:
    tools = default_tools([docs_corpus], completer=None)  # no completer: visit is extractive, no model needed
    yield tools
    close_tools(tools)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def serve(tools: list[Any], tmp_path: Path) -> Iterator[Callable[..., tuple[str, ResearchService]]]:
    """``serve(turns, api_key=None, max_queue=8, config=AgentConfig(), pairing=None, model_name=None, pace=None)``:
    the app over a service on a scripted engine (``turns``: its list of turns, or its policy), on 127.0.0.1; returns
    (base URL, service)."""
    running: list[tuple[UvicornThread, ResearchService]] = []

    def start(turns: list[Any] | Callable[[str], Any], *, api_key: str | None = None, max_queue: int = 8,
              config: AgentConfig | None = None, pairing: PairingTokens | None = None,
              model_name: str | None = None, pace: PaceConfig | None = None) -> tuple[str, ResearchService]:
        engine = ScriptedEngine(turns, piece_chars=8, delay_s=0.03)
        service = ResearchService([engine], tools, config or AgentConfig(), journal_path=tmp_path / "journal.jsonl",
                                  max_queue=max_queue, pace=pace)
        server = UvicornThread(create_app(service, api_key=api_key, pairing=pairing, model_name=model_name))
        running.append((server, service))
        return server.url, service

    yield start
    for server, service in running:
        service.close()
        server.stop()


#: A phone as Chromium emulates one: a 390x844 CSS-pixel screen at 3 device pixels each, touch, mobile viewport.
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 3, "is_mobile": True, "has_touch": True}


@pytest.fixture
def new_context(browser: Any) -> Iterator[Callable[..., Any]]:
    """``new_context(**options)``: a fresh browser context (no cookies; playwright's ``new_context`` options);
    fails the test if a page of one throws an uncaught exception."""
    contexts: list[Any] = []
    errors: list[Any] = []

    def make(**options: Any) -> Any:
        context = browser.new_context(**options)
        context.set_default_timeout(WAIT_MS)
        context.on("page", lambda page: page.on("pageerror", lambda error: errors.append(error)))
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"the page's script failed: {errors}"


@pytest.fixture
def context(new_context: Callable[..., Any]) -> Any:
    """A fresh desktop browser context."""
    return new_context()


def test_a_question_streams_live_and_ends_with_linked_sources(serve: Any, context: Any) -> None:
    release = threading.Event()  # the answer waits until the running session's page has been looked at
    turns = [
        "",  # an empty attempt: the agent retries, and the page shows it discarded
        thinking("I should find the standard library module for TOML.", 24)  # ~4.6 s of live writing
        + tool_call_turn("search", query=["tomllib parse TOML"]),
        tool_call_turn("visit", url=[TOML_PAGE], goal="how to parse a TOML file"),
        answer_turn(f"Use tomllib.load on a file opened in binary mode (see {TOML_PAGE}). "
                    f"The format itself is described at {NEVER_READ} too."),
    ]

    def engine_policy(prompt: str) -> str:
        if len(turns) == 1:
            release.wait(60)
        return turns.pop(0)

    url, _ = serve(engine_policy)
    page = context.new_page()
    page.goto(url)
    sync_api.expect(page.locator("#history")).to_contain_text("No sessions yet")
    page.fill("#question", QUESTION)
    page.click("#ask")

    # Live: the first turn's reasoning is on the page, still being written, before any answer exists.
    page.wait_for_function("""() => {
        const texts = [...document.querySelectorAll('#turns .turn .attempt:not(.discarded) pre')];
        const live = texts.map((t) => t.textContent).find((t) => t.includes('standard library'));
        return live !== undefined && !live.includes('</tool_call>') && document.querySelector('#result').hidden;
    }""")
    sync_api.expect(page.locator("#stop")).to_be_enabled()
    sync_api.expect(page.locator("#ask")).to_be_disabled()
    sync_api.expect(page.locator("#history li.session")).to_contain_text(QUESTION)  # listed while running
    sync_api.expect(page.locator("#turns .attempt.discarded")).to_contain_text("discarded (empty)")
    release.set()

    # The search and the page read, each as a line of its turn.
    sync_api.expect(page.locator("#turns .line.search")).to_contain_text("tomllib parse TOML", timeout=WAIT_MS)
    sync_api.expect(page.locator("#turns .line.visit a")).to_have_attribute("href", TOML_PAGE)
    sync_api.expect(page.locator("#turns .line.returned a")).to_have_text(TOML_PAGE)

    # The answer, its source as a link, and the citation that no tool read, flagged.
    sync_api.expect(page.locator("#answer")).to_contain_text("Use tomllib.load on a file opened in binary mode",
                                                            timeout=WAIT_MS)
    assert page.locator("#sources a").evaluate_all("links => links.map((a) => a.getAttribute('href'))") == [TOML_PAGE]
    unvisited = page.locator("#unvisited .unvisited")
    sync_api.expect(unvisited).to_have_count(1)
    sync_api.expect(unvisited).to_contain_text(NEVER_READ)
    sync_api.expect(unvisited).to_contain_text("cited but never read")
    sync_api.expect(page.locator("#answer a.unvisited-cite")).to_have_attribute("href", NEVER_READ)
    sync_api.expect(page.locator("#answer a.cite:not(.unvisited-cite)")).to_have_attribute("href", TOML_PAGE)
    sync_api.expect(page.locator("#status")).to_have_text("Answered")
    sync_api.expect(page.locator("#stop")).to_be_disabled()
    assert page.locator("#turns > .turn").count() == 3
    # Model text is text: the turn's markup shows as written, never as elements.
    assert page.locator("#turns tool_call, #turns answer").count() == 0
    sync_api.expect(page.locator("#turns .turn").last).to_contain_text("<answer>")

    # A fresh page lists the session; opening it reads it back from the journal.
    page.goto(url)
    session = page.locator("#history li.session")
    sync_api.expect(session).to_have_count(1)
    sync_api.expect(session).to_contain_text(QUESTION)
    sync_api.expect(session).to_contain_text("Answered")
    sync_api.expect(page.locator("#session")).to_be_hidden()
    session.locator("button").click()
    sync_api.expect(page.locator("#session-question")).to_have_text(QUESTION)
    sync_api.expect(page.locator("#turns > .turn")).to_have_count(3)
    sync_api.expect(page.locator("#turns .line.search")).to_contain_text("tomllib parse TOML")
    sync_api.expect(page.locator("#turns .turn").nth(1).locator(".observation")).to_have_count(1)
    sync_api.expect(page.locator("#answer")).to_contain_text("Use tomllib.load")
    sync_api.expect(page.locator("#sources a")).to_have_attribute("href", TOML_PAGE)
    sync_api.expect(page.locator("#unvisited .unvisited")).to_contain_text(NEVER_READ)
    sync_api.expect(session).to_have_class(re.compile(r"\bcurrent\b"))


def test_stop_cancels_a_running_session_and_a_full_queue_says_busy(serve: Any, context: Any) -> None:
    slow = thinking("Let me think about this slowly.", 200) + tool_call_turn("search", query=["never reached"])
    url, service = serve([slow], max_queue=0)  # one session runs; none may wait
    page = context.new_page()
    page.goto(url)
    page.fill("#question", "A question that takes long")
    page.click("#ask")
    sync_api.expect(page.locator("#turns .turn pre")).to_contain_text("think about this slowly")

    # A second page: the queue is full, so its question is refused with the server's Retry-After.
    other = context.new_page()
    other.goto(url)
    other.fill("#question", "Another question")
    other.click("#ask")
    sync_api.expect(other.locator("#error")).to_contain_text(re.compile(r"busy: retry in \d+ s"))
    sync_api.expect(other.locator("#ask")).to_be_enabled()
    # ... and it can follow the running session from the list, live.
    other.locator("#history li.session button").click()
    sync_api.expect(other.locator("#turns .turn pre")).to_contain_text("think about this slowly")
    sync_api.expect(other.locator("#stop")).to_be_enabled()

    page.click("#stop")
    sync_api.expect(page.locator("#status")).to_have_text("Cancelled")
    sync_api.expect(page.locator("#answer")).to_contain_text("No answer: Cancelled")
    sync_api.expect(page.locator("#stop")).to_be_disabled()
    sync_api.expect(page.locator("#ask")).to_be_enabled()
    sync_api.expect(other.locator("#status")).to_have_text("Cancelled")
    sync_api.expect(page.locator("#history li.session")).to_contain_text("Cancelled")
    (handle,) = service.sessions.values()
    assert handle.result is not None and handle.result.termination == "cancelled"
    text = page.locator("#turns .turn pre").first.text_content() or ""
    assert "never reached" not in text  # stopped mid-turn: the rest of the turn was never streamed


def test_with_an_api_key_the_page_asks_for_it_and_then_works(serve: Any, context: Any) -> None:
    url, _ = serve([answer_turn("Nothing needed reading.")], api_key="k")
    page = context.new_page()
    page.goto(url)
    sync_api.expect(page.locator("#key-form")).to_be_visible()
    page.fill("#key", "wrong")
    page.click("#key-submit")
    sync_api.expect(page.locator("#key-error")).to_contain_text("refused")
    sync_api.expect(page.locator("#key-form")).to_be_visible()
    page.fill("#key", "k")
    page.click("#key-submit")
    sync_api.expect(page.locator("#key-form")).to_be_hidden()
    sync_api.expect(page.locator("#history")).to_contain_text("No sessions yet")
    sync_api.expect(page.locator("#health")).to_have_text("model: scripted")
    (cookie,) = [c for c in context.cookies() if c["name"] == "venus_edge_key"]
    assert (cookie["value"], cookie["path"], cookie["sameSite"]) == ("k", "/", "Strict")

    page.fill("#question", QUESTION)
    page.click("#ask")  # POST with the cookie, then EventSource (which cannot send headers) with the cookie
    sync_api.expect(page.locator("#answer")).to_have_text("Nothing needed reading.")
    sync_api.expect(page.locator("#status")).to_have_text("Answered")
    sync_api.expect(page.locator("#sources-head")).to_have_text(f"Sources: {NO_SOURCES}")  # as the CLI says it
    sync_api.expect(page.locator("#sources")).to_be_hidden()
    sync_api.expect(page.locator("#history li.session")).to_contain_text(QUESTION)


def _sleep_then(seconds: float, turns: list[str]) -> Callable[[str], str]:
    """A scripted engine's policy: wait ``seconds`` before the first turn (so that a time limit below it has passed
    when the turn ends), then give ``turns`` in order."""
    def policy(prompt: str) -> str:
        if len(turns) == remaining[0]:
            time.sleep(seconds)
        return turns.pop(0)
    remaining = [len(turns)]
    return policy


# (termination, the engine's turns (made afresh for each run), the server's limits, what the answer box says)
ENDINGS: list[tuple[str, Callable[[], Any], dict[str, Any], str]] = [
    ("answered", lambda: [answer_turn("Nothing needed reading.")], {}, "Nothing needed reading."),
    ("answered_max_steps", lambda: [tool_call_turn("search", query=["tomllib"]), answer_turn("A guess, forced.")],
     {"max_turns": 1}, "A guess, forced."),
    ("max_steps", lambda: [tool_call_turn("search", query=["tomllib"]),
                           tool_call_turn("search", query=["toml parsing"])],
     {"max_turns": 1}, "No answer: turn limit."),
    ("timeout", lambda: _sleep_then(0.6, [tool_call_turn("search", query=["tomllib"]), answer_turn("too late")]),
     {"time_limit_s": 0.5}, "No answer: time limit."),
    ("error", lambda: [RuntimeError("the engine broke")], {}, "No answer: Failed."),
]


@pytest.mark.parametrize(("termination", "turns", "limits", "answer"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_each_ending_has_its_own_words_and_the_reopened_view_shows_the_same(
        serve: Any, context: Any, termination: str, turns: Callable[[], Any], limits: dict[str, Any],
        answer: str) -> None:
    """The status names how the session ended in the server's words (``venus_edge.result.TERMINATIONS``), green
    only for an answer the model chose; a session reopened from the list shows the same status, the same figures
    (turns, seconds, tokens) and the same tool lines (with their seconds) as the live view did."""
    url, service = serve(turns(), config=AgentConfig(**limits))
    expected = TERMINATIONS[termination]
    page = context.new_page()
    page.goto(url)
    page.fill("#question", QUESTION)
    page.click("#ask")
    result = page.locator("#result[data-from='journal']")  # the live box, drawn again from the journal at the end
    sync_api.expect(result).to_be_visible()
    (handle,) = service.sessions.values()
    assert handle.result is not None and handle.result.termination == termination
    status = page.locator("#status")
    sync_api.expect(status).to_have_text(expected.label)
    sync_api.expect(status).to_have_attribute("data-outcome", expected.outcome)
    sync_api.expect(page.locator("#answer")).to_have_text(answer)
    live_meta = page.locator("#result-meta").text_content() or ""
    assert re.search(r"\d+ turns · \d+\.\d s · ", live_meta), live_meta
    live_lines = page.locator("#turns .line").all_text_contents()
    live_texts = page.locator("#turns pre.text").all_text_contents()
    if termination == "answered":
        assert expected.outcome == "answer"
        sync_api.expect(page.locator("#sources-head")).to_have_text(f"Sources: {NO_SOURCES}")
    else:  # not one of the others says "Answered"
        assert expected.outcome != "answer" and not expected.label.startswith("Answered")
    ok_color = page.evaluate("""() => { const probe = document.createElement('span'); probe.style.color = 'var(--ok)';
        document.body.append(probe); const color = getComputedStyle(probe).color; probe.remove(); return color; }""")
    is_green = status.evaluate("(node) => getComputedStyle(node).color") == ok_color
    assert is_green == (termination == "answered"), (termination, ok_color)
    if termination in ("answered_max_steps", "max_steps", "timeout"):
        assert any(re.search(r"search returned [\d,]+ characters in \d+\.\d s", line) for line in live_lines), \
            live_lines

    page.goto(url)
    entry = page.locator("#history li.session")
    sync_api.expect(entry).to_contain_text(expected.label)
    sync_api.expect(entry.locator(".meta")).to_have_attribute("data-outcome", expected.outcome)
    entry.locator("button").click()
    sync_api.expect(result).to_be_visible()
    sync_api.expect(status).to_have_text(expected.label)
    sync_api.expect(status).to_have_attribute("data-outcome", expected.outcome)
    sync_api.expect(page.locator("#answer")).to_have_text(answer)
    sync_api.expect(page.locator("#result-meta")).to_have_text(live_meta)
    assert page.locator("#turns .line").all_text_contents() == live_lines
    assert page.locator("#turns pre.text").all_text_contents() == live_texts  # the turns' text as it streamed


def test_the_sidebar_counts_turns_while_a_session_runs(serve: Any, context: Any) -> None:
    """The list's entry of the running session says the turn it is on, as each turn starts (and after a refresh
    of the list); the engine holds turn 2 until the test has looked."""
    release = threading.Event()
    script = [tool_call_turn("search", query=["tomllib"]), answer_turn(f"Use tomllib (see {TOML_PAGE}).")]

    def engine_policy(prompt: str) -> str:
        if len(script) == 1:  # turn 2: wait until the test lets it go
            release.wait()
        return script.pop(0)

    url, _ = serve(engine_policy)
    try:
        page = context.new_page()
        page.goto(url)
        page.fill("#question", QUESTION)
        page.click("#ask")
        entry = page.locator("#history li.session .meta")
        sync_api.expect(page.locator("#status")).to_have_text("Turn 2…")
        sync_api.expect(entry).to_contain_text("running · turn 2")
        page.click("#refresh")  # the server's list says the same (turn 1 is in the journal)
        sync_api.expect(entry).to_contain_text("running · turn 2")
    finally:
        release.set()
    sync_api.expect(page.locator("#status")).to_have_text("Answered")
    sync_api.expect(entry).to_contain_text("Answered · 2 turns")


# ---------------------------------------------------------------------------------------------- the phone
#: Also keep the phone tests' screenshots here when set (a folder; they always go to the test's tmp_path).
SCREENSHOTS_ENV = "VENUS_EDGE_SCREENSHOTS"
LONG_URL = "https://example.org/" + "a-very-long-path-segment-" * 6 + "end"
#: A model file's name as the header shows it: long enough that the header once broke "venus-edge" at its hyphen.
LONG_MODEL_NAME = "DR-Venus-4B-Instruct-Q4_K_M-imatrix.gguf"


def screenshot(page: Any, folder: Path, name: str, *, full_page: bool = False) -> Path:
    """``page`` as a PNG in ``folder`` (and in ``$VENUS_EDGE_SCREENSHOTS`` when set)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    extra = os.environ.get(SCREENSHOTS_ENV)
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)
    return path


def assert_fits_a_phone(page: Any, state: str) -> None:
    """No sideways scrolling at 390 CSS pixels, the header's name on one line, and the sessions list right after
    the question and session (no blank screen between)."""
    measured = page.evaluate("""() => {
        const root = document.documentElement, h1 = document.querySelector('header h1');
        const main = document.querySelector('main'), sidebar = document.getElementById('sidebar');
        const shown = [...main.children].filter((e) => !e.hidden && e.getClientRects().length);
        window.scrollTo(10000, window.scrollY);  // try to scroll sideways
        const scrolledX = window.scrollX;
        window.scrollTo(0, window.scrollY);
        return {clientWidth: root.clientWidth, scrollWidth: root.scrollWidth, innerWidth: window.innerWidth,
                bodyScrollWidth: document.body.scrollWidth, scrolledX,
                h1Height: h1.getBoundingClientRect().height, lineHeight: parseFloat(getComputedStyle(h1).lineHeight),
                h1Overflow: h1.scrollWidth - h1.clientWidth,
                gapAboveSessions: sidebar.getBoundingClientRect().top
                                  - Math.max(...shown.map((e) => e.getBoundingClientRect().bottom))};
    }""")
    assert measured["clientWidth"] == measured["innerWidth"] == 390, (state, measured)  # not zoomed out to fit
    assert measured["scrollWidth"] <= measured["clientWidth"], (state, measured)
    assert measured["bodyScrollWidth"] <= measured["clientWidth"] and measured["scrolledX"] == 0, (state, measured)
    assert measured["h1Height"] < 1.5 * measured["lineHeight"] and measured["h1Overflow"] <= 0, (state, measured)
    assert 0 <= measured["gapAboveSessions"] <= 60, (state, measured)


def assert_reachable(locator: Any) -> None:
    """Scrolled to, on the screen, and the element a tap there would hit (``click(trial=True)``: playwright's
    visible, stable, enabled and receives-events checks, without clicking)."""
    locator.scroll_into_view_if_needed()
    sync_api.expect(locator).to_be_in_viewport()
    locator.click(trial=True)


def test_the_page_fits_a_phone_and_everything_is_in_reach(serve: Any, new_context: Callable[..., Any],
                                                          tmp_path: Path) -> None:
    """At 390x844 (Chromium's mobile emulation, touch): no sideways scrolling and the name on one line before,
    during and after a session and when one is reopened; the question box, the live turns, the sources and the
    list of sessions are each reachable by scrolling and take a tap."""
    turns = [
        thinking("I should find the standard library module for TOML.", 12) + "x" * 300 + "\n"
        + tool_call_turn("search", query=["tomllib parse TOML " + "long-query-word-" * 8]),
        tool_call_turn("visit", url=[TOML_PAGE], goal="how to parse a TOML file"),
        answer_turn(f"Use tomllib.load on a file opened in binary mode (see {TOML_PAGE}; also {LONG_URL})."),
    ]
    url, _ = serve(turns, model_name=LONG_MODEL_NAME)
    shots = tmp_path / "shots"
    page = new_context(**PHONE).new_page()
    page.goto(url)
    sync_api.expect(page.locator("#history")).to_contain_text("No sessions yet")
    sync_api.expect(page.locator("#health")).to_have_text(f"model: {LONG_MODEL_NAME}")
    assert_fits_a_phone(page, "empty")
    screenshot(page, shots, "1-start")

    page.locator("#question").tap()
    page.fill("#question", QUESTION)
    page.locator("#ask").tap()
    page.wait_for_function("""() => [...document.querySelectorAll('#turns .turn pre')]
        .some((t) => t.textContent.includes('standard library')) && document.querySelector('#result').hidden""")
    assert_fits_a_phone(page, "live")
    screenshot(page, shots, "2-live")
    sync_api.expect(page.locator("#answer")).to_contain_text("Use tomllib.load", timeout=WAIT_MS)
    sync_api.expect(page.locator("#status")).to_have_text("Answered")
    assert_fits_a_phone(page, "answered")

    for locator in (page.locator("#question"), page.locator("#ask"), page.locator("#turns .turn").first,
                    page.locator("#turns .line.search").first, page.locator("#turns .line.visit a"),
                    page.locator("#sources a").first, page.locator("#answer a.cite").last,
                    page.locator("#history li.session button"), page.locator("#refresh")):
        assert_reachable(locator)
    page.locator("#result").scroll_into_view_if_needed()
    screenshot(page, shots, "3-answer")
    screenshot(page, shots, "4-whole-page", full_page=True)

    page.goto(url)  # a fresh page: the session is in the list below the question box; a tap reopens it
    entry = page.locator("#history li.session button")
    sync_api.expect(entry).to_contain_text(QUESTION)
    assert_fits_a_phone(page, "listed")
    assert_reachable(entry)
    screenshot(page, shots, "5-listed")
    entry.tap()
    sync_api.expect(page.locator("#session-question")).to_have_text(QUESTION)
    sync_api.expect(page.locator("#turns > .turn")).to_have_count(3)
    sync_api.expect(page.locator("#sources a")).to_have_attribute("href", TOML_PAGE)
    assert_fits_a_phone(page, "reopened")
    assert_reachable(page.locator("#turns .turn details.observation summary").first)
    page.locator("#turns .turn details.observation summary").first.tap()  # a tool response opens in place
    assert_fits_a_phone(page, "tool response open")
    page.locator("#session-question").scroll_into_view_if_needed()
    screenshot(page, shots, "6-reopened")


def test_the_page_installs_as_a_web_app_whose_worker_keeps_only_the_shell(serve: Any, context: Any) -> None:
    """The manifest and the service worker load on a keyed server without the key; Chromium finds the page
    installable; after a session is asked, followed and reopened, the worker's cache holds the shell's paths and
    nothing else (no API response, no research)."""
    from venus_edge.server.webapp import SHELL_PATHS

    url, _ = serve([tool_call_turn("search", query=["tomllib"]), answer_turn(f"Use tomllib (see {TOML_PAGE}).")],
                   api_key="k")
    context.add_cookies([{"name": "venus_edge_key", "value": "k", "url": url}])
    page = context.new_page()
    page.goto(url)
    script = page.evaluate("""async () => (await navigator.serviceWorker.ready).active.scriptURL""")
    assert script == f"{url}/sw.js"
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")  # clients.claim(): this page too
    manifest = page.evaluate("""async () => (await fetch(document.querySelector('link[rel=manifest]').href)).text()""")
    assert json.loads(manifest)["display"] == "standalone"
    errors = context.new_cdp_session(page).send("Page.getInstallabilityErrors")["installabilityErrors"]
    # A playwright context is incognito, where Chromium installs nothing; every other check of the page passes.
    assert [error["errorId"] for error in errors] == ["in-incognito"], errors

    page.fill("#question", QUESTION)
    page.click("#ask")
    sync_api.expect(page.locator("#status")).to_have_text("Answered")
    page.reload()
    page.locator("#history li.session button").click()
    sync_api.expect(page.locator("#answer")).to_contain_text("Use tomllib")
    cached = page.evaluate("""async () => {
        const paths = [];
        for (const name of await caches.keys()) {
            for (const request of await (await caches.open(name)).keys()) paths.push(new URL(request.url).pathname);
        }
        return paths;
    }""")
    assert sorted(cached) == sorted(SHELL_PATHS), cached


def test_a_pairing_link_pairs_one_phone_once(serve: Any, new_context: Callable[..., Any], tmp_path: Path) -> None:
    """The QR code's link opens the pairing page, which trades its one-time code for the key as an HttpOnly
    cookie and opens the research page, which then works; the same link on a second phone is refused with a
    message that says why, and the code leaves the address bar either way."""
    pairing = PairingTokens()
    url, _ = serve([answer_turn("Paired and answered.")], api_key="phone-key", pairing=pairing)
    link = f"{url}/pair#token={pairing.issue()}"

    phone = new_context(**PHONE)
    page = phone.new_page()
    page.goto(link)
    page.wait_for_url(f"{url}/")
    sync_api.expect(page.locator("#history")).to_contain_text("No sessions yet")
    sync_api.expect(page.locator("#health")).to_have_text("model: scripted")
    sync_api.expect(page.locator("#key-form")).to_be_hidden()
    (cookie,) = [c for c in phone.cookies() if c["name"] == "venus_edge_key"]
    assert (cookie["value"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]) == ("phone-key", "/", True,
                                                                                         "Strict")
    assert "venus_edge_key" not in page.evaluate("document.cookie")  # no script of the page can read it
    page.fill("#question", QUESTION)
    page.locator("#ask").tap()
    sync_api.expect(page.locator("#answer")).to_have_text("Paired and answered.")

    other = new_context(**PHONE).new_page()
    other.goto(link)
    message = other.locator("#message")
    sync_api.expect(message).to_have_attribute("data-state", "refused")
    sync_api.expect(message).to_contain_text("used already")
    assert other.url == f"{url}/pair"
    screenshot(other, tmp_path / "shots", "7-pairing-refused")
    other.locator("a[href='/']").tap()
    sync_api.expect(other.locator("#key-form")).to_be_visible()  # not paired: the key is asked for


def test_pacing_shows_as_a_notice_and_a_low_battery_ends_the_session_resumably(serve: Any, context: Any,
                                                                               tmp_path: Path) -> None:
    """``serve --pace`` on a phone in Termux, its browser the client: what pacing does is a notice in the session,
    and a battery below the floor ends it with the server's words for it."""
    supply = tmp_path / "phone" / "sys" / "class" / "power_supply" / "battery"
    supply.mkdir(parents=True)
    for name, value in (("type", "Battery"), ("status", "Discharging"), ("capacity", "9")):
        (supply / name).write_text(value + "\n")
    url, _ = serve([answer_turn("never written")], pace=PaceConfig(root=tmp_path / "phone"))
    page = context.new_page()
    page.goto(url)
    page.fill("#question", QUESTION)
    page.click("#ask")
    sync_api.expect(page.locator("#result[data-from='journal']")).to_be_visible()
    sync_api.expect(page.locator("#status")).to_have_text(TERMINATIONS["battery_low"].label)
    notices = page.locator("#turns .notice.pace")
    sync_api.expect(notices).to_have_count(2)
    live = notices.all_text_contents()
    assert live[0].startswith("Pacing (sensor problem): temperatures: no thermal zones"), live  # said once
    assert live[1].startswith("Pacing (battery stop): battery battery at 9% and discharging, below the 15% floor")
    page.goto(url)  # reopened from the list: the same notices, from the journal's pace records
    entry = page.locator("#history li.session")
    sync_api.expect(entry).to_contain_text(TERMINATIONS["battery_low"].label)
    entry.locator("button").click()
    sync_api.expect(page.locator("#status")).to_have_text(TERMINATIONS["battery_low"].label)
    sync_api.expect(notices).to_have_count(2)
    assert notices.all_text_contents() == live
