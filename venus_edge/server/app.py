"""The HTTP face of ``ResearchService``: research over Server-Sent Events, an OpenAI-compatible chat endpoint,
sessions read back from the journal, health, Prometheus metrics, and the research page at ``/``.

Routes (JSON unless said; errors are ``{"error": {"message", "type"}}``, the OpenAI shape):

    GET    /                         the research page (static HTML; no data, so no key needed)
    GET    /manifest.webmanifest, /sw.js, /icon.svg, /icon-192.png, /icon-512.png
                                     the page as an installable web app (``venus_edge.server.webapp``; no key)
    GET    /pair                     with ``pairing``: the page a pairing link opens (``serve --lan``; no key)
    POST   /pair                     {"token"}: a one-time pairing token for the key, as an HttpOnly cookie (204)
    GET    /health                   status, model, queue
    GET    /metrics                  Prometheus text: sessions, queue, tokens, seconds, prefill reuse
    POST   /v1/research              {"question", "max_turns"?, "time_limit_s"?, "max_tokens"?, "stream"?: true}
                                     stream: SSE of the session's events (``Event.to_dict()``; ``event:`` is its
                                     type, ``id:`` its index), ending with ``session_finished``; a client that
                                     disconnects cancels the session. stream false: 202 {"session_id", ...}
    GET    /v1/sessions              sessions in the journal and in memory, newest first; the journal's lines
                                     that could not be read (``skipped_lines``: line, reason)
    GET    /v1/sessions/{id}         one session: state, turns, answer, sources, timings (from the journal)
    GET    /v1/sessions/{id}/events  SSE of its events from ``Last-Event-ID`` + 1 (or 0), live; does not cancel
    DELETE /v1/sessions/{id}         cancel it
    GET    /v1/models                the one model (OpenAI shape)
    POST   /v1/chat/completions      OpenAI chat: the last user message is the question; research progress
                                     streams as ``reasoning_content``, the answer (with its sources) as ``content``

A full queue answers 429 with ``Retry-After``; a body over ``max_body_bytes`` 413; a body not received within
``body_timeout_s`` 408 (the connection is closed); a bad request 422. With an
``api_key`` every route but the page's shell and ``/pair`` needs ``Authorization: Bearer KEY`` (or the
``venus_edge_key`` cookie that the page sets, or that ``POST /pair`` sets, since ``EventSource`` cannot send
headers).
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timezone
from importlib.resources import files
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from venus_edge.agent import unvisited_citations
from venus_edge.events import Paced
from venus_edge.protocol import is_observation, observation_text
from venus_edge.result import NO_SOURCES, TERMINATIONS, Result
from venus_edge.server import webapp
from venus_edge.server.defaults import DEFAULT_BODY_TIMEOUT_S
from venus_edge.server.pairing import PairingTokens
from venus_edge.server.service import (
    QuestionTooLongError,
    QueueFullError,
    ResearchService,
    SessionHandle,
    SessionRequest,
    answer_with_sources,
)
from venus_edge.text import finite_json
from venus_edge.trajectory import Trajectory

__all__ = ["create_app"]

_log = logging.getLogger(__name__)

KEY_COOKIE = "venus_edge_key"
#: The page may not be framed by another site (its Stop button), sniffed or cached.
PAGE_HEADERS = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-store"}
#: Host headers a loopback server answers (``allowed_hosts``): a DNS-rebinding page cannot read its sessions.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
#: The page's shell besides the page: public, never sniffed, checked for a newer version on each use.
SHELL_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
#: Routes open without the API key: the page, what installs it, and pairing (none of them holds data).
PUBLIC_ROUTES = frozenset({("GET", path) for path in webapp.SHELL_PATHS}
                          | {("GET", "/sw.js"), ("GET", "/pair"), ("POST", "/pair")})
#: Seconds a paired device's key cookie lasts (a key given with --server-api-key stays valid across restarts).
PAIRED_COOKIE_MAX_AGE_S = 30 * 24 * 3600
#: Seconds between SSE keep-alive comments, so proxies and clients do not time out during a long prefill.
SSE_PING_S = 15


class _ResearchBody(BaseModel):
    """``POST /v1/research``."""

    model_config = ConfigDict(extra="forbid")
    question: str
    max_turns: int | None = Field(default=None, ge=1)
    time_limit_s: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool = True


class _ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class _ChatBody(BaseModel):
    """``POST /v1/chat/completions``: the OpenAI fields a research answer uses; the others are accepted and
    ignored (sampling is the server's)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[_ChatMessage]
    stream: bool = False
    max_turns: int | None = Field(default=None, ge=1)
    time_limit_s: float | None = Field(default=None, gt=0)


class _PairBody(BaseModel):
    """``POST /pair``."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(max_length=256)


class _ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers or {}


def create_app(
    service: ResearchService,
    *,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    max_body_bytes: int = 64 * 1024,
    model_name: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    pairing: PairingTokens | None = None,
) -> FastAPI:
    """The FastAPI app over ``service`` (serve it with uvicorn: ``venus-edge serve``).

    Args:
        service: the sessions' model, tools and queue.
        api_key: required as a bearer token on every route but ``/`` when given.
        cors_origins: origins allowed cross-origin requests (none: CORS off).
        max_body_bytes: the largest request body accepted; larger ones get 413 before they are read whole.
        model_name: the id ``/v1/models`` reports (default the model file's name).
        allowed_hosts: Host headers answered (others get 400); ``serve`` on loopback gives ``LOOPBACK_HOSTS``,
            so that a web page rebinding its DNS name to 127.0.0.1 cannot use the server. None: any.
        body_timeout_s: seconds a client has to send the whole request body; a slower one gets 408 and the
            connection is closed (a client that promises a body and never sends it holds nothing). The headers'
            own timeout is the HTTP server's (``venus_edge.server.timeouts``).
        pairing: one-time tokens that ``POST /pair`` exchanges for ``api_key`` as an HttpOnly cookie
            (``serve --lan``); None: no ``/pair``.

    Raises:
        ValueError: ``body_timeout_s`` is not positive, or ``pairing`` without an ``api_key``.
    """
    if not body_timeout_s > 0:
        raise ValueError(f"body_timeout_s must be > 0, got {body_timeout_s}")
    if pairing is not None and not api_key:
        raise ValueError("pairing hands out the API key: give api_key too")
    app = FastAPI(title="venus-edge", docs_url=None, redoc_url=None, openapi_url=None)
    name = model_name or str(service.model_info.get("name") or "venus-edge")
    registry = CollectorRegistry()
    registry.register(_ServiceCollector(service))

    @app.exception_handler(_ApiError)
    async def api_error(request: Request, exc: _ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.kind, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors())
        return _error(422, f"invalid request: {problems}", "invalid_request_error")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":  # FastAPI's, vague
            return _error(400, await _unparsed_body_reason(request), "invalid_request_error")
        return _error(exc.status_code, str(exc.detail), "invalid_request_error")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(_page_html(), headers=PAGE_HEADERS)

    @app.get("/manifest.webmanifest", include_in_schema=False)
    async def manifest() -> Response:
        return Response(json.dumps(webapp.manifest(), ensure_ascii=False), media_type="application/manifest+json",
                        headers=SHELL_HEADERS)

    @app.get("/sw.js", include_in_schema=False)
    async def service_worker() -> Response:
        return Response(webapp.service_worker_js(), media_type="text/javascript; charset=utf-8",
                        headers=SHELL_HEADERS)

    @app.get("/icon.svg", include_in_schema=False)
    async def icon_svg() -> Response:
        return Response(webapp.icon_svg(), media_type="image/svg+xml", headers=SHELL_HEADERS)

    @app.get("/icon-{size:int}.png", include_in_schema=False)
    async def icon_png(size: int) -> Response:
        if size not in webapp.ICON_SIZES:
            raise _ApiError(404, f"no {size}px icon; the sizes are {webapp.ICON_SIZES}", "not_found_error")
        return Response(webapp.icon_png(size), media_type="image/png", headers=SHELL_HEADERS)

    @app.get("/pair", response_class=HTMLResponse, include_in_schema=False)
    async def pair_page() -> HTMLResponse:
        if pairing is None:
            raise _ApiError(404, "this server pairs no devices (start it with venus-edge serve --lan)",
                           "not_found_error")
        page = files("venus_edge.server").joinpath("static/pair.html").read_text(encoding="utf-8")
        return HTMLResponse(page, headers={**PAGE_HEADERS, "Referrer-Policy": "no-referrer"})

    @app.post("/pair", include_in_schema=False)
    async def pair(body: _PairBody, request: Request) -> Response:
        if pairing is None or not api_key:
            raise _ApiError(404, "this server pairs no devices (start it with venus-edge serve --lan)",
                           "not_found_error")
        client = request.client.host if request.client else "an unknown address"
        outcome = pairing.redeem(body.token)
        if outcome != "paired":
            _log.warning("refused a pairing code from %s: %s", client, outcome)  # never the code
            raise _ApiError(403 if outcome == "wrong" else 410, pairing.refusal(outcome), "authentication_error")
        _log.info("paired the device at %s", client)
        response = Response(status_code=204, headers={"Cache-Control": "no-store"})
        # Percent-encoded as the page's own cookie (any character of a given key travels); HttpOnly: no script
        # of the page can read it, SameSite=Strict: no other site's request carries it.
        response.set_cookie(KEY_COOKIE, quote(api_key, safe=""), max_age=PAIRED_COOKIE_MAX_AGE_S, path="/",
                            httponly=True, samesite="strict")
        return response

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": name, "observation_style": service.config.observation_style,
                "queue": _queue(service)}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/research", response_model=None)
    async def research(body: _ResearchBody) -> Any:
        handle = _submit(service, SessionRequest(body.question, body.max_turns, body.time_limit_s, body.max_tokens))
        if not body.stream:
            return JSONResponse(_links(handle), status_code=202)
        return EventSourceResponse(_sse(handle, cancel=service.cancel), ping=SSE_PING_S,
                                   headers={"X-Session-Id": handle.session_id})

    @app.get("/v1/sessions")
    async def sessions() -> dict[str, Any]:
        listed: dict[str, dict[str, Any]] = {}
        journal = await asyncio.to_thread(service.read_history)
        for trajectory in journal.trajectories:
            listed[trajectory.session_id] = _summary(trajectory, service.get(trajectory.session_id))
        for handle in list(service.sessions.values()):
            if handle.session_id not in listed:  # queued, or cancelled before it ran: nothing journaled
                result = handle.result
                listed[handle.session_id] = {"session_id": handle.session_id, "question": handle.question,
                                             "state": handle.state, "termination": result and result.termination,
                                             "answer": result and result.answer,
                                             "started_at": _iso(handle.submitted_at), "turns": 0}
        newest_first = sorted(listed.values(), key=lambda s: s.get("started_at") or "", reverse=True)
        page: dict[str, Any] = finite_json({"sessions": newest_first, "skipped_lines": [
            {"line": s.line, "reason": s.reason} for s in journal.skipped]})
        return page

    @app.get("/v1/sessions/{session_id}")
    async def session(session_id: str) -> dict[str, Any]:
        handle = service.get(session_id)
        trajectory = await asyncio.to_thread(service.journal, session_id)
        if trajectory is None and handle is None:
            raise _ApiError(404, f"no session {session_id}", "not_found_error")
        if trajectory is not None:
            view = _view(trajectory, handle)
        else:
            assert handle is not None  # one of the two, checked above
            view = {"session_id": session_id, "question": handle.question, "started_at": _iso(handle.submitted_at),
                    "turns": []}
        if handle is not None:
            view["state"] = handle.state
            if handle.result is not None and not (trajectory is not None and trajectory.end):
                result = handle.result  # nothing journaled of its end (a queued session cancelled, a full disk)
                view.update(termination=result.termination, answer=result.answer, sources=result.sources,
                            unvisited_citations=result.unvisited_citations, elapsed_s=result.elapsed_s,
                            totals=result.totals.to_dict(), turn_count=result.turns)
        finite: dict[str, Any] = finite_json(view)
        return finite

    @app.get("/v1/sessions/{session_id}/events", response_model=None)
    async def session_events(session_id: str, request: Request) -> Any:
        handle = service.get(session_id)
        if handle is None:
            raise _ApiError(404, f"no live session {session_id} (read ended ones at /v1/sessions/{session_id})",
                           "not_found_error")
        last = request.headers.get("last-event-id", "")
        start = int(last) + 1 if re.fullmatch(r"[0-9]{1,9}", last) else 0  # anything else: from the start
        return EventSourceResponse(_sse(handle, start=start), ping=SSE_PING_S)

    @app.delete("/v1/sessions/{session_id}")
    async def cancel(session_id: str) -> JSONResponse:
        handle = service.get(session_id)
        if handle is None:
            raise _ApiError(404, f"no live session {session_id}", "not_found_error")
        if not service.cancel(session_id):
            raise _ApiError(409, f"session {session_id} has ended already", "conflict_error")
        return JSONResponse({"session_id": session_id, "cancelled": True}, status_code=202)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "venus-edge"}]}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: _ChatBody, request: Request) -> Any:
        question = _last_user_text(body.messages)
        handle = _submit(service, SessionRequest(question, body.max_turns, body.time_limit_s))
        if body.stream:
            return EventSourceResponse(_chat_chunks(handle, name, service.cancel), ping=SSE_PING_S)
        if not await _ended_unless_gone(handle, request):
            service.cancel(handle.session_id)  # the client left: stop the research nobody will read
            return Response(status_code=499)
        return _chat_completion(handle, name)

    # Added last = outermost: errors of the body limit and the key check carry CORS headers too.
    app.add_middleware(_BodyLimit, max_bytes=max_body_bytes, timeout_s=body_timeout_s)
    if api_key:
        app.add_middleware(_BearerAuth, api_key=api_key)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                           expose_headers=["Retry-After", "X-Session-Id"])
    return app


# ---------------------------------------------------------------------------------------------- helpers
#: Where the page holds the words it shares with the CLI (``_page_html`` fills it in).
WORDING_BLOCK = '<script id="wording" type="application/json">{}</script>'


def _page_html() -> str:
    """The research page with its wording filled in: each termination's label and outcome and the no-sources line
    (``venus_edge.result``), so that the page and the CLI say the same."""
    html = files("venus_edge.server").joinpath("static/index.html").read_text(encoding="utf-8")
    wording = {"terminations": {name: t.to_dict() for name, t in TERMINATIONS.items()}, "no_sources": NO_SOURCES}
    data = json.dumps(wording, ensure_ascii=False).replace("</", "<\\/")  # cannot close the script element
    if WORDING_BLOCK not in html:
        raise RuntimeError(f"the research page has lost its wording block {WORDING_BLOCK!r}")
    return html.replace(WORDING_BLOCK, WORDING_BLOCK.replace("{}", data))


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status, headers=headers)


def _queue(service: ResearchService) -> dict[str, int]:
    return {"waiting": service.waiting, "running": service.running, "max_queue": service.max_queue,
            "workers": len(service.engines)}


def _submit(service: ResearchService, request: SessionRequest) -> SessionHandle:
    try:
        return service.submit(request)
    except QueueFullError as exc:
        raise _ApiError(429, str(exc), "rate_limit_error", {"Retry-After": str(exc.retry_after_s)}) from exc
    except QuestionTooLongError as exc:
        raise _ApiError(413, str(exc), "invalid_request_error") from exc
    except ValueError as exc:
        raise _ApiError(422, str(exc), "invalid_request_error") from exc
    except RuntimeError as exc:
        raise _ApiError(503, str(exc), "server_error") from exc


def _links(handle: SessionHandle) -> dict[str, str]:
    base = f"/v1/sessions/{handle.session_id}"
    return {"session_id": handle.session_id, "session_url": base, "events_url": f"{base}/events"}


async def _sse(handle: SessionHandle, *, start: int = 0,
               cancel: Callable[[str], bool] | None = None) -> AsyncIterator[dict[str, Any]]:
    """The session's events as SSE messages (``id`` is the event's index); when the client leaves first and
    ``cancel`` is given, the session is cancelled with it (taken off the queue, or its decode stopped)."""
    index = start
    try:
        async for event in handle.stream(start=start):
            yield {"event": event["type"], "id": str(index), "data": json.dumps(event, ensure_ascii=False)}
            index += 1
    finally:
        if cancel is not None and not handle.finished:
            cancel(handle.session_id)


async def _ended_unless_gone(handle: SessionHandle, request: Request, poll_s: float = 0.5) -> bool:
    """Wait for the session to end: True; False as soon as the client has disconnected (checked every
    ``poll_s`` seconds: a plain handler is not cancelled when its client leaves)."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    stop = handle.follow(lambda event: event is None and loop.call_soon_threadsafe(ended.set))
    try:
        while not ended.is_set():
            try:
                await asyncio.wait_for(ended.wait(), timeout=poll_s)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return False
        return True
    finally:
        stop()


async def _unparsed_body_reason(request: Request) -> str:
    """Why a request body is not JSON, in words a client can act on."""
    try:
        (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"the request body is not UTF-8 (byte {exc.start}): JSON text is UTF-8 (RFC 8259); send the text "
                "as UTF-8, or other characters as \\uXXXX escapes")
    except Exception:  # the body could not be read again: say what is known
        pass
    return "the request body is not JSON"


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def _summary(trajectory: Trajectory, handle: SessionHandle | None) -> dict[str, Any]:
    """A journaled session; ``state`` is the live one, or ``finished``, or ``incomplete`` (no end record and not
    running here: a server that was killed; ``venus-edge research --resume`` continues it). A session that ended
    here without an end record (pacing's ``battery_low``, resumable) has the termination it ended with."""
    ended = trajectory.termination != "incomplete"
    result = handle.result if handle is not None else None
    return {"session_id": trajectory.session_id, "question": trajectory.question,
            "state": handle.state if handle is not None else "finished" if ended else "incomplete",
            "termination": trajectory.termination if ended or result is None else result.termination,
            "answer": trajectory.answer,
            "started_at": trajectory.header.get("started_at"), "turns": len(trajectory.turns)}


def _view(trajectory: Trajectory, handle: SessionHandle | None) -> dict[str, Any]:
    """A journaled session as the page shows it: what the live events said, read back from the journal records.
    A turn's ``observation_chars`` and ``tool_s`` are its ``tool_returned`` event's ``observation_chars`` and
    ``elapsed_s``, ``stats`` its ``turn_completed`` event's; ``elapsed_s``, ``totals`` and ``turn_count`` are the
    ``session_finished`` event's (absent while the session has not ended); ``paces`` are its ``pace`` events
    (``serve --pace``), each before the turn it names."""
    end = trajectory.end
    return {
        **_summary(trajectory, handle),
        "sources": trajectory.sources,
        "unvisited_citations": unvisited_citations(trajectory.answer or "", trajectory.sources),
        **{name: end[name] for name in ("elapsed_s", "totals") if name in end},
        **({"turn_count": end["turns"]} if "turns" in end else {}),
        "turns": [{"index": t.index, "kind": t.kind, "content": t.content, "tool_call": t.tool_call,
                   "observation": t.observation, "observation_chars": _observation_chars(t.observation),
                   "tool_s": t.tool_s, "visited_urls": list(t.visited_urls),
                   "tool_failures": list(t.tool_failures), "tool_attempts": list(t.tool_attempts),
                   "dropped_arguments": list(t.dropped_arguments), "format_errors": list(t.format_errors),
                   "stats": dict(t.stats)} for t in trajectory.turns],
        "paces": [{k: v for k, v in record.items() if k not in ("record", "session_id")}
                  for record in trajectory.paces],
    }


def _observation_chars(observation: str | None) -> int | None:
    """Characters of the tool's text inside an observation (the ``tool_returned`` event's count), else None."""
    return len(observation_text(observation)) if observation is not None and is_observation(observation) else None


def _last_user_text(messages: Sequence[_ChatMessage]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            if isinstance(message.content, list):  # OpenAI content parts: the text ones
                return "\n".join(str(part.get("text", "")) for part in message.content if part.get("type") == "text")
            return message.content or ""
    raise _ApiError(422, "invalid request: messages hold no user message (its text is the research question)",
                   "invalid_request_error")


def _finished(handle: SessionHandle) -> Result:
    """The result of a session the caller waited for (one that ended without its own: a server error)."""
    return handle.result or Result.unrun("error", session_id=handle.session_id)


def _answer_text(result: Result) -> str:
    """The chat reply of a finished session."""
    return answer_with_sources(result.answer, result.termination, result.sources, result.unvisited_citations)


def _progress_text(event: dict[str, Any]) -> str:
    """What a chat client shows of the research while it runs (``reasoning_content``)."""
    kind = event["type"]
    if kind == "text":
        return str(event["text"])
    if kind == "turn_started" and event["attempt"] == 0 and event["turn"] > 0:
        return "\n\n"
    if kind == "tool_called":
        return f"\n[{event['name']}] {json.dumps(event['arguments'], ensure_ascii=False)}\n"
    if kind == "tool_returned":
        read = f", read {', '.join(event['visited_urls'])}" if event["visited_urls"] else ""
        return f"[{event['name']} returned {event['observation_chars']:,} characters{read}]\n"
    if kind in ("limit_reached", "error"):
        return f"\n[{kind}: {event.get('detail') or event.get('message') or ''}]\n"
    if kind == "pace":  # serve --pace: why the research slows down, waits or stops
        return f"\n[{Paced.words(event['action'], event['detail'])}]\n"
    return ""


def _usage(result: Result) -> dict[str, int]:
    totals = result.totals
    prompt = totals.prompt_tokens_evaluated + totals.prompt_tokens_reused
    completion = totals.tokens_decoded
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chat_completion(handle: SessionHandle, model: str) -> dict[str, Any]:
    result = _finished(handle)
    reasoning = "".join(_progress_text(event) for event in handle.events)
    return {
        "id": f"chatcmpl-{handle.session_id}", "object": "chat.completion", "created": int(handle.submitted_at),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": _answer_text(result), "reasoning_content": reasoning}}],
        "usage": _usage(result),
        "venus_edge": {"session_id": handle.session_id, "termination": result.termination,
                       "sources": result.sources, "unvisited_citations": result.unvisited_citations},
    }


async def _chat_chunks(handle: SessionHandle, model: str, cancel: Callable[[str], bool]) -> AsyncIterator[str]:
    """OpenAI ``chat.completion.chunk`` stream: role, reasoning deltas, the answer, finish, usage, ``[DONE]``."""
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return json.dumps({"id": f"chatcmpl-{handle.session_id}", "object": "chat.completion.chunk",
                           "created": int(handle.submitted_at), "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra},
                          ensure_ascii=False)

    try:
        yield chunk({"role": "assistant", "content": ""})
        async for event in handle.stream():
            text = _progress_text(event)
            if text:
                yield chunk({"reasoning_content": text})
        result = _finished(handle)
        yield chunk({"content": _answer_text(result)})
        yield chunk({}, "stop", usage=_usage(result),
                    venus_edge={"session_id": handle.session_id, "termination": result.termination,
                                "sources": result.sources, "unvisited_citations": result.unvisited_citations})
        yield "[DONE]"
    finally:
        if not handle.finished:
            cancel(handle.session_id)


class _ServiceCollector:
    """Prometheus metrics read from the service at scrape time."""

    def __init__(self, service: ResearchService) -> None:
        self.service = service

    def collect(self) -> Any:
        service = self.service
        queue = GaugeMetricFamily("venus_edge_sessions", "research sessions now, by state", labels=["state"])
        queue.add_metric(["waiting"], service.waiting)
        queue.add_metric(["running"], service.running)
        yield queue
        finished = CounterMetricFamily("venus_edge_sessions_finished", "sessions ended, by termination",
                                       labels=["termination"])
        counters, figures = service.snapshot()
        for key, count in sorted(counters.items()):
            if key.startswith("finished:"):
                finished.add_metric([key.split(":", 1)[1]], count)
        yield finished
        yield CounterMetricFamily("venus_edge_sessions_submitted", "sessions accepted",
                                  value=counters.get("submitted", 0))
        yield CounterMetricFamily("venus_edge_turns", "model turns completed", value=counters.get("turns", 0))
        for name, help_text in (("tokens_decoded", "tokens sampled"),
                                ("prompt_tokens_evaluated", "prompt tokens prefilled"),
                                ("prompt_tokens_reused", "prompt tokens reused from the KV cache"),
                                ("decode_s", "seconds decoding"), ("prefill_s", "seconds prefilling")):
            unit = name.removesuffix("_s") + "_seconds" if name.endswith("_s") else name
            yield CounterMetricFamily(f"venus_edge_{unit}", help_text, value=figures.get(name, 0.0))
        decoded, decode_s = figures.get("tokens_decoded", 0.0), figures.get("decode_s", 0.0)
        decode_rate = GaugeMetricFamily("venus_edge_decode_tokens_per_second",
                                        "tokens decoded per decode second, since start")
        decode_rate.add_metric([], decoded / decode_s if decode_s else 0.0)
        yield decode_rate
        reused = figures.get("prompt_tokens_reused", 0.0)
        prompt = figures.get("prompt_tokens_evaluated", 0.0) + reused
        reuse = GaugeMetricFamily("venus_edge_prefill_reuse_ratio",
                                  "share of prompt tokens served from the KV cache, since start")
        reuse.add_metric([], reused / prompt if prompt else 0.0)
        yield reuse


class _BodyLimit:
    """413 for a request body over ``max_bytes``: at once from Content-Length, or as soon as a chunked body
    passes the limit; 408 (and the connection closed) for a body not received within ``timeout_s``. The body is
    read here (it is small) and handed on; later ``receive`` calls (a client's disconnect during a stream) go
    through."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send)
        body: collections.deque[Message] = collections.deque()
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return await self._time_out(send)
            body.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(send)
            if not message.get("more_body"):
                break

        async def replay() -> Message:
            return body.popleft() if body else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = _error(413, f"request body over {self.max_bytes:,} bytes", "invalid_request_error")
        await response({"type": "http"}, _no_body, send)

    async def _time_out(self, send: Send) -> None:
        response = _error(408, f"request body not received within {self.timeout_s:g} s", "invalid_request_error",
                          {"Connection": "close"})  # the rest of the body may still come: do not read it as a request
        await response({"type": "http"}, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class _BearerAuth:
    """401 unless the request carries the API key (bearer token or the page's cookie); ``PUBLIC_ROUTES`` are
    open."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app, self.key = app, api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in PUBLIC_ROUTES:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        given = b""
        authorization = headers.get(b"authorization", b"")
        if authorization[:7].lower() == b"bearer ":
            given = authorization[7:].strip()
        else:
            for part in headers.get(b"cookie", b"").split(b";"):
                key, _, value = part.strip().partition(b"=")
                if key == KEY_COOKIE.encode():
                    given = unquote_to_bytes(value)  # the page sets it with encodeURIComponent
        if scope["method"] == "OPTIONS" or (given and hmac.compare_digest(given, self.key)):
            return await self.app(scope, receive, send)
        response = _error(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                          "authentication_error", {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)
