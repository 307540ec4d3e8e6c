"""Line breaks are text: a parsed page's ``<br>``, ``<wbr>`` and ``<pre>`` made readable by every text pass.

A ``<br>`` is an element without text, so a pass that reads text nodes (lxml's ``text_content``, ``itertext``)
reads ``foo<br>bar`` as ``foobar``; trafilatura knows ``<br>`` (its ``<lb/>``) but collapses the line breaks of a
``<pre>`` it does not take as code. ``break_lines`` normalizes the parsed tree once, before visit's main pass
(trafilatura), its recall and fallback passes and the corpus's index pass read it, so all of them see the lines a
browser shows:

1. every ``<br>`` (the parser reads ``<br/>``, ``<br >`` and ``<BR>`` alike) stays, for trafilatura, and its tail
   starts with a newline, for the passes that read text nodes: ``foo<br>bar`` reads ``foo\\nbar``. Inside a
   ``<pre>`` the ``<br>`` becomes that newline alone (trafilatura drops the text after a ``<br>`` in code);
2. a ``<wbr>`` (a place where a browser may break a long word) is removed and its neighbours joined:
   ``super<wbr>cali`` reads ``supercali``;
3. the content of a ``<pre>`` that holds no ``<code>`` is wrapped in one: trafilatura keeps whitespace only in
   what it takes as code, and a ``<pre>``'s newlines and indentation are its text whatever it holds.

It runs wherever the ``<br>`` stands (directly in ``<body>``, in ``<p>``, ``<div>``, ``<td>``, ``<li>``, inside
``<span>``, ``<b>``, ``<a>``), in any document the HTML parser reads, XHTML included.
"""

from __future__ import annotations

import lxml.html
from lxml import etree

__all__: list[str] = []


def break_lines(tree: lxml.html.HtmlElement) -> None:
    """Normalize ``tree`` (an lxml HTML tree, changed in place) as the module docstring says."""
    for wbr in list(tree.iter("wbr")):
        wbr.drop_tag()  # lxml joins its tail to the text before it
    for br in list(tree.iter("br")):
        br.tail = "\n" + (br.tail or "")
        if next(br.iterancestors("pre"), None) is not None:
            br.drop_tag()  # inside a <pre> the newline is the line break (trafilatura drops what follows a code <lb/>)
    for pre in tree.iter("pre"):
        if pre.find(".//code") is None and (pre.text or len(pre)):
            _wrap_content(pre, "code")


def _wrap_content(element: etree._Element, tag: str) -> None:
    """Move ``element``'s text and children into a new ``tag`` child, its only child."""
    wrapper = etree.SubElement(element, tag)
    wrapper.text, element.text = element.text, None
    for child in list(element)[:-1]:
        wrapper.append(child)  # append moves the child, its tail with it
