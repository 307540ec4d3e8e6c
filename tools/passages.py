"""Turn a page into passages and keep the ones that matter for a goal, within a token budget.

``visit`` cannot hand a 95,000-token page to a small local model (the reference tool cuts pages to 95,000
tokens for its extractor, PROTOCOL.md "Tools and observation shapes"). It reduces the page first:

1. ``extract_passages``: main text with trafilatura (HTML, its XML output, one passage per paragraph, heading,
   list item or table row) or blank-line paragraphs (plain text, Markdown). The page is parsed once (trafilatura's
   ``load_html``) and its line breaks made text (``linebreaks.break_lines``) before any pass reads it; a
   ``<br>`` (trafilatura's ``<lb/>``) is a newline inside its passage, so ``foo<br>bar`` is ``foo\nbar``.
   trafilatura can drop text of the main body (the first line of a ``<br>``-separated page without ``<p>``); a
   recall pass over the page's lines restores it (``recall.restore_dropped_text``). A page trafilatura finds no
   main content in gives all its visible lines (``recall.page_lines``);
2. ``split_passages``: short passages (headings) join the next one, long ones split at sentence ends;
3. ``select_passages``: score each passage against the goal with BM25 (k1 1.2, b 0.75), keep the best in
   document order while they fit in the budget. Tokens are approximated as ``ceil(len(text) / 4)`` unless a
   ``count_tokens`` callable is given.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

import lxml.html
import trafilatura
from bm25s.stopwords import STOPWORDS_EN
from lxml import etree

from venus_edge.tools.linebreaks import break_lines
from venus_edge.tools.recall import page_lines, restore_dropped_text

__all__: list[str] = []

MIN_PASSAGE_CHARS = 80
MAX_PASSAGE_CHARS = 1200
# A <noscript> with at least this much text is the page's content, not a notice to enable JavaScript.
NOSCRIPT_CONTENT_CHARS = 200
_BLOCK_TAGS = frozenset({"p", "head", "list", "item", "table", "row", "quote"})
# Tags of trafilatura's XML that start a new line inside a leaf block: its line break, and a block inside a table
# cell (a cell's <br> comes back as <cell>a<p>b</p></cell>).
_LINE_START_TAGS = _BLOCK_TAGS | {"lb"}
_UTF8_HTML_PARSER = lxml.html.HTMLParser(encoding="utf-8")
# Question words carry no topic: "How does str.split handle maxsplit?" is about str, split and maxsplit.
_QUESTION_WORDS = (
    "how", "what", "when", "where", "which", "who", "whom", "why", "does", "do", "did", "can", "could", "should",
    "would",
)
_STOPWORDS = frozenset(STOPWORDS_EN) | frozenset(_QUESTION_WORDS)
# Ideographs, kana and hangul are written without spaces: each character is a term (unigrams), so a Chinese
# goal or query matches a Chinese page. Elsewhere a term is a run of 2+ word characters.
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0003134f"
WORD_PATTERN = rf"(?u)[{CJK_CHARS}]|(?:(?![{CJK_CHARS}])\w){{2,}}"
_WORD = re.compile(WORD_PATTERN)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """A token estimate without a tokenizer: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)


def extract_passages(source: str, content_type: str) -> list[str]:
    """The main text of a page as passages in document order (``[]`` when nothing readable is left).

    Args:
        source: the page, HTML markup or text.
        content_type: ``text/html`` and ``application/xhtml+xml`` go through trafilatura (with the page's
            visible lines when trafilatura finds no main content); anything else is split at blank lines.
    """
    if content_type in ("text/html", "application/xhtml+xml") or (not content_type and _looks_like_html(source)):
        raw = _html_paragraphs(source)
    else:
        raw = [" ".join(block.split()) for block in re.split(r"\n\s*\n", source)]
    return split_passages([p for p in raw if p])


def _looks_like_html(source: str) -> bool:
    head = source[:1000].lstrip().lower()
    return head.startswith(("<!doctype html", "<html")) or "<body" in head


def _html_paragraphs(html: str) -> list[str]:
    tree = parse_page(html)
    if tree is None:
        return []
    xml = trafilatura.extract(
        tree, output_format="xml", include_comments=False, include_tables=True, favor_recall=True, deduplicate=False
    )  # trafilatura works on a copy of the tree
    if xml:
        root = etree.fromstring(xml.encode("utf-8"), parser=etree.XMLParser(recover=True))
        if root is not None:
            out: list[str] = []
            _collect_blocks(root.find("main") if root.find("main") is not None else root, out)
            return restore_dropped_text(tree, out)
    return page_lines(tree)


def parse_page(html: str) -> lxml.html.HtmlElement | None:
    """``html`` parsed as trafilatura parses it (``load_html``: its repairs, an encoding declaration allowed), else
    as an lxml document, with its line breaks made text (``linebreaks.break_lines``); ``None`` when nothing parses.
    """
    tree = trafilatura.load_html(html)
    if tree is None:  # trafilatura turns down what does not look like HTML; a browser would still show it
        try:
            tree = lxml.html.document_fromstring(html.encode("utf-8"), parser=_UTF8_HTML_PARSER)
        except (etree.ParserError, ValueError):
            return None
    break_lines(tree)
    return tree


def is_script_shell(html: str) -> bool:
    """True for an HTML page that holds scripts and no visible text outside ``<script>``, ``<style>`` and
    ``<template>``: a single-page-app shell whose content only JavaScript would render.

    A ``<noscript>`` notice ("You need to enable JavaScript") does not count as content, but a ``<noscript>``
    holding an article (``NOSCRIPT_CONTENT_CHARS`` or more) does; so does a declarative shadow root
    (``<template shadowrootmode>``), which browsers render without scripts.
    """
    try:
        tree = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return False
    if not tree.xpath("//script"):
        return False
    if tree.xpath("//template[@shadowrootmode or @shadowroot]"):
        return False
    noscript = " ".join(" ".join(node.text_content().split()) for node in tree.xpath("//noscript"))
    if len(noscript) >= NOSCRIPT_CONTENT_CHARS:
        return False
    for node in tree.xpath("//script|//style|//noscript|//template|//head"):
        node.drop_tree()
    return not tree.text_content().strip()


def _collect_blocks(element: etree._Element, out: list[str]) -> None:
    """Append one passage per leaf block (a block with no block children) of trafilatura's XML."""
    # <code> is a block at the top (a <pre>), inline inside a paragraph or list item
    block_tags = _BLOCK_TAGS | {"code"} if element.tag in ("main", "doc") else _BLOCK_TAGS
    if not any(child.tag in block_tags for child in element):
        if element.tag == "code":  # a code block keeps its line breaks
            text = "".join(element.itertext()).strip()
        elif element.tag == "row":
            text = " | ".join(_lines_text(cell) for cell in element)
        else:
            text = _lines_text(element)
        if text:
            out.append(text)
        return
    lead = " ".join((element.text or "").split())
    if lead:
        out.append(lead)
    for child in element:
        _collect_blocks(child, out)
        tail = " ".join((child.tail or "").split())
        if tail:
            out.append(tail)


def _lines_text(element: etree._Element) -> str:
    """The text of a leaf block of trafilatura's XML, one line per ``<lb/>`` (or nested block), each line's
    whitespace collapsed, empty lines dropped."""
    lines = [""]

    def walk(node: etree._Element) -> None:
        lines[-1] += node.text or ""
        for child in node:
            if child.tag in _LINE_START_TAGS:
                lines.append("")
            walk(child)
            if child.tag in _LINE_START_TAGS:
                lines.append("")
            lines[-1] += child.tail or ""

    walk(element)
    return "\n".join(filter(None, (" ".join(line.split()) for line in lines)))


def split_passages(
    paragraphs: Sequence[str], *, min_chars: int = MIN_PASSAGE_CHARS, max_chars: int = MAX_PASSAGE_CHARS
) -> list[str]:
    """Join a paragraph shorter than ``min_chars`` that does not end a sentence (a heading, a label, a list
    lead ending in ":") to the next one; split paragraphs over ``max_chars`` at sentence ends (a single
    sentence longer than ``max_chars`` is cut)."""
    joined: list[str] = []
    pending = ""
    for paragraph in paragraphs:
        pending = f"{pending}\n{paragraph}" if pending else paragraph
        if len(pending) >= min_chars or pending.endswith((".", "!", "?")):
            joined.append(pending)
            pending = ""
    if pending:
        joined.append(pending)
    return [piece for passage in joined for piece in _split_long(passage, max_chars)]


def _split_long(passage: str, max_chars: int) -> list[str]:
    """Pack lines (code keeps its line breaks), else sentences, into pieces of at most ``max_chars``."""
    if len(passage) <= max_chars:
        return [passage]
    if "\n" in passage:
        units = [u for line in passage.split("\n") for u in _split_long(line, max_chars)]
        return _pack(units, "\n", max_chars)
    units = []
    for sentence in filter(None, _SENTENCE_END.split(passage)):
        units.extend(sentence[i : i + max_chars] for i in range(0, len(sentence), max_chars))
    return _pack(units, " ", max_chars)


def _pack(units: list[str], separator: str, max_chars: int) -> list[str]:
    pieces, current = [], ""
    for unit in units:
        if current and len(current) + len(separator) + len(unit) > max_chars:
            pieces.append(current)
            current = ""
        current = f"{current}{separator}{unit}" if current else unit
    if current:
        pieces.append(current)
    return pieces


def terms(text: str) -> list[str]:
    """Lower-case terms (``WORD_PATTERN``: words of 2+ characters, single CJK characters) without English stop
    words (the bm25s list) and question words."""
    return [word for word in _WORD.findall(text.lower()) if word not in _STOPWORDS]


def score_passages(passages: Sequence[str], goal: str, *, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 score of each passage for the goal's terms, the passages being the collection (Robertson/Lucene
    idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``)."""
    goal_terms = set(terms(goal))
    counts = [Counter(terms(passage)) for passage in passages]
    if not goal_terms or not counts:
        return [0.0] * len(passages)
    avg_len = sum(sum(c.values()) for c in counts) / len(counts) or 1.0
    df = {term: sum(1 for c in counts if term in c) for term in goal_terms}
    idf = {term: math.log(1 + (len(counts) - n + 0.5) / (n + 0.5)) for term, n in df.items()}
    scores = []
    for c in counts:
        norm = k1 * (1 - b + b * sum(c.values()) / avg_len)
        scores.append(sum(idf[t] * c[t] * (k1 + 1) / (c[t] + norm) for t in goal_terms if t in c))
    return scores


def select_passages(
    passages: Sequence[str],
    goal: str,
    *,
    budget_tokens: int,
    count_tokens: TokenCounter = approx_tokens,
    keep_unmatched: bool = True,
    min_score_ratio: float = 0.0,
) -> list[str]:
    """The best passages for ``goal`` in document order, their token total within ``budget_tokens``.

    Passages are taken best score first (ties: earlier first) while they fit. With ``keep_unmatched=False``
    passages that share no term with the goal, or score below ``min_score_ratio`` times the best score, are
    left out, unless none matches: then the page's leading passages stand in. The first passage taken is cut
    to fit when it alone is over the budget.
    """
    scores = score_passages(passages, goal)
    order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))
    best = max(scores, default=0.0)
    if not keep_unmatched and best > 0:
        order = [i for i in order if scores[i] > 0 and scores[i] >= min_score_ratio * best]
    kept: dict[int, str] = {}
    used = 0
    for i in order:
        cost = count_tokens(passages[i])
        if used + cost <= budget_tokens:
            kept[i], used = passages[i], used + cost
        elif not kept:
            kept[i] = passages[i][: max(1, budget_tokens * 4)]
            used = count_tokens(kept[i])
    return [kept[i] for i in sorted(kept)]


def first_sentences(text: str, *, max_chars: int = 400) -> str:
    """Leading whole sentences of ``text`` up to ``max_chars`` (at least one sentence, cut if longer)."""
    out = ""
    for sentence in _SENTENCE_END.split(" ".join(text.split())):
        if out and len(out) + 1 + len(sentence) > max_chars:
            break
        out = f"{out} {sentence}" if out else sentence
    return out[:max_chars]
