"""What each HTML tag, class and role means to the extractor (``_html_writer``, walked
by ``_html``), in one table, and which literal text Markdown must escape."""

from __future__ import annotations

import functools
import re
from typing import Final

# fmt: off
DROP: Final = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "math", "canvas", "iframe", "object",
        "embed", "nav", "head", "button", "select", "datalist", "dialog",
    }
)
# fmt: on
DROP_ROLES: Final = frozenset(
    {"navigation", "menu", "menubar", "search", "contentinfo", "complementary"}
)
# fmt: off
DROP_CLASSES: Final = frozenset(
    {
        "sphinxsidebar", "related", "footer", "headerlink", "navheader", "navfooter", "navigation",
        "nav", "mw-editsection",
    }
)
# fmt: on
"""Sphinx's sidebar, its prev/next bar, its footer and its permalinks; DocBook's and
gtk-doc's navigation bars (Valgrind's DocBook style names them ``table.nav``); MediaWiki's
"[edit]" links."""
# fmt: off
PERMALINK_CLASSES: Final = frozenset(
    {
        "mark", "anchor", "anchorjs-link", "header-anchor", "heading-anchor", "hash-link",
        "copiable-anchor",
    }
)
# fmt: on
"""Classes of in-page ``<a href="#...">`` permalink marks (Node.js docs, markdown-it, Texinfo
7's ``¶``, ...)."""
VOID: Final = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
# fmt: off
BLOCK: Final = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "ol",
        "p", "pre", "section", "summary", "table", "tr", "ul", "h1", "h2", "h3", "h4", "h5", "h6",
    }
)
# fmt: on
AUTOCLOSE: Final = frozenset({"p", "li", "dt", "dd", "tr", "td", "th", "option"})
LAYOUT: Final = frozenset(
    {"pre", "table", "ul", "ol", "dl", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6"}
)
"""Blocks that a Markdown table cell cannot hold: a cell with one (or a second ``<p>``) makes
its table a layout table, whose cells become blocks."""
HEADINGS: Final = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
INLINE_MARKS: Final = {"strong": "**", "b": "**", "em": "*", "i": "*", "code": "`"}
"""Markdown marks that open and close an inline element (none inside ``<pre>``)."""
NO_LANGUAGE: Final = frozenset({"", "default", "none", "text", "plain", "plaintext", "nohighlight"})
MAX_MARKS: Final = 32
"""Inline elements open at once that get Markdown marks (deeper ones are plain text), so
unclosed ``<b>`` tags cannot make each block cost more."""
SPAN_CELLS: Final = 100_000
"""Empty cells ``colspan``/``rowspan`` may add to one page, so spans cannot inflate it."""
WS: Final = " \t\n\r\f\v\x00"
"""Whitespace, and the ``\\x00`` that stands for a ``<br>`` until the block is flushed."""
SPACE = re.compile(r"\s+")
BREAK = re.compile(" ?\x00 ?")
BLANK_LINES = re.compile(r"^(?:[ \t]*\n)+")
ESCAPE = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)|[*`]|\](?=\()|<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)")
"""Characters of literal text that CommonMark reads as markup anywhere in a line: a backslash
before punctuation, stars, backticks, the ``](`` that closes a link, ``<`` that may open a tag
or an autolink, and ``&`` that starts an entity."""
MAY_ESCAPE = re.compile(r"[\\*`\]<&_]")
"""The characters :func:`escape` may escape: most text has none, and this search costs a tenth
of the substitution."""
UNDERSCORE_RUNS = re.compile(r"(?<!\w)_++(?![\s\x00])|(?<![\s\x00_])_++(?!\w)")
"""``_`` runs that can open or close emphasis, with a text node's ends counted as punctuation
(CommonMark's flanking rules: open after a space or punctuation and before no space; close
after no space and before a space or punctuation); intraword runs, as in ``snake_case``, and
lone ones between spaces are neither."""
OPENS = re.compile(r"(?<!\w)_++(?![\s\x00])")
LAST_CLOSES = re.compile(r"(?s:.*)(?<![\s\x00_])(_++)(?!\w)")
LINE_START = re.compile(
    r"^(?:#{1,6}(?=[ \t]|$)|[-+](?=[ \t]|$)|-(?=[- \t]*$)|_(?=[_ \t]*$)|=+[ \t]*$|>|~~~"
    r"|<(?=[A-Za-z/!?])|\[(?=[^\]\n]*\]:)|\d{1,9}(?=[.)](?:[ \t]|$)))",
    re.M,
)
"""What makes a line of literal text a heading, list item, quote, thematic break, setext
underline, fence, HTML block or link definition; escaped before its first character (after
an ordered list's number)."""
LINE_MARKS: Final = frozenset("#-+=_>~<[0123456789")
"""First characters of the ``LINE_START`` matches, so most blocks skip the search."""
CLOSING_HASHES = re.compile(r"(?:^|(?<=[ \t]))#+[ \t]*$")
"""The ``#`` run that would end an ATX heading, and vanish, if a heading's text ended so."""


def escape(text: str, opener: bool) -> tuple[str, bool]:
    """Literal text as Markdown that reads as the same text, and whether an underscore run
    that could open emphasis is still open after it (``opener``: before it, in its block).

    Underscores are escaped only where they could pair into emphasis, so ``snake_case``,
    ``_name`` or ``a _ b`` stay as they are while ``_private_`` and ``__init__`` are escaped:
    every run that can open or close, from the first that can open (or, after an open one,
    the first of all) to the last that can close.
    """
    text = ESCAPE.sub(r"\\\g<0>", text)
    if "_" not in text:
        return text, opener
    first = (UNDERSCORE_RUNS if opener else OPENS).search(text)
    last = LAST_CLOSES.match(text)
    if not (first and last):
        return text, opener or first is not None
    start, end = first.start(), last.end(1)
    if start > last.start(1) or (start == last.start(1) and not opener):
        return text, True
    span = UNDERSCORE_RUNS.sub(_run_escaped, text[start:end])
    text = text[:start] + span + text[end:]
    return text, opener or OPENS.search(text, start + len(span)) is not None


def _run_escaped(found: re.Match[str]) -> str:
    return "\\_" * len(found[0])


def escape_lines(text: str) -> str:
    """A Markdown block whose lines begin as literal text, not as block markup
    (``LINE_START``)."""
    if text[:1] in LINE_MARKS or "\n" in text:
        return LINE_START.sub(_line_escaped, text)
    return text


def escape_heading(text: str) -> str:
    """A heading's text, whose trailing ``#`` run is not read as the heading's end."""
    return CLOSING_HASHES.sub(r"\\\g<0>", text) if text.endswith("#") else text


def _line_escaped(found: re.Match[str]) -> str:
    mark = found[0]
    return mark + "\\" if mark[0].isdigit() else "\\" + mark


def span(value: str | None, most: int) -> int:
    """A ``colspan``/``rowspan`` value, between 1 and ``most``."""
    try:
        return min(max(int(value or 1), 1), most)
    except ValueError:
        return 1


def language(classes: list[str], prefixes: tuple[str, ...]) -> str | None:
    """The code language a class such as ``language-js`` names ("" for plain text), or
    ``None`` when no class has one of the ``prefixes``."""
    for name in classes:
        for prefix in prefixes:
            if name.startswith(prefix):
                found = name[len(prefix) :]
                return "" if found in NO_LANGUAGE else found
    return None


def squeeze(text: str) -> str:
    """``text`` with each run of whitespace as one space, and none at the ends: what
    ``re.sub(r"\\s+", " ", text).strip()`` gives (``str.split`` and ``\\s`` know the same
    whitespace), at a fraction of its cost (the substitution was a sixth of the walk's)."""
    return " ".join(text.split())


def dropped_for(tag: str, attributes: dict[str, str | None]) -> bool:
    """Whether an element's attributes drop it: hidden, a navigation role, a sidebar's or a
    permalink's class."""
    if not (len(attributes) == 1 and "class" in attributes):  # (the most common: a class alone)
        if "hidden" in attributes or attributes.get("aria-hidden") == "true":
            return True
        if attributes.get("role") in DROP_ROLES:
            return True

    classes = attributes.get("class")
    if not classes:
        return False
    kind = _class_kind(classes) if len(classes) <= CACHED_CLASS else _kind_of_class(classes)
    if kind is _DROPS:
        return True
    return kind is _PERMALINK and tag == "a" and (attributes.get("href") or "").startswith("#")


_DROPS: Final = "drops"
_PERMALINK: Final = "permalink"
CACHED_CLASS: Final = 200
"""Longest class whose kind is remembered, here and in ``_main``'s verdicts (so each cache
holds at most 4,096 short strings)."""


def _kind_of_class(classes: str) -> str:
    """What a class says to :func:`dropped_for`: ``_DROPS``, ``_PERMALINK`` or ""."""
    names = classes.split()
    if not DROP_CLASSES.isdisjoint(names):
        return _DROPS
    return "" if PERMALINK_CLASSES.isdisjoint(names) else _PERMALINK


_class_kind = functools.lru_cache(maxsize=4096)(_kind_of_class)
""":func:`_kind_of_class`, remembered: a page repeats its classes, and the walk asks for
every element with attributes (the split and the set tests were a tenth of its time)."""
