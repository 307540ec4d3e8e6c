"""Page text against a reference, word by word: visit's page text and the corpus's index text, against plain
trafilatura, on real HTML pages found on this machine (run with and without a change to compare).

The measure, per page:

* reference: the words a reader sees in the page's main content: the text of its main element (the first of
  ``MAIN_XPATHS`` that matches: ARIA main, ``<main>``, Node's ``#apicontent``, Sphinx's ``div.body``, DocBook's
  book or article, or its chapter when the page is one, else ``<body>``), without ``<script>``, ``<style>``,
  ``<noscript>``, ``<template>``, ``<nav>`` and navigation roles, read as a browser lays it out: a block element
  or a ``<br>`` separates words, an inline element does not, ``<wbr>`` is nothing. It is written here, apart from
  the code under test, from the HTML rendering defaults (which elements are blocks);
* words: lower-cased runs of word characters (``passages.WORD_PATTERN``: 2+ characters, CJK one each), counted
  as a multiset, so glued words (``tonightbravo``) count as wrong and missing;
* recall = |reference ∩ text| / |reference|, precision = |reference ∩ text| / |text| (multiset intersection),
  summed over all pages (micro average) and per page.

Texts measured: ``trafilatura`` (``trafilatura.extract(html, favor_recall=True, include_tables=True)``, plain
text), ``visit`` (``extract_passages`` joined: what visit reduces for the model) and ``corpus`` (the index pass,
``corpus.extract_fields``). Run it once with the code before a change and once after, e.g.::

    /work/main/.venv/bin/python benchmarks/bench_line_breaks.py --out before.json   # main's code
    .venv/bin/python benchmarks/bench_line_breaks.py --out after.json --before before.json

Pages: ``PAGES`` (paths on a Debian machine with python3.11-doc, valgrind, nodejs, libxslt1-dev and others
installed); a missing page is skipped and named.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
from collections import Counter
from pathlib import Path

import lxml.html
import trafilatura

from venus_edge.tools.charset import decode_text
from venus_edge.tools.corpus import extract_fields
from venus_edge.tools.passages import WORD_PATTERN, extract_passages

PAGES = (
    "/usr/share/doc/python3.11/html/library/tomllib.html",
    "/usr/share/doc/python3.11/html/library/pickle.html",
    "/usr/share/doc/python3.11/html/library/mmap.html",
    "/usr/share/doc/python3.11/html/faq/library.html",
    "/usr/share/doc/python3.11/html/download.html",
    "/usr/share/doc/python3.11/html/distutils/setupscript.html",
    "/root/.pyenv/versions/3.13.0/lib/python3.13/idlelib/help.html",
    "/usr/share/doc/valgrind/html/faq.html",
    "/usr/share/doc/valgrind/html/dist.authors.html",
    "/usr/share/doc/valgrind/html/quick-start.html",
    "/usr/share/doc/valgrind/html/mc-manual.html",
    "/usr/share/doc/nodejs/api/addons.html",
    "/usr/lib/node_modules/npm/docs/output/commands/npm-install.html",
    "/usr/share/doc/zlib1g-dev/examples/zlib_how.html",
    "/usr/share/doc/gcc-12-base/NEWS.html",
    "/usr/share/doc/xtrans-dev/xtrans.html",
    "/usr/share/doc/libjs-underscore/index.html",
    "/usr/share/doc/libxslt1-dev/html/tutorial/libxslttutorial.html",
    "/usr/share/doc/libxslt1-dev/html/html/libxslt-transform.html",
    "/usr/share/doc/libffi8/html/Closure-Example.html",
    "/usr/share/doc/ninja-build/manual.html",
    "/usr/share/doc/time/time.html",
    "/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html/book/ch01-01-installation.html",
)
MAIN_XPATHS = (
    "//*[@role='main']",
    "//main",
    "//*[@id='apicontent']",
    "//div[@class='body']",
    "//div[@class='book' or @class='article']",
    "//div[@class='chapter'][count(//div[@class='chapter']) = 1]",
    "//body",
)
NOT_SHOWN = "//script|//style|//noscript|//template|//nav|//*[@role='navigation']|//head"
# Elements a browser lays out as blocks (HTML rendering defaults), and <br>: each separates words.
BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "br", "caption", "center", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hgroup", "hr", "html", "legend", "li", "main", "menu", "ol", "p", "pre", "section", "summary", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "ul",
})
WORD = re.compile(WORD_PATTERN)


def reference_text(html: str) -> tuple[str, str]:
    """(the XPath that chose the main element, the words a reader sees in it), as the module docstring says."""
    tree = lxml.html.document_fromstring(html.encode("utf-8"), parser=lxml.html.HTMLParser(encoding="utf-8"))
    xpath, main = next((x, found[0]) for x in MAIN_XPATHS if (found := tree.xpath(x)))
    main = copy.deepcopy(main)
    for node in main.xpath("." + NOT_SHOWN.replace("|//", "|.//")):
        node.drop_tree()
    for wbr in list(main.iter("wbr")):
        wbr.drop_tag()
    parts: list[str] = []

    def walk(element: lxml.html.HtmlElement) -> None:
        block = isinstance(element.tag, str) and element.tag in BLOCKS
        parts.append(" " if block else "")
        if isinstance(element.tag, str):  # comments and processing instructions show nothing
            parts.append(element.text or "")
            for child in element:
                walk(child)
        parts.append(" " if block else "")
        parts.append(element.tail or "")

    walk(main)
    parts.pop()  # the main element's tail is outside it
    return xpath, "".join(parts)


def words(text: str) -> Counter[str]:
    return Counter(WORD.findall(text.lower()))


def scores(reference: Counter[str], text: Counter[str]) -> dict[str, int]:
    common = sum((reference & text).values())
    return {"common": common, "reference": sum(reference.values()), "text": sum(text.values())}


def measure(path: Path) -> dict[str, object]:
    html = decode_text(path.read_bytes(), markup=True)
    xpath, reference = reference_text(html)
    ref = words(reference)
    texts = {
        "trafilatura": trafilatura.extract(html, favor_recall=True, include_tables=True) or "",
        "visit": "\n".join(extract_passages(html, "text/html")),
        "corpus": extract_fields(html, path)[1],
    }
    return {"main": xpath, "br": len(re.findall(r"<br\b", html, re.IGNORECASE)),
            **{name: scores(ref, words(text)) for name, text in texts.items()}}


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for this run's figures")
    parser.add_argument("--before", type=Path, help="a previous run's JSON to show side by side")
    args = parser.parse_args()
    results = {page: measure(Path(page)) for page in PAGES if Path(page).is_file()}
    for page in PAGES:
        if page not in results:
            print(f"missing, skipped: {page}")
    args.out.write_text(json.dumps(results, indent=1))
    before = json.loads(args.before.read_text()) if args.before else {}
    columns = ["trafilatura", "visit", "corpus"]
    heading = "  ".join(f"{c + ' R/P':>15}" for c in columns)
    if before:
        heading += "  " + "  ".join(f"{c + ' before R/P':>22}" for c in columns[1:])
    print(f"{'page':<58} {'<br>':>5}  {heading}")
    totals: dict[str, Counter[str]] = {}
    for page, result in results.items():
        row = []
        for source, prefix in ((result, ""), (before.get(page), "before ")):
            if not source:
                continue
            for column in columns if not prefix else columns[1:]:
                s = source[column]
                totals.setdefault(prefix + column, Counter()).update(s)
                cell = f"{_ratio(s['common'], s['reference']):.3f}/{_ratio(s['common'], s['text']):.3f}"
                row.append(f"{cell:>{22 if prefix else 15}}")
        print(f"{page[-58:]:<58} {result['br']:>5}  " + "  ".join(row))
    print("micro average (recall / precision):")
    for name, s in totals.items():
        print(f"  {name:<20} {_ratio(s['common'], s['reference']):.4f} / {_ratio(s['common'], s['text']):.4f}")


if __name__ == "__main__":
    main()
