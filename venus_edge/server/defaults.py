"""What ``serve`` and ``mcp`` share before any server loads (the command line parser reads it, so it stays light):
the loopback rule that decides whether an API key is needed, the journal's default path, and the HTTP timeouts'
defaults.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = ["default_journal_path", "is_loopback"]

LOOPBACK_NAMES = {"localhost", "ip6-localhost"}
#: Seconds a client has to send a request's headers (``venus_edge.server.timeouts``; ``serve --header-timeout``).
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Seconds a client has to send a request's whole body (``create_app``; ``serve --body-timeout``).
DEFAULT_BODY_TIMEOUT_S = 30.0
#: Seconds an idle keep-alive connection stays open after a response (uvicorn's default; ``serve --keep-alive``).
DEFAULT_KEEP_ALIVE_S = 5.0
#: Connections open at once; the next is answered 503 and closed at once (``serve --max-connections``). Each open
#: one held ~80 KB, and enough of them ran the process out of file descriptors.
DEFAULT_MAX_CONNECTIONS = 256


def default_journal_path() -> Path:
    """``$XDG_DATA_HOME/venus-edge/server/journal.jsonl`` (default ``~/.local/share/...``)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "venus-edge" / "server" / "journal.jsonl"


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
