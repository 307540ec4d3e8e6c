"""Timeouts of the HTTP server below the app: a connection must finish sending a request's headers within
``header_timeout_s`` of opening (or of sending more after a response), so that a client that connects and sends
nothing, or drips its headers a byte at a time (slow loris), does not hold a connection forever. uvicorn has no
such timeout: its ``timeout_keep_alive`` covers an idle connection after a response only, and the app never sees a
request whose headers are not complete. The request body has its own timeout in the app (``create_app``'s
``body_timeout_s``). And a cap on the connections open at once (``max_connections``): the one over it is answered
``503 Service Unavailable`` and closed as it opens, before anything is read. Without it, 9,000 connections that
each stalled in a 64 KB body held ~80 KB apiece (RSS 496 -> 969 MB), and ~20,000 idle ones ran the process out of
file descriptors (``accept()`` failed with EMFILE and asyncio logged a traceback per failure, 7 MB in 30 s).
uvicorn's ``limit_concurrency`` answers 503 only once a request's headers are in, after the connection was held.

    uvicorn.run(app, **uvicorn_options(header_timeout_s=10.0, keep_alive_s=5.0, max_connections=256))

The protocol is uvicorn's h11 one (``uvicorn.protocols.http.h11_impl.H11Protocol``) with a timer: armed when the
connection opens and when bytes of a next request arrive, cancelled when the request's headers are complete; at
expiry the server answers ``408 Request Timeout`` and closes the connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from venus_edge.server.defaults import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_KEEP_ALIVE_S, DEFAULT_MAX_CONNECTIONS

__all__ = ["uvicorn_options"]


def uvicorn_options(*, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S, keep_alive_s: float = DEFAULT_KEEP_ALIVE_S,
                    max_connections: int = DEFAULT_MAX_CONNECTIONS) -> dict[str, Any]:
    """The ``uvicorn.run`` / ``uvicorn.Config`` keywords for these limits (seconds; connections): the h11 protocol
    with a header timeout and the connection cap (``http=``) and the idle keep-alive timeout
    (``timeout_keep_alive=``; uvicorn takes whole seconds, rounded up here).

    Raises:
        ValueError: a timeout that is not positive, or a cap below 1.
    """
    if not header_timeout_s > 0 or not keep_alive_s > 0:
        raise ValueError(f"timeouts must be > 0 s, got header {header_timeout_s}, keep-alive {keep_alive_s}")
    if max_connections < 1:
        raise ValueError(f"max_connections must be at least 1, got {max_connections}")
    protocol = type("HeaderTimeoutH11Protocol", (_HeaderTimeoutH11Protocol,),
                    {"header_timeout_s": header_timeout_s, "max_connections": max_connections})
    return {"http": protocol, "timeout_keep_alive": max(1, int(-(-keep_alive_s // 1)))}


def _raw_response(status: bytes, body: bytes, headers: bytes = b"") -> bytes:
    """A whole plain-text response that closes the connection, as raw bytes: h11 sends none before it has read a
    request."""
    return (b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n%scontent-length: %d"
            b"\r\n\r\n%s" % (status, headers, len(body), body))


_FULL_RESPONSE = _raw_response(b"503 Service Unavailable", b"too many connections open; try again\n",
                               b"retry-after: 1\r\n")
_TIMEOUT_RESPONSE = _raw_response(b"408 Request Timeout", b"request headers not received in time\n")


class _HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers (``header_timeout_s``) and a cap on the
    connections open at once (``max_connections``), both set by ``uvicorn_options`` on a subclass."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:  # it counts this one
            transport.write(_FULL_RESPONSE)  # raw bytes, as for the timeout: no request was read
            transport.close()
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_headers():
            if self._header_timer is None and not self.transport.is_closing():
                self._arm_header_timer()  # bytes of a next request: its headers must come in time too
        else:
            self._cancel_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        """No request is being served: the connection is new, or its last response is complete."""
        return self.cycle is None or self.cycle.response_complete

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._on_header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _on_header_timeout(self) -> None:
        self._header_timer = None
        if self._awaiting_headers() and not self.transport.is_closing():
            # Raw bytes: h11 sends no response before it has read a request.
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()
