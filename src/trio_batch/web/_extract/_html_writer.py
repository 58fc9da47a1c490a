"""The writer of a page's text or Markdown: it is told each element's start, its text and its
end, in document order, and writes blocks as they arrive (``_html`` walks lexbor's tree to
tell it).

Scripts, styles, navigation, sidebars, footers and permalink marks are dropped; headings,
paragraphs, lists, tables, quotes and preformatted blocks keep their shape. Markdown adds
heading marks, links (made absolute), emphasis and code, and keeps them well formed: no markup
inside code, no emphasis that starts or ends with a space, no link without text, and one fence
per code block; text that Markdown would read as markup (``# ``, ``1. ``, ``[](``, ``_a_``,
``<tag>``) is escaped, and only where it would be.

Each tag's meaning is a small handler, found by name in a table (``_TEXT_STARTS``,
``_MARKDOWN_STARTS`` and their end-tag twins, after the class). The state of what is open
lives in small records: the lists (``_List``), the inline marks (``_Mark``), the tables
(``_html_tables.Tables``) and the ``<pre>`` (``_Pre``).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from ._html_tables import Tables
from ._html_tags import (
    AUTOCLOSE,
    BLANK_LINES,
    BLOCK,
    BREAK,
    DROP,
    HEADINGS,
    INLINE_MARKS,
    LAYOUT,
    MAX_MARKS,
    MAY_ESCAPE,
    VOID,
    WS,
    dropped_for,
    escape,
    escape_heading,
    escape_lines,
    language,
    squeeze,
)
from ._main import CHROME_TAGS, dropped_for_main


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


@dataclass(slots=True)
class _Pre:
    """An open ``<pre>`` (``depth`` counts those open inside it): its code's language, and
    what decides whether its ``<code>`` children are its blocks or inline."""

    language: str
    depth: int = 1
    inside: int = 0
    """Elements open inside the ``<pre>``."""
    codes: int = 0
    """``<code>`` elements seen directly inside the ``<pre>``."""
    top_code: bool = False
    """The element open directly inside the ``<pre>`` is a ``<code>``."""
    loose: bool = False
    """The ``<pre>`` has text outside its direct ``<code>`` children, so they are inline."""


@dataclass
class Writer:
    """Writes blocks of text or Markdown as it is told of the elements (:meth:`start`,
    :meth:`text`, :meth:`end`, then :meth:`finish`); :meth:`result` joins them.

    The callbacks only take the steps every tag takes (the title, dropped subtrees), then call
    the tag's handler. So what ``<tr>`` or ``<pre>`` does is read in one place, and a new tag
    is one entry. An element whose tag is not in :attr:`special` only needs its start for
    :func:`dropped_for` while :attr:`every_tag` is false: a walk may skip telling it.
    """

    markdown: bool
    base_url: str
    """What Markdown's relative links are made absolute against."""
    main: bool = False
    """Drop page chrome inside the main content too (``_main.dropped_for_main``)."""
    special: frozenset[str] = field(init=False, repr=False)
    """Tags whose start or end does something beyond the drop check of their attributes."""
    every_tag: bool = False
    """The writer is inside a ``<pre>`` or a dropped subtree, where it must be told of every
    element, not only of the tags of :attr:`special` (kept by the writer, read by the walk)."""
    blocks: list[tuple[str, bool]] = field(default_factory=list)
    """The blocks written so far, each with whether it is tight (a list item's, a table
    row's: no blank line before the next tight one)."""
    title: str = ""
    _pieces: list[str] = field(default_factory=list)
    _drop: list[str] = field(default_factory=list)
    """The tags open in the dropped subtree, its root first."""
    _lists: list[_List] = field(default_factory=list)
    _prefix: str = ""
    _tight: bool = False
    _heading: int = 0
    _pre: _Pre | None = None
    _highlight: str = ""
    """The language a Sphinx ``<div class="highlight-js">`` names for the next ``<pre>``."""
    _quote: int = 0
    _in_title: bool = False
    _marks: list[_Mark] = field(default_factory=list)
    _waiting: int = 0
    """How many of ``_marks`` wait for text."""
    _opener: bool = False
    """The block or cell has an unescaped ``_`` that could open emphasis."""
    _code: int = 0
    _cells: list[list[str]] | None = None
    """The open row's cells, where text goes until the row ends (``None`` outside a row)."""
    _tables: Tables = field(default_factory=Tables)
    _targets: dict[str, str] = field(default_factory=dict)
    """Each ``href`` of the page made absolute (a page links to the same places again)."""

    _starts: dict[str, _Start] = field(init=False, repr=False)
    """What each start tag does: ``_MARKDOWN_STARTS`` or ``_TEXT_STARTS``."""
    _ends: dict[str, _End] = field(init=False, repr=False)
    _dropped_for: Callable[[str, dict[str, str | None]], bool] = field(init=False, repr=False)
    """What drops an element for its attributes: ``dropped_for``, or with ``main`` also
    chrome's classes (``dropped_for_main``)."""
    _may_drop: frozenset[str] = field(init=False, repr=False)
    _chrome_tags: frozenset[str] = field(init=False, repr=False)
    """With ``main``, tags that may be chrome whatever their attributes (``<aside>``)."""

    def __post_init__(self) -> None:
        self._starts = _MARKDOWN_STARTS if self.markdown else _TEXT_STARTS
        self._ends = _MARKDOWN_ENDS if self.markdown else _TEXT_ENDS
        self.special = _MARKDOWN_SPECIAL if self.markdown else _TEXT_SPECIAL
        self._dropped_for = dropped_for_main if self.main else dropped_for
        self._chrome_tags = CHROME_TAGS if self.main else frozenset()
        self._may_drop = _MAY_DROP | self._chrome_tags

    # -- what a walk tells it -------------------------------------------------------------------

    def start(self, tag: str, attributes: dict[str, str | None]) -> bool:
        """An element starts: the steps every tag takes (the title, dropped subtrees, a table
        cell that turns out to hold a layout block), then what this tag does: its handler in
        ``_starts``. Whether nothing inside the element can be kept (it starts a dropped
        subtree; not ``<head>``, which holds the title), so that a walk may skip its inside.
        """
        if tag == "title":
            self._in_title = True
            return False

        drop = self._drop
        if drop or attributes or tag in self._may_drop:
            dropping = bool(drop)
            if self._skipped(tag, attributes):  # (one with no attributes only for its tag)
                self.every_tag = bool(drop) or self._pre is not None
                return not dropping and bool(drop) and tag != "head"
            if dropping:  # it ended a dropped <p> or <li> left open
                self.every_tag = self._pre is not None

        if self._cells is not None and (tag in LAYOUT or (tag == "p" and self._tables.paragraphs)):
            self._unrow()

        handler = self._starts.get(tag)
        if handler is not None:
            handler(self, tag, attributes)
        elif self._pre:  # what _start_other does for most tags, without its call
            self._start_other(tag, attributes)
        return False

    def end(self, tag: str) -> None:
        """An element ends: the steps every end tag takes (the title, dropped subtrees), then
        its handler in ``_ends``."""
        if tag == "title":
            self._in_title = False
            return

        if self._drop:
            if tag in self._drop:
                while self._drop.pop() != tag:
                    pass
                self.every_tag = bool(self._drop) or self._pre is not None
            return

        handler = self._ends.get(tag)
        if handler is not None:
            handler(self, tag)
            return
        pre = self._pre
        if pre is not None and pre.inside and tag != "pre":  # _end_other, without its call
            pre.inside -= 1
        if tag in BLOCK and self._pieces:
            self._flush()

    def text(self, text: str) -> None:
        """Text of the page, where it stands."""
        if self._in_title:
            self.title += text
            return
        if self._drop:
            return
        cells = self._cells
        pre = self._pre
        if cells is None:
            buffer = self._pieces
            if not (buffer or pre or self._waiting or self._opener) and text.isspace():
                return  # the space between blocks, which _flush would drop
        elif cells:
            buffer = cells[-1]
        else:
            return
        if pre is not None:
            if not (pre.loose or (pre.inside and pre.top_code) or text.isspace()):
                pre.loose = True
        elif self.markdown and not self._code:
            if MAY_ESCAPE.search(text):
                text, self._opener = escape(text, self._opener)
            if text[:1] == "(" and buffer and buffer[-1].endswith("]"):
                buffer[-1] = buffer[-1][:-1] + "\\]"  # a ] and ( from two text nodes
        if self._waiting and not pre:
            self._write_marks(buffer, text)
            return
        buffer.append(text)

    def finish(self) -> None:
        """The end of the document: the text still open is a block."""
        self._flush()

    def result(self) -> tuple[str, str]:
        """The text or Markdown written (its blocks joined), and the page's title."""
        return _join(self.blocks), squeeze(self.title)

    # -- output -------------------------------------------------------------------------------

    def _flush(self) -> None:
        if not self._pieces:
            return
        if self._marks:
            self._settle(self._pieces)
        raw = "".join(self._pieces)
        self._pieces.clear()
        self._opener = False
        pre = self._pre
        if pre is not None:
            text = BLANK_LINES.sub("", raw).rstrip()
            if text and self.markdown:
                fence = "```"
                while fence in text:
                    fence += "`"
                text = f"{fence}{pre.language}\n{text}\n{fence}"
        elif raw.isspace():
            return  # the space between blocks
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
        if pre and column and self.markdown:
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

    def _unrow(self) -> None:
        """The open row's table is a layout table: its cells so far become blocks."""
        assert self._cells is not None
        for cell in self._cells:
            self._settle(cell)
            text = squeeze("".join(cell).replace("\x00", " "))
            if text:
                self.blocks.append((escape_lines(text) if self.markdown else text, False))
        self._cells = None
        self._tables.to_layout()

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
            (attributes or tag in self._chrome_tags) and self._dropped_for(tag, attributes)
        ):
            if tag not in VOID:
                drop.append(tag)
            return True
        return False

    # -- start tags: the handlers of ``_starts`` ----------------------------------------------

    def _start_other(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A tag with no meaning of its own here, or the last step of one that has: inside a
        ``<pre>`` it is counted (a ``<code>`` directly inside gives the fence its language)."""
        pre = self._pre
        if pre is None:
            return

        if not pre.inside:
            pre.top_code = tag == "code"
        if tag == "code" and not pre.inside:
            if pre.codes and not pre.loose:
                self._flush()  # a second <code> in one <pre> (Node's ESM/CJS pair): a block
            pre.codes += 1
            classes = (attributes.get("class") or "").split()
            found = language(classes, ("language-", "lang-"))
            if found is not None:
                pre.language = found
        if tag not in VOID:
            pre.inside += 1

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
            self._tables.paragraphs += 1
            return

        self._start_block(tag, attributes)

    def _start_table(self, tag: str, attributes: dict[str, str | None]) -> None:
        self._tables.start_table()
        self._start_block(tag, attributes)

    def _start_row(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A row's cells gather until its end tag; a layout table's row is only a break."""
        self._flush()
        if self._tables.in_layout():
            return

        self._cells = []
        self._tables.start_row()

    def _start_cell(self, tag: str, attributes: dict[str, str | None]) -> None:
        """A new cell of the open row, after the empty cells that spans add before it."""
        if self._tables.in_layout():
            self._flush()
            return
        if self._cells is None:
            return

        if self._cells:
            self._settle(self._cells[-1])
        self._tables.start_cell(self._cells, tag, attributes)
        self._opener = False

    def _start_sup(self, tag: str, attributes: dict[str, str | None]) -> None:
        self.text("^")
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
        classes = (attributes.get("class") or "").split()
        found = language(classes, ("language-", "lang-"))
        named = self._highlight if found is None else found
        if self._pre is None:
            self._pre = _Pre(named)
            self.every_tag = True
        else:
            self._pre.depth += 1
            self._pre.language = named

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
        """Markdown: an image-only link keeps the image's text, unless that is an address
        (``[https://.../photo.jpg](...)`` tells a reader nothing)."""
        if self._pre or self._code:
            self._start_other(tag, attributes)
            return

        alt = squeeze(attributes.get("alt") or "")
        if alt and self._marks and self._marks[-1].tag == "a" and not _ADDRESS.match(alt):
            self.text(alt)

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
        pre = self._pre
        if pre is not None and pre.inside and tag != "pre":
            pre.inside -= 1
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
        tables = self._tables
        if tables.in_layout():
            self._flush()
            return
        if self._cells is None:
            self._end_other(tag)
            return

        tables.end_row(self._cells)
        for cell in self._cells:
            self._settle(cell)
        cells = [squeeze("".join(c).replace("\x00", " ")) for c in self._cells]
        if self.markdown:
            cells = [cell.replace("|", "\\|") for cell in cells]
        self._cells = None

        if len(cells) == 1:  # a one-cell row is a box around a block, not a table
            self.blocks.append((escape_lines(cells[0]) if self.markdown else cells[0], False))
        elif any(cells):
            line = "| " + " | ".join(cells) + " |" if self.markdown else " | ".join(cells)
            self.blocks.append((line, True))
            if self.markdown and tables.header_row and tables.rows == 0:
                self.blocks.append(("|" + " --- |" * len(cells), True))
            tables.rows += 1

    def _end_table(self, tag: str) -> None:
        self._tables.end_table()
        self._cells = None
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
        pre = self._pre
        if pre is None:
            return

        pre.depth -= 1
        if not pre.depth:
            self._pre = None
            self._highlight = ""
            self.every_tag = False  # (the end of a tag inside a drop never comes here)

    def _end_quote(self, tag: str) -> None:
        self._end_other(tag)
        if self._quote:
            self._quote -= 1

    def _end_inline(self, tag: str) -> None:
        """Markdown: a link, emphasis or inline code closes its mark (outside ``<pre>``; in
        inline code, only the code's own end tag)."""
        pre = self._pre
        if pre is not None:  # what _end_other does for an inline tag
            if pre.inside:
                pre.inside -= 1
            return

        if tag == "code" and self._code:
            self._code -= 1
            self._end_mark(tag)
        elif not self._code:
            self._end_mark(tag)


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


_MAY_DROP: Final = DROP | {"footer"}
"""Tags that are dropped for what they are, whatever their attributes."""
_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*:|www\.|/)\S*$", re.I)
"""An ``alt`` text that is only an address."""

_Start: TypeAlias = "Callable[[Writer, str, dict[str, str | None]], None]"
_End: TypeAlias = "Callable[[Writer, str], None]"

_TEXT_STARTS: Final[dict[str, _Start]] = {
    **dict.fromkeys(BLOCK, Writer._start_block),
    "br": Writer._start_br,
    "p": Writer._start_paragraph,
    "table": Writer._start_table,
    "tr": Writer._start_row,
    "td": Writer._start_cell,
    "th": Writer._start_cell,
    "sup": Writer._start_sup,
    **dict.fromkeys(HEADINGS, Writer._start_heading),
    "ul": Writer._start_list,
    "ol": Writer._start_list,
    "li": Writer._start_item,
    "pre": Writer._start_pre,
    "blockquote": Writer._start_quote,
}
"""What a start tag does in text, after the steps every tag takes (``Writer.start``); a tag
not here is ``_start_other``'s. Every block ends the text before it (``_start_block``)."""
_MARKDOWN_STARTS: Final[dict[str, _Start]] = {
    **_TEXT_STARTS,
    "div": Writer._start_highlight,
    "hr": Writer._start_rule,
    "a": Writer._start_link,
    "img": Writer._start_image,
    **dict.fromkeys(INLINE_MARKS, Writer._start_mark),
}
"""Text's table, plus what Markdown writes: rules, code languages, links and inline marks."""

_TEXT_ENDS: Final[dict[str, _End]] = {
    "td": Writer._end_cell,
    "th": Writer._end_cell,
    "p": Writer._end_paragraph,
    "tr": Writer._end_row,
    "table": Writer._end_table,
    **dict.fromkeys(HEADINGS, Writer._end_heading),
    "ul": Writer._end_list,
    "ol": Writer._end_list,
    "pre": Writer._end_pre,
    "blockquote": Writer._end_quote,
}
"""What an end tag does in text, after the steps every end tag takes (``Writer.end``); a tag
not here is ``_end_other``'s."""
_MARKDOWN_ENDS: Final[dict[str, _End]] = {
    **_TEXT_ENDS,
    "a": Writer._end_inline,
    **dict.fromkeys(INLINE_MARKS, Writer._end_inline),
}
"""Text's table, plus the ends of Markdown's links and inline marks."""
_ALWAYS_SPECIAL: Final = BLOCK | _MAY_DROP | VOID | LAYOUT | {"p", "title"}
"""Tags that ``Writer.start`` or ``Writer.end`` treat apart whatever their handler."""
_TEXT_SPECIAL: Final = _ALWAYS_SPECIAL | _TEXT_STARTS.keys() | _TEXT_ENDS.keys()
_MARKDOWN_SPECIAL: Final = _ALWAYS_SPECIAL | _MARKDOWN_STARTS.keys() | _MARKDOWN_ENDS.keys()
