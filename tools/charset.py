"""Bytes of a page or a file to text, choosing the encoding in the order a browser does.

WHATWG HTML, "Determining the character encoding": a byte order mark first, then the charset of the
``Content-Type`` header, then a ``<meta charset>`` / ``<meta http-equiv="Content-Type">`` (or an XML
``encoding=`` declaration) in the document, then detection. w3lib (Scrapy's ``w3lib.encoding``) reads the BOM,
the header and the document's declaration, and maps labels as browsers do (``latin1`` and ``iso-8859-1`` are
windows-1252). A label counts only when it names one of the WHATWG Encoding Standard's encodings
(``WEB_ENCODINGS``): ``undefined``, ``hex``, ``base64``, EBCDIC code pages and other Python codecs are ignored, as
browsers ignore them; a document that declares UTF-16 or UTF-32 without a BOM is read as UTF-8 (WHATWG: a
``<meta>`` UTF-16 means UTF-8).

Detection, when nothing usable is declared: valid UTF-8 is UTF-8; text that windows-1252 reads as Latin-script
prose (accented letters among plain ones, the usual typographic marks) is windows-1252, the WHATWG fallback,
because charset-normalizer tells the Western code pages apart poorly (German cp1252 comes back as cp775); anything
else is what charset-normalizer finds in the part of the body that holds non-ASCII bytes, UTF-16 and UTF-32
excluded (no BOM, no UTF-16); windows-1252 when it finds nothing. Undecodable bytes become U+FFFD.

Plain text and Markdown have no ``<meta>``: BOM, header, detection. ``visit`` decodes fetched pages here and the
local corpus decodes its files here: one decoder for both.
"""

from __future__ import annotations

import codecs
import re
import unicodedata

import charset_normalizer
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom, to_unicode

__all__: list[str] = []

#: Where nothing declares an encoding and detection finds none (the WHATWG fallback for most locales).
FALLBACK_ENCODING = "cp1252"
#: The Python codecs of the WHATWG Encoding Standard's encodings (as ``codecs.lookup(...).name`` spells them).
WEB_ENCODINGS = frozenset(
    ["utf-8", "cp866", "koi8-r", "koi8-u", "mac-roman", "cp874", "gb18030", "gbk", "big5hkscs", "big5", "euc_jp",
     "iso2022_jp", "cp932", "shift_jis", "cp949", "euc_kr", "utf-16-be", "utf-16-le", "mac-cyrillic"]
    + [f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)]
    + [f"cp{n}" for n in range(1250, 1259)]
)
# Detection reads this much of a body, from just before its first non-ASCII byte.
_DETECT_BYTES = 64_000
# Marks that Western text holds besides accented letters (quotes, dashes, currency, degrees, ...).
_WESTERN_MARKS = frozenset("“”‘’„‚–—…€•·«»°§©®±×÷¿¡™£¥¢µ½¼¾²\u00a0")
_NON_ASCII = re.compile(rb"[\x80-\xff]")


def decode_text(body: bytes, content_type_header: str | None = None, *, markup: bool) -> str:
    """``body`` as text, its encoding chosen as a browser chooses it (see the module docstring).

    Args:
        body: the raw bytes, after any content encoding (gzip) is undone.
        content_type_header: the ``Content-Type`` header value (``text/html; charset=...``), or None for a file.
        markup: HTML or XML: the document's own declaration is read after the header.
    """
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return to_unicode(body[len(bom):], bom_encoding)
    declared = _web_encoding(http_content_type_encoding(content_type_header) if content_type_header else None)
    if declared is None and markup:
        declared = _web_encoding(html_body_declared_encoding(body), in_document=True)
    return to_unicode(body, declared or detect_encoding(body))


def _web_encoding(name: str | None, *, in_document: bool = False) -> str | None:
    """The codec to use for a declared (w3lib-resolved) encoding, or None when browsers would ignore it."""
    if name is None:
        return None
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        return None
    if codec.startswith(("utf-16", "utf-32")):
        return "utf-8" if in_document else codec if codec in WEB_ENCODINGS else None
    return codec if codec in WEB_ENCODINGS else None


def detect_encoding(body: bytes) -> str:
    """The encoding of a body that declares none: UTF-8, windows-1252 for Latin-script text, else
    charset-normalizer's finding (see the module docstring)."""
    first = _NON_ASCII.search(body)
    if first is None:
        return "utf-8"
    try:
        body.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        pass
    sample = body[max(0, first.start() - 1_000): first.start() + _DETECT_BYTES]
    if _reads_as_western(sample):
        return FALLBACK_ENCODING
    excluded = ["utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le", "utf_7"]
    best = charset_normalizer.from_bytes(sample, cp_exclusion=excluded).best()
    found = _web_encoding(best.encoding) if best is not None else None
    return found or FALLBACK_ENCODING


def _reads_as_western(sample: bytes) -> bool:
    """True when windows-1252 decodes ``sample`` into Latin-script prose: every non-ASCII character an accented
    Latin letter or a usual mark, and most letters plain ASCII (mis-read Cyrillic is all accented letters)."""
    try:
        text = sample.decode("cp1252")
    except UnicodeDecodeError:  # a byte windows-1252 leaves undefined
        return False
    letters = accented = 0
    for char in text:
        if char.isascii():
            letters += char.isalpha()
        elif char in _WESTERN_MARKS:
            continue
        elif char.isalpha() and unicodedata.name(char, "").startswith("LATIN"):
            letters += 1
            accented += 1
        else:
            return False
    return letters > 0 and accented <= 0.5 * letters
