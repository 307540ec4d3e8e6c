"""Web search through the ``ddgs`` metasearch package: several engines, rate-limit back-off, fallback, a cache.

``DdgsSearchBackend`` is a ``SearchBackend`` for the ``search`` tool (``SearchTool`` writes the observation JSON
of PROTOCOL.md). It drives ddgs's text engines one at a time, in a fixed order, instead of ddgs's ``DDGS``
aggregator, because the aggregator hides why an engine gave nothing: ddgs's ``BaseSearchEngine.request``
returns ``None`` for any status other than 200. Each engine here is a subclass whose ``request`` checks the
status: 202, 403 and 429 (what DuckDuckGo, Brave and the others answer when they throttle a client) raise
``ddgs.exceptions.RatelimitException``; any other non-200 status raises ``DDGSException``.

For one query::

    round 0: try every engine in order (the one that answered last goes first)
             rate-limited, timed out or failed -> next engine at once (fallback)
             results                            -> cached for the session and returned
    round r: if some engine was rate-limited or timed out in round r-1, sleep
             min(max_backoff_s, base_backoff_s * 2**(r-1)) scaled by a jitter in [0.5, 1), then try all again
    after max_rounds rounds without results    -> WebSearchError (SearchTool shows an empty result list)

Every engine tried is logged in ``DdgsSearchBackend.attempts`` (a ``SearchAttempt``: engine, outcome, detail, and
the back-off slept before it, on the first attempt of a round after a sleep). ``SearchTool`` turns the attempts
of one query into ``ToolAttempt``s when the query needed more than a clean first try, and the agent loop reports
them as ``ToolAttempted`` events.

An engine that answers with no results is not a failure: when, in a round, no engine has results, none was
throttled or timed out, and at least one answered, the query has no results (an empty list, cached as such). Queries
holding Chinese ideographs (U+4E00..U+9FFF) are searched in region ``cn-zh``, others in ``us-en``, as the reference tool
does (DR-Venus ``Inference/tool_server/tool_search.py`` sends ``gl=cn, hl=zh-cn`` for them).

Under a ``Deadline`` (the search tool passes the session's), no engine is tried once it has passed or was cancelled,
and no back-off sleep goes past it: the query then fails with ``WebSearchError`` saying so (nothing is cached).

``ddgs`` is an optional dependency (``pip install 'venus-edge[web]'``), imported on first search.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from venus_edge.tools.base import Deadline
from venus_edge.tools.corpus import Hit
from venus_edge.tools.errors import WebSearchError

__all__ = ["DdgsSearchBackend", "SearchAttempt", "split_snippet_date"]

DEFAULT_ENGINES = ("duckduckgo", "brave", "mojeek", "startpage", "yahoo", "wikipedia")
RATE_LIMIT_STATUSES = (202, 403, 429)
CJK_REGION = "cn-zh"
DEFAULT_REGION = "us-en"
INSTALL_HINT = "the web search backend needs ddgs: pip install 'venus-edge[web]' (or pip install 'ddgs>=9')"


@dataclass(frozen=True)
class SearchAttempt:
    """One engine tried for one query.

    Attributes:
        query: the query text.
        engine: the ddgs engine name (``duckduckgo``, ``brave``, ...).
        outcome: ``ok`` (results), ``empty`` (answered, no results), ``rate_limited``, ``timeout`` or ``error``.
        detail: the exception text for a failure, else the number of results.
        waited_s: seconds of back-off slept just before this attempt; only the first attempt of a round after a
            sleep carries it, every other attempt has 0.0.
    """

    query: str
    engine: str
    outcome: str
    detail: str
    waited_s: float = 0.0


def region_for(query: str) -> str:
    """``cn-zh`` for a query holding a Chinese ideograph (U+4E00..U+9FFF), else ``us-en`` (the reference's rule)."""
    return CJK_REGION if any("\u4e00" <= char <= "\u9fff" for char in query) else DEFAULT_REGION


class DdgsSearchBackend:
    """A ``SearchBackend`` over the web through ddgs's engines, with back-off, fallback and a session cache.

    Args:
        engines (`Sequence[str]`, default `DEFAULT_ENGINES`): ddgs text engine names, tried in this order.
        max_rounds (`int`, default `3`): passes over all engines for one query before giving up.
        base_backoff_s (`float`, default `2.0`): sleep before the second round, in seconds; doubles each round.
        max_backoff_s (`float`, default `30.0`): cap on one sleep, in seconds, before jitter.
        timeout_s (`int`, default `10`): HTTP timeout of one engine request, in seconds.
        proxy (`str`, optional): proxy URL handed to ddgs (http, https or socks5).
        safesearch (`str`, default `"moderate"`): ddgs safesearch setting (``on``, ``moderate``, ``off``).
        sleep (`Callable[[float], None]`, default `time.sleep`): how to wait; tests pass a recorder.
        rng (`random.Random`, optional): source of the jitter; default a fresh unseeded ``random.Random``.

    Attributes:
        attempts: every engine tried in this session, in order (``SearchAttempt``), append-only; ``SearchTool``
            reads the entries one query added and reports them as ``ToolAttempt``s.
    """

    def __init__(
        self,
        engines: Sequence[str] = DEFAULT_ENGINES,
        *,
        max_rounds: int = 3,
        base_backoff_s: float = 2.0,
        max_backoff_s: float = 30.0,
        timeout_s: int = 10,
        proxy: str | None = None,
        safesearch: str = "moderate",
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if not engines:
            raise ValueError("engines must name at least one ddgs engine")
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
        if base_backoff_s < 0 or max_backoff_s < base_backoff_s:
            raise ValueError(f"need 0 <= base_backoff_s <= max_backoff_s, got {base_backoff_s}, {max_backoff_s}")
        self.engine_names = list(engines)
        self.max_rounds = max_rounds
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.proxy = proxy
        self.safesearch = safesearch
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.attempts: list[SearchAttempt] = []
        self._engines: dict[str, Any] | None = None  # built on first search (imports ddgs)
        self._cache: dict[tuple[str, str], list[Hit]] = {}
        self._preferred: str | None = None

    def search(self, query: str, k: int, *, deadline: Deadline | None = None) -> list[Hit]:
        """Return at most ``k`` hits for ``query``, from the cache when this session already searched it; by
        ``deadline`` when given.

        Raises:
            WebSearchError: every engine failed in every round, or ``deadline`` passed first.
            ImportError: ddgs is not installed (with the pip command).
        """
        region = region_for(query)
        key = (query, region)
        if key not in self._cache:
            self._cache[key] = self._search_uncached(query, region, deadline or Deadline())
        return self._cache[key][:k]

    def backoff_s(self, round_index: int) -> float:
        """Seconds to sleep before round ``round_index`` (>= 1): exponential, capped, with jitter in [0.5, 1)."""
        delay = min(self.max_backoff_s, self.base_backoff_s * 2.0 ** (round_index - 1))
        return delay * (0.5 + 0.5 * self.rng.random())

    # ---- one query -------------------------------------------------------------------------------------

    def _search_uncached(self, query: str, region: str, deadline: Deadline) -> list[Hit]:
        last: dict[str, SearchAttempt] = {}
        for round_index in range(self.max_rounds):
            waited_s = 0.0
            if round_index:
                waited_s = self.backoff_s(round_index)
                if waited_s >= deadline.left_s():  # the back-off would end past the call's deadline
                    raise WebSearchError(f"no search engine answered {query!r} before the call's deadline "
                                         f"(the next round was {waited_s:.1f} s of back-off away)")
                self.sleep(waited_s)
            for name in self._engine_order():
                if deadline.expired():
                    raise WebSearchError(f"no search engine answered {query!r} before the call's deadline "
                                         f"({'cancelled' if deadline.cancelled else 'time limit'})")
                hits, attempt = self._try_engine(name, query, region)
                if waited_s:  # the sleep delayed only the round's first attempt; the others followed at once
                    attempt = replace(attempt, waited_s=waited_s)
                    waited_s = 0.0
                self.attempts.append(attempt)
                last[name] = attempt
                if hits:
                    self._preferred = name
                    return hits
            outcomes = {attempt.outcome for attempt in last.values()}
            if outcomes <= {"empty", "error"} and "empty" in outcomes:
                return []  # the engines that answered found nothing: the query has no results
            if not outcomes & {"rate_limited", "timeout"}:
                break  # nothing transient to wait for
        summary = "; ".join(f"{a.engine}: {a.outcome} ({a.detail})" for a in last.values())
        raise WebSearchError(f"no search engine answered {query!r} after {round_index + 1} round(s): {summary}")

    def _engine_order(self) -> list[str]:
        """The configured order, with the engine that answered last moved to the front."""
        if self._preferred is None:
            return list(self.engine_names)
        return [self._preferred] + [name for name in self.engine_names if name != self._preferred]

    def _try_engine(self, name: str, query: str, region: str) -> tuple[list[Hit], SearchAttempt]:
        from ddgs.exceptions import RatelimitException, TimeoutException

        engine = self._engine(name)
        try:
            results = engine.search(query, region=region, safesearch=self.safesearch) or []
        except RatelimitException as exc:
            return [], SearchAttempt(query, name, "rate_limited", str(exc))
        except TimeoutException as exc:
            return [], SearchAttempt(query, name, "timeout", str(exc))
        except Exception as exc:  # a parse error or transport fault of one engine: fall back to the next
            return [], SearchAttempt(query, name, "error", f"{type(exc).__name__}: {exc}")
        hits = _to_hits(results)
        return hits, SearchAttempt(query, name, "ok" if hits else "empty", f"{len(hits)} result(s)")

    def _engine(self, name: str) -> Any:
        if self._engines is None:
            self._engines = self._build_engines()
        return self._engines[name]

    def _build_engines(self) -> dict[str, Any]:
        try:
            from ddgs.engines import ENGINES
        except ImportError as exc:
            raise ImportError(INSTALL_HINT) from exc
        available = ENGINES.get("text", {})
        unknown = [name for name in self.engine_names if name not in available]
        if unknown:
            raise ValueError(f"unknown ddgs engine(s) {unknown}; available: {', '.join(sorted(available))}")
        return {
            name: _checked(available[name])(proxy=self.proxy, timeout=self.timeout_s) for name in self.engine_names
        }


def _checked(engine_class: type) -> type:
    """A subclass of a ddgs engine whose ``request`` raises on throttling and errors instead of returning None."""
    from ddgs.exceptions import DDGSException, RatelimitException

    def request(self: Any, *args: Any, **kwargs: Any) -> str:
        response = self.http_client.request(*args, **kwargs)
        if response.status_code == 200:
            return str(response.text)
        if response.status_code in RATE_LIMIT_STATUSES:
            raise RatelimitException(f"{self.name} answered HTTP {response.status_code} (rate limited)")
        raise DDGSException(f"{self.name} answered HTTP {response.status_code}")

    return type(engine_class.__name__, (engine_class,), {"request": request})


def _to_hits(results: Sequence[Any]) -> list[Hit]:
    """ddgs ``TextResult``s -> ``Hit``s, dropping results without a URL and repeated URLs; a date that an engine
    writes at the start of the snippet becomes the hit's date (``split_snippet_date``)."""
    hits, seen = [], set()
    for result in results:
        url = getattr(result, "href", "")
        if url and url not in seen:
            seen.add(url)
            date, snippet = split_snippet_date(getattr(result, "body", "") or "")
            hits.append(Hit(getattr(result, "title", "") or url, url, snippet, date))
    return hits


_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
          r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?")
# "Mar 5, 2024 · ", "5 March 2024 — ", "2024-03-05 - ", "3 days ago · ": how engines lead a dated snippet. A relative
# date needs a dot or dash separator other than a hyphen ("10 years ago - he wrote" is prose).
_SNIPPET_DATE = re.compile(
    rf"^\s*(?:({_MONTH}\s+\d{{1,2}},\s+\d{{4}}|\d{{1,2}}\s+{_MONTH}\s+\d{{4}}|\d{{4}}-\d{{2}}-\d{{2}})\b"
    rf"\s*(?:·|—|–|-|\.\.\.|…)"
    rf"|(\d{{1,2}}\s+(?:minute|hour|day|week|month|year)s?\s+ago)\s*(?:·|—|\.\.\.|…))\s+",
    re.IGNORECASE,
)


def split_snippet_date(snippet: str) -> tuple[str | None, str]:
    """(the date an engine put at the start of ``snippet``, the snippet without it), or (None, snippet).

    ddgs's results carry no date field; DuckDuckGo, Brave, Bing and others write the page's date at the start of
    the snippet (``"Mar 5, 2024 · The release..."``). The reference shows such a date as ``Date published``.
    """
    match = _SNIPPET_DATE.match(snippet)
    if match is None:
        return None, snippet
    return match.group(1) or match.group(2), snippet[match.end() :]
