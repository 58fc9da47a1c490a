"""HTML to readable text or Markdown, with the standard library's ``html.parser`` only.

Scripts, styles, navigation, sidebars, footers and permalink marks are dropped; headings,
paragraphs, lists, tables, quotes and preformatted blocks keep their shape. Markdown adds
heading marks, links (made absolute), emphasis and code, and keeps them well formed: no markup
inside code, no emphasis that starts or ends with a space, no link without text, and one fence
per code block; text that Markdown would read as markup (``# ``, ``1. ``, ``[](``, ``_a_``,
``<tag>``) is escaped, and only where it would be.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser

from ._html_tags import (
    AUTOCLOSE,
    BLANK_LINES,
    BLOCK,
    BREAK,
    DROP,
    DROP_CLASSES,
    DROP_ROLES,
    HEADINGS,
    INLINE_MARKS,
    LAYOUT,
    MAX_MARKS,
    MAY_ESCAPE,
    PERMALINK_CLASSES,
    SPACE,
    SPAN_CELLS,
    VOID,
    WS,
    escape,
    escape_heading,
    escape_lines,
    language,
    span,
)


@dataclass
class _List:
    ordered: bool
    count: int = 0
    column: int = 0
    """Where the open item's content starts: the indent of its blocks after the first."""


@dataclass
class _Mark:
    """An open inline element's Markdown: written only once text follows it (so an element
    with no text leaves no mark), and closed with the whitespace around it moved outside."""

    tag: str
    opening: str
    closing: str
    buffer: list[str] | None = None
    """Where the opening mark went; ``None`` while it waits for text."""
    index: int = 0


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
    _inside: int = 0
    """Elements open inside the ``<pre>``."""
    _codes: int = 0
    """``<code>`` elements seen directly inside the ``<pre>``."""
    _top_code: bool = False
    """The element open directly inside the ``<pre>`` is a ``<code>``."""
    _loose: bool = False
    """The ``<pre>`` has text outside its direct ``<code>`` children, so they are inline."""
    _language: str = ""
    _highlight: str = ""
    _quote: int = 0
    _in_title: bool = False
    _marks: list[_Mark] = field(default_factory=list)
    _waiting: int = 0
    """How many of ``_marks`` wait for text."""
    _opener: bool = False
    """The block or cell has an unescaped ``_`` that could open emphasis."""
    _code: int = 0
    _cells: list[list[str]] | None = None
    _paragraphs: int = 0
    _header_row: bool = False
    _rows: int = 0
    _tables: int = 0
    _spans: dict[int, int] = field(default_factory=dict)
    """Columns that cells of earlier rows span into, and for how many more rows."""
    _next_spans: dict[int, int] = field(default_factory=dict)
    _pad: int = 0
    """Empty cells the open cell's ``colspan`` adds after it."""
    _budget: int = SPAN_CELLS
    """Empty cells that spans may still add to this page."""
    _layout: list[int] = field(default_factory=list)
    """Depths of the open tables found to be layout tables."""

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    # -- output -------------------------------------------------------------------------------

    def _flush(self) -> None:
        if not self._pieces:
            return
        if self._marks:
            self._settle(self._pieces)
        raw = "".join(self._pieces)
        self._pieces.clear()
        self._opener = False
        if self._pre:
            text = BLANK_LINES.sub("", raw).rstrip()
            if text and self.markdown:
                fence = "```"
                while fence in text:
                    fence += "`"
                text = f"{fence}{self._language}\n{text}\n{fence}"
        else:
            text = SPACE.sub(" ", raw)
            if "\x00" in text:
                text = BREAK.sub("\n", text)
            text = text.strip()
            if self.markdown and text:
                text = escape_heading(text) if self._heading else escape_lines(text)
        if not text:
            return
        if self._heading and self.markdown:
            text = "#" * self._heading + " " + text
        column = len(self._prefix) if self._prefix else 0
        if self._prefix:
            text = self._prefix + text
            self._prefix = ""
        elif self._lists and self._tight:
            column = self._lists[-1].column
            text = " " * column + text
        if self._pre and column and self.markdown:
            # a fence in a list item is indented to the item's content, or it ends the list
            text = text.replace("\n", "\n" + " " * column)
        if self._quote and self.markdown:
            text = "\n".join("> " + line for line in text.split("\n"))
        self.blocks.append((text, self._tight))

    def _buffer(self) -> list[str] | None:
        """Where text goes now: the open table cell, or the block; ``None`` to drop it."""
        if self._cells is not None:
            return self._cells[-1] if self._cells else None
        return self._pieces

    def _emit(self, text: str) -> None:
        if self._in_title:
            self.title += text
            return
        if self._drop:
            return
        buffer = self._buffer()
        if buffer is None:
            return
        if self._pre and not (self._loose or (self._inside and self._top_code) or text.isspace()):
            self._loose = True
        if self.markdown and not (self._pre or self._code):
            if MAY_ESCAPE.search(text):
                text, self._opener = escape(text, self._opener)
            if text[:1] == "(" and buffer and buffer[-1].endswith("]"):
                buffer[-1] = buffer[-1][:-1] + "\\]"  # a ] and ( from two text nodes
        if self._waiting and not self._pre:
            body = text.lstrip(WS)
            if not body:
                buffer.append(text)
                return
            if len(body) < len(text):
                buffer.append(text[: len(text) - len(body)])
            for mark in self._marks:
                if mark.buffer is None:
                    if mark.opening == "[" and buffer and buffer[-1].endswith("!"):
                        buffer[-1] = buffer[-1][:-1] + "\\!"  # not an image's ![
                    mark.buffer, mark.index = buffer, len(buffer)
                    buffer.append(mark.opening)
            self._waiting = 0
            text = body
        buffer.append(text)

    # -- inline marks -------------------------------------------------------------------------

    def _open(self, tag: str, opening: str, closing: str) -> None:
        if self._drop or self._in_title or len(self._marks) >= MAX_MARKS:
            return
        self._marks.append(_Mark(tag, opening, closing))
        self._waiting += 1

    def _close(self, mark: _Mark) -> None:
        """Write ``mark``'s closing, or remove its opening if nothing but space followed."""
        buffer = mark.buffer
        if buffer is None:
            self._waiting -= 1
            return
        mark.buffer = None
        start = mark.index + 1
        tail = ""
        while len(buffer) > start:
            piece = buffer[-1]
            kept = piece.rstrip(WS)
            if kept == piece:
                break
            tail = piece[len(kept) :] + tail
            if kept:
                buffer[-1] = kept
                break
            buffer.pop()
        if len(buffer) == start:
            buffer.pop()
        else:
            closing = mark.closing
            if mark.tag == "code" and "`" in "".join(buffer[start:]):
                buffer[mark.index], closing = "`` ", " ``"
            buffer.append(closing)
        if tail:
            buffer.append(tail)

    def _end_mark(self, tag: str) -> None:
        for i in range(len(self._marks) - 1, -1, -1):
            if self._marks[i].tag == tag:
                for mark in reversed(self._marks[i:]):
                    self._close(mark)
                del self._marks[i:]
                return

    def _settle(self, buffer: list[str]) -> None:
        """Close the marks written into ``buffer``, as a block or cell ends there: emphasis
        or a link that spans blocks covers the first one only, never leaves a mark open, and
        cannot be repeated in every block it spans."""
        kept = []
        for mark in reversed(self._marks):
            if mark.buffer is buffer:
                self._close(mark)
            else:
                kept.append(mark)
        if len(kept) < len(self._marks):
            self._marks[:] = reversed(kept)

    # -- tables -------------------------------------------------------------------------------

    def _spanned(self, *, end: bool = False) -> None:
        """Add the empty cells of the open cell's ``colspan``, then those that ``rowspan``
        cells of earlier rows fill here (all of them at the row's ``end``)."""
        cells = self._cells
        assert cells is not None
        cells.extend([] for _ in range(self._pad))
        self._pad = 0
        last = max(self._spans) if end and self._spans else -1
        while self._spans and self._budget > 0:
            column = len(cells)
            left = self._spans.get(column)
            if left is None and column >= last:
                return
            cells.append([])
            self._budget -= 1
            if left is not None:
                if left > 1:
                    self._spans[column] = left - 1
                else:
                    del self._spans[column]
        self._spans.clear()

    def _in_layout(self) -> bool:
        return bool(self._layout) and self._layout[-1] == self._tables

    def _unrow(self) -> None:
        """The open row's table is a layout table: its cells so far become blocks."""
        assert self._cells is not None
        for cell in self._cells:
            self._settle(cell)
            text = SPACE.sub(" ", "".join(cell).replace("\x00", " ")).strip()
            if text:
                self.blocks.append((escape_lines(text) if self.markdown else text, False))
        self._cells = None
        if not self._in_layout():
            self._layout.append(self._tables)

    # -- parser callbacks ---------------------------------------------------------------------

    def _dropped(self, tag: str, attributes: dict[str, str | None]) -> bool:
        if tag in DROP or "hidden" in attributes or attributes.get("aria-hidden") == "true":
            return True
        if attributes.get("role") in DROP_ROLES or (tag == "footer" and not self._quote):
            return True
        classes = (attributes.get("class") or "").split()
        if not classes:
            return False
        if not DROP_CLASSES.isdisjoint(classes):
            return True
        return (
            tag == "a"
            and (attributes.get("href") or "").startswith("#")
            and not PERMALINK_CLASSES.isdisjoint(classes)
        )

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "title":
            self._in_title = True
            return
        if self._drop == [tag] and tag in AUTOCLOSE:
            self._drop.clear()  # a hidden <p> or <li> left open ends where the next one starts
        elif self._drop:
            if tag not in VOID:
                self._drop.append(tag)
            return
        if self._dropped(tag, attributes):
            if tag not in VOID:
                self._drop.append(tag)
            return
        if tag == "br":
            buffer = self._buffer()
            if buffer is not None and not self._in_title:
                buffer.append("\n" if self._pre else " " if self._code else " \x00 ")
            return
        if self._cells is not None and (tag in LAYOUT or (tag == "p" and self._paragraphs)):
            self._unrow()
        if self._in_layout() and tag in ("tr", "td", "th"):
            self._flush()
            return
        if tag in ("td", "th"):
            if self._cells is not None:
                if self._cells:
                    self._settle(self._cells[-1])
                self._spanned()
                self._cells.append([])
                self._opener = False
                self._paragraphs = 0
                self._header_row = self._header_row or tag == "th"
                column = len(self._cells) - 1
                rows = span(attributes.get("rowspan"), 100)
                self._pad = min(span(attributes.get("colspan"), 50) - 1, max(self._budget, 0))
                self._budget -= self._pad
                if rows > 1:
                    for extra in range(self._pad + 1):
                        self._next_spans[column + extra] = rows - 1
            return
        if tag == "p" and self._cells is not None:
            self._paragraphs += 1
            return
        if tag == "table":
            self._tables += 1
            self._spans.clear()
            self._next_spans.clear()
        elif tag == "sup":
            self._emit("^")
        if tag in BLOCK:
            self._flush()
        if tag in HEADINGS:
            self._heading = HEADINGS[tag]
        elif tag in ("ul", "ol"):
            self._lists.append(_List(ordered=tag == "ol"))
            self._tight = True
        elif tag == "li":
            depth = max(len(self._lists), 1)
            current = self._lists[-1] if self._lists else _List(ordered=False)
            current.count += 1
            mark = f"{current.count}. " if current.ordered else "- "
            indent = 2 * (depth - 1)
            if self.markdown and depth > 1:
                indent = self._lists[-2].column  # a nested list starts at its item's content
            self._prefix = " " * indent + mark
            current.column = 2 * depth if not self.markdown else indent + len(mark)
            self._tight = True
        elif tag == "pre":
            self._pre += 1
            classes = (attributes.get("class") or "").split()
            found = language(classes, ("language-", "lang-"))
            self._language = self._highlight if found is None else found
        elif tag == "div" and self.markdown:
            found = language((attributes.get("class") or "").split(), ("highlight-",))
            if found is not None:
                self._highlight = found
        elif tag == "blockquote":
            self._quote += 1
        elif tag == "tr":
            self._cells = []
            self._pad = 0
            self._header_row = False
        elif tag == "hr" and self.markdown:
            self.blocks.append(("---", False))
        elif self._pre:
            if not self._inside:
                self._top_code = tag == "code"
            if tag == "code" and not self._inside:
                if self._codes and not self._loose:
                    self._flush()  # a second <code> in one <pre> (Node's ESM/CJS pair): a block
                self._codes += 1
                classes = (attributes.get("class") or "").split()
                found = language(classes, ("language-", "lang-"))
                if found is not None:
                    self._language = found
            if tag not in VOID:
                self._inside += 1
        elif not self.markdown or self._code:
            return
        elif tag == "a":
            href = attributes.get("href") or ""
            if href and not href.lower().startswith(("javascript:", "data:", "#")):
                self._open("a", "[", f"]({urllib.parse.urljoin(self.base_url, href)})")
        elif tag == "img":
            alt = SPACE.sub(" ", attributes.get("alt") or "").strip()
            if alt and self._marks and self._marks[-1].tag == "a":
                self._emit(alt)  # an image-only link keeps the image's text
        elif sign := INLINE_MARKS.get(tag):
            self._open(tag, sign, sign)
            if tag == "code":
                self._code += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if self._drop:
            if tag in self._drop:
                while self._drop.pop() != tag:
                    pass
            return
        if tag in ("td", "th") or (tag == "p" and self._cells is not None):
            return
        if tag == "tr" and self._in_layout():
            self._flush()
            return
        if tag == "tr" and self._cells is not None:
            self._spanned(end=True)
            self._spans.update(self._next_spans)
            self._next_spans.clear()
            for cell in self._cells:
                self._settle(cell)
            cells = [SPACE.sub(" ", "".join(c).replace("\x00", " ")).strip() for c in self._cells]
            if self.markdown:
                cells = [cell.replace("|", "\\|") for cell in cells]
            self._cells = None
            if len(cells) == 1:  # a one-cell row is a box around a block, not a table
                self.blocks.append((escape_lines(cells[0]) if self.markdown else cells[0], False))
            elif any(cells):
                line = "| " + " | ".join(cells) + " |" if self.markdown else " | ".join(cells)
                self.blocks.append((line, True))
                if self.markdown and self._header_row and self._rows == 0:
                    self.blocks.append(("|" + " --- |" * len(cells), True))
                self._rows += 1
            return
        if tag == "table":
            if self._in_layout():
                self._layout.pop()
            self._tables = max(self._tables - 1, 0)
            self._cells = None
            self._rows = 0
            self.blocks.append(("", False))
        if self._pre and self._inside and tag != "pre":
            self._inside -= 1
        if self.markdown and not self._pre and (tag == "a" or tag in INLINE_MARKS):
            if tag == "code" and self._code:
                self._code -= 1
                self._end_mark(tag)
            elif not self._code:
                self._end_mark(tag)
        if tag in BLOCK:
            self._flush()
        if tag in HEADINGS:
            self._heading = 0
        elif tag in ("ul", "ol") and self._lists:
            self._lists.pop()
            self._tight = bool(self._lists)
            if not self._lists:
                self.blocks.append(("", False))
        elif tag == "pre" and self._pre:
            self._pre -= 1
            if not self._pre:
                self._language = self._highlight = ""
                self._inside = self._codes = 0
                self._top_code = self._loose = False
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
    return _join(converter.blocks), SPACE.sub(" ", converter.title).strip()
