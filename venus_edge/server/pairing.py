"""Pairing a phone with ``venus-edge serve --lan``: the machine's LAN address, one-time pairing tokens, and the QR
code of the pairing link.

The server makes an API key (or takes ``--server-api-key``) and never prints it. It prints a QR code of
``http://ADDR:PORT/pair#token=T`` instead: the phone's camera opens the link, the pairing page posts ``T`` to
``POST /pair``, and the server answers with the key as an HttpOnly, SameSite=Strict cookie that then authorizes
the page's API calls, as a key typed into the page does. A token works once and for ``ttl_s`` seconds; a new one
is printed on request (Enter in the server's terminal).

Departures from the request that asked for it (issue 28):

1. The token travels in the link's fragment (``#token=``), not its query (``?token=``): a browser never sends a
   fragment, so the token is in no request line, access log, proxy log or ``Referer``; the page reads it and
   posts it.
2. The page exchanges the token with a POST, never a GET: a link previewer or prefetcher that opens the link
   cannot spend it.

This module loads nothing heavy (``segno`` is imported to draw a code), so that the command line parser may import
it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TextIO

from venus_edge.session import SetupError

__all__ = ["DEFAULT_PAIRING_TTL_S", "PairingTokens", "Redemption", "lan_address", "make_api_key", "pairing_url",
           "print_pairing_code"]

logger = logging.getLogger(__name__)

#: Seconds a pairing token stays valid after it is printed (``serve --pairing-ttl``).
DEFAULT_PAIRING_TTL_S = 300.0
#: Where ``lan_address`` asks the routing table to send a packet (TEST-NET-3, RFC 5737): a UDP ``connect`` only
#: picks the route and the source address, and sends nothing, so the address need not answer.
ROUTE_PROBE = "203.0.113.1"
#: Tokens remembered (the newest), so that a used or expired one is told apart from a wrong one.
MAX_REMEMBERED_TOKENS = 64

#: The outcome of ``PairingTokens.redeem``.
Redemption = Literal["paired", "wrong", "used", "expired"]


def make_api_key() -> str:
    """A fresh API key for ``serve --lan`` without ``--server-api-key``: 256 random bits, URL-safe text."""
    return secrets.token_urlsafe(32)


def lan_address(route_probe: str = ROUTE_PROBE) -> str:
    """The IPv4 address of this machine on the interface of its default route (the one a phone on the same Wi-Fi
    reaches): the source address the routing table picks for ``route_probe``. Nothing is sent.

    Raises:
        SetupError: no default route (no network), or only a loopback or link-local address; the message names
            ``--host`` to give the address by hand.
    """
    fix = "connect this machine to the phone's network, or give the address with --host ADDR"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((route_probe, 9))
            address = str(probe.getsockname()[0])
        except OSError as exc:
            raise SetupError(f"--lan: this machine has no route to a network ({exc.strerror or exc}); {fix}") \
                from None
    parsed = ipaddress.ip_address(address)
    if parsed.is_loopback or parsed.is_unspecified or parsed.is_link_local:
        raise SetupError(f"--lan: this machine has no LAN address (its default route leaves from {address}); {fix}")
    return address


def pairing_url(host: str, port: int, token: str) -> str:
    """The link a phone opens to pair: ``http://HOST:PORT/pair#token=TOKEN`` (IPv6 hosts in brackets)."""
    bare = host.strip("[]")
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}/pair#token={token}"


def print_pairing_code(url: str, stream: TextIO, *, ttl_s: float) -> None:
    """Print ``url`` as a QR code for a phone's camera (``segno``, drawn with text blocks) and as text.

    Raises:
        SetupError: ``segno`` is not installed; the message names the extra that installs it.
    """
    try:
        import segno
    except ImportError:
        raise SetupError("--lan draws its pairing QR code with segno: pip install 'venus-edge[server]'") from None
    stream.write(f"\nScan to pair a phone (the link works once, for {ttl_s:g} s):\n")
    segno.make(url, error="m").terminal(out=stream, compact=True)
    stream.write(f"or open {url}\n\n")
    stream.flush()


@dataclass
class _Issued:
    digest: bytes  # SHA-256 of the token: what is kept and compared
    issued_at: float
    used_at: float | None = None


class PairingTokens:
    """One-time pairing tokens: each one redeems once, within ``ttl_s`` seconds of ``issue``.

    ``clock`` gives seconds (``time.monotonic``; a test passes its own). Tokens are compared in constant time
    against every remembered one, so that the time of a refusal says nothing about a token.

    Raises:
        ValueError: ``ttl_s`` is not positive.
    """

    def __init__(self, ttl_s: float = DEFAULT_PAIRING_TTL_S, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not ttl_s > 0:
            raise ValueError(f"a pairing token must live > 0 s, got {ttl_s}")
        self.ttl_s, self.clock = ttl_s, clock
        self._issued: list[_Issued] = []
        self._lock = threading.Lock()  # the server redeems on its loop; the terminal issues from its thread

    def issue(self) -> str:
        """A new token (URL-safe text, 192 random bits)."""
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._issued.append(_Issued(_digest(token), self.clock()))
            del self._issued[:-MAX_REMEMBERED_TOKENS]
        return token

    def redeem(self, token: str) -> Redemption:
        """Spend ``token``: ``"paired"`` the first time within its lifetime, else why not (``"used"``,
        ``"expired"``, ``"wrong"``: not a token this server issued, or one forgotten)."""
        given = _digest(token)
        now = self.clock()
        with self._lock:
            found: _Issued | None = None
            for issued in self._issued:  # every one, without stopping at a match
                if hmac.compare_digest(issued.digest, given):
                    found = issued
            if found is None:
                return "wrong"
            if found.used_at is not None:
                return "used"
            if now - found.issued_at > self.ttl_s:
                return "expired"
            found.used_at = now
            return "paired"

    def refusal(self, outcome: Redemption) -> str:
        """What the pairing page shows for a refused token; never the token."""
        again = "press Enter in the terminal where venus-edge serve --lan runs (or start it again) for a new code"
        if outcome == "used":
            return f"This pairing code was used already: each code pairs one device, once. To pair this one, {again}."
        if outcome == "expired":
            return f"This pairing code has expired (codes last {self.ttl_s:g} s). {again[0].upper()}{again[1:]}."
        return (f"This is not a pairing code of this server (a link cut short, or from an earlier run of the "
                f"server). Scan the code the server shows now, or {again}.")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
