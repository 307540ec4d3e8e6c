"""What a body is by its first bytes, before its declared type is trusted (``fetch`` and the local corpus).

A server's ``Content-Type`` (or a file's suffix) says what the body should be; the bytes say what it is. A PDF
served as ``text/html`` must be read as a PDF, not become evidence as raw ``%PDF-1.4 1 0 obj ...``; a gzip
archive, an image or a program served as ``text/html`` is not text at all. The signatures are those of the
WHATWG MIME Sniffing standard ("Matching an image type pattern", "... an audio or video type pattern",
"... an archive type pattern", fonts) plus common compressors and executables; PDF itself is
``pdf.looks_like_pdf``. Only signatures that no text document starts with are listed (no ``BM``, ``MZ``).
"""

from __future__ import annotations

import re

__all__: list[str] = []

# (signature at offset 0, what it is). WHATWG MIME Sniffing sections 6.1-6.4, and the formats' own headers.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b\x08", "a gzip archive"),
    (b"PK\x03\x04", "a zip archive"),
    (b"PK\x05\x06", "a zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"\x28\xb5\x2f\xfd", "a zstd archive"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x00\x00\x01\x00", "an icon image"),
    (b"wOFF", "a WOFF font"),
    (b"wOF2", "a WOFF2 font"),
    (b"OggS\x00", "an Ogg audio or video stream"),
    (b"fLaC", "a FLAC audio stream"),
    (b"ID3\x02", "an MP3 audio stream"),
    (b"ID3\x03", "an MP3 audio stream"),
    (b"ID3\x04", "an MP3 audio stream"),
    (b"\x1a\x45\xdf\xa3", "a WebM or Matroska video"),
    (b"\x7fELF", "an ELF executable"),
    (b"\xca\xfe\xba\xbe", "a Java class or Mach-O executable"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\x00asm", "a WebAssembly module"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")
_HTML_START = re.compile(rb"\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body)[\s>]", re.IGNORECASE | re.DOTALL)


def binary_kind(head: bytes) -> str | None:
    """What the body starting with ``head`` is when its signature is one that never starts text
    (``"a gzip archive"``, ``"a PNG image"``), else None. A PDF is None here (``pdf.looks_like_pdf``)."""
    for signature, kind in _SIGNATURES:
        if head.startswith(signature):
            return kind
    if head[:4] == b"RIFF" and head[8:12] in (b"WEBP", b"WAVE", b"AVI "):
        return {b"WEBP": "a WebP image", b"WAVE": "a WAVE audio stream", b"AVI ": "an AVI video"}[head[8:12]]
    if head[4:8] == b"ftyp":
        return "an MP4 or other ISO media file"
    if _BZIP2.match(head):
        return "a bzip2 archive"
    return None


def looks_like_html(head: bytes) -> bool:
    """True for a body whose first bytes (after a UTF-8 byte order mark, white space and comments) open an HTML
    document: ``<!DOCTYPE html``, ``<html``, ``<head`` or ``<body`` (WHATWG MIME Sniffing 7.1's HTML patterns)."""
    return _HTML_START.match(head.removeprefix(b"\xef\xbb\xbf")) is not None
