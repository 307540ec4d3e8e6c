"""What ``serve`` and ``mcp`` share before any server loads (the command line parser reads it, so it stays light):
the loopback rule that decides whether an API key is needed, and the journal's default path.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = ["default_journal_path", "is_loopback"]

LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


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
