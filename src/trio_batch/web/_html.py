"""HTML to readable text or Markdown, with the standard library's ``html.parser`` only.

Scripts, styles, navigation and other non-content elements are dropped; headings, paragraphs,
lists, tables, quotes and preformatted blocks keep their shape. Markdown adds heading marks,
links (made absolute), emphasis and code.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Final

_DROP: Final = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "canvas",
        "iframe",
        "object",
        "embed",
        "nav",
        "head",
        "button",
        "select",
        "datalist",
        "dialog",
    }
)
_VOID: Final = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
_BLOCK: Final = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hr",
        "li",
        "main",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tr",
        "ul",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
    }
)
_AUTOCLOSE: Final = frozenset({"p", "li", "dt", "dd", "tr", "td", "th", "option"})
_HEADINGS: Final = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_INLINE_MARKS: Final = {"strong": "**", "b": "**", "em": "*", "i": "*", "code": "`"}
"""Markdown marks that open and close an inline element (``code`` only outside ``<pre>``)."""
_SPACE = re.compile(r"\s+")


@dataclass
class _List:
    ordered: bool
    count: int = 0


@dataclass
class _Converter(HTMLParser):
    markdown: bool
    base_url: str
    blocks: list[tuple[str, bool]] = field(default_factory=list)
    title: str = ""
    _pieces: list[str] = field(default_factory=list)
    _drop: list[str] = field(default_factory=list)
    _lists: list[_List] = field(default_factory=list)
    _prefix: str = ""
    _tight: bool = False
    _heading: int = 0
    _pre: int = 0
    _quote: int = 0
    _in_title: bool = False
    _links: list[str | None] = field(default_factory=list)
    _cells: list[str] | None = None
    _header_row: bool = False
    _rows: int = 0

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    # -- output -------------------------------------------------------------------------------

    def _flush(self) -> None:
        raw = "".join(self._pieces)
        self._pieces.clear()
        if self._pre:
            text = raw.strip("\n")
        else:
            text = _SPACE.sub(" ", raw)
            text = re.sub(r" ?\x00 ?", "\n", text).strip()
        if not text:
            return
        if self._heading and self.markdown:
            text = "#" * self._heading + " " + text
        if self._prefix:
            text = self._prefix + text
            self._prefix = ""
        elif self._lists and self._tight:
            text = "  " * len(self._lists) + text
        if self._quote and self.markdown:
            text = "\n".join("> " + line for line in text.split("\n"))
        self.blocks.append((text, self._tight))

    def _emit(self, text: str) -> None:
        if self._in_title:
            self.title += text
            return
        if self._drop:
            return
        if self._cells is not None:
            if self._cells:
                self._cells[-1] += text
            return
        self._pieces.append(text)

    def _inline_mark(self, tag: str) -> str:
        """The Markdown mark ``tag`` opens and closes here; "" for none."""
        if not self.markdown or (tag == "code" and self._pre):
            return ""
        return _INLINE_MARKS.get(tag, "")

    # -- parser callbacks ---------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "title":
            self._in_title = True
            return
        if self._drop == [tag] and tag in _AUTOCLOSE:
            self._drop.clear()  # a hidden <p> or <li> left open ends where the next one starts
        elif self._drop:
            if tag not in _VOID:
                self._drop.append(tag)
            return
        if (
            tag in _DROP
            or "hidden" in attributes
            or attributes.get("aria-hidden") == "true"
            or attributes.get("role") in ("navigation", "menu", "menubar")
        ):
            if tag not in _VOID:
                self._drop.append(tag)
            return
        if tag == "br":
            self._emit("\n" if self._pre else " \x00 ")
            return
        if tag in ("td", "th"):
            if self._cells is not None:
                self._cells.append("")
                self._header_row = self._header_row or tag == "th"
            return
        if tag in _BLOCK:
            self._flush()
        if tag in _HEADINGS:
            self._heading = _HEADINGS[tag]
        elif tag in ("ul", "ol"):
            self._lists.append(_List(ordered=tag == "ol"))
            self._tight = True
        elif tag == "li":
            depth = max(len(self._lists), 1)
            current = self._lists[-1] if self._lists else _List(ordered=False)
            current.count += 1
            mark = f"{current.count}. " if current.ordered else "- "
            self._prefix = "  " * (depth - 1) + mark
            self._tight = True
        elif tag == "pre":
            self._pre += 1
            if self.markdown:
                self._pieces.append("```\n")
        elif tag == "blockquote":
            self._quote += 1
        elif tag == "tr":
            self._cells = []
            self._header_row = False
        elif tag == "hr" and self.markdown:
            self.blocks.append(("---", False))
        elif self.markdown and tag == "a":
            href = attributes.get("href") or ""
            if href and not href.lower().startswith(("javascript:", "data:", "#")):
                self._links.append(urllib.parse.urljoin(self.base_url, href))
                self._emit("[")
            else:
                self._links.append(None)
        elif mark := self._inline_mark(tag):
            self._emit(mark)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if self._drop:
            if tag in self._drop:
                while self._drop.pop() != tag:
                    pass
            return
        if tag in ("td", "th"):
            return
        if tag == "tr" and self._cells is not None:
            cells = [_SPACE.sub(" ", c.replace("\x00", " ")).strip() for c in self._cells]
            self._cells = None
            if any(cells):
                line = "| " + " | ".join(cells) + " |" if self.markdown else " | ".join(cells)
                self.blocks.append((line, True))
                if self.markdown and self._header_row and self._rows == 0:
                    self.blocks.append(("|" + " --- |" * len(cells), True))
                self._rows += 1
            return
        if tag == "table":
            self._rows = 0
            self.blocks.append(("", False))
        if self.markdown and tag == "a" and self._links:
            href = self._links.pop()
            if href is not None:
                self._emit(f"]({href})")
        elif mark := self._inline_mark(tag):
            self._emit(mark)
        if tag in _BLOCK:
            if tag == "pre" and self.markdown:
                self._pieces.append("\n```")
            self._flush()
        if tag in _HEADINGS:
            self._heading = 0
        elif tag in ("ul", "ol") and self._lists:
            self._lists.pop()
            self._tight = bool(self._lists)
            if not self._lists:
                self.blocks.append(("", False))
        elif tag == "pre" and self._pre:
            self._pre -= 1
        elif tag == "blockquote" and self._quote:
            self._quote -= 1

    def handle_data(self, data: str) -> None:
        self._emit(data)

    def close(self) -> None:
        super().close()
        self._flush()


def _join(blocks: list[tuple[str, bool]]) -> str:
    out: list[str] = []
    previous_tight = False
    for text, tight in blocks:
        if not text:
            previous_tight = False
            continue
        text = "\n".join(line.rstrip() for line in text.split("\n"))
        if out:
            out.append("\n" if tight and previous_tight else "\n\n")
        out.append(text)
        previous_tight = tight
    return "".join(out).strip() + ("\n" if out else "")


def html_to_text(html: str, *, base_url: str = "", markdown: bool = False) -> tuple[str, str]:
    """The readable text (or Markdown) of an HTML document, and its title.

    Never raises on malformed HTML: the parser is forgiving, and what it cannot place is kept
    as text.
    """
    converter = _Converter(markdown=markdown, base_url=base_url)
    converter.feed(html)
    converter.close()
    return _join(converter.blocks), _SPACE.sub(" ", converter.title).strip()
