"""Serving the agent to apps: ``ResearchService`` (sessions over one model), ``create_app`` (FastAPI: SSE
research, OpenAI-compatible chat, the research page), ``uvicorn_options`` (the HTTP server's header and keep-alive
timeouts), the MCP server (``venus_edge.server.mcp``), the page as an installable web app
(``venus_edge.server.webapp``) and the pairing of phones with ``serve --lan`` (``venus_edge.server.pairing``).

Needs the ``server`` extra (``pip install 'venus-edge[server]'``). ``venus-edge serve`` and ``venus-edge mcp``
start them from the command line (``venus_edge.server.cli``). Names load on first use, so that the command line
parser does not import FastAPI.
"""

from __future__ import annotations

from typing import Any

from venus_edge.lazy import LazyExports

_EXPORTS = LazyExports(__name__, {
    "app": ("create_app",),
    "defaults": ("default_journal_path", "is_loopback"),
    "mcp": ("ResearchOutput", "argument_problems", "create_mcp_server", "run_mcp"),
    "pairing": ("DEFAULT_PAIRING_TTL_S", "PairingTokens", "Redemption", "lan_address", "make_api_key", "pairing_url",
                "print_pairing_code"),
    "service": ("QuestionTooLongError", "QueueFullError", "ResearchService", "SessionHandle", "SessionRequest",
                "answer_with_sources"),
    "timeouts": ("uvicorn_options",),
    "webapp": ("ICON_SIZES", "SHELL_PATHS", "icon_png", "icon_svg", "manifest", "service_worker_js"),
})


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
