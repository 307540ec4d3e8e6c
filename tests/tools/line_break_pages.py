"""Pages whose lines are separated by ``<br>`` (and its siblings) wherever it can stand: served by conftest's
/lines/<name> route, read by test_line_breaks.py through visit, the corpus and the recall pass."""

from __future__ import annotations

# No line ends in punctuation, so lines that run together show as glued words ("tonightBravo").
LINES = (
    "Alpha harbour lights shine over the quiet northern bay tonight",
    "Bravo fishermen mend their nets beside the old stone pier",
    "Charlie gulls circle above the boats waiting for the evening catch",
)
RUSSIAN_LINES = (
    "Альфа огни гавани светят над тихой северной бухтой сегодня",
    "Браво рыбаки чинят сети возле старого каменного причала",
    "Чарли чайки кружат над лодками в ожидании вечернего улова",
)
FOOTER = "<footer>Copyright 2024 Harbour Weekly. All rights reserved.</footer>"
A, B, C = LINES


def _page(body: str, head: str = "") -> str:
    return f"<!DOCTYPE html><html><head>{head}<title>Harbour notes</title></head><body>{body}</body></html>"


# name -> the page's <body>; each page shows LINES as three lines
BODIES: dict[str, str] = {
    "directly in body": f"{A}<br>{B}<br>{C}",
    "in body with source newlines and a footer": f"{A}<br>\n{B}<br>\n{C}{FOOTER}",
    "in p": f"<p>{A}<br>{B}<br>{C}</p>",
    "in div": f"<div>{A}<br>{B}<br>{C}</div>{FOOTER}",
    "in td": f"<table><tr><td>{A}<br>{B}<br>{C}</td></tr></table>",
    "in li": f"<ul><li>{A}<br>{B}<br>{C}</li></ul>",
    "in blockquote": f"<blockquote>{A}<br>{B}<br>{C}</blockquote>",
    "inside span": f"<p><span>{A}<br>{B}</span><br>{C}</p>",
    "inside b": f"<p><b>{A}<br></b>{B}<br><b>{C}</b></p>",
    "inside a": f"<p>{A}<br><a href='/bravo'>{B}<br></a>{C}</p>",
    "br slash": f"<p>{A}<br/>{B}<br/>{C}</p>",
    "br space": f"<p>{A}<br >{B}<br >{C}</p>",
    "br space slash": f"<p>{A}<br />{B}<br />{C}</p>",
    "BR upper case": f"<p>{A}<BR>{B}<BR>{C}</p>",
    "newlines in pre": f"<pre>{A}\n{B}\n{C}</pre>",
    "br in pre": f"<pre>{A}<br>{B}<br />{C}</pre>",
    "wbr is nothing": f"<p>{A}<br>{B.replace('fishermen', 'fisher<wbr>men')}<br>{C}</p>",
}
# name -> (Content-Type header, body bytes, the lines the page shows)
LINE_BREAK_PAGES: dict[str, tuple[str, bytes, tuple[str, ...]]] = {
    name: ("text/html; charset=utf-8", _page(body).encode("utf-8"), LINES) for name, body in BODIES.items()
}
LINE_BREAK_PAGES["windows-1251 declared in meta"] = (
    "text/html",
    _page("<br>".join(RUSSIAN_LINES), '<meta charset="windows-1251">').encode("cp1251"),
    RUSSIAN_LINES,
)
LINE_BREAK_PAGES["xhtml"] = (
    "application/xhtml+xml",
    (
        '<?xml version="1.0" encoding="iso-8859-1"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" '
        '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
        f"<title>Harbour notes</title></head><body><p>{A}<br/>{B}<br/>{C}</p></body></html>"
    ).encode("latin-1"),
    LINES,
)
