"""What each HTML tag, class and role means to the extractor (``_html``), in one table."""

from __future__ import annotations

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
