"""Bytes of a page or a file to text, choosing the encoding in the order a browser does.

WHATWG HTML, "Determining the character encoding": a byte order mark first, then the charset of the
``Content-Type`` header, then a ``<meta charset>`` / ``<meta http-equiv="Content-Type">`` (or an XML
``encoding=`` declaration) in the document, then detection. w3lib (Scrapy's ``w3lib.encoding``) implements that
order and the WHATWG label mapping (``latin1`` and ``iso-8859-1`` read as windows-1252, as browsers do). Detection
is ours only in its order: valid UTF-8 is UTF-8; anything else is what charset-normalizer finds; windows-1252
when it finds nothing. Undecodable bytes become U+FFFD. Plain text and Markdown have no ``<meta>``: BOM, header,
detection.

``visit`` decodes fetched pages here and the local corpus decodes its files here: one decoder for both.
"""

from __future__ import annotations

import charset_normalizer
from w3lib.encoding import html_to_unicode, http_content_type_encoding, read_bom, to_unicode

__all__: list[str] = []

#: Where nothing declares an encoding and detection finds none (the WHATWG fallback for most locales).
FALLBACK_ENCODING = "cp1252"
# Detection reads at most this much of a body: enough to tell encodings apart, cheap on a 5 MB page.
_DETECT_BYTES = 256_000


def decode_text(body: bytes, content_type_header: str | None = None, *, markup: bool) -> str:
    """``body`` as text, its encoding chosen as a browser chooses it (see the module docstring).

    Args:
        body: the raw bytes, after any content encoding (gzip) is undone.
        content_type_header: the ``Content-Type`` header value (``text/html; charset=...``), or None for a file.
        markup: HTML or XML: the document's own declaration is read after the header.
    """
    if markup:
        return html_to_unicode(content_type_header, body, default_encoding=FALLBACK_ENCODING,
                               auto_detect_fun=detect_encoding)[1]
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return to_unicode(body[len(bom):], bom_encoding)
    declared = http_content_type_encoding(content_type_header) if content_type_header else None
    return to_unicode(body, declared or detect_encoding(body) or FALLBACK_ENCODING)


def detect_encoding(body: bytes) -> str | None:
    """UTF-8 when ``body`` is valid UTF-8, else charset-normalizer's best guess, else None."""
    try:
        body.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        pass
    best = charset_normalizer.from_bytes(body[:_DETECT_BYTES]).best()
    return best.encoding if best is not None else None
