"""``venus-edge serve``: the research server (``venus_edge.server.app``) on uvicorn, one model loaded once; and
``venus-edge mcp``: the MCP server (``venus_edge.server.mcp``).

    venus-edge serve --model M.gguf [--corpus DIR] [--web] [--host 127.0.0.1] [--port 8765] [--api-key KEY]
                     [--cors-origin URL] [--max-queue N] [--slots N] [--journal FILE]
                     [--header-timeout S] [--body-timeout S] [--keep-alive S]
    venus-edge mcp --model M.gguf [--corpus DIR] [--transport stdio|http] [--host 127.0.0.1] [--port 8766]
                   [--journal FILE] [--max-queue N]

Loopback only by default: binding any other address needs ``--api-key`` (clients send it as a bearer token).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from venus_edge.flags import add_session_arguments, check_key_text, check_session_arguments, size_argument
from venus_edge.server.defaults import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEP_ALIVE_S,
    default_journal_path,
    is_loopback,
)
from venus_edge.session import SessionSettings, open_session

__all__ = ["add_commands", "run"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and ``mcp`` (their parsers import nothing heavy)."""
    serve = commands.add_parser("serve", help="serve research over HTTP: SSE, OpenAI-compatible chat, a web page")
    add_session_arguments(serve, engine_key_flag="--engine-api-key")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1; any other needs --api-key)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    serve.add_argument("--api-key", dest="server_api_key", default=os.environ.get("VENUS_EDGE_SERVER_KEY"),
                       metavar="KEY", help="clients must send 'Authorization: Bearer KEY' (default "
                                           "$VENUS_EDGE_SERVER_KEY; required off loopback)")
    serve.add_argument("--cors-origin", action="append", default=[], metavar="URL",
                       help="allow cross-origin requests from this origin (repeatable; default none)")
    serve.add_argument("--max-queue", type=int, default=8, metavar="N",
                       help="sessions that may wait for the model; more get 429 (default 8)")
    serve.add_argument("--slots", type=int, default=1, metavar="N",
                       help="sessions decoding at once: above 1, one llama.cpp batch of N sequences, or N "
                            "concurrent requests with --engine openai (default 1)")
    serve.add_argument("--journal", type=Path, default=None, metavar="FILE",
                       help=f"the sessions' journal (default {default_journal_path()})")
    serve.add_argument("--max-body", type=size_argument, default=64 * 1024, metavar="SIZE",
                       help="largest request body (default 64K)")
    serve.add_argument("--max-question-chars", type=int, default=4_000, metavar="N",
                       help="longest question in characters (default 4000)")
    serve.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S, metavar="S",
                       help="seconds a client has to send a request's headers, from connecting (or from its next "
                            f"request's first byte); then 408 and the connection is closed (default "
                            f"{DEFAULT_HEADER_TIMEOUT_S:g})")
    serve.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT_S, metavar="S",
                       help="seconds a client has to send a request's whole body; then 408 and the connection is "
                            f"closed (default {DEFAULT_BODY_TIMEOUT_S:g})")
    serve.add_argument("--keep-alive", type=float, default=DEFAULT_KEEP_ALIVE_S, metavar="S",
                       help="seconds an idle connection stays open after a response, in whole seconds (default "
                            f"{DEFAULT_KEEP_ALIVE_S:g})")

    mcp = commands.add_parser("mcp", help="serve research, search and visit to MCP clients (stdio or streamable HTTP)")
    add_session_arguments(mcp, engine_key_flag="--engine-api-key")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio: the client starts this process (default); http: streamable HTTP at /mcp")
    mcp.add_argument("--host", default="127.0.0.1",
                     help="with --transport http: a loopback address (default 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=8766, help="with --transport http: the port (default 8766)")
    mcp.add_argument("--journal", type=Path, default=None, metavar="FILE",
                     help=f"the sessions' journal (default {default_journal_path()})")
    mcp.add_argument("--max-queue", type=int, default=8, metavar="N",
                     help="research sessions that may wait for the model; more are refused (default 8)")


def _loopback_hosts(host: str) -> list[str] | None:
    """The Host headers a server bound to ``host`` answers: loopback names and ``host`` itself; None (any) off
    loopback, where the API key guards it."""
    from venus_edge.server.app import LOOPBACK_HOSTS

    if not is_loopback(host):
        return None
    bare = host.strip("[]")
    return [*LOOPBACK_HOSTS, bare, f"[{bare}]"]


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``venus-edge serve`` (or ``mcp``: ``venus_edge.server.mcp.run_mcp``): load the model and tools, serve until
    interrupted; the exit code."""
    if args.command == "mcp":
        return _run_mcp(args, parser)
    import uvicorn

    from venus_edge.server.app import create_app
    from venus_edge.server.service import ResearchService
    from venus_edge.server.timeouts import uvicorn_options

    if not is_loopback(args.host) and not args.server_api_key:
        parser.error(f"--host {args.host} can be reached from other machines: give --api-key KEY (or "
                     "$VENUS_EDGE_SERVER_KEY) so that only your clients can use the model")
    check_session_arguments(args, parser)
    check_key_text(args.server_api_key, "the server's key (--api-key or $VENUS_EDGE_SERVER_KEY)", parser)
    if args.slots < 1 or args.max_queue < 0:
        parser.error("--slots must be at least 1 and --max-queue at least 0")
    if min(args.header_timeout, args.body_timeout, args.keep_alive) <= 0:
        parser.error(f"--header-timeout, --body-timeout and --keep-alive must be > 0 seconds, got "
                     f"{args.header_timeout:g}, {args.body_timeout:g} and {args.keep_alive:g}")
    journal = args.journal or default_journal_path()
    with open_session(SessionSettings.from_args(args), samples=args.slots) as session:
        engines: list[Any] = session.parallel_engines(args.slots)
        service = ResearchService(engines, session.tools, session.config, journal_path=journal,
                                  max_queue=args.max_queue, max_question_chars=args.max_question_chars)
        app = create_app(service, api_key=args.server_api_key, cors_origins=args.cors_origin,
                         max_body_bytes=args.max_body, allowed_hosts=_loopback_hosts(args.host),
                         body_timeout_s=args.body_timeout)
        access = "API key required" if args.server_api_key else "loopback only, no API key"
        print(f"venus-edge serve: http://{args.host}:{args.port}/ ({access}; {len(engines)} session(s) at once, "
              f"{args.max_queue} may wait; journal {journal})", file=sys.stderr, flush=True)
        try:
            uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                        **uvicorn_options(header_timeout_s=args.header_timeout, keep_alive_s=args.keep_alive))
        finally:
            service.close()
    return 0


def _run_mcp(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``venus-edge mcp``: serve MCP on ``args.transport`` (``venus_edge.server.mcp.run_mcp``); the exit code.

    Refuses (``parser.error``, exit code 2) bad session flags, ``--max-queue`` below 0 and, with
    ``--transport http``, a ``--host`` other machines can reach.
    """
    from venus_edge.server.mcp import run_mcp

    if args.transport == "http" and not is_loopback(args.host):
        parser.error(f"--host {args.host} can be reached from other machines; venus-edge mcp serves loopback only "
                     "(127.0.0.1, ::1, localhost): use venus-edge serve --api-key KEY to serve other machines")
    check_session_arguments(args, parser)
    if args.max_queue < 0:
        parser.error("--max-queue must be at least 0")
    return run_mcp(SessionSettings.from_args(args), transport=args.transport, host=args.host, port=args.port,
                   journal_path=args.journal or default_journal_path(), max_queue=args.max_queue)
