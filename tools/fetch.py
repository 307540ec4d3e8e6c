"""Fetching one web page for ``visit``: address policy, manual redirects, time and size limits.

Every hop of a redirect chain is checked before it is requested: only ``http``/``https``; the host is
resolved and refused when any of its addresses is not globally routable (loopback, private, link-local, which
includes the cloud metadata address 169.254.169.254, carrier-grade NAT, multicast, reserved), unless
``allow_private=True`` (every address allowed) or the address lies in one of ``allowed_networks`` (CIDR strings
such as ``"127.0.0.1/32"`` or ``"10.20.0.0/16"``: an intranet, or the tests' server on loopback).

The check is made again where it counts, when the connection opens: ``checked_transport`` is an httpx transport
whose httpcore network backend resolves the host with the same resolver, applies the same policy and connects
to the addresses it just checked. A DNS server that answers with a public address for the check and a private
one for the connection (DNS rebinding) is therefore refused, and the connection never uses an address that was
not checked. TLS still verifies the certificate against the host name (httpcore sends it as SNI). ``visit``
builds its client on this transport. Requests that go through a proxy from the environment (``proxy_mounts``)
are resolved and connected by the proxy, so only the per-hop check applies to them. A client passed in by the
caller keeps its own transport (and the per-hop check).

Failures raise ``FetchError`` (``tools.errors``) with a ``kind`` that ``visit`` turns into a ``ToolFailure``::

    FetchError.kind
    ├── refused_address      scheme other than http(s), or a non-global address (first hop or a redirect)
    ├── unreachable          bad URL, DNS failure, connection refused or reset
    ├── timeout              connect/read timeout, or the whole fetch past total_timeout_s or the caller's deadline
    ├── cancelled            the caller's deadline was cancelled (checked before each hop and each chunk)
    ├── too_many_redirects   more than max_redirects hops
    ├── blocked              status 401, 403, 407, 429 or 451: the site refuses this client (or throttles it)
    ├── http_error           any other status >= 400 (the status is in the detail)
    ├── too_large            declared or streamed body beyond max_bytes
    └── not_text             a content type or body that is not text (images, binary), or an unreadable PDF

The body's first bytes are read before its declared type is trusted (``sniff``): a body starting with ``%PDF-`` is
a PDF whatever its ``Content-Type`` (``text/html``, ``text/plain``, octet-stream, none, a wrong charset); a body
whose signature is an archive, an image, audio, video, a font or a program is ``not_text`` whatever its type says;
an ``application/octet-stream`` body that opens an HTML document is read as HTML. A PDF (declared as
``application/pdf``, or recognized by its bytes) is read in full within the same limits and returned as its text,
extracted in a child process that is stopped at the fetch's deadline (``pdf.pdf_text_isolated``), with the content
type ``application/pdf``.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx

from venus_edge.tools.base import Deadline
from venus_edge.tools.charset import decode_text
from venus_edge.tools.errors import FetchError, PdfError
from venus_edge.tools.pdf import PDF_CONTENT_TYPES, looks_like_pdf, pdf_text_isolated
from venus_edge.tools.sniff import binary_kind, looks_like_html

__all__ = ["FetchLimits", "FetchedPage", "fetch_page"]

DEFAULT_USER_AGENT = "venus-edge/0.1 (deep-research agent; +https://github.com/inclusionAI/DR-Venus)"
TEXT_CONTENT_TYPES = ("application/xhtml+xml", "application/xml", "application/json", "application/rss+xml")
# Types whose documents may declare their own encoding (<meta charset>, <?xml encoding?>); an untyped body too.
MARKUP_CONTENT_TYPES = ("text/html", "application/xhtml+xml", "application/xml", "text/xml", "application/rss+xml")
_REDIRECT_CODES = (301, 302, 303, 307, 308)
_GZIP_MAGIC = b"\x1f\x8b"
# Only encodings that ``_read_capped`` decompresses under the byte cap.
ACCEPT_ENCODING = "gzip, deflate"
BLOCKED_STATUSES = {
    401: "the site wants a login",
    403: "the site refuses this client",
    407: "the proxy wants a login",
    429: "the site rate-limits this client",
    451: "unavailable for legal reasons",
}
_SNIFF_BYTES = 4096
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# Types whose body is read to learn what it is (a PDF or an HTML document, by its first bytes).
_SNIFFED_TYPES = ("", "application/octet-stream", "binary/octet-stream")

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class FetchLimits:
    """Limits on one page fetch.

    Attributes:
        connect_timeout_s: seconds to open a connection.
        read_timeout_s: seconds to wait for each chunk of the response (headers included).
        total_timeout_s: seconds for the whole fetch, all redirect hops and the body together.
        max_bytes: largest body accepted, in bytes (declared ``Content-Length`` or counted while streaming).
        max_redirects: redirect hops followed before giving up.
    """

    connect_timeout_s: float = 10.0
    read_timeout_s: float = 20.0
    total_timeout_s: float = 60.0
    max_bytes: int = 5_000_000
    max_redirects: int = 5

    def __post_init__(self) -> None:
        for field_name in ("connect_timeout_s", "read_timeout_s", "total_timeout_s", "max_bytes"):
            if getattr(self, field_name) <= 0:
                raise ValueError(f"FetchLimits.{field_name} must be positive, got {getattr(self, field_name)}")
        if self.max_redirects < 0:
            raise ValueError(f"FetchLimits.max_redirects must be >= 0, got {self.max_redirects}")


@dataclass(frozen=True)
class FetchedPage:
    """A fetched text page.

    Attributes:
        url: the final URL after redirects.
        content_type: the media type, lower case, without parameters (``""`` when the server sent none;
            ``application/pdf`` for a PDF, also one recognized by its first bytes).
        text: the body decoded as a browser decodes it (``charset.decode_text``: BOM, header, ``<meta>``,
            detection; undecodable bytes replaced), or the text extracted from a PDF.
    """

    url: str
    content_type: str
    text: str


def resolve_host(host: str, port: int) -> list[str]:
    """All IP addresses of ``host`` (``socket.getaddrinfo``). Raises ``OSError`` when it does not resolve."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})


def is_allowed_address(address: str, allowed_networks: Sequence[str] = ()) -> bool:
    """True for a public address (``is_public_address``) or one inside any of the ``allowed_networks`` (CIDR).

    Raises:
        ValueError: an entry of ``allowed_networks`` that is not a network (``ipaddress.ip_network`` rules).
    """
    if is_public_address(address):
        return True
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return any(ip in ipaddress.ip_network(network, strict=False) for network in allowed_networks)


# IPv6 ranges that carry an IPv4 address in their last 32 bits (RFC 6052 NAT64, RFC 4291 IPv4-compatible,
# RFC 2765 SIIT): a gateway may forward them to that IPv4 address, so they are judged by it.
_IPV4_EMBEDDING = tuple(
    ipaddress.ip_network(net) for net in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96", "::ffff:0:0:0/96")
)


def is_public_address(address: str) -> bool:
    """True for a globally routable unicast address.

    An IPv6 address that embeds an IPv4 one (IPv4-mapped, 6to4, Teredo, NAT64, IPv4-compatible, SIIT) is judged
    by the IPv4 address it leads to as well; site-local ``fec0::/10`` is not public.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local:
            return False
        embedded = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
        embedded += [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) for net in _IPV4_EMBEDDING if ip in net]
        if any(v4 is not None and not is_public_address(str(v4)) for v4 in embedded):
            return False
        if ip.ipv4_mapped is not None:
            return True  # judged by its IPv4 part above
    return ip.is_global and not ip.is_multicast


def check_url(
    url: str, *, allow_private: bool, resolve: Resolver = resolve_host, allowed_networks: Sequence[str] = ()
) -> None:
    """Refuse a URL before requesting it (scheme, then every resolved address).

    Raises:
        FetchError: ``refused_address`` or ``unreachable`` (no host, DNS failure).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        scheme = parts.scheme or "(none)"
        raise FetchError("refused_address", url, f"scheme {scheme!r} is not allowed; use http or https")
    try:
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise FetchError("unreachable", url, f"not a valid URL: {exc}") from None
    if not host:
        raise FetchError("unreachable", url, "the URL has no host")
    if not allow_private:
        checked_addresses(host, port, allow_private=False, resolve=resolve, url=url, allowed_networks=allowed_networks)


def checked_addresses(
    host: str,
    port: int,
    *,
    allow_private: bool,
    resolve: Resolver,
    url: str = "",
    allowed_networks: Sequence[str] = (),
) -> list[str]:
    """The addresses of ``host``, all of them public or in ``allowed_networks`` unless ``allow_private``.

    Raises:
        FetchError: ``unreachable`` when the host does not resolve, ``refused_address`` when an address is not
            public (or none is returned); ``url`` (default ``host``) names the target in the error.
    """
    url = url or host
    try:
        addresses = resolve(host, port)
    except OSError as exc:
        raise FetchError("unreachable", url, f"cannot resolve host {host!r}: {exc}") from None
    refused = [address for address in addresses if not is_allowed_address(address, allowed_networks)]
    if not addresses or (refused and not allow_private):
        raise FetchError(
            "refused_address", url, f"host {host!r} resolves to non-public address(es) {', '.join(refused)}"
        )
    return addresses


class _CheckedNetworkBackend(httpcore.NetworkBackend):
    """An httpcore network backend that resolves, checks, then connects to exactly the checked addresses."""

    def __init__(self, *, allow_private: bool, resolve: Resolver, allowed_networks: Sequence[str]) -> None:
        self._allow_private = allow_private
        self._resolve = resolve
        self._allowed_networks = tuple(allowed_networks)
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = checked_addresses(
            host,
            port,
            allow_private=self._allow_private,
            resolve=self._resolve,
            allowed_networks=self._allowed_networks,
        )
        error: Exception | None = None
        for address in addresses:  # the first that accepts, as a resolver-driven client would
            try:
                return self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None  # checked_addresses never returns an empty list
        raise error

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed for page fetches")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def proxy_mounts() -> dict[str, httpx.BaseTransport | None]:
    """httpx ``mounts`` for the environment's proxies (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``): a proxy
    transport per proxied scheme, and ``None`` (the client's own transport) for each ``NO_PROXY`` host. Requests
    that no proxy carries stay on the client's transport, so with ``checked_transport`` they keep the connect-time
    address check.
    """
    proxies = urllib.request.getproxies()
    mounts: dict[str, httpx.BaseTransport | None] = {}
    for scheme in ("http", "https"):
        if proxy := proxies.get(scheme) or proxies.get("all"):
            mounts[f"{scheme}://"] = httpx.HTTPTransport(proxy=proxy)
    for host in filter(None, (h.strip() for h in proxies.get("no", "").split(","))):
        if host == "*":
            return {}
        pattern = host if "://" in host else f"all://*{host}" if host.startswith(".") else f"all://{host}"
        mounts[pattern] = None
        if "://" not in host and not host.startswith("."):
            mounts[f"all://*.{host}"] = None  # a domain covers its subdomains, as curl does
    return mounts


def checked_transport(
    *,
    allow_private: bool = False,
    resolve: Resolver = resolve_host,
    verify: ssl.SSLContext | None = None,
    allowed_networks: Sequence[str] = (),
) -> httpx.HTTPTransport:
    """An ``httpx.HTTPTransport`` whose connections go only to addresses resolved and checked at connect time.

    Use it as ``httpx.Client(transport=checked_transport())``. ``verify`` is the TLS context that checks
    server certificates; default ``httpx.create_ssl_context()`` (certifi's bundle, as httpx does). A refused
    connection raises ``FetchError`` out of the request.
    """
    transport = httpx.HTTPTransport()
    # httpx has no public hook for the network backend; its pool is rebuilt with ours (httpx's defaults).
    transport._pool = httpcore.ConnectionPool(
        ssl_context=verify or httpx.create_ssl_context(),
        max_connections=httpx.Limits().max_connections,
        max_keepalive_connections=httpx.Limits().max_keepalive_connections,
        keepalive_expiry=httpx.Limits().keepalive_expiry,
        network_backend=_CheckedNetworkBackend(
            allow_private=allow_private, resolve=resolve, allowed_networks=allowed_networks
        ),
    )
    return transport


def fetch_page(
    client: httpx.Client,
    url: str,
    limits: FetchLimits,
    *,
    allow_private: bool = False,
    resolve: Resolver = resolve_host,
    allowed_networks: Sequence[str] = (),
    deadline: Deadline | None = None,
) -> FetchedPage:
    """GET ``url`` following at most ``limits.max_redirects`` redirects, each hop checked by ``check_url``; the
    whole fetch ends by ``limits.total_timeout_s`` or ``deadline`` (a tool call's), whichever comes first.

    Raises:
        FetchError: see the module docstring for the kinds.
    """
    until = (deadline or Deadline()).capped(limits.total_timeout_s)
    current = url
    for _ in range(limits.max_redirects + 1):
        check_url(current, allow_private=allow_private, resolve=resolve, allowed_networks=allowed_networks)
        _check_deadline(until, current, limits)
        left = until.left_s()
        # No single wait may outlast the whole fetch's remaining time.
        timeout = httpx.Timeout(min(limits.read_timeout_s, left), connect=min(limits.connect_timeout_s, left))
        try:
            with client.stream(
                "GET", current, follow_redirects=False, timeout=timeout, headers={"Accept-Encoding": ACCEPT_ENCODING}
            ) as response:
                if response.status_code in _REDIRECT_CODES and "location" in response.headers:
                    current = str(response.url.join(response.headers["location"]))
                    continue
                return _read_response(response, current, limits, until)
        except FetchError as exc:  # refused by the transport at connect time: name the URL, not the host
            raise FetchError(exc.kind, current, exc.detail) from None
        except httpx.TimeoutException as exc:
            raise FetchError("timeout", current, f"{type(exc).__name__} after the limits {limits}") from None
        except (httpx.TransportError, httpx.InvalidURL) as exc:
            raise FetchError("unreachable", current, f"{type(exc).__name__}: {exc}") from None
        except httpx.HTTPError as exc:  # anything else httpx raises about this response (a malformed one)
            raise FetchError("unreachable", current, f"{type(exc).__name__}: {exc}") from None
    raise FetchError("too_many_redirects", url, f"more than {limits.max_redirects} redirects (last: {current})")


def _check_deadline(until: Deadline, url: str, limits: FetchLimits) -> None:
    """Raise the ``FetchError`` of a fetch whose time is up (``timeout``) or that was cancelled (``cancelled``)."""
    if until.cancelled:
        raise FetchError("cancelled", url, "the tool call was cancelled")
    if until.expired():
        raise FetchError("timeout", url, f"fetch took longer than total_timeout_s {limits.total_timeout_s} or the "
                                         "tool call's deadline")


def _read_response(response: httpx.Response, url: str, limits: FetchLimits, until: Deadline) -> FetchedPage:
    if response.status_code in BLOCKED_STATUSES:
        reason = BLOCKED_STATUSES[response.status_code]
        raise FetchError("blocked", url, f"HTTP status {response.status_code}: {reason}")
    if response.status_code >= 400:
        raise FetchError("http_error", url, f"HTTP status {response.status_code}")
    content_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if not (_is_text_type(content_type) or content_type in PDF_CONTENT_TYPES or content_type in _SNIFFED_TYPES):
        raise FetchError("not_text", url, f"content type {content_type!r} is not text (HTML, plain text or PDF)")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_bytes:
        raise FetchError("too_large", url, f"Content-Length {declared} bytes exceeds max_bytes {limits.max_bytes}")
    body = _read_capped(response, url, limits, until)
    head = body[:_SNIFF_BYTES]
    if content_type in PDF_CONTENT_TYPES or looks_like_pdf(head):  # the bytes decide, whatever the declared type
        try:
            text = pdf_text_isolated(body, timeout_s=max(1.0, until.left_s()))
            return FetchedPage(str(response.url), PDF_CONTENT_TYPES[0], text)
        except PdfError as exc:
            raise FetchError("not_text", url, str(exc)) from None
    if (kind := binary_kind(head)) is not None:
        declared = f"declared as {content_type!r}" if content_type else "sent without a content type"
        raise FetchError("not_text", url, f"the body is {kind} by its first bytes ({declared}), not text")
    if content_type in _SNIFFED_TYPES and content_type and looks_like_html(head):
        content_type = "text/html"  # an octet-stream that holds an HTML document
    if content_type and not _is_text_type(content_type):
        raise FetchError("not_text", url, f"content type {content_type!r} is not text and the body is not a PDF "
                                          f"or HTML")
    if b"\x00" in body[:_SNIFF_BYTES] and not body.startswith(_UTF16_BOMS):  # UTF-16 text holds NUL bytes
        raise FetchError("not_text", url, "the body holds NUL bytes: binary content")
    markup = content_type in MARKUP_CONTENT_TYPES or not content_type
    text = decode_text(body, response.headers.get("content-type"), markup=markup)
    return FetchedPage(str(response.url), content_type, text)


def _read_capped(response: httpx.Response, url: str, limits: FetchLimits, until: Deadline) -> bytes:
    """The decoded body, at most ``max_bytes`` of it after decompression, read before ``until``.

    The raw stream is decompressed here, not by httpx: httpx inflates each received chunk whole, so a few hundred
    compressed bytes could become gigabytes before any cap is checked. Here each step inflates at most what the
    cap still allows. One ``gzip`` or ``deflate`` layer is read (what ``ACCEPT_ENCODING`` asks for); any other
    or a stacked encoding is refused as ``not_text``.
    """
    encodings = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",") if e.strip()]
    encodings = [e for e in encodings if e != "identity"]
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
        raise FetchError("not_text", url, f"content encoding {', '.join(encodings)!r} is not read (gzip or deflate)")
    encoding = encodings[0] if encodings else ""
    inflater = None
    stream: Iterable[bytes] = response.iter_raw()
    if response.is_stream_consumed:  # a response built with its content (httpx.MockTransport): already decoded
        stream, encoding = [response.content], ""
    chunks, size = [], 0
    try:
        for raw in stream:
            _check_deadline(until, url, limits)
            pending = raw
            while pending:
                if not encoding:
                    piece, pending = pending, b""
                else:
                    if inflater is not None and inflater.eof:
                        if not pending.startswith(_GZIP_MAGIC) or encoding == "deflate":
                            break  # bytes after the end of the stream are ignored, as browsers do
                        inflater = None  # another gzip member follows (RFC 1952 allows several)
                    if inflater is None:
                        inflater = zlib.decompressobj(_wbits(encoding, pending))
                    piece = inflater.decompress(pending, limits.max_bytes - size + 1)
                    pending = inflater.unconsumed_tail or (inflater.unused_data if inflater.eof else b"")
                size += len(piece)
                if size > limits.max_bytes:
                    raise FetchError("too_large", url, f"body exceeds max_bytes {limits.max_bytes} (decoded)")
                chunks.append(piece)
        if inflater is not None:
            chunks.append(inflater.flush())  # the tail zlib holds back: under one window (32 KiB)
            if size + len(chunks[-1]) > limits.max_bytes:
                raise FetchError("too_large", url, f"body exceeds max_bytes {limits.max_bytes} (decoded)")
    except zlib.error as exc:
        raise FetchError("not_text", url, f"the {encoding} body cannot be decoded: {exc}") from None
    return b"".join(chunks)


def _wbits(encoding: str, head: bytes) -> int:
    """zlib's window bits for a body: gzip; deflate with a zlib header (RFC 1950) or raw (RFC 1951), as sent."""
    if encoding in ("gzip", "x-gzip"):
        return 16 + zlib.MAX_WBITS
    zlib_header = len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
    return zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS


def _is_text_type(content_type: str) -> bool:
    return content_type.startswith("text/") or content_type in TEXT_CONTENT_TYPES
