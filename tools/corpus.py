"""A local corpus: a folder of documents searchable with BM25 and readable by URL.

A ``Corpus`` is the offline stand-in for the web (``../shared/TEST_MODELS.md``, "Real documents for offline
research"). Every document gets a URL the model can pass to ``visit``: ``corpus://{name}/{relative/path}``.

Terms are lower-cased, English stop words dropped and words stemmed (Snowball, PyStemmer), in the index and
in queries alike. Indexing is a cheap text pass (lxml ``text_content`` of the page's main region, not trafilatura, which
takes ~70 s on the 530 pages of the Python docs; pypdf for PDF files) followed by a bm25s index. The index, the
extracted texts and a manifest of the files (relative path, mtime in ns, size in bytes) are saved under
``index_dir``. A later ``Corpus.open`` of an unchanged folder loads them instead of re-indexing; after a change
it extracts only the files that are new or changed (same path, mtime and size -> the saved text is reused) and
rebuilds the BM25 index, which is the cheap part. ``Corpus.stats`` says what was reused and extracted.
The manifest, written last, also holds the SHA-256 of every other file of the saved index; a saved index whose
files do not match it (a damaged or edited cache: two arrays of the same size swapped still load in bm25s, and
every search then fails) is not used, not even its texts: the corpus is extracted and indexed again and saved
over it, with a logged warning.

A file is read as what its first bytes say before its suffix is trusted (``sniff``): a PDF named ``.html`` is read
as a PDF, and an archive or image named ``.html`` or ``.txt`` is skipped, never indexed as text.

A file that cannot be read (a broken or password-protected PDF, a scanned PDF without text) does not stop the
corpus: it is left out of the index and listed in ``Corpus.skipped`` with the reason, and is not retried until
it changes. A file the system would not read (permission denied, an I/O error, too many open files) is retried at
the next open: that error says nothing about the file's content, and ``chmod`` changes neither mtime nor size.

A document is a file under the folder: a symbolic link whose target lies outside it (``/proc/self/environ``, a
home folder's key, a link carried in a downloaded bundle) is listed in ``Corpus.skipped``, never indexed, searched
or read, as ``serve --lan`` serves the corpus to other devices. Links inside the folder are followed; links to
folders are not (``os.walk``).

Usage::

    corpus = Corpus.open("/usr/share/doc/python3.11/html", name="pydocs")
    hits = corpus.search("default pickle protocol", k=5)
    page = corpus.read(hits[0].url)

Errors: ``CorpusError`` and its subclasses, in the tool layer's tree (``tools.errors``).
"""

from __future__ import annotations

import datetime
import email.utils
import errno
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import bm25s
import lxml.html
import Stemmer
from lxml import etree

from venus_edge.tools.charset import decode_text
from venus_edge.tools.errors import (
    DocumentNotFoundError,
    EmptyCorpusError,
    PdfError,
    UnreadableDocumentError,
)
from venus_edge.tools.linebreaks import break_lines
from venus_edge.tools.observation_styles import DEFAULT_OBSERVATION_STYLE, ObservationStyle, search_hit
from venus_edge.tools.passages import CJK_CHARS, WORD_PATTERN
from venus_edge.tools.pdf import looks_like_pdf, pdf_text
from venus_edge.tools.sniff import binary_kind

__all__ = ["Corpus", "Document", "Hit", "IndexStats"]

URL_SCHEME = "corpus"
ACCEPTED_SUFFIXES: tuple[str, ...] = (".html", ".htm", ".md", ".txt", ".pdf")
CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html",
    ".htm": "text/html",
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".pdf": "application/pdf",
}
# Bumped whenever the text pass, the tokenizer or the file layout changes, so old caches are rebuilt.
INDEX_FORMAT_VERSION = 9  # 9: links out of the folder are skipped; an index of 8 may hold their text
_CHECKSUMS = "sha256"  # the manifest's key for the checksums of the other files of the saved index
SNIPPET_CHARS = 240
_SNIFF_BYTES = 4096
_TOKEN_PATTERN = WORD_PATTERN
_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
logger = logging.getLogger(__name__)
_UTF8_HTML_PARSER = lxml.html.HTMLParser(encoding="utf-8")
_STOPWORDS = "en"


@dataclass(frozen=True)
class Hit:
    """One search result, shaped like a web search result (PROTOCOL.md, "Tools and observation shapes").

    Attributes:
        date: the publication date the source gives (a web engine's snippet date, a page's metadata), or None.
    """

    title: str
    url: str
    snippet: str
    date: str | None = None

    def to_dict(self, style: ObservationStyle = DEFAULT_OBSERVATION_STYLE) -> dict[str, str]:
        """The result as the observation shows it in ``style`` (``tools.observation_styles.search_hit``):
        ``inference``, a dated snippet begins ``Date published: {date}`` and a blank line, as in the reference's
        search results (PROTOCOL.md); ``rl``, the date is a key of its own, ``""`` when there is none, as in the RL
        rollouts."""
        return search_hit(self.title, self.url, self.snippet, self.date, style)


@dataclass(frozen=True)
class Document:
    """One document read in full.

    Attributes:
        url: the ``corpus://`` URL (or the final http(s) URL when ``visit`` builds one from a fetch).
        title: the page title, or the file name when the document has none.
        html_or_text: the raw document text (HTML markup kept for ``text/html``); for a PDF, its extracted text
            (pages separated by blank lines).
        content_type: ``text/html``, ``text/markdown``, ``text/plain`` or ``application/pdf``.
    """

    url: str
    title: str
    html_or_text: str
    content_type: str


@dataclass(frozen=True)
class IndexStats:
    """What one ``Corpus.open`` did.

    Attributes:
        extracted: files whose text was extracted in this open (new or changed, or all on a first index).
        reused: files whose saved text was reused (unchanged path, mtime and size).
        removed: files of the saved index that are gone from the folder.
        skipped: files left out because they could not be read (see ``Corpus.skipped``).
    """

    extracted: int
    reused: int
    removed: int
    skipped: int


@dataclass(frozen=True)
class _Entry:
    path: str  # relative, POSIX separators
    title: str
    text: str  # whitespace-collapsed text from the cheap pass
    mtime_ns: int
    size: int
    error: str = ""  # why the file is left out of the index; "" for an indexed document
    date: str = ""  # the publication date the document declares (YYYY-MM-DD when it reads so), or ""
    retry: bool = False  # the error came from the system, not the content: read the file again at the next open


class Corpus:
    """A folder of ``.html/.htm/.md/.txt/.pdf`` documents with a BM25 index; build with ``Corpus.open``.

    Attributes:
        root, name: the folder and the corpus name used in URLs.
        loaded_from_cache: the folder was unchanged and the saved index was loaded as it was.
        stats (`IndexStats`): files extracted, reused, removed and skipped by this open.
        skipped (`dict[str, str]`): relative path -> why the file is not in the index.
    """

    def __init__(self, root: Path, name: str, entries: list[_Entry], retriever: bm25s.BM25, stats: IndexStats) -> None:
        self.root = root
        self.name = name
        self._entries = [entry for entry in entries if not entry.error]
        self._all_entries = entries
        self.skipped = {entry.path: entry.error for entry in entries if entry.error}
        self._retriever = retriever
        self._by_path = {entry.path: index for index, entry in enumerate(self._entries)}
        self.stats = stats
        self.loaded_from_cache = False

    @classmethod
    def open(
        cls,
        folder: str | os.PathLike[str],
        *,
        index_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        skip_dir_prefixes: Sequence[str] = (".", "_"),
    ) -> Corpus:
        """Open (and index if needed) the documents under ``folder``.

        Args:
            folder: the folder to index, searched recursively.
            index_dir: where the index is saved; default
                ``$XDG_CACHE_HOME/venus-edge/corpus/<sha256 of the folder path>`` (``~/.cache`` without it).
            name: the corpus name used in URLs (letters, digits, ``.``, ``_``, ``-``); default the folder name
                with other characters replaced by ``-``.
            skip_dir_prefixes: folders whose name starts with one of these are skipped: hidden folders and
                Sphinx build folders (``_sources`` holds a ``.txt`` copy of every page, ``_static`` assets).

        Raises:
            EmptyCorpusError: no readable document under ``folder`` (none with an accepted extension, or none
                whose text could be read).
            NotADirectoryError: ``folder`` is not a folder.
            ValueError: a ``name`` that cannot be a URL host.

        An index folder that cannot be written (read-only cache) only costs the speed of the next start: the
        corpus is still returned, and the failure logged.
        """
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise NotADirectoryError(f"corpus folder {str(root)!r} is not a directory")
        if name is not None and not _NAME_PATTERN.fullmatch(name):
            raise ValueError(f"corpus name {name!r} must be letters, digits, '.', '_' or '-' (it is a URL host)")
        name = name or (re.sub(r"[^A-Za-z0-9._-]+", "-", root.name).strip("-.") or "corpus")
        cache = Path(index_dir) if index_dir is not None else default_index_dir(root)
        manifest = _manifest(root, skip_dir_prefixes)
        if not manifest["files"]:
            raise EmptyCorpusError(
                f"no readable documents in {str(root)!r}: expected files ending in "
                f"{', '.join(ACCEPTED_SUFFIXES)} (folders starting with {', '.join(skip_dir_prefixes)} are skipped)"
            )
        saved_manifest, saved_entries = _read_saved(cache, root)
        corpus = None
        if saved_manifest == manifest:
            # files the system refused are read again; while they still fail, the saved index stands as it is
            retried = [_extract_entry(root, e.path, e.mtime_ns, e.size) if e.retry else e for e in saved_entries]
            if all(entry.error for old, entry in zip(saved_entries, retried) if old.retry):
                corpus = _load_index(cache, root, name, manifest, retried)
        if corpus is None:
            corpus = _build_index(root, name, manifest, {entry.path: entry for entry in saved_entries})
            try:
                _save_index(cache, corpus, manifest)
            except OSError as exc:
                logger.warning("corpus %s: the index could not be saved under %s (%s); it is rebuilt next time",
                               name, cache, exc)
        return corpus

    def __len__(self) -> int:
        return len(self._entries)

    def url_for(self, path: str) -> str:
        """The ``corpus://`` URL of the document at relative POSIX ``path`` (percent-encoded; a file name that is
        not UTF-8 keeps its bytes)."""
        return f"{URL_SCHEME}://{self.name}/{quote(path, errors='surrogateescape')}"

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """Return up to ``k`` documents for ``query``, best first; ``[]`` when no query term is indexed."""
        terms = _query_terms(query, stem=True)
        known = [term for term in terms if term in self._retriever.vocab_dict]
        if not known or k <= 0:
            return []
        k = min(k, len(self._entries))
        doc_ids, scores = self._retriever.retrieve([known], k=k, show_progress=False, n_threads=1)
        words = list(dict.fromkeys([*_query_terms(query, stem=False), *terms]))  # a stem is not always a prefix
        hits = []
        for doc_id, score in zip(doc_ids[0], scores[0]):
            if score <= 0:
                continue
            entry = self._entries[int(doc_id)]
            hits.append(Hit(entry.title, self.url_for(entry.path), make_snippet(entry.text, words), entry.date or None))
        return hits

    def read(self, url: str) -> Document:
        """Read the document at a ``corpus://{name}/{path}`` URL (a ``#fragment`` or ``?query`` is ignored).

        Raises:
            DocumentNotFoundError: another scheme or corpus name, or no such document in this corpus.
            UnreadableDocumentError: a file left out of the index (``skipped``), or a PDF that no longer parses.
        """
        path = self._path_of(url)
        try:  # checked again here: the file may have become a link since it was indexed
            raw = _inside(self.root, path).read_bytes()
        except ValueError as exc:
            raise UnreadableDocumentError(f"cannot read {url}: {exc}") from None
        except OSError as exc:
            raise DocumentNotFoundError(f"cannot read {url}: {exc.strerror}") from None
        entry = self._entries[self._by_path[path]]
        try:
            content_type = _document_type(path, raw)
        except ValueError as exc:
            raise UnreadableDocumentError(f"cannot read {url}: {exc}") from None
        if content_type == "application/pdf":
            try:
                return Document(url, entry.title, pdf_text(raw), content_type)
            except PdfError as exc:
                raise UnreadableDocumentError(f"cannot read {url}: {exc}") from None
        return Document(url, entry.title, _decode_file(raw, path), content_type)

    def _path_of(self, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme != URL_SCHEME or parts.netloc != self.name:
            expected = f"{URL_SCHEME}://{self.name}/..."
            raise DocumentNotFoundError(f"{url} is not a document of corpus {self.name!r} ({expected})")
        path = unquote(parts.path, errors="surrogateescape").lstrip("/")
        if path in self.skipped:
            raise UnreadableDocumentError(f"{url} cannot be read: {self.skipped[path]}")
        if path not in self._by_path:
            raise DocumentNotFoundError(f"no document {path!r} in corpus {self.name!r}")
        return path


def default_index_dir(root: Path) -> Path:
    """``$XDG_CACHE_HOME/venus-edge/corpus/<first 16 hex of sha256(root)>``, ``~/.cache`` by default."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return base / "venus-edge" / "corpus" / digest


# ---------------------------------------------------------------------------------------------------------
# Files and the manifest


def _iter_documents(root: Path, skip_dir_prefixes: Sequence[str]) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(tuple(skip_dir_prefixes)))
        for filename in sorted(filenames):
            if filename.lower().endswith(ACCEPTED_SUFFIXES):
                yield Path(dirpath) / filename


def _manifest(root: Path, skip_dir_prefixes: Sequence[str]) -> dict[str, Any]:
    files = []
    for file in _iter_documents(root, skip_dir_prefixes):
        try:
            info = file.stat()
        except OSError:  # a dangling symbolic link, or a file removed while walking
            continue
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device named like a document would block or never end
            continue
        files.append([file.relative_to(root).as_posix(), info.st_mtime_ns, info.st_size])
    return {"version": INDEX_FORMAT_VERSION, "root": str(root), "files": files}


# ---------------------------------------------------------------------------------------------------------
# Building, saving and loading the index


def _build_index(root: Path, name: str, manifest: dict[str, Any], saved: dict[str, _Entry]) -> Corpus:
    """Extract new and changed files (reusing ``saved`` texts of unchanged ones), then index the readable ones."""
    entries, extracted = [], 0
    for path, mtime_ns, size in manifest["files"]:
        previous = saved.get(path)
        if previous is not None and not previous.retry and (previous.mtime_ns, previous.size) == (mtime_ns, size):
            entries.append(previous)
            continue
        entries.append(_extract_entry(root, path, mtime_ns, size))
        extracted += 1
    readable = [entry for entry in entries if not entry.error]
    if not readable:
        reasons = "; ".join(f"{entry.path}: {entry.error}" for entry in entries[:5])
        raise EmptyCorpusError(f"no document in {str(root)!r} could be read ({reasons})")
    tokens = bm25s.tokenize(
        [f"{entry.title}\n{entry.text}" for entry in readable],
        token_pattern=_TOKEN_PATTERN,
        stopwords=_STOPWORDS,
        stemmer=_stemmer(),
        show_progress=False,
    )
    if not tokens.vocab:  # bm25s cannot index documents without a single term ("max() arg is an empty sequence")
        names = ", ".join(entry.path for entry in readable[:5])
        raise EmptyCorpusError(f"no document in {str(root)!r} has a word to search for ({names}): search needs "
                               "documents with words (two or more letters, or a CJK character, not a stop word)")
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    present = {path for path, _, _ in manifest["files"]}
    stats = IndexStats(
        extracted=extracted,
        reused=len(entries) - extracted,
        removed=len(set(saved) - present),
        skipped=len(entries) - len(readable),
    )
    return Corpus(root, name, entries, retriever, stats)


def _extract_entry(root: Path, path: str, mtime_ns: int, size: int) -> _Entry:
    """One file's title and text; a file that cannot be read gets an entry with ``error`` set instead (``retry``
    when the system refused it)."""
    try:
        raw = _inside(root, path).read_bytes()
        is_pdf = _document_type(path, raw) == "application/pdf"
        source = pdf_text(raw) if is_pdf else _decode_file(raw, path)
    except OSError as exc:  # permission, I/O, open files: nothing about the content, so tried again next time
        return _Entry(path, "", "", mtime_ns, size, str(exc), retry=True)
    except (PdfError, ValueError, LookupError) as exc:  # one unreadable file never stops the corpus
        return _Entry(path, "", "", mtime_ns, size, str(exc))
    if is_pdf and not source.strip():
        return _Entry(path, "", "", mtime_ns, size, "the PDF has no text layer (a scan?)")
    title, text, date = extract_fields(source, Path(path).with_suffix(".pdf") if is_pdf else Path(path))
    return _Entry(path, title, text, mtime_ns, size, date=date)


def _inside(root: Path, path: str) -> Path:
    """The file at ``root/path`` (``root`` resolved, as ``Corpus.open`` makes it) with its symbolic links resolved.

    Raises:
        ValueError: it resolves outside ``root`` (module docstring: such a link is never read), or to something
            other than a regular file.
        OSError: it cannot be looked at (gone, a loop of links, no permission).
    """
    try:
        file = (root / path).resolve()
    except RuntimeError as exc:  # Python 3.11-3.12 raise it for a loop of links (3.13: OSError ELOOP)
        raise OSError(errno.ELOOP, f"a loop of symbolic links ({exc})") from None
    if not file.is_relative_to(root):
        raise ValueError("a symbolic link to a file outside the corpus folder; only files under the folder are "
                         "documents")
    if not stat.S_ISREG(file.stat().st_mode):  # a FIFO or a device put in a document's place: a read never ends
        raise ValueError("not a regular file (a pipe or a device in a document's place)")
    return file


def _document_type(path: str, raw: bytes) -> str:
    """A file's media type by its first bytes, then its suffix (``sniff``): a PDF named ``.html`` is a PDF.

    Raises:
        ValueError: the bytes are an archive, an image or another binary format, whatever the suffix says.
    """
    head = raw[:_SNIFF_BYTES]
    if looks_like_pdf(head):
        return "application/pdf"
    if (kind := binary_kind(head)) is not None:
        raise ValueError(f"the file is {kind} by its first bytes, not a {Path(path).suffix} document")
    return CONTENT_TYPES[Path(path).suffix.lower()]


def _save_index(cache: Path, corpus: Corpus, manifest: dict[str, Any]) -> None:
    """Write index, texts, then the manifest with their checksums last: a folder with a manifest is complete."""
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    corpus._retriever.save(cache / "bm25", show_progress=False)
    with open(cache / "documents.jsonl", "w", encoding="utf-8") as out:
        for entry in corpus._all_entries:
            out.write(json.dumps(asdict(entry)) + "\n")
    saved = {**manifest, _CHECKSUMS: _content_checksums(cache)}
    (cache / "manifest.json.tmp").write_text(json.dumps(saved), encoding="utf-8")
    os.replace(cache / "manifest.json.tmp", cache / "manifest.json")


def _content_checksums(cache: Path) -> dict[str, str]:
    """SHA-256 (hex) of every file of a saved index but its manifest, by POSIX path relative to ``cache``."""
    manifests = {"manifest.json", "manifest.json.tmp"}
    files = sorted(path for path in cache.rglob("*") if path.is_file() and path.relative_to(cache).as_posix()
                   not in manifests)
    return {path.relative_to(cache).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def _read_saved(cache: Path, root: Path) -> tuple[dict[str, Any], list[_Entry]]:
    """The saved manifest (its checksums taken out) and per-file entries of an index of the same folder and format
    whose files match their checksums; ``({}, [])`` when absent, unreadable or damaged (damage logged)."""
    try:
        saved = json.loads((cache / "manifest.json").read_text(encoding="utf-8"))
        if saved.get("version") != INDEX_FORMAT_VERSION or saved.get("root") != str(root):
            return {}, []
        checksums, found = saved.pop(_CHECKSUMS, None) or {}, _content_checksums(cache)
        if checksums != found:
            damaged = sorted(name for name in {*found, *checksums} if checksums.get(name) != found.get(name))
            logger.warning("corpus index under %s does not match its checksums (%s); it is rebuilt", cache,
                           ", ".join(damaged) or "no checksums saved")
            return {}, []
        with open(cache / "documents.jsonl", encoding="utf-8") as lines:
            return saved, [_Entry(**json.loads(line)) for line in lines]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}, []


def _load_index(cache: Path, root: Path, name: str, manifest: dict[str, Any], entries: list[_Entry]) -> Corpus | None:
    """The saved corpus, whose saved manifest equals the current ``manifest``; ``None`` when the saved entries or
    the BM25 index do not match it (a damaged cache)."""
    if [path for path, _, _ in manifest["files"]] != [entry.path for entry in entries]:
        return None
    try:
        retriever = bm25s.BM25.load(cache / "bm25", show_progress=False)
        if retriever.scores["num_docs"] != sum(1 for entry in entries if not entry.error):
            return None
    except Exception:
        return None
    skipped = sum(1 for entry in entries if entry.error)
    corpus = Corpus(root, name, entries, retriever, IndexStats(0, len(entries), 0, skipped))
    corpus.loaded_from_cache = True
    return corpus


# ---------------------------------------------------------------------------------------------------------
# The cheap text pass


def _decode_file(raw: bytes, path: str) -> str:
    """A file's text: BOM, then an HTML file's own declaration, then detection (``charset.decode_text``)."""
    return decode_text(raw, markup=CONTENT_TYPES[Path(path).suffix.lower()] == "text/html")


def extract_fields(source: str, path: Path) -> tuple[str, str, str]:
    """Title, whitespace-collapsed text and publication date of one document (cheap pass for indexing, ~3 ms
    per page).

    HTML: ``<title>``, the text of the main region (``role="main"``, ``<main>``, else ``<body>``) without scripts
    and styles, a ``<br>`` read as a line break (``linebreaks.break_lines``), and the date its metadata declares
    (``published_date``). Markdown: the first ``# `` heading. Plain text (and a PDF's extracted text): the first
    non-empty line. The file name stands in for a missing title; a document without a declared date gets ``""``.
    """
    date = ""
    if path.suffix.lower() in (".html", ".htm"):
        title, text, date = _html_fields(source)
    else:
        title, text = _plain_title(source, markdown=path.suffix.lower() == ".md"), source
    return " ".join(title.split())[:200] or path.name, " ".join(text.split()), date


def _html_fields(source: str) -> tuple[str, str, str]:
    try:  # the text is already decoded: tell lxml its UTF-8 bytes are UTF-8 (it assumes Latin-1 without a meta)
        tree = lxml.html.document_fromstring(source.encode("utf-8"), parser=_UTF8_HTML_PARSER)
    except (etree.ParserError, ValueError):
        return "", "", ""
    date = published_date(tree)
    break_lines(tree)  # foo<br>bar is two words, not "foobar"
    for node in tree.xpath("//script|//style|//noscript|//template"):
        node.drop_tree()
    title = tree.findtext(".//title") or ""
    main = tree.xpath("//*[@role='main']|//main") or [tree.find("body")]
    return title, (tree if main[0] is None else main[0]).text_content(), date


# Metadata that declares when a page was published (Open Graph, schema.org, Dublin Core, Highwire/Google
# Scholar, common CMS names), in the order they are trusted.
_DATE_META = (
    "article:published_time", "og:published_time", "datepublished", "citation_publication_date", "citation_date",
    "dc.date.issued", "dcterms.issued", "dc.date", "dcterms.created", "date", "pubdate", "publish-date",
    "publication_date",
)
_ISO_DATE = re.compile(r"^(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})")


def published_date(tree: etree._Element) -> str:
    """The publication date a page declares in its metadata (``<meta>`` by name, property or itemprop, or a
    ``<time itemprop="datePublished">``), as ``YYYY-MM-DD``; ``""`` when none reads as a date."""
    found: dict[str, list[str]] = {}
    for meta in tree.xpath("//meta[@content]"):
        key = (meta.get("property") or meta.get("name") or meta.get("itemprop") or "").strip().lower()
        found.setdefault(key, []).append(meta.get("content", "").strip())
    for time in tree.xpath("//time[@itemprop='datePublished'][@datetime]"):
        found.setdefault("datepublished", []).append(time.get("datetime", "").strip())
    for value in (value for key in _DATE_META for value in found.get(key, []) if value):
        if date := _as_date(value):
            return date
    return ""


def _as_date(value: str) -> str:
    """``YYYY-MM-DD`` for an ISO-like (``2024/3/5``, ``2024-03-05T10:00Z``) or RFC 2822 date, else ''."""
    try:
        if match := _ISO_DATE.match(value):
            return datetime.date(*map(int, match.groups())).isoformat()
        return email.utils.parsedate_to_datetime(value).date().isoformat()
    except (ValueError, TypeError, IndexError):  # 2024-13-45, an epoch number, free text: not a date
        return ""


def _plain_title(source: str, *, markdown: bool) -> str:
    for line in source.splitlines():
        line = line.strip()
        if markdown and line.startswith("# "):
            return line[2:]
        if not markdown and line:
            return line
    return ""


@functools.cache
def _stemmer() -> Stemmer.Stemmer:
    """The English Snowball stemmer (PyStemmer), so "herds" and "herd" are one term in the index and queries."""
    return Stemmer.Stemmer("english")


def _query_terms(query: str, *, stem: bool) -> list[str]:
    tokens = bm25s.tokenize(
        query,
        token_pattern=_TOKEN_PATTERN,
        stopwords=_STOPWORDS,
        stemmer=_stemmer() if stem else None,
        return_ids=False,
        show_progress=False,
    )
    return list(dict.fromkeys(tokens[0])) if tokens else []


def make_snippet(text: str, terms: Sequence[str], width_chars: int = SNIPPET_CHARS) -> str:
    """A passage of about ``width_chars`` around the densest cluster of query ``terms`` in ``text``.

    The window holding the most distinct terms (then the most occurrences) wins; it is cut at word boundaries
    and marked with "..." where text was cut. Without any term in the text, the start of the text.
    """
    start = _best_window_start(text, terms, width_chars) if terms else 0
    end = min(len(text), start + width_chars)
    if start > 0:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < start + 30 else start
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > start else end
    body = text[start:end].strip()
    return ("..." if start > 0 else "") + body + ("..." if end < len(text) else "")


def _best_window_start(text: str, terms: Sequence[str], width_chars: int) -> int:
    # A word term starts at a word boundary; a CJK character has none inside a run of CJK text.
    alternatives = [re.escape(t) if re.match(f"[{CJK_CHARS}]", t) else rf"\b{re.escape(t)}" for t in terms]
    pattern = re.compile("(" + "|".join(alternatives) + ")", re.IGNORECASE)
    matches = [(m.start(), m.group(1).lower()) for _, m in zip(range(5000), pattern.finditer(text))]
    if not matches:
        return 0
    best, best_key, lead = 0, (0, 0), width_chars // 5
    right = 0
    for left, (position, _) in enumerate(matches):
        right = max(right, left)
        while right + 1 < len(matches) and matches[right + 1][0] < position + width_chars - lead:
            right += 1
        window = matches[left : right + 1]
        key = (len({term for _, term in window}), len(window))
        if key > best_key:
            best, best_key = max(0, position - lead), key
    return best
