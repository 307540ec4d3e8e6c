"""``venus-edge mcp``: the local research agent as an MCP server (the official ``mcp`` SDK, 2.x ``MCPServer``).

Tools (only those the session has; ``research`` always):

- ``research(question, max_turns=None, time_limit_s=None)``: one research session on the shared
  ``ResearchService``; a progress notification per turn start, tool call, tool return, limit, compaction and
  error (when the client asked for progress), then the answer with its sources as text, and the same as
  structured output (``ResearchOutput``). A cancelled request cancels the session.
- ``search(query)`` and ``visit(url, goal)``: the session's own search and visit tools, called directly; the
  result is the observation text the agent would see. A direct visit reads extractively (the page passages that
  match the goal): the model, busy with research sessions, writes no summary for it.

The server announces the venus-edge package's version. Arguments a tool's schema refuses come back as one line that
names the tool, each argument and what is wrong with it (``research: argument max_turns should be greater than or
equal to 1 (got 0)``), not pydantic's report.

Transports: stdio (default; stdout carries only the protocol, logs go to stderr) and streamable HTTP on a
loopback address (``--transport http --host 127.0.0.1 --port 8766``, endpoint ``/mcp``).

    venus-edge mcp --model M.gguf --corpus DIR [--transport stdio|http] [--host 127.0.0.1] [--port 8766]
                   [--journal FILE] [--max-queue N]
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field, ValidationError

from venus_edge.events import Paced
from venus_edge.result import Result
from venus_edge.server.service import QueueFullError, ResearchService, SessionRequest, answer_with_sources
from venus_edge.session import SessionSettings, open_session
from venus_edge.toolbox import close_tools
from venus_edge.tools.base import Tool, ToolRegistry
from venus_edge.tools.errors import ToolArgumentError

__all__ = ["ResearchOutput", "argument_problems", "create_mcp_server", "run_mcp"]

#: The event types a ``research`` call reports as progress (``text`` deltas are too many and too small).
PROGRESS_EVENTS = frozenset({"turn_started", "tool_called", "tool_returned", "limit_reached", "context_compacted",
                             "pace", "error"})
#: Longest progress message, in characters (tool arguments are cut to fit).
MAX_PROGRESS_MESSAGE = 300


class ResearchOutput(BaseModel):
    """The structured result of the MCP ``research`` tool (the session's ``session_finished`` event, in part).

    Attributes:
        answer: the final answer, or None when the session ended without one (see ``termination``).
        sources: the URLs the session's tools read.
        unvisited_citations: URLs the answer cites that no tool read.
        termination: why the session ended (``answered``, ``max_steps``, ``cancelled``, ``error``, ...).
        turns: model turns used.
        session_id: the session's id in the journal.
    """

    answer: str | None = Field(description="the final answer; null when the research ended without one")
    sources: list[str] = Field(description="URLs the research read")
    unvisited_citations: list[str] = Field(description="URLs the answer cites that the research never read")
    termination: str = Field(description="why the research ended: answered, max_steps, cancelled, error, ...")
    turns: int = Field(description="model turns used")
    session_id: str = Field(description="the session's id in the server's journal")


def create_mcp_server(service: ResearchService, tools: Sequence[Tool] | None = None, *, name: str = "venus-edge",
                      log_level: str = "WARNING") -> MCPServer:
    """An ``MCPServer`` with the tools ``research`` (sessions on ``service``) and, where ``tools`` has them,
    ``search`` and ``visit`` (called directly, on a worker thread).

    Args:
        service: runs the research sessions; the caller closes it (and its engines and tools) after the server.
        tools: the tools that ``search`` and ``visit`` call (default ``service.tools``). They run on worker threads
            while research sessions decode: a tool must not use the model of ``service`` (a visit with a
            completer); ``run_mcp`` gives copies of the session's tools without their completer.
        name: the server name announced to clients.
        log_level: the SDK's log level; ``MCPServer`` sets up logging on stderr (``logging.basicConfig``).

    Returns:
        the server: ``server.run("stdio")``, ``server.run("streamable-http", host=..., port=...)``, or
        ``server.streamable_http_app()`` to mount it.

    Errors reach the client as tool results with ``isError`` (the server goes on): ``research`` with an empty or
    over-long question or a limit below 1, a full queue (``QueueFullError``'s message gives a retry time) or a
    closed service; ``search`` and ``visit`` with arguments their schema refuses. A tool's own failures (a page
    not found) are observation text, as the agent sees them.
    """
    instructions = ("Deep research over the local corpus (and the web when enabled) by a local model: call research "
                    "with a question; search and visit read the same sources directly.")
    server = _Server(name, version=version("venus-edge"), instructions=instructions,
                     log_level=log_level)  # type: ignore[arg-type]
    registry = ToolRegistry(service.tools if tools is None else tools)

    async def research(
        question: Annotated[str, Field(description="the research question")],
        ctx: Context,
        max_turns: Annotated[int | None, Field(description="research turns at most, then one more turn asked for "
                                                           "the final answer (default and maximum: the server's)",
                                               ge=1)] = None,
        time_limit_s: Annotated[float | None, Field(description="wall-clock seconds at most (default and maximum: "
                                                                "the server's)", ge=1)] = None,
    ) -> Annotated[CallToolResult, ResearchOutput]:
        try:
            handle = service.submit(SessionRequest(question, max_turns=max_turns, time_limit_s=time_limit_s))
        except (ValueError, QueueFullError, RuntimeError) as exc:
            raise ToolError(str(exc)) from exc
        progress = _Progress(handle.config.max_turns)
        try:
            async with contextlib.aclosing(handle.stream()) as events:
                async for event in events:
                    report = progress.of(event)
                    if report is not None:
                        await ctx.report_progress(*report)
        finally:
            if not handle.finished:  # the request was cancelled, or the client went away
                service.cancel(handle.session_id)
        result = handle.result or Result.unrun("error", session_id=handle.session_id)
        output = ResearchOutput(
            answer=result.answer, sources=list(result.sources), unvisited_citations=list(result.unvisited_citations),
            termination=result.termination, turns=result.turns, session_id=handle.session_id,
        )
        text = answer_with_sources(output.answer, output.termination, output.sources, output.unvisited_citations)
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=output.model_dump(mode="json"))

    server.add_tool(research, description="Research a question with the local deep-research agent: it searches, "
                                          "reads pages and answers with its sources. Takes minutes; reports "
                                          "progress per turn.")
    if "search" in registry:
        async def search(query: Annotated[str, Field(description="the search query")]) -> str:
            return await _call(registry, "search", {"query": query})

        server.add_tool(search, description=_description(registry, "search"), structured_output=False)
    if "visit" in registry:
        async def visit(
            url: Annotated[str, Field(description="the URL to read (corpus://... or http(s)://...)")],
            goal: Annotated[str, Field(description="what to look for on the page")],
        ) -> str:
            return await _call(registry, "visit", {"url": url, "goal": goal})

        server.add_tool(visit, description=_description(registry, "visit"), structured_output=False)
    return server


def run_mcp(settings: SessionSettings, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8766,
            journal_path: str | os.PathLike[str], max_queue: int = 8) -> int:
    """Load the model and tools ``settings`` describe and serve MCP on ``transport`` (``stdio`` or ``http``, the
    streamable HTTP endpoint ``/mcp`` on ``host``:``port``) until the client closes stdin (stdio) or the process is
    interrupted (http); the exit code. Sessions are journaled to ``journal_path``; ``max_queue`` may wait.

    Raises:
        SetupError: the tools cannot be built (exit code 3 in the CLI).
    """
    journal = Path(journal_path)
    stdio = transport == "stdio"
    with contextlib.ExitStack() as stack:
        with _stdout_to_stderr() if stdio else contextlib.nullcontext():  # stdout is the protocol's alone
            session = stack.enter_context(open_session(settings))
        service = ResearchService([session.engine], session.tools, session.config, journal_path=journal,
                                  max_queue=max_queue, pace=settings.pace)
        stack.callback(service.close)
        direct = [_direct_tool(tool) for tool in session.tools]
        stack.callback(close_tools, [twin for twin, tool in zip(direct, session.tools) if twin is not tool])
        server = create_mcp_server(service, direct)
        where = "stdio" if stdio else f"http://{host}:{port}/mcp"
        served = ["research", *(name for name in ("search", "visit") if any(t.name == name for t in session.tools))]
        print(f"venus-edge mcp: {where} (tools: {', '.join(served)}; "
              f"{max_queue} session(s) may wait; journal {journal})", file=sys.stderr, flush=True)
        if stdio:
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
    return 0


class _Server(MCPServer[Any]):
    """``MCPServer`` whose argument errors read as one line (``argument_problems``) instead of pydantic's report."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):  # the SDK logs the fields of a ValidationError cause
                raise ToolError(argument_problems(name, exc.__cause__)) from exc.__cause__
            raise


def argument_problems(tool: str, error: ValidationError) -> str:
    """One line naming ``tool`` and, for each argument its schema refuses, what is wrong and the value given:
    ``research: argument question is required; argument max_turns should be greater than or equal to 1 (got 0)``."""
    problems = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"]) or "(all)"
        if problem["type"] == "missing":
            problems.append(f"argument {where} is required")
            continue
        message = problem["msg"].removeprefix("Input ").replace("\n", " ")
        given = repr(problem.get("input"))
        if len(given) > 40:
            given = given[:39] + "…"
        problems.append(f"argument {where} {message[:1].lower()}{message[1:]} (got {given})")
    return f"{tool}: " + "; ".join(problems)


class _Progress:
    """Progress notifications of one ``research`` call: ``(progress, total, message)``, progress strictly rising.

    Progress counts turns: turn ``t`` (0-based) starting is ``t``, its tool call ``t + 0.5``, the tool's return
    ``t + 0.75``; total is the session's ``max_turns`` (raised if a forced final turn goes past it)."""

    def __init__(self, max_turns: int) -> None:
        self.total = float(max_turns)
        self.last = -1.0

    def of(self, event: dict[str, Any]) -> tuple[float, float, str] | None:
        kind = event.get("type")
        if kind not in PROGRESS_EVENTS:
            return None
        turn = int(event.get("turn", 0) or 0)
        if kind == "turn_started":
            value = float(turn)
            purpose = "writing notes" if event.get("purpose") == "notes" else "thinking"
            retry = f" (retry {event['attempt']})" if event.get("attempt") else ""
            message = f"turn {turn + 1}: {purpose}{retry}"
        elif kind == "tool_called":
            value = turn + 0.5
            message = f"turn {turn + 1}: {event['name']} {json.dumps(event.get('arguments'), ensure_ascii=False)}"
        elif kind == "tool_returned":
            value = turn + 0.75
            read = f"; read {', '.join(event['visited_urls'])}" if event.get("visited_urls") else ""
            message = f"turn {turn + 1}: {event['name']} returned {event['observation_chars']:,} characters{read}"
        elif kind == "pace":  # mcp --pace: why the session slows down, waits or stops
            value = self.last
            message = f"turn {turn + 1}: {Paced.words(str(event.get('action')), str(event.get('detail')))}"
        else:
            value = self.last
            detail = event.get("detail") or event.get("message") or event.get("policy") or ""
            message = f"turn {turn + 1}: {kind.replace('_', ' ')}: {detail}".rstrip(": ")
        self.last = max(value, self.last + 0.01)
        self.total = max(self.total, self.last)
        if len(message) > MAX_PROGRESS_MESSAGE:
            message = message[:MAX_PROGRESS_MESSAGE - 1] + "…"
        return self.last, self.total, message


async def _call(registry: ToolRegistry, name: str, arguments: dict[str, Any]) -> str:
    """Run one tool call on a worker thread; its observation text. Arguments the tool refuses raise ``ToolError``."""
    def call() -> str:
        try:
            return registry.call(name, arguments).text
        except ToolArgumentError as exc:
            raise ToolError(str(exc)) from exc

    return await anyio.to_thread.run_sync(call)


def _description(registry: ToolRegistry, name: str) -> str:
    return str(registry.get(name).schema.get("function", {}).get("description") or name)


def _direct_tool(tool: Any) -> Any:
    """``tool`` for direct calls beside the research sessions: a shallow copy without its completer (the model,
    which one thread at a time may use; visit then answers extractively) when it has one, inside a recording
    wrapper too; else ``tool`` itself. A copy opens its own HTTP client when it needs one: close it."""
    inner = getattr(tool, "tool", None)
    if inner is not None and _direct_tool(inner) is not inner:
        twin = copy.copy(tool)
        twin.tool = _direct_tool(inner)
        return twin
    if getattr(tool, "completer", None) is not None:
        twin = copy.copy(tool)
        twin.completer = None
        return twin
    return tool


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send whatever is written to file descriptor 1 (Python or C: a model loader's messages) to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
