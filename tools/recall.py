"""The recall pass of ``visit``'s page reading: put back the lines of the main body that trafilatura dropped.

trafilatura (the main pass) chooses the main content well but drops text of it: the first line of a page of
``<br>``-separated lines without ``<p>`` or ``<article>``, whole entries of the Python docs (``mmap.write_byte``).
The recall pass reads the page's lines as a browser breaks them, finds the main region from what the main pass
kept, and puts back, in place, each line of that region that the main pass left out; a paragraph of the main
pass that is several whole lines of the page joined by spaces gets its line breaks back. Lines outside the region
(menus, footers, sidebars around the article) and page furniture inside it stay out, as the main pass decided.

Lines are compared with what the main pass kept on a folded form (NFKC, no whitespace, no format characters such
as soft hyphens and zero-width spaces), and a long line counts as kept when most of its 16-character pieces are,
since trafilatura normalizes text its own way. The pass is linear in the page's length.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from lxml import etree

__all__: list[str] = []

# Elements that start a new line of text; text inside inline elements (a, b, font, span) continues the line.
_BLOCK_ELEMENTS = frozenset(
    ["address", "article", "aside", "blockquote", "body", "br", "center", "dd", "details", "dialog", "div", "dl", "dt",
     "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr",
     "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
     "ul"]
)
# Elements whose text a reader never sees as the page's text: code, styles, media fallbacks, drawings.
_NOT_TEXT = frozenset({"script", "style", "noscript", "template", "head", "title", "video", "audio", "iframe",
                       "object", "embed", "canvas", "svg", "math", "picture", "map"})
# Page furniture: lines inside these elements, or elements with these ARIA roles, are never put back.
_FURNITURE = frozenset({"nav", "aside", "header", "footer", "form", "menu", "button", "select", "label"})
_FURNITURE_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar",
                              "dialog", "alertdialog"})
# ... and class or id names that mark furniture (as readability's "unlikely candidates" do).
_FURNITURE_NAMES = re.compile(
    r"(?:^|[-_\s])(?:footer|sidebar|sphinxsidebar|nav|navbar|navigation|menu|breadcrumbs?|related|comments?|share|"
    r"social|cookies?|banner|ads?|advert|newsletter|subscribe|signup|tags?|credits?|promo|sponsor(?:ed)?|popup|"
    r"modal|disqus)(?:$|[-_\s])",
    re.IGNORECASE,
)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# A block counts as main content when the main pass kept a line of at least this many words from it.
MAIN_LINE_WORDS = 5
# The main region holds at least this share of the characters the main pass kept.
MAIN_REGION_SHARE = 0.9
# A folded line longer than this counts as kept when KEPT_SHARE of its GRAM-character pieces are in the kept text.
GRAM = 16
KEPT_SHARE = 0.7


@dataclass
class _Line:
    """One line of the page as a browser would break it: text between block boundaries and ``<br>``s."""

    parts: list[str]
    block: etree._Element  # the block element the line is in
    link_chars: int = 0  # characters inside <a>
    furniture: bool = False  # inside nav, aside, header, footer, ...

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def page_lines(tree: etree._Element) -> list[str]:
    """The text of the page's visible lines as a browser breaks them, in page order (no scripts, styles, hidden
    elements or media fallbacks; furniture included), each line's whitespace collapsed."""
    return [line.text for line in _page_lines(tree) if line.text]


def restore_dropped_text(tree: etree._Element, paragraphs: list[str]) -> list[str]:
    """``paragraphs`` (the main pass, in page order) with the lines of the main body it dropped put back.

    ``tree`` is the page the main pass read (``passages.parse_page``).

    A block is main content when the main pass kept one of its lines of at least ``MAIN_LINE_WORDS`` words; the
    main region is the deepest element holding ``MAIN_REGION_SHARE`` of the text the main pass kept. A line that
    the main pass dropped is put back, before the paragraph that holds the next kept line (or at the end), when
    it lies inside the main region, or right next to a kept line in an element around the region (an opening
    line before the article's ``<div>``), and is not mostly link text, hidden, nor inside page furniture (nav,
    aside, header, footer, forms; navigation roles; classes such as ``footer``, ``sidebar``, ``newsletter``).
    """
    lines = [line for line in _page_lines(tree) if line.text]
    folded_paragraphs = [_fold(p) for p in paragraphs]
    kept_text = "".join(folded_paragraphs)
    kept_grams = {kept_text[i : i + GRAM] for i in range(0, max(0, len(kept_text) - GRAM + 1))}
    kept = [_is_kept(_fold(line.text), kept_text, kept_grams) for line in lines]
    main = {line.block for line, was_kept in zip(lines, kept) if was_kept and len(line.text.split()) >= MAIN_LINE_WORDS}
    if not main:
        return paragraphs
    region = _main_region([(line, len(line.text)) for line, was_kept in zip(lines, kept) if was_kept])
    around = set(region.iterancestors())

    def restorable(index: int) -> bool:
        line = lines[index]
        if kept[index] or line.furniture or line.link_chars * 2 >= len(line.text) or not re.search(r"\w\w", line.text):
            return False
        if line.block is region or region in line.block.iterancestors():
            return True
        neighbours = [i for i in (index - 1, index + 1) if 0 <= i < len(lines) and kept[i]]
        return line.block in around and any(lines[i].block in main for i in neighbours)

    # Walk the lines and the paragraphs together, forward only: a dropped line goes before the paragraph that
    # holds the next kept line at or after the cursor (so a repeated label does not send it back to the top).
    out: list[str] = []
    cursor = 0
    pending: list[str] = []
    held: dict[int, list[str]] = {}  # paragraph index -> the kept lines found in it

    def emit_until(end: int) -> None:
        nonlocal cursor
        out.extend(_with_line_breaks(paragraphs[i], held.get(i, [])) for i in range(cursor, end))
        cursor = end

    for index, line in enumerate(lines):
        if kept[index]:
            folded = _fold(line.text)
            at = next((i for i in range(cursor, len(paragraphs)) if folded in folded_paragraphs[i]), None)
            if at is not None:
                emit_until(at)
                held.setdefault(at, []).append(line.text)
            out += pending
            pending = []
        elif restorable(index):
            pending.append(line.text)
    emit_until(len(paragraphs))
    return out + pending


def _with_line_breaks(paragraph: str, page_lines: list[str]) -> str:
    """``paragraph`` with a newline between the page's lines when it is exactly those lines joined by spaces (the
    main pass merged lines a ``<br>`` or a block boundary separated), else as it is."""
    if len(page_lines) > 1 and " ".join(paragraph.split()) == " ".join(page_lines):
        return "\n".join(page_lines)
    return paragraph


def _fold(text: str) -> str:
    """``text`` for comparison: NFKC, without whitespace and format characters (soft hyphen, zero-width ones)."""
    normalized = unicodedata.normalize("NFKC", text)
    return "".join(c for c in normalized if not c.isspace() and unicodedata.category(c) != "Cf")


def _is_kept(folded: str, kept_text: str, kept_grams: set[str]) -> bool:
    if len(folded) <= 2 * GRAM:
        return folded in kept_text
    pieces = [folded[i : i + GRAM] for i in range(0, len(folded) - GRAM + 1, GRAM // 2)]
    return sum(piece in kept_grams for piece in pieces) >= KEPT_SHARE * len(pieces)


def _page_lines(tree: etree._Element) -> list[_Line]:
    """The page's text as lines, in order (see ``_Line``)."""
    lines: list[_Line] = []

    def add(text: str | None, block: etree._Element, in_link: bool, furniture: bool) -> None:
        if not text or not text.strip():
            return
        if block.tag == "pre" and "\n" in text.strip():  # a <pre>'s newlines end its lines
            first, rest = text.split("\n", 1)
            add(first, block, in_link, furniture)
            lines.append(_Line([], block, furniture=furniture))
            add(rest, block, in_link, furniture)
            return
        if not lines or lines[-1].block is not block or lines[-1].furniture != furniture:
            lines.append(_Line([], block, furniture=furniture))
        lines[-1].parts.append(text)
        lines[-1].link_chars += len(text.strip()) if in_link else 0

    def visit(element: etree._Element, block: etree._Element, in_link: bool, furniture: bool) -> None:
        if not isinstance(element.tag, str) or element.tag in _NOT_TEXT or _is_hidden(element):
            return
        if element.tag in _BLOCK_ELEMENTS:
            block = element
            lines.append(_Line([], block, furniture=furniture))  # a block starts a new line
        in_link = in_link or element.tag == "a"
        furniture = furniture or _is_furniture(element)
        add(element.text, block, in_link, furniture)
        for child in element:
            visit(child, block, in_link, furniture)
            if isinstance(child.tag, str) and child.tag in _BLOCK_ELEMENTS:
                lines.append(_Line([], block, furniture=furniture))  # text after a block is a new line
            add(child.tail, block, in_link and child.tag != "a", furniture)

    visit(tree, tree, False, False)
    return lines


def _is_hidden(element: etree._Element) -> bool:
    """Not rendered: ``hidden``, ``aria-hidden="true"``, an inline ``display: none``, a closed ``<dialog>``."""
    if element.get("hidden") is not None or element.get("aria-hidden", "").lower() == "true":
        return True
    if element.tag == "dialog" and element.get("open") is None:
        return True
    return bool(_HIDDEN_STYLE.search(element.get("style", "")))


def _is_furniture(element: etree._Element) -> bool:
    if element.tag in _FURNITURE or element.get("role") in _FURNITURE_ROLES:
        return True
    return bool(_FURNITURE_NAMES.search(f"{element.get('class', '')} {element.get('id', '')}"))


def _main_region(kept_lines: list[tuple[_Line, int]]) -> etree._Element:
    """The deepest element that holds at least ``MAIN_REGION_SHARE`` of the kept characters: the article, not the
    page around it when the main pass also kept a line of a sidebar."""
    held: dict[etree._Element, int] = {}
    for line, chars in kept_lines:
        for element in (line.block, *line.block.iterancestors()):
            held[element] = held.get(element, 0) + chars
    total = sum(chars for _, chars in kept_lines)
    candidates = [element for element, chars in held.items() if chars >= MAIN_REGION_SHARE * total]
    return max(candidates, key=lambda element: sum(1 for _ in element.iterancestors()))
