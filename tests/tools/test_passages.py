"""Page reduction: passages from real HTML, joining and splitting rules, BM25 selection within a budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import lxml.html
import pytest
import trafilatura

from venus_edge.tools.passages import (
    approx_tokens,
    extract_passages,
    first_sentences,
    is_script_shell,
    select_passages,
    split_passages,
)


def test_real_page_gives_paragraph_passages(docs_root: Path) -> None:
    html = (docs_root / "library/pickle.html").read_text(encoding="utf-8")
    passages = extract_passages(html, "text/html")
    assert len(passages) > 50, len(passages)
    assert any("Currently the default protocol is 4" in p for p in passages)
    assert all(len(p) <= 1200 for p in passages), max(map(len, passages))
    assert any("import pickle\nimport sqlite3\n" in p for p in passages), "code blocks keep their line breaks"


def test_headings_join_the_next_paragraph_sentences_stay_alone() -> None:
    passages = split_passages(["Warning", "Never unpickle untrusted data.", "Short sentence.", "x" * 2500])
    assert passages[:2] == ["Warning\nNever unpickle untrusted data.", "Short sentence."]
    assert [len(p) for p in passages[2:]] == [1200, 1200, 100]


def test_long_paragraph_splits_at_sentence_ends() -> None:
    sentence = "This sentence has exactly sixty characters, give or take a bit. "
    pieces = split_passages([sentence * 40], max_chars=300)
    assert all(len(p) <= 300 and p.endswith(".") for p in pieces), pieces[:3]
    assert " ".join(pieces) == (sentence * 40).strip()


def test_selection_keeps_best_passages_in_document_order_within_budget() -> None:
    passages = ["intro about nothing in particular", "pickle protocol 4 is the default", "weather", "pickle module"]
    kept = select_passages(passages, "default pickle protocol", budget_tokens=approx_tokens(passages[1] + passages[3]))
    assert kept == [passages[1], passages[3]]
    matched = select_passages(passages, "default pickle protocol", budget_tokens=1000, keep_unmatched=False)
    assert matched == [passages[1], passages[3]]
    unmatched = select_passages(passages, "zebra", budget_tokens=approx_tokens(passages[0]), keep_unmatched=False)
    assert unmatched == [passages[0]], "no match: the page's leading passages stand in"


def test_oversized_first_passage_is_cut_to_budget() -> None:
    kept = select_passages(["pickle " * 1000], "pickle", budget_tokens=10)
    assert len(kept) == 1 and len(kept[0]) == 40


def test_first_sentences() -> None:
    assert first_sentences("One. Two!  Three?", max_chars=9) == "One. Two!"
    assert first_sentences("x" * 500, max_chars=400) == "x" * 400


def test_tools_never_import_the_runtime() -> None:
    """One-way arrows (ARCHITECTURE.md): importing every tool module pulls in no engine, agent or protocol."""
    code = (
        "import sys, venus_edge.tools.search, venus_edge.tools.visit, venus_edge.tools.corpus, venus_edge.tools.replay,"
        " venus_edge.tools.web_search, venus_edge.tools.pdf;"
        "bad = [m for m in sys.modules if m.split('.')[:2] in (['venus_edge','engine'],['venus_edge','agent'],"
        "['venus_edge','protocol']) or m in ('torch', 'transformers', 'llama_cpp', 'ddgs', 'pypdf')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_script_shell_detection_keeps_pages_rendered_without_javascript() -> None:
    scripts = "<script src='/app.js'></script>"
    shell = f"<html><head><title>App</title>{scripts}</head><body><noscript>Enable JavaScript.</noscript>" \
            "<div id='root'></div></body></html>"
    article = "The measured boiling point was 412 kelvin at sea level. " * 5
    noscript_article = f"<html><body>{scripts}<noscript><p>{article}</p></noscript><div id=root></div></body></html>"
    shadow = f"<html><body>{scripts}<my-card><template shadowrootmode='open'><p>{article}</p></template>" \
             "</my-card></body></html>"
    short_article = f"<html><body>{scripts}<p>Short note: the meeting moved to 3 pm.</p></body></html>"
    assert is_script_shell(shell)
    assert not any(is_script_shell(page) for page in (noscript_article, shadow, short_article))
    assert not is_script_shell("<html><body><div id=root></div></body></html>"), "no scripts: simply empty"


def test_a_chinese_goal_selects_the_chinese_passage() -> None:
    passages = [
        "本页介绍 Python 标准库中的许多模块，以及它们的历史和用途，内容很长。" * 3,
        "pickle 模块的默认协议版本是 4，这个版本在 Python 3.8 中成为默认值。",
        "其他无关的段落，讨论天气和交通情况，与问题没有关系。" * 3,
    ]
    kept = select_passages(passages, "pickle 的默认协议是什么版本", budget_tokens=20)
    assert kept == [passages[1]]


PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
LINES = [f"Line {i}: the quick brown fox number {i} jumps over the lazy dog again and again." for i in range(1, 7)]
NAV = "<nav><a href='/'>Home</a> | <a href='/a'>About us</a> | Site menu words here now</nav>"
SIDEBAR = "<div class='sidebar'><h3>Related reading</h3><p>Some unrelated promotional words in a sidebar.</p></div>"
FOOTER = "<footer>Copyright 2024 Example Corp. All rights reserved forever and ever.</footer>"
BR_PAGES = {
    "text in body": "<body>{nav}{lines}{footer}</body>",
    "inside font": "<body>{nav}<font face=arial>{lines}</font>{sidebar}{footer}</body>",
    "inside center": "<body><center>{lines}</center>{footer}</body>",
    "after a heading": "<body>{nav}<h1>Notes</h1>{lines}{footer}</body>",
    "heading inside a div": "<body><div><h1>Notes</h1>{lines}</div>{sidebar}</body>",
    "opening line before the div": "<body>{nav}{first}<div>{rest}</div>{footer}</body>",
    "br with slash": "<body>{slash}</body>",
}


@pytest.mark.parametrize("layout", BR_PAGES.values(), ids=BR_PAGES.keys())
def test_no_line_of_a_br_separated_page_is_lost(layout):
    """trafilatura drops the first line of <br>-separated text without <p>/<article>; the recall pass puts it
    back in its place, and leaves menus, sidebars and footers out as the main pass did."""
    html = "<html><head><title>Notes</title></head>" + layout.format(
        nav=NAV, footer=FOOTER, sidebar=SIDEBAR, lines="<br>\n".join(LINES), first=LINES[0] + "<br>",
        rest="<br>".join(LINES[1:]), slash="<br/>".join(LINES)) + "</html>"
    text = " ".join(extract_passages(html, "text/html"))
    positions = [text.find(line) for line in LINES]
    assert -1 not in positions, [line[:7] for line, at in zip(LINES, positions) if at == -1]
    assert positions == sorted(positions), "in page order"
    assert "menu words" not in text and "Copyright" not in text and "promotional" not in text


def test_a_paragraph_the_main_pass_drops_on_a_real_page_is_restored():
    """On the real Python docs, trafilatura drops whole entries (mmap.write_byte); the recall pass restores them."""
    html = (PYTHON_DOCS / "library" / "mmap.html").read_text(encoding="utf-8")
    entry = "Write the integer byte into memory at the current position of the file pointer"
    assert entry not in " ".join(trafilatura.extract(html, favor_recall=True).split()), "the main pass drops it"
    text = " ".join(extract_passages(html, "text/html"))
    assert entry in text
    assert "Previous topic" not in text and "Python Software Foundation License" not in text


ARTICLE = ("The committee approved the new budget after a long debate about hospitals and schools in the region.",
           "Second paragraph with more details about the vote, the opposition and what happens next year.",
           "Closing remarks about the vote and the schedule of the next meetings of the regional council.")


@pytest.mark.parametrize(
    "marker", ["\u00ad", "\u200b", "\u2060", "\ufeff"], ids=["soft hyphen", "zwsp", "joiner", "bom"]
)
def test_text_the_main_pass_normalized_is_not_put_back_twice(marker):
    """trafilatura drops soft hyphens and zero-width characters; the recall pass compares on a folded form."""
    first = ARTICLE[0].replace("budget", f"bud{marker}get").replace("hospitals", f"hos{marker}pitals")
    html = f"<html><body><article><p>{first}</p><p>{ARTICLE[1]}</p><p>{ARTICLE[2]}</p></article></body></html>"
    passages = extract_passages(html, "text/html")
    assert sum("committee approved" in p for p in passages) == 1, passages


HIDDEN = {
    "aria-hidden": "<p aria-hidden='true'>Decorative duplicate heading text for the layout grid.</p>",
    "display none": "<p style='display: none'>Invisible text kept for search engines only.</p>",
    "closed dialog": "<dialog><p>Subscribe now and get unlimited access to every article.</p></dialog>",
    "video fallback": "<video src='v.mp4'>Your browser does not support the video tag, sorry.</video>",
    "iframe fallback": "<iframe src='x'>Your browser does not support inline frames at all.</iframe>",
    "svg text": "<svg><text>Chart label north south east west regions.</text></svg>",
    "newsletter box": "<div class='newsletter-box'><p>Sign up for our daily newsletter to get the news.</p></div>",
    "tags line": "<div class='post-tags'><p>Tags: politics, budget, hospitals and schools.</p></div>",
    "comments": "<div id='disqus_thread'><p>User123: This is a great article, thanks for writing it!</p></div>",
}


@pytest.mark.parametrize("extra", HIDDEN.values(), ids=HIDDEN.keys())
def test_hidden_text_media_fallbacks_and_furniture_are_not_put_back(extra):
    html = (
        f"<html><body><div class='content'><p>{ARTICLE[0]}</p>{extra}<p>{ARTICLE[1]}</p><p>{ARTICLE[2]}</p>"
        "</div></body></html>"
    )
    text = " ".join(extract_passages(html, "text/html"))
    hidden = lxml.html.fromstring(extra).text_content().strip()[:20]
    assert hidden not in text and all(p[:30] in text for p in ARTICLE), text


def test_a_restored_line_goes_in_its_place_even_after_a_repeated_label():
    """The dropped line is inserted before the next kept line at or after where the walk is, not before the first
    paragraph that happens to hold the same short text."""
    html = (
        "<html><body><div id='main'>"
        f"<p>Example: yes.</p><p>{ARTICLE[0]}</p>Dropped line that belongs right here in the middle.<br>"
        f"<p>Example: yes.</p><p>{ARTICLE[2]}</p></div></body></html>"
    )
    passages = extract_passages(html, "text/html")
    text = " ".join(passages)
    assert text.index(ARTICLE[0][:30]) < text.index("Dropped line") < text.index(ARTICLE[2][:30]), passages
