"""The ``visit`` tool: read pages (local corpus or web), keep what serves the goal, observe as DR-Venus did.

Source: PROTOCOL.md, "Tools and observation shapes", and the reference tool (DR-Venus
``Inference/tool_server/tool_visit.py``), whose observation text we reproduce byte for byte::

    The useful information in {url} for user goal {goal} as follows: \\n\\n
    Evidence in page: \\n{evidence}\\n\\n
    Summary: \\n{summary}\\n\\n

one block per URL, joined with ``"\\n=======\\n"``, the whole ``.strip()``'ed (not in the ``rl`` observation style:
the RL rollouts' visit observations end with the blocks' blank line, ``tools.observation_styles``). A page that
cannot be read gets fixed evidence and summary texts (``UNREADABLE_EVIDENCE``, ``UNREADABLE_SUMMARY``) and a typed
``ToolFailure``.

Per URL: read (``corpus://`` from a ``Corpus``, ``http(s)`` through ``fetch.fetch_page``; the URLs of one call
are read concurrently, up to ``max_concurrent_reads`` at a time), extract passages
(``passages.extract_passages``), reduce them to the goal within ``reduce_budget_tokens``, then ask the
completer (the local model; one call per URL, up to two more when its answer does not parse) for a JSON object
``{"rational", "evidence", "summary"}``. Without a completer, or when it never answers with parseable JSON,
the output is extractive: evidence = the passages that match the goal, summary = their first sentences.
The completer runs one URL after another, in the order given: there is one local model.

A URL named more than once in a call is read and summarized once and counted once (``ToolResult.visited_urls``);
its block is repeated where the model named it again, as the reference's observation would have it.

A call reads at most ``max_urls_per_call`` distinct URLs (the rest get the fixed "could not be accessed" text and a
``too_many_urls`` failure) and ends by ``max_call_s`` (the reference's 900 s per call, ``tool_visit.py``) or the
session's ``Deadline``, whichever comes first: reads not started by then are not started, reads still running are
left behind, and the completer is not asked again (extractive output); each such URL gets a ``timeout`` (or
``cancelled``) failure. The caps are code, not schema text: the schema is the trained protocol's.

A page with no readable text is an ``empty`` failure; that includes an HTML page that is only a JavaScript
application shell (``passages.is_script_shell``), since visit does not run scripts.
"""

from __future__ import annotations

import ipaddress
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from venus_edge.tools.base import Deadline, TextCompleter, ToolFailure, ToolResult, as_list
from venus_edge.tools.corpus import URL_SCHEME, Corpus
from venus_edge.tools.errors import DocumentNotFoundError, FetchError, UnreadableDocumentError
from venus_edge.tools.fetch import (
    DEFAULT_USER_AGENT,
    FetchLimits,
    Resolver,
    checked_transport,
    fetch_page,
    proxy_mounts,
    resolve_host,
)
from venus_edge.tools.observation_styles import (
    DEFAULT_OBSERVATION_STYLE,
    ObservationStyle,
    observation_style,
    protocol_style,
)
from venus_edge.tools.passages import (
    approx_tokens,
    extract_passages,
    first_sentences,
    is_script_shell,
    select_passages,
)

__all__ = ["VISIT_SCHEMA", "VisitTool"]

VISIT_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "visit",
        "description": "Visit webpage(s) and return the summary of the content.",
        "parameters": {
            "type": "object",
            "properties": {
                "url": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The URL(s) of the webpage(s) to visit. Can be a single URL or an array of URLs.",
                },
                "goal": {"type": "string", "description": "The specific information goal for visiting webpage(s)."},
            },
            "required": ["url", "goal"],
        },
    },
}

URL_SEPARATOR = "\n=======\n"
UNREADABLE_EVIDENCE = "The provided webpage content could not be accessed. Please check the URL or file format."
UNREADABLE_SUMMARY = "The webpage content could not be processed, and therefore, no information is available."
DEFAULT_REDUCE_BUDGET_TOKENS = 3000
DEFAULT_EXTRACTIVE_BUDGET_TOKENS = 1200
DEFAULT_COMPLETER_MAX_TOKENS = 1500
DEFAULT_COMPLETER_ATTEMPTS = 3
DEFAULT_MAX_CONCURRENT_READS = 4
DEFAULT_MAX_URLS_PER_CALL = 10
#: The reference's cap on one call (``tool_visit.py``: URLs after 900 s get the "could not be accessed" text).
DEFAULT_MAX_CALL_S = 900.0
# How often a wait for reads looks at the cancel event, in seconds.
_CANCEL_POLL_S = 0.05
# Seconds a read may run past total_timeout_s, from its own start, before visit stops waiting for it.
READ_GRACE_S = 2.0
# Below this much extracted text an HTML page is checked for being a JavaScript shell.
_SHELL_CHECK_CHARS = 500
_HTML_TYPES = ("text/html", "application/xhtml+xml", "")
# Extractive evidence keeps passages scoring at least this fraction of the page's best passage.
EXTRACTIVE_MIN_SCORE_RATIO = 0.3

# Our wording (not DR-Venus's extractor prompt). {url}, {goal} and {passages} are filled in.
EXTRACTION_PROMPT = """You are reading a web page for a researcher. Pull out what the page says about the goal.

Goal: {goal}
Page: {url}

Excerpts from the page, in page order:
<page>
{passages}
</page>

Answer with a single JSON object and nothing else, with three string fields:
"rational": one or two sentences on whether and where the page addresses the goal;
"evidence": the passages that bear on the goal, quoted as written, with enough context to be understood;
"summary": a concise answer to the goal drawn only from the evidence, or a statement that the page does not cover it."""

RETRY_PROMPT = (
    "That reply could not be read as a JSON object. Answer again with only the JSON object with the string "
    'fields "rational", "evidence" and "summary", no other text.'
)


@dataclass(frozen=True)
class _PageText:
    """A page read and cut into passages."""

    url: str
    passages: list[str]


class VisitTool:
    """The ``visit`` tool.

    Args:
        corpora (`Sequence[Corpus]`): local corpora whose ``corpus://{name}/...`` URLs can be visited.
        http_client (`httpx.Client`, optional): used for http(s) URLs; redirects are followed by the tool, not the
            client. Default: a client on ``fetch.checked_transport`` (addresses checked again at connect time), with
            the environment's proxies mounted for the schemes they carry (``fetch.proxy_mounts``); created on first
            use and closed by ``close()``.
        completer (`TextCompleter`, optional): the local model that writes evidence and summary; extractive
            output without it.
        limits (`FetchLimits`): time, size and redirect limits of a fetch.
        allow_private (`bool`, default `False`): allow loopback, private and link-local addresses (tests, intranets).
        allowed_networks (`Sequence[str]`, default `()`): CIDR networks allowed although not public, e.g.
            ``["127.0.0.1/32"]`` for a server on loopback while every other private address stays refused.
        reduce_budget_tokens (`int`, default `3000`): tokens of page passages shown to the completer (on the
            12 known-answer cases of `benchmarks/bench_visit.py`, 2000 already keeps every evidence sentence).
        extractive_budget_tokens (`int`, default `1200`): tokens of evidence in the extractive output.
        count_tokens (`Callable[[str], int]`, optional): token counter; default ``ceil(len(text) / 4)``.
        completer_max_tokens (`int`, default `1500`): ``max_tokens`` of each completer call.
        completer_attempts (`int`, default `3`): completer calls per URL while its answer does not parse.
        resolve (`Callable[[str, int], list[str]]`): host -> addresses, for the address policy (``getaddrinfo``).
        max_concurrent_reads (`int`, default `4`): URLs of one call fetched (or read from a corpus) at once.
        max_urls_per_call (`int`, default `10`): URLs read per call; the others get the unreadable text and a
            ``too_many_urls`` failure.
        max_call_s (`float`, default `900.0`): seconds one call may take (the reference's cap), within the
            session's deadline when one is given.
        style (`str`, default `"inference"`): the observation style (``tools.observation_styles``): ``inference``
            strips the observation, ``rl`` keeps each block's trailing blank line as the RL rollouts show it.
    """

    name = "visit"

    def __init__(
        self,
        *,
        corpora: Sequence[Corpus] = (),
        http_client: httpx.Client | None = None,
        completer: TextCompleter | None = None,
        limits: FetchLimits = FetchLimits(),
        allow_private: bool = False,
        reduce_budget_tokens: int = DEFAULT_REDUCE_BUDGET_TOKENS,
        extractive_budget_tokens: int = DEFAULT_EXTRACTIVE_BUDGET_TOKENS,
        count_tokens: Callable[[str], int] | None = None,
        completer_max_tokens: int = DEFAULT_COMPLETER_MAX_TOKENS,
        completer_attempts: int = DEFAULT_COMPLETER_ATTEMPTS,
        resolve: Resolver = resolve_host,
        max_concurrent_reads: int = DEFAULT_MAX_CONCURRENT_READS,
        allowed_networks: Sequence[str] = (),
        max_urls_per_call: int = DEFAULT_MAX_URLS_PER_CALL,
        max_call_s: float = DEFAULT_MAX_CALL_S,
        style: ObservationStyle = DEFAULT_OBSERVATION_STYLE,
    ) -> None:
        names = [corpus.name for corpus in corpora]
        if len(set(names)) != len(names):
            raise ValueError(f"corpus names must be unique, got {names}")
        if min(reduce_budget_tokens, extractive_budget_tokens, completer_attempts, max_concurrent_reads,
               max_urls_per_call) < 1:
            raise ValueError(
                "reduce_budget_tokens, extractive_budget_tokens, completer_attempts, max_concurrent_reads and "
                "max_urls_per_call must be >= 1"
            )
        if not max_call_s > 0:
            raise ValueError(f"max_call_s must be > 0, got {max_call_s}")
        self.schema = json.loads(json.dumps(VISIT_SCHEMA))
        self.corpora = {corpus.name: corpus for corpus in corpora}
        self.completer = completer
        self.limits = limits
        self.allow_private = allow_private
        self.reduce_budget_tokens = reduce_budget_tokens
        self.extractive_budget_tokens = extractive_budget_tokens
        self.count_tokens = count_tokens or approx_tokens
        self.completer_max_tokens = completer_max_tokens
        self.completer_attempts = completer_attempts
        self.resolve = resolve
        self.max_concurrent_reads = max_concurrent_reads
        self.max_urls_per_call = max_urls_per_call
        self.max_call_s = max_call_s
        self.style = observation_style(style)
        self.allowed_networks = tuple(allowed_networks)
        for network in self.allowed_networks:
            ipaddress.ip_network(network, strict=False)  # a bad entry fails here, not at the first fetch
        self._client = http_client
        self._owns_client = http_client is None
        self._client_lock = threading.Lock()

    def __call__(self, arguments: dict[str, Any], *, deadline: Deadline | None = None) -> ToolResult:
        """Visit every URL of ``arguments["url"]`` (a list or a bare string) for ``arguments["goal"]``, the first
        ``max_urls_per_call`` of them, by ``deadline`` (the session's) and ``max_call_s``."""
        goal = str(arguments.get("goal", ""))
        urls = [str(u) for u in as_list(arguments.get("url", []))]
        until = (deadline or Deadline()).capped(self.max_call_s)
        distinct = list(dict.fromkeys(urls))  # a URL named twice is read (and summarized) once
        read = distinct[: self.max_urls_per_call]
        over = f"visit reads at most {self.max_urls_per_call} URLs per call; this one was not read"
        skipped: list[tuple[_PageText | None, ToolFailure | None]] = [
            (None, ToolFailure("too_many_urls", url, over)) for url in distinct[len(read):]]
        section_of, visited, failures = {}, [], []
        for url, (page, failure) in zip(distinct, self._read_all(read, until) + skipped):
            if page is None:
                section_of[url] = format_visit_section(url, goal, UNREADABLE_EVIDENCE, UNREADABLE_SUMMARY)
                failures.append(failure)
                continue
            visited.append(url)
            evidence, summary, failure = self._summarize(page, goal, until)
            section_of[url] = format_visit_section(url, goal, evidence, summary)
            if failure is not None:
                failures.append(failure)
        # One block per URL as named, repeats included: the observation stays the reference's.
        sections = [section_of[url] for url in urls]
        return ToolResult(self._observation(sections), tuple(visited), tuple(f for f in failures if f))

    def failure_result(self, arguments: dict[str, Any], failure: ToolFailure) -> ToolResult:
        """What the model sees for a call that was abandoned (``ToolRegistry.interrupted_result``): the fixed
        "could not be accessed" section for every URL, as for a page that could not be read."""
        goal = str(arguments.get("goal", ""))
        urls = [str(u) for u in as_list(arguments.get("url", []))]
        sections = [format_visit_section(url, goal, UNREADABLE_EVIDENCE, UNREADABLE_SUMMARY) for url in urls]
        failures = tuple(ToolFailure(failure.kind, url, failure.detail) for url in urls)
        return ToolResult(self._observation(sections), failures=failures or (failure,))

    def _observation(self, sections: Sequence[str]) -> str:
        """The blocks of one call as its observation text: joined by ``URL_SEPARATOR``, stripped in the
        ``inference`` style (the reference's ``.strip()``), as they are in ``rl``."""
        text = URL_SEPARATOR.join(sections)
        return text.strip() if protocol_style(self.style).strip_visit else text

    def close(self) -> None:
        """Close the HTTP client if this tool created it (a client passed in stays open)."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> VisitTool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- reading ---------------------------------------------------------------------------------------

    def _read_all(self, urls: list[str], until: Deadline) -> list[tuple[_PageText | None, ToolFailure | None]]:
        """``_read`` of every URL, in the order given, up to ``max_concurrent_reads`` in flight at once, by ``until``.

        A read still running ``total_timeout_s`` plus ``READ_GRACE_S`` after it started is reported as a
        ``timeout`` and left behind, and its slot goes to the next URL: fetch limits bound each wait, but a server
        that drips its headers byte by byte, or a PDF that is slow to parse, would otherwise hold the call. A read
        left behind ends with its own limits (each fetch also stops at ``until``), or when ``close()`` closes the
        client under it. When ``until`` passes (or its cancel is set), reads still running are left behind and
        reads not started are not started.
        """
        results: list[tuple[_PageText | None, ToolFailure | None]] = [(None, None)] * len(urls)
        waiting = list(enumerate(urls))
        running: dict[int, float] = {}  # index -> deadline
        finished: queue.SimpleQueue[tuple[int, tuple[_PageText | None, ToolFailure | None]]] = queue.SimpleQueue()

        def read(index: int, url: str) -> None:
            finished.put((index, self._read(url, until)))

        while waiting or running:
            if until.expired():  # the call's time is up: what is not read yet is not read
                for index in [*running, *(index for index, _ in waiting)]:
                    results[index] = (None, until.failure(urls[index]))
                break
            while waiting and len(running) < self.max_concurrent_reads:
                index, url = waiting.pop(0)
                running[index] = time.monotonic() + self.limits.total_timeout_s + READ_GRACE_S
                # A daemon thread: a read left behind never keeps the process alive at exit.
                threading.Thread(target=read, args=(index, url), name="visit-read", daemon=True).start()
            wait_s = max(0.0, min(min(running.values()) - time.monotonic(), until.left_s()))
            try:
                index, result = finished.get(timeout=min(wait_s, _CANCEL_POLL_S) if until.cancel else wait_s)
                if index in running:
                    results[index] = result
                    del running[index]
            except queue.Empty:
                pass
            for index, deadline in list(running.items()):
                if time.monotonic() >= deadline:
                    detail = f"not read within total_timeout_s {self.limits.total_timeout_s} s; left behind"
                    results[index] = (None, ToolFailure("timeout", urls[index], detail))
                    del running[index]
        return results

    def _read(self, url: str, until: Deadline) -> tuple[_PageText | None, ToolFailure | None]:
        """Read one URL into passages, or say why not; never raises (one bad page must not sink the call)."""
        try:
            return self._read_page(url, until)
        except Exception as exc:  # a fault in a parser or library on hostile input: this URL fails, the rest go on
            return None, ToolFailure("backend_error", url, f"reading failed: {type(exc).__name__}: {exc}")

    def _read_page(self, url: str, until: Deadline) -> tuple[_PageText | None, ToolFailure | None]:
        try:
            if urlsplit(url).scheme == URL_SCHEME:
                source, content_type = self._read_corpus(url)
            else:
                page = fetch_page(
                    self._http(),
                    url,
                    self.limits,
                    allow_private=self.allow_private,
                    resolve=self.resolve,
                    allowed_networks=self.allowed_networks,
                    deadline=until,
                )
                source, content_type = page.text, page.content_type
        except FetchError as exc:
            where = "" if exc.url == url else f" (at redirect hop {exc.url})"
            return None, ToolFailure(exc.kind, url, exc.detail + where)
        except DocumentNotFoundError as exc:
            return None, ToolFailure("not_found", url, str(exc))
        except UnreadableDocumentError as exc:
            return None, ToolFailure("not_text", url, str(exc))
        except ValueError as exc:  # urlsplit on a malformed URL (e.g. an unclosed IPv6 bracket)
            return None, ToolFailure("unreachable", url, f"not a valid URL: {exc}")
        passages = extract_passages(source, content_type)
        short_html = content_type in _HTML_TYPES and sum(map(len, passages)) < _SHELL_CHECK_CHARS
        if short_html and is_script_shell(source):
            detail = "script-only page: its content is rendered by JavaScript, which visit does not run"
            return None, ToolFailure("empty", url, detail)
        if not passages:
            return None, ToolFailure("empty", url, "no readable text in the page")
        return _PageText(url, passages), None

    def _read_corpus(self, url: str) -> tuple[str, str]:
        name = urlsplit(url).netloc
        if name not in self.corpora:
            known = ", ".join(self.corpora) or "none"
            raise DocumentNotFoundError(f"no corpus named {name!r}; corpora: {known}")
        document = self.corpora[name].read(url)
        return document.html_or_text, document.content_type

    def _http(self) -> httpx.Client:
        with self._client_lock:  # reads run in threads; one client (and connection pool) for all
            if self._client is None:
                transport = checked_transport(
                    allow_private=self.allow_private, resolve=self.resolve, allowed_networks=self.allowed_networks
                )
                self._client = httpx.Client(
                    headers={"User-Agent": DEFAULT_USER_AGENT},
                    transport=transport,
                    mounts=proxy_mounts(),  # proxied schemes go through the proxy; the rest stays checked
                    trust_env=False,
                )
            return self._client

    # ---- evidence and summary --------------------------------------------------------------------------

    def _summarize(self, page: _PageText, goal: str, until: Deadline) -> tuple[str, str, ToolFailure | None]:
        """(evidence, summary, failure): the completer's when it answers with parseable JSON, else extractive (also
        once ``until`` has passed: the completer is not asked after the call's time is up)."""
        if self.completer is None:
            return (*self._extractive(page, goal), None)
        passages = select_passages(
            page.passages, goal, budget_tokens=self.reduce_budget_tokens, count_tokens=self.count_tokens
        )
        prompt = EXTRACTION_PROMPT.format(goal=goal, url=page.url, passages="\n\n".join(passages))
        messages = [{"role": "user", "content": prompt}]
        problem = ""
        for _ in range(self.completer_attempts):
            if until.expired():
                failure = until.failure(page.url)
                detail = f"{failure.detail}; the completer was not asked, extractive output used"
                return (*self._extractive(page, goal), ToolFailure(failure.kind, page.url, detail))
            try:
                reply = self.completer.complete(messages, max_tokens=self.completer_max_tokens)
            except Exception as exc:  # the model runtime failed: fall back, report, never raise into the loop
                problem = f"completer failed: {type(exc).__name__}: {exc}"
                break
            parsed = parse_extraction(reply)
            if parsed is not None:
                return parsed["evidence"], parsed["summary"], None
            problem = f"completer reply not parseable as JSON after {self.completer_attempts} attempt(s)"
            messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": RETRY_PROMPT}]
        failure = ToolFailure("backend_error", page.url, f"{problem}; extractive output used")
        return (*self._extractive(page, goal), failure)

    def _extractive(self, page: _PageText, goal: str) -> tuple[str, str]:
        kept = select_passages(
            page.passages,
            goal,
            budget_tokens=self.extractive_budget_tokens,
            count_tokens=self.count_tokens,
            keep_unmatched=False,
            min_score_ratio=EXTRACTIVE_MIN_SCORE_RATIO,
        )
        evidence = "\n\n".join(kept)
        return evidence, first_sentences(evidence)


def format_visit_section(url: str, goal: str, evidence: str, summary: str) -> str:
    """One URL's observation block, byte for byte as DR-Venus's ``tool_visit.py`` writes it."""
    return (
        f"The useful information in {url} for user goal {goal} as follows: \n\n"
        f"Evidence in page: \n{evidence}\n\n"
        f"Summary: \n{summary}\n\n"
    )


def parse_extraction(reply: str) -> dict[str, str] | None:
    """Read the completer's ``{"rational", "evidence", "summary"}`` tolerantly; ``None`` when it cannot.

    Strips code fences, takes the outermost ``{...}``, ``json.loads`` it. ``evidence`` and ``summary`` must be
    present and non-empty; a list value is joined with newlines, any other value ``str()``'ed.
    """
    text = re.sub(r"```(?:json)?", "", reply)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    fields = {key: _as_text(data.get(key)) for key in ("rational", "evidence", "summary")}
    if not fields["evidence"].strip() or not fields["summary"].strip():
        return None
    return fields


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return str(value)
