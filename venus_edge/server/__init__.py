"""Serving the agent to apps: ``ResearchService`` (sessions over one model), ``create_app`` (FastAPI: SSE
research, OpenAI-compatible chat, the research page), ``uvicorn_options`` (the HTTP server's header and keep-alive
timeouts) and the MCP server (``venus_edge.server.mcp``).

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
    "service": ("QuestionTooLongError", "QueueFullError", "ResearchService", "SessionHandle", "SessionRequest",
                "answer_with_sources"),
    "timeouts": ("uvicorn_options",),
})


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
