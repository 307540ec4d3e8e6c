"""Pages in other encodings, declared (or not) in each place a browser looks: served by conftest's
/charset/<name> route, read by test_charset.py."""

from __future__ import annotations

# Text in several scripts, and pages that carry it in an encoding declared (or not) in each place a browser looks.
GERMAN = "Die Grüße für Müller: Straße, Größe, Übung. Das Café öffnet um acht – „schön“ und 5 €!"
RUSSIAN = ("Съешь же ещё этих мягких французских булок, да выпей чаю. Широкая электрификация южных губерний даст "
           "мощный толчок подъёму сельского хозяйства.")
JAPANESE = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所で泣いていた。"
CHINESE = "深度研究助手会交叉核对多个来源，然后把结论整合成一份全面、准确、结构清晰的回答。"


def _html(text: str, head: str = "") -> str:
    return f"<html><head>{head}<title>Page</title></head><body><p>{text}</p></body></html>"


# name -> (Content-Type header, body bytes, the text a browser shows)
CHARSET_CASES: dict[str, tuple[str, bytes, str]] = {
    "meta-charset-1252": ("text/html", _html(GERMAN, '<meta charset="windows-1252">').encode("cp1252"), GERMAN),
    "meta-http-equiv-latin1": ("text/html", _html(GERMAN, '<meta http-equiv="Content-Type" '
                                                  'content="text/html; charset=iso-8859-1">').encode("cp1252"), GERMAN),
    "meta-single-quoted": ("text/html", _html(RUSSIAN, "<meta charset='koi8-r'>").encode("koi8-r"), RUSSIAN),
    "meta-shift-jis": ("text/html", _html(JAPANESE, '<meta charset="Shift_JIS">').encode("shift_jis"), JAPANESE),
    "meta-gbk": ("text/html", _html(CHINESE, '<meta http-equiv=Content-Type content="text/html;charset=GBK">')
                 .encode("gbk"), CHINESE),
    "header-beats-meta": ("text/html; charset=koi8-r", _html(RUSSIAN, '<meta charset="utf-8">').encode("koi8-r"),
                          RUSSIAN),
    "bom-beats-header": ("text/html; charset=iso-8859-1", b"\xef\xbb\xbf" + _html(GERMAN).encode("utf-8"), GERMAN),
    "utf16-bom": ("text/html", _html(JAPANESE).encode("utf-16"), JAPANESE),
    "xml-declaration": ("application/xhtml+xml", ('<?xml version="1.0" encoding="windows-1251"?>' + _html(RUSSIAN))
                        .encode("cp1251"), RUSSIAN),
    "undeclared-1252": ("text/html", _html(GERMAN).encode("cp1252"), GERMAN),
    "undeclared-shift-jis": ("", _html(JAPANESE).encode("shift_jis"), JAPANESE),
    "undeclared-utf8": ("text/html", _html(CHINESE).encode("utf-8"), CHINESE),
    "plain-1252": ("text/plain", GERMAN.encode("cp1252"), GERMAN),
    "plain-declared-koi8": ("text/plain; charset=KOI8-R", RUSSIAN.encode("koi8-r"), RUSSIAN),
}
CHARSET_PAGES = {name: (content_type, body) for name, (content_type, body, _) in CHARSET_CASES.items()}
