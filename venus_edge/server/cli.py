"""``venus-edge serve``: the research server (``venus_edge.server.app``) on uvicorn, one model loaded once; and
``venus-edge mcp``: the MCP server (``venus_edge.server.mcp``).

    venus-edge serve --model M.gguf [--corpus DIR] [--web] [--host 127.0.0.1] [--port 8765] [--server-api-key KEY]
                     [--cors-origin URL] [--max-queue N] [--slots N] [--journal FILE]
                     [--header-timeout S] [--body-timeout S] [--keep-alive S] [--max-connections N]
    venus-edge mcp --model M.gguf [--corpus DIR] [--transport stdio|http] [--host 127.0.0.1] [--port 8766]
                   [--journal FILE] [--max-queue N]

Loopback only by default: binding any other address needs ``--server-api-key`` (clients send it as a bearer token).
``serve --lan`` binds the machine's LAN address, makes a key if none is given, and prints a QR code of a one-time
pairing link for a phone (``venus_edge.server.pairing``).
``--engine-api-key`` is the key of the model server behind ``--engine openai``, as in ``research`` and ``eval``.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus_edge.flags import (
    add_deprecated_alias,
    add_pace_arguments,
    add_session_arguments,
    check_key_text,
    check_output_file,
    check_session_arguments,
    count_argument,
    pace_config,
    size_argument,
)
from venus_edge.server.defaults import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_MAX_CONNECTIONS,
    default_journal_path,
    is_loopback,
)
from venus_edge.server.pairing import (
    DEFAULT_PAIRING_TTL_S,
    PairingTokens,
    lan_address,
    make_api_key,
    pairing_url,
    print_pairing_code,
)
from venus_edge.session import SessionSettings, SetupError, open_session

if TYPE_CHECKING:
    from venus_edge.server.service import ResearchService

__all__ = ["add_commands", "run"]


_SERVE_DESCRIPTION = """\
Load the model once and serve research over HTTP: POST /v1/research (JSON, or SSE events as they happen), OpenAI-
compatible /v1/chat/completions, the sessions at /v1/sessions, and a research page at /. Every session is journaled
to --journal (JSONL). Loopback only, unless --server-api-key is given.

examples:
  venus-edge serve --model M.gguf --corpus docs/ --port 8765      # then open http://127.0.0.1:8765/
  venus-edge serve --model M.gguf --corpus docs/ --lan            # then scan the QR code with a phone
  venus-edge serve --model M.gguf --corpus docs/ --pace           # on a phone: slower when hot, stops on low battery
"""


_MCP_DESCRIPTION = """\
Serve the research agent and its search and visit tools to MCP clients (Claude Desktop, the MCP Inspector): over
stdio, where the client starts this command, or streamable HTTP at /mcp. Research sessions are journaled to
--journal (JSONL); nothing is written on stdout but the protocol.

examples:
  venus-edge mcp --model M.gguf --corpus docs/                    # as the command in the client's config
  venus-edge mcp --model M.gguf --corpus docs/ --transport http    # then http://127.0.0.1:8766/mcp
"""


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and ``mcp`` (their parsers import nothing heavy)."""
    serve = commands.add_parser("serve", help="serve research over HTTP: SSE, OpenAI-compatible chat, a web page",
                                description=_SERVE_DESCRIPTION)
    add_session_arguments(serve, old_api_key=False)
    add_pace_arguments(serve)
    serve.add_argument("--host", default=None,
                       help="address to bind (default 127.0.0.1, or with --lan the LAN address; any other than "
                            "loopback needs --server-api-key or --lan)")
    serve.add_argument("--lan", action="store_true",
                       help="serve the phones and laptops of this network: bind the address of the default route's "
                            "interface (or --host), make a key unless --server-api-key gives one, and print a QR "
                            "code of a one-time pairing link (Enter prints a new one)")
    serve.add_argument("--pairing-ttl", type=float, default=DEFAULT_PAIRING_TTL_S, metavar="S",
                       help=f"with --lan: seconds a pairing link works, once (default {DEFAULT_PAIRING_TTL_S:g})")
    serve.add_argument("--port", type=_port_argument(0), default=8765, help="port (default 8765; 0: any free port)")
    serve.add_argument("--server-api-key", dest="server_api_key", default=os.environ.get("VENUS_EDGE_SERVER_KEY"),
                       metavar="KEY", help="this server's own key: clients must send 'Authorization: Bearer KEY' "
                                           "(default $VENUS_EDGE_SERVER_KEY; required off loopback)")
    add_deprecated_alias(serve, "--api-key", "--server-api-key")
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
    serve.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                       help="connections open at once; the next one is answered 503 and closed as it opens "
                            f"(default {DEFAULT_MAX_CONNECTIONS})")

    mcp = commands.add_parser("mcp", help="serve research, search and visit to MCP clients (stdio or streamable HTTP)",
                              description=_MCP_DESCRIPTION)
    add_session_arguments(mcp, old_api_key=False)
    add_pace_arguments(mcp)
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio: the client starts this process (default); http: streamable HTTP at /mcp")
    mcp.add_argument("--host", default="127.0.0.1",
                     help="with --transport http: a loopback address (default 127.0.0.1)")
    mcp.add_argument("--port", type=_port_argument(1), default=8766,
                     help="with --transport http: the port (default 8766)")
    mcp.add_argument("--journal", type=Path, default=None, metavar="FILE",
                     help=f"the sessions' journal (default {default_journal_path()})")
    mcp.add_argument("--max-queue", type=int, default=8, metavar="N",
                     help="research sessions that may wait for the model; more are refused (default 8)")


def _port_argument(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for a TCP port from ``minimum`` (0: the system picks a free one) to 65535."""
    count = count_argument(minimum)

    def port(text: str) -> int:
        value = count(text)
        if value > 65_535:
            raise argparse.ArgumentTypeError(f"a TCP port is at most 65535, got {value}")
        return value

    port.__name__ = "port"
    return port


def _listening_socket(host: str, port: int, *, keep: bool = True) -> socket.socket | None:
    """Bind ``host``:``port`` before the model loads, so that a port in use is one line naming ``--port``, not a
    traceback after the banner. ``keep``: return the bound socket for the server to listen on (no other process
    can take the port meanwhile); else close it (the server binds again itself: ``mcp``).

    Raises:
        SetupError: the port is in use, or the address cannot be bound; the message names the fix.
    """
    bare = host.strip("[]")
    sock: socket.socket | None = None
    try:
        family = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a just-closed server's port is free
        sock.bind((bare, port))
    except OSError as exc:
        if sock is not None:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            zero = ", or --port 0 for any free one" if keep else ""
            raise SetupError(f"--port {port}: {host}:{port} is already in use by another program (another "
                             f"venus-edge?); stop it or choose another --port{zero}") from None
        raise SetupError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    if not keep:
        sock.close()
        return None
    return sock


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

    if args.host is not None and not is_loopback(args.host) and not args.server_api_key and not args.lan:
        parser.error(f"--host {args.host} can be reached from other machines: give --server-api-key KEY (or "
                     "$VENUS_EDGE_SERVER_KEY) so that only your clients can use the model, or --lan to pair them")
    if args.lan and not args.pairing_ttl > 0:
        parser.error(f"--pairing-ttl must be > 0 seconds, got {args.pairing_ttl:g}")
    check_session_arguments(args, parser)
    check_key_text(args.server_api_key, "the server's key (--server-api-key or $VENUS_EDGE_SERVER_KEY)", parser)
    host = args.host or (lan_address() if args.lan else "127.0.0.1")
    api_key: str | None = args.server_api_key or (make_api_key() if args.lan else None)  # never printed
    pairing = PairingTokens(args.pairing_ttl) if args.lan else None
    if args.slots < 1 or args.max_queue < 0:
        parser.error("--slots must be at least 1 and --max-queue at least 0")
    if min(args.header_timeout, args.body_timeout, args.keep_alive) <= 0:
        parser.error(f"--header-timeout, --body-timeout and --keep-alive must be > 0 seconds, got "
                     f"{args.header_timeout:g}, {args.body_timeout:g} and {args.keep_alive:g}")
    if args.max_connections < 1:
        parser.error(f"--max-connections must be at least 1, got {args.max_connections}")
    settings = replace(SessionSettings.from_args(args), pace=pace_config(args, parser))
    journal = args.journal or default_journal_path()
    check_output_file(journal, "--journal", parser)
    _descriptors_for(args.max_connections)
    listening = _listening_socket(host, args.port)
    assert listening is not None
    with listening, open_session(settings, samples=args.slots) as session:
        engines: list[Any] = session.parallel_engines(args.slots)
        service = ResearchService(engines, session.tools, session.config, journal_path=journal,
                                  max_queue=args.max_queue, max_question_chars=args.max_question_chars,
                                  pace=settings.pace)
        app = create_app(service, api_key=api_key, cors_origins=args.cors_origin,
                         max_body_bytes=args.max_body, allowed_hosts=_loopback_hosts(host),
                         body_timeout_s=args.body_timeout, pairing=pairing)
        access = ("API key required; pair a device with the code below" if pairing else "API key required"
                  if api_key else "loopback only, no API key")
        port = listening.getsockname()[1]  # the one chosen for --port 0
        print(f"venus-edge serve: http://{host}:{port}/ ({access}; {len(engines)} session(s) at once, "
              f"{args.max_queue} may wait; journal {journal})", file=sys.stderr, flush=True)
        if pairing is not None:
            _offer_pairing_codes(pairing, _reachable_host(host), port)
        try:
            server = _closing_server(uvicorn.Config(app, log_level="warning", **uvicorn_options(
                header_timeout_s=args.header_timeout, keep_alive_s=args.keep_alive,
                max_connections=args.max_connections)), service)
            server.run(sockets=[listening])
        finally:
            service.close()
    return 0


def _closing_server(config: Any, service: ResearchService) -> Any:
    """A ``uvicorn.Server`` that, as it starts to shut down (Ctrl-C, SIGTERM), stops accepting and closes
    ``service`` before it waits for the open connections: each running session is interrupted (resumable; its
    client's stream ends with ``session_finished``, termination ``interrupted``), so the wait ends. uvicorn alone
    waits for every open research stream to end first, and the service was closed only after it.

    sse-starlette's own drain is turned off for this process: it cut every event stream at the signal, before the
    service was closed, so a client missed its ``session_finished`` and a stream's end cancelled its session
    (``cancelled``, not resumable) first. The streams still open once the service is closed (followers of ended
    sessions) are drained then. A second Ctrl-C stops the wait for the service, as uvicorn's own wait."""
    import asyncio

    import uvicorn
    from sse_starlette.sse import AppStatus

    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]

    class ClosingServer(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            for listening in self.servers:
                listening.close()
            closing = asyncio.ensure_future(asyncio.to_thread(service.close))  # its workers publish the last events
            while not closing.done() and not self.force_exit:
                await asyncio.sleep(0.05)
            AppStatus.should_exit = True
            await super().shutdown(sockets=sockets)

    return ClosingServer(config)


#: File descriptors the process needs besides its connections: the model, the journal, the corpus, logs, pipes.
_OTHER_DESCRIPTORS = 256


def _descriptors_for(max_connections: int) -> None:
    """Raise the soft limit on open files (up to the hard one) so that ``max_connections`` fit beside what the
    process opens itself; say so on stderr when the hard limit is too low."""
    import resource

    needed = max_connections + _OTHER_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < needed:
        fits = max(1, target - _OTHER_DESCRIPTORS)
        print(f"venus-edge serve: warning: {max_connections} connections need about {needed} open files, and this "
              f"process may open {target} (ulimit -n); lower --max-connections to {fits} or raise the limit",
              file=sys.stderr, flush=True)


def _reachable_host(host: str) -> str:
    """The address a phone opens for a server bound to ``host``: the LAN address for a wildcard bind."""
    return lan_address() if host.strip("[]") in ("0.0.0.0", "::", "") else host


def _offer_pairing_codes(pairing: PairingTokens, host: str, port: int) -> None:
    """Print a pairing code on stderr, and from a terminal a new one on each Enter (for the next device, or after
    one expired)."""
    def show() -> None:
        print_pairing_code(pairing_url(host, port, pairing.issue()), sys.stderr, ttl_s=pairing.ttl_s)

    show()
    if not sys.stdin.isatty():
        return
    print("Press Enter here for a new code (another device, or one that expired).", file=sys.stderr, flush=True)

    def on_enter() -> None:
        for _ in sys.stdin:
            show()

    threading.Thread(target=on_enter, name="pairing-codes", daemon=True).start()


def _run_mcp(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``venus-edge mcp``: serve MCP on ``args.transport`` (``venus_edge.server.mcp.run_mcp``); the exit code.

    Refuses (``parser.error``, exit code 2) bad session flags, ``--max-queue`` below 0 and, with
    ``--transport http``, a ``--host`` other machines can reach.
    """
    from venus_edge.server.mcp import run_mcp

    if args.transport == "http" and not is_loopback(args.host):
        parser.error(f"--host {args.host} can be reached from other machines; venus-edge mcp serves loopback only "
                     "(127.0.0.1, ::1, localhost): use venus-edge serve --server-api-key KEY to serve other "
                     "machines")
    check_session_arguments(args, parser)
    if args.max_queue < 0:
        parser.error("--max-queue must be at least 0")
    check_output_file(args.journal or default_journal_path(), "--journal", parser)
    settings = replace(SessionSettings.from_args(args), pace=pace_config(args, parser))
    if args.transport == "http":
        _listening_socket(args.host, args.port, keep=False)
    return run_mcp(settings, transport=args.transport, host=args.host, port=args.port,
                   journal_path=args.journal or default_journal_path(), max_queue=args.max_queue)
