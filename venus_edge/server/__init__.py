"""Serving the agent to apps: ``ResearchService`` (sessions over one model), ``create_app`` (FastAPI: SSE
research, OpenAI-compatible chat, the research page), ``uvicorn_options`` (the HTTP server's header and keep-alive
timeouts) and the MCP server (``venus_edge.server.mcp``).

Needs the ``server`` extra (``pip install 'venus-edge[server]'``). ``venus-edge serve`` and ``venus-edge mcp``
start them from the command line (``venus_edge.server.cli``). Names load on first use, so that the command line
parser does not import FastAPI.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["QuestionTooLongError", "QueueFullError", "ResearchOutput", "ResearchService", "SessionHandle",
           "SessionRequest", "answer_with_sources", "create_app", "create_mcp_server", "default_journal_path",
           "is_loopback", "run_mcp", "uvicorn_options"]

_HOMES = {"create_app": "venus_edge.server.app", "QueueFullError": "venus_edge.server.service",
          "QuestionTooLongError": "venus_edge.server.service",
          "answer_with_sources": "venus_edge.server.service",
          "ResearchService": "venus_edge.server.service", "SessionHandle": "venus_edge.server.service",
          "SessionRequest": "venus_edge.server.service", "ResearchOutput": "venus_edge.server.mcp",
          "create_mcp_server": "venus_edge.server.mcp", "run_mcp": "venus_edge.server.mcp",
          "default_journal_path": "venus_edge.server.defaults", "is_loopback": "venus_edge.server.defaults",
          "uvicorn_options": "venus_edge.server.timeouts"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'venus_edge.server' has no attribute {name!r}")
