"""HTML to readable text or Markdown: lexbor's HTML5 parser (through selectolax) builds the
tree, and our rules, walking it, decide what is content and how Markdown is written.

The rules were written for the event stream of the standard library's ``html.parser``, which
took two thirds of a page's shaping time (12.1 of 18.4 ms a page on 302 real pages) and is
quadratic on some inputs (64 KiB of ``<a b='``: 12 s). Walking lexbor's tree gives the same
events (each element's start, its text, its end), in C but for the walk, linear in the input,
and every output on those pages and on the fixture pages stays the same byte for byte
(``docs/web.md`` has the measurements, and why lexbor over lxml and html5-parser).

Scripts, styles, navigation, sidebars, footers and permalink marks are dropped; headings,
paragraphs, lists, tables, quotes and preformatted blocks keep their shape. Markdown adds
heading marks, links (made absolute), emphasis and code, and keeps them well formed: no markup
inside code, no emphasis that starts or ends with a space, no link without text, and one fence
per code block; text that Markdown would read as markup (``# ``, ``1. ``, ``[](``, ``_a_``,
``<tag>``) is escaped, and only where it would be.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from selectolax.lexbor import LexborHTMLParser, LexborNode

from ._html_clean import clean_html
from ._html_meta import base_url, page_links, page_metadata
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
    SPAN_CELLS,
    VOID,
    WS,
    escape,
    escape_heading,
    escape_lines,
    language,
    span,
)


def _squeeze(text: str) -> str:
    """``text`` with each run of whitespace as one space, and none at the ends: what
    ``re.sub(r"\\s+", " ", text).strip()`` gives (``str.split`` and ``\\s`` know the same
    whitespace), at a fraction of its cost (the substitution was a sixth of the walk's)."""
    return " ".join(text.split())


@dataclass
class _List:
    ordered: bool
    count: int = 0
    column: int = 0
    """Where the open item's content starts: the indent of its blocks after the first."""


@dataclass(slots=True)
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
class _Converter:
    """The tree walk's callbacks, writing blocks of text or Markdown as the tags arrive.

    Each tag's meaning is a small handler, found by name in a table (``_TEXT_STARTS``,
    ``_MARKDOWN_STARTS`` and their end-tag twins, after the class): the callbacks only take
    the steps every tag takes (the title, dropped subtrees), then call the tag's handler. So
    what ``<tr>`` or ``<pre>`` does is read in one place, and a new tag is one entry.
    """

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
    _targets: dict[str, str] = field(default_factory=dict)
    """Each ``href`` of the page made absolute (a page links to the same places again)."""

    _starts: dict[str, _Start] = field(init=False, repr=False)
    """What each start tag does: ``_MARKDOWN_STARTS`` or ``_TEXT_STARTS``."""
    _ends: dict[str, _End] = field(init=False, repr=False)
    _special: frozenset[str] = field(init=False, repr=False)
    """Tags whose start or end does something beyond the drop check of their attributes
    (``_walk`` gives the others to the converter only inside ``<pre>`` or a dropped subtree)."""

    def __post_init__(self) -> None:
        self._starts = _MARKDOWN_STARTS if self.markdown else _TEXT_STARTS
        self._ends = _MARKDOWN_ENDS if self.markdown else _TEXT_ENDS
        self._special = _MARKDOWN_SPECIAL if self.markdown else _TEXT_SPECIAL

    # -- output -------------------------------------------------------------------------------

    def _flush(self) -> None:
        if not self._pieces:
            return
        if self._marks:
            self._settle(self._pieces)
        raw = "".join(self._pieces)
        self._pieces.clear()
        self._opener = False
        if raw.isspace() and not self._pre:
            return  # the space between blocks
        if self._pre:
            text = BLANK_LINES.sub("", raw).rstrip()
            if text and self.markdown:
                fence = "```"
                while fence in text:
                    fence += "`"
                text = f"{fence}{self._language}\n{text}\n{fence}"
        else:
            text = " ".join(raw.split())  # (the spaces it drops at the ends go in strip() below)
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
        cells = self._cells
        if cells is None:
            buffer = self._pieces
            if not (buffer or self._pre or self._waiting or self._opener) and text.isspace():
                return  # the space between blocks, which _flush would drop
        elif cells:
            buffer = cells[-1]
        else:
            return
        if self._pre and not (self._loose or (self._inside and self._top_code) or text.isspace()):
            self._loose = True
        if self.markdown and not (self._pre or self._code):
            if MAY_ESCAPE.search(text):
                text, self._opener = escape(text, self._opener)
            if text[:1] == "(" and buffer and buffer[-1].endswith("]"):
                buffer[-1] = buffer[-1][:-1] + "\\]"  # a ] and ( from two text nodes
        if self._waiting and not self._pre:
            self._write_marks(buffer, text)
            return
        buffer.append(text)

    def _write_marks(self, buffer: list[str], text: str) -> None:
        """Write ``text`` into ``buffer`` after the marks waiting for text, if it is more than
        space (which goes before them)."""
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
        buffer.append(body)

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
            text = _squeeze("".join(cell).replace("\x00", " "))
            if text:
                self.blocks.append((escape_lines(text) if self.markdown else text, False))
        self._cells = None
        if not self._in_layout():
            self._layout.append(self._tables)

    # -- parser callbacks ---------------------------------------------------------------------

    def handle_starttag(self, tag: str, attributes: dict[str, str | None]) -> None:
        """Steps every tag takes (the title, dropped subtrees, a table cell that turns out to
        hold a layout block), then what this tag does: its handler in ``_starts``."""
        if tag == "title":
            self._in_title = True
            return

        if (self._drop or attributes or tag in _MAY_DROP) and self._skipped(tag, attributes):
            return  # (an element with no attributes is dropped only for its tag)

        if self._cells is not None and (tag in LAYOUT or (tag == "p" and self._paragraphs)):
            self._unrow()

        handler = self._starts.get(tag)
        if handler is not None:
            handler(self, tag, attributes)
        elif self._pre:  # what _start_other does for most tags, without its call
            self._start_other(tag, attributes)

    def handle_endtag(self, tag: str) -> None:
        """Steps every end tag takes (the title, dropped subtrees), then its handler in
        ``_ends``."""
        if tag == "title":
            self._in_title = False
            return

        if self._drop:
            if tag in self._drop:
                while self._drop.pop() != tag:
                    pass
            return

        handler = self._ends.get(tag)
        if handler is not None:
            handler(self, tag)
            return
        if self._pre and self._inside and tag != "pre":  # _end_other, without its call
            self._inside -= 1
        if tag in BLOCK and self._pieces:
            self._flush()

    def handle_data(self, data: str) -> None:
        self._emit(data)

    def finish(self) -> None:
        """The end of the document: the text still open is a block."""
        self._flush()

    # -- what is dropped ----------------------------------------------------------------------

    def _skipped(self, tag: str, attributes: dict[str, str | None]) -> bool:
        """Whether the tag is inside a dropped subtree or starts one (whose end tag then ends
        the drop)."""
        drop = self._drop
        if drop:
            if len(drop) == 1 and drop[0] == tag and tag in AUTOCLOSE:
                drop.clear()  # a hidden <p> or <li> left open ends where the next one starts
            else:
                if tag not in VOID:
                    drop.append(tag)
                return True

        if (tag in DROP or (tag == "footer" and not self._quote)) or (
            attributes and _dropped_for(tag, attributes)
        ):
            if tag not in VOID:
                drop.append(tag)
            return True
        return False

    # -- start tags: the handlers of ``_starts`` ----------------------------------------------

    def _start_other(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A tag with no meaning of its own here, or the last step of one that has: inside a
        ``<pre>`` it is counted (a ``<code>`` directly inside gives the fence its language)."""
        if not self._pre:
            return

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

    def _start_block(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A block with no other meaning: it ends the text before it."""
        if self._pieces:
            self._flush()
        self._start_other(tag, attributes)

    def _start_br(self, tag: str, attributes: dict[str, str | None]) -> None:
        buffer = self._buffer()
        if buffer is not None and not self._in_title:
            buffer.append("\n" if self._pre else " " if self._code else " \x00 ")

    def _start_paragraph(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A paragraph, or inside a table cell a count (a second one makes a layout table)."""
        if self._cells is not None:
            self._paragraphs += 1
            return

        self._start_block(tag, attributes)

    def _start_table(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._tables += 1
        self._spans.clear()
        self._next_spans.clear()
        self._start_block(tag, attributes)

    def _start_row(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A row's cells gather until its end tag; a layout table's row is only a break."""
        self._flush()
        if self._in_layout():
            return

        self._cells = []
        self._pad = 0
        self._header_row = False

    def _start_cell(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A new cell of the open row, after the empty cells that spans add before it."""
        if self._in_layout():
            self._flush()
            return
        if self._cells is None:
            return

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

    def _start_sup(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._emit("^")
        self._start_other(tag, attributes)

    def _start_heading(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        self._heading = HEADINGS[tag]

    def _start_list(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        self._lists.append(_List(ordered=tag == "ol"))
        self._tight = True

    def _start_item(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A list item's mark, indented to its depth (in Markdown, to the content of the item
        that holds its list)."""
        self._flush()
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

    def _start_pre(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        self._pre += 1
        classes = (attributes.get("class") or "").split()
        found = language(classes, ("language-", "lang-"))
        self._language = self._highlight if found is None else found

    def _start_quote(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        self._quote += 1

    def _start_highlight(self, tag: str, attributes: dict[str, str | None]) -> None:
        """Markdown: a ``<div class="highlight-js">`` (Sphinx) names its ``<pre>``'s language."""
        self._flush()
        found = language((attributes.get("class") or "").split(), ("highlight-",))
        if found is not None:
            self._highlight = found

    def _start_rule(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._flush()
        self.blocks.append(("---", False))

    def _start_link(self, tag: str, attributes: dict[str, str | None]) -> None:
        """Markdown: a link with a target worth keeping (made absolute) opens a mark."""
        if self._pre or self._code:
            self._start_other(tag, attributes)
            return

        href = attributes.get("href") or ""
        if href and not href.lower().startswith(("javascript:", "data:", "#")):
            target = self._targets.get(href)
            if target is None:
                target = self._targets[href] = urllib.parse.urljoin(self.base_url, href)
            self._open("a", "[", f"]({target})")

    def _start_image(self, tag: str, attributes: dict[str, str | None]) -> None:
        """Markdown: an image-only link keeps the image's text."""
        if self._pre or self._code:
            self._start_other(tag, attributes)
            return

        alt = _squeeze(attributes.get("alt") or "")
        if alt and self._marks and self._marks[-1].tag == "a":
            self._emit(alt)

    def _start_mark(self, tag: str, attributes: dict[str, str | None]) -> None:
        """Markdown: emphasis or inline code opens a mark (none inside code)."""
        if self._pre or self._code:
            self._start_other(tag, attributes)
            return

        self._open(tag, INLINE_MARKS[tag], INLINE_MARKS[tag])
        if tag == "code":
            self._code += 1

    # -- end tags: the handlers of ``_ends`` --------------------------------------------------

    def _end_other(self, tag: str) -> None:
        """Any end tag's steps, and all of one with no meaning of its own: inside a ``<pre>``
        it closes what ``_start_other`` counted; a block ends its text."""
        if self._pre and self._inside and tag != "pre":
            self._inside -= 1
        if tag in BLOCK and self._pieces:
            self._flush()

    def _end_cell(self, tag: str) -> None:
        """A cell (or a paragraph in one) ends where the next starts, or with its row."""

    def _end_paragraph(self, tag: str) -> None:
        if self._cells is None:
            self._end_other(tag)

    def _end_row(self, tag: str) -> None:
        """A row's cells become one line (a one-cell row, a block), and the header row gets
        its rule."""
        if self._in_layout():
            self._flush()
            return
        if self._cells is None:
            self._end_other(tag)
            return

        self._spanned(end=True)
        self._spans.update(self._next_spans)
        self._next_spans.clear()
        for cell in self._cells:
            self._settle(cell)
        cells = [_squeeze("".join(c).replace("\x00", " ")) for c in self._cells]
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

    def _end_table(self, tag: str) -> None:
        if self._in_layout():
            self._layout.pop()
        self._tables = max(self._tables - 1, 0)
        self._cells = None
        self._rows = 0
        self.blocks.append(("", False))
        self._end_other(tag)

    def _end_heading(self, tag: str) -> None:
        self._end_other(tag)
        self._heading = 0

    def _end_list(self, tag: str) -> None:
        """The end of the outermost list also ends the run of tight blocks."""
        self._end_other(tag)
        if not self._lists:
            return

        self._lists.pop()
        self._tight = bool(self._lists)
        if not self._lists:
            self.blocks.append(("", False))

    def _end_pre(self, tag: str) -> None:
        self._end_other(tag)
        if not self._pre:
            return

        self._pre -= 1
        if not self._pre:
            self._language = self._highlight = ""
            self._inside = self._codes = 0
            self._top_code = self._loose = False

    def _end_quote(self, tag: str) -> None:
        self._end_other(tag)
        if self._quote:
            self._quote -= 1

    def _end_inline(self, tag: str) -> None:
        """Markdown: a link, emphasis or inline code closes its mark (outside ``<pre>``; in
        inline code, only the code's own end tag)."""
        if self._pre:  # what _end_other does for an inline tag
            if self._inside:
                self._inside -= 1
            return

        if tag == "code" and self._code:
            self._code -= 1
            self._end_mark(tag)
        elif not self._code:
            self._end_mark(tag)


def _dropped_for(tag: str, attributes: dict[str, str | None]) -> bool:
    """Whether an element's attributes drop it: hidden, a navigation role, a sidebar's or a
    permalink's class."""
    if "hidden" in attributes or attributes.get("aria-hidden") == "true":
        return True
    if attributes.get("role") in DROP_ROLES:
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


_MAY_DROP: Final = DROP | {"footer"}
"""Tags that are dropped for what they are, whatever their attributes."""

_Start: TypeAlias = "Callable[[_Converter, str, dict[str, str | None]], None]"
_End: TypeAlias = "Callable[[_Converter, str], None]"

_TEXT_STARTS: Final[dict[str, _Start]] = {
    **dict.fromkeys(BLOCK, _Converter._start_block),
    "br": _Converter._start_br,
    "p": _Converter._start_paragraph,
    "table": _Converter._start_table,
    "tr": _Converter._start_row,
    "td": _Converter._start_cell,
    "th": _Converter._start_cell,
    "sup": _Converter._start_sup,
    **dict.fromkeys(HEADINGS, _Converter._start_heading),
    "ul": _Converter._start_list,
    "ol": _Converter._start_list,
    "li": _Converter._start_item,
    "pre": _Converter._start_pre,
    "blockquote": _Converter._start_quote,
}
"""What a start tag does in text, after the steps every tag takes (``handle_starttag``); a tag
not here is ``_start_other``'s. Every block ends the text before it (``_start_block``)."""
_MARKDOWN_STARTS: Final[dict[str, _Start]] = {
    **_TEXT_STARTS,
    "div": _Converter._start_highlight,
    "hr": _Converter._start_rule,
    "a": _Converter._start_link,
    "img": _Converter._start_image,
    **dict.fromkeys(INLINE_MARKS, _Converter._start_mark),
}
"""Text's table, plus what Markdown writes: rules, code languages, links and inline marks."""

_TEXT_ENDS: Final[dict[str, _End]] = {
    "td": _Converter._end_cell,
    "th": _Converter._end_cell,
    "p": _Converter._end_paragraph,
    "tr": _Converter._end_row,
    "table": _Converter._end_table,
    **dict.fromkeys(HEADINGS, _Converter._end_heading),
    "ul": _Converter._end_list,
    "ol": _Converter._end_list,
    "pre": _Converter._end_pre,
    "blockquote": _Converter._end_quote,
}
"""What an end tag does in text, after the steps every end tag takes (``handle_endtag``); a tag
not here is ``_end_other``'s."""
_MARKDOWN_ENDS: Final[dict[str, _End]] = {
    **_TEXT_ENDS,
    "a": _Converter._end_inline,
    **dict.fromkeys(INLINE_MARKS, _Converter._end_inline),
}
"""Text's table, plus the ends of Markdown's links and inline marks."""
_SKIPPED: Final = frozenset({"-comment", "-doctype", "!doctype", "-document"})
"""Nodes that are neither elements nor text, which the converter never sees."""
_ALWAYS_SPECIAL: Final = BLOCK | _MAY_DROP | VOID | LAYOUT | _SKIPPED | {"p", "title", "-text"}
"""Tags that ``handle_starttag`` or ``handle_endtag`` treat apart whatever their handler."""
_TEXT_SPECIAL: Final = _ALWAYS_SPECIAL | _TEXT_STARTS.keys() | _TEXT_ENDS.keys()
_MARKDOWN_SPECIAL: Final = _ALWAYS_SPECIAL | _MARKDOWN_STARTS.keys() | _MARKDOWN_ENDS.keys()


def _join(blocks: list[tuple[str, bool]]) -> str:
    out: list[str] = []
    previous_tight = False
    for text, tight in blocks:
        if not text:
            previous_tight = False
            continue
        if "\n" in text:
            text = "\n".join(line.rstrip() for line in text.split("\n"))
        else:
            text = text.rstrip()
        if out:
            out.append("\n" if tight and previous_tight else "\n\n")
        out.append(text)
        previous_tight = tight
    return "".join(out).strip() + ("\n" if out else "")


_HEAD_START = re.compile(r"<head[\s>/]", re.I)
_HEAD_END = re.compile(r"</head\s*>", re.I)
_HEAD_ONLY: Final = frozenset({"link", "meta", "script", "style", "title", "base", "noscript"})


def _walk(converter: _Converter, top: LexborNode) -> None:
    """Give ``converter`` the start, text and end of every node under ``top``, in document
    order, as ``html.parser`` did (an end tag for every element but the void ones).

    A dropped subtree (scripts, navigation...) is not walked: everything in it would be
    ignored anyway, except a ``<title>``, so ``<head>`` is walked. A tag with no meaning of
    its own (``<span>``, and in text ``<a>`` or ``<code>``), outside ``<pre>`` and dropped
    subtrees, is not given to the converter at all: its start and end would do nothing but
    check its attributes (about half the elements of a page, and a third of the walk's time).
    """
    start, end, data = converter.handle_starttag, converter.handle_endtag, converter._emit
    drops, special = converter._drop, converter._special
    node: LexborNode | None = top
    depth = 0
    while node is not None:
        tag = node.tag
        if tag == "-text":
            data(node.text_content or "")
        elif tag not in special and tag is not None and not (drops or converter._pre):
            child = node.first_child  # (a childless one is left as it is, dropped or not)
            if child is not None:
                attributes = node.attributes
                if not (attributes and _dropped_for(tag, attributes)):
                    node = child
                    depth += 1
                    continue
        elif tag is not None and tag not in _SKIPPED:
            dropping = bool(drops)
            start(tag, node.attributes)
            if tag in VOID:
                pass
            elif not dropping and drops and tag != "head":
                end(tag)  # started a drop: nothing inside it would be kept
            else:
                child = node.first_child
                if child is not None:
                    node = child
                    depth += 1
                    continue
                end(tag)
        while True:  # the next node: a sibling, or the end of each parent left behind
            if not depth:
                return
            following = node.next
            if following is not None:
                node = following
                break
            node = node.parent
            depth -= 1
            assert node is not None
            tag = node.tag or ""
            if tag in special or drops or converter._pre:  # else its end does nothing
                end(tag)


def _head_leaks(tree: LexborHTMLParser) -> bool:
    """Whether the body starts with what the source had inside ``<head>``: text there (Node's
    docs leave a template mark in it), which HTML5 moves into the body, where
    ``html.parser`` dropped it with the head."""
    body = tree.body
    node = body.child if body is not None else None
    while node is not None and node.tag == "-text" and not (node.text_content or "").strip():
        node = node.next
    return node is not None and (node.tag == "-text" or node.tag in _HEAD_ONLY)


@dataclass(frozen=True, slots=True)
class _Content:
    """What the converter walks: the head alone (for the title) when the source's head text
    leaked into the body, then the root of the content."""

    head: LexborNode | None
    root: LexborNode | None
    trees: tuple[LexborHTMLParser, ...]
    """The parsers that own those nodes (a node does not keep its tree alive)."""


def _head_end(html: str) -> int | None:
    """Where the source's ``</head>`` ends, if it has a head and one."""
    head = _HEAD_START.search(html)
    end = _HEAD_END.search(html, head.end()) if head is not None else None
    return None if end is None else end.end()


def _content(html: str, tree: LexborHTMLParser) -> _Content:
    end = _head_end(html)
    if end is not None and tree.head is not None and _head_leaks(tree):
        # What stood in <head> is dropped with it: the head gives the title, the content is
        # what follows </head>.
        rest = LexborHTMLParser(html[end:])
        return _Content(tree.head, rest.root, (tree, rest))
    return _Content(None, tree.root, (tree,))


def _parsed(html: str) -> _Content:
    """``_content(html, LexborHTMLParser(html))``, with one parse of the page where its head
    leaks, not two: the source up to ``</head>`` alone gives the same head, and the same
    first nodes of the body, as the whole page does (the parser never goes back to a node it
    has passed), so it tells whether the head leaks and gives the title (and ``<base>``),
    and only what follows ``</head>`` is parsed besides (Node's pages, a fifth of the
    corpus's bytes, were parsed twice)."""
    end = _head_end(html)
    if end is not None:
        head = LexborHTMLParser(html[:end])
        if head.head is not None and _head_leaks(head):
            rest = LexborHTMLParser(html[end:])
            return _Content(head.head, rest.root, (head, rest))
    return _content(html, LexborHTMLParser(html))  # lone surrogates are dropped


def _convert(content: _Content, url: str, markdown: bool) -> tuple[str, str]:
    """The text or Markdown of ``content``, and the title; Markdown's links are made absolute
    against the page's ``<base href>``, or ``url``."""
    converter = _Converter(
        markdown=markdown, base_url=base_url(content.trees[0], url) if markdown else url
    )
    if content.head is not None:
        _walk(converter, content.head)
    if content.root is not None:
        _walk(converter, content.root)
    converter.finish()
    return _join(converter.blocks), _squeeze(converter.title)


def html_to_text(html: str, *, base_url: str = "", markdown: bool = False) -> tuple[str, str]:
    """The readable text (or Markdown) of an HTML document, and its title.

    Never raises on malformed HTML: the parser follows HTML5, which gives every input a tree.
    """
    return _convert(_parsed(html), base_url, markdown)


@dataclass(frozen=True, slots=True)
class HtmlShapes:
    """What ``formats`` ask of one HTML document (:func:`html_shapes`)."""

    texts: dict[str, str]
    """Each text-like format asked for (``text``, ``markdown``, ``html``, ``raw``)."""
    title: str
    links: list[dict[str, object]] | None
    """``_html_meta.page_links``, when asked for."""
    metadata: dict[str, str] | None
    """``_html_meta.page_metadata``, when asked for."""


def html_shapes(html: str, *, url: str, formats: Sequence[str]) -> HtmlShapes:
    """Every format of ``formats`` from one parse of ``html`` (the page at ``url``, its final
    URL): text and Markdown by the converter's walk, ``html`` cleaned from the same tree (last,
    as it edits the tree), links and metadata read from it. Never raises on malformed HTML."""
    tree = LexborHTMLParser(html)
    content = _content(html, tree)
    texts: dict[str, str] = {}
    title: str | None = None
    for name in formats:
        if name in ("text", "markdown"):
            texts[name], title = _convert(content, url, markdown=name == "markdown")
        elif name == "raw":
            texts[name] = html
    if title is None:
        node = tree.css_first("title")
        title = _squeeze(node.text(deep=True)) if node is not None else ""
    links = page_links(tree, url) if "links" in formats else None
    metadata = page_metadata(tree, url, title) if "metadata" in formats else None
    if "html" in formats:
        texts["html"] = clean_html(tree, base_url(tree, url))
    return HtmlShapes(texts, title, links, metadata)
