"""HTML to readable text or Markdown: lexbor's HTML5 parser (through selectolax) builds the
tree, and walking it tells our writer (``_html_writer``) each element's start, its text and its
end, from which it decides what is content and how Markdown is written.

The writer's rules were written for the event stream of the standard library's
``html.parser``, which took two thirds of a page's shaping time (12.1 of 18.4 ms a page on 302
real pages) and is quadratic on some inputs (64 KiB of ``<a b='``: 12 s). Walking lexbor's
tree gives the same events, in C but for the walk, linear in the input, and every output on
those pages and on the fixture pages stays the same byte for byte (``docs/web.md`` has the
measurements, and why lexbor over lxml and html5-parser).

A page is parsed once (:func:`parse`) for all that is read from it: its text and Markdown
(:func:`convert`), and in ``_shape`` the other formats (links, metadata, clean HTML).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

from ._html_meta import base_url
from ._html_tags import VOID, dropped_for, squeeze
from ._html_writer import Writer
from ._main import hide_chrome, keep_main, unhide

_HEAD_START = re.compile(r"<head[\s>/]", re.I)
_HEAD_END = re.compile(r"</head\s*>", re.I)
_HEAD_ONLY: Final = frozenset({"link", "meta", "script", "style", "title", "base", "noscript"})
_SKIPPED: Final = frozenset({"-comment", "-doctype", "!doctype", "-document"})
"""Nodes that are neither elements nor text, which the writer is never told of."""


def _walk(writer: Writer, top: LexborNode) -> None:
    """Tell ``writer`` the start, text and end of every node under ``top``, in document
    order, as ``html.parser`` did (an end tag for every element but the void ones).

    A dropped subtree (scripts, navigation...) is not walked: everything in it would be
    ignored anyway, except a ``<title>``, so ``<head>`` is walked. A tag with no meaning of
    its own (``<span>``, and in text ``<a>`` or ``<code>``: not in ``writer.special``), outside
    ``<pre>`` and dropped subtrees (``writer.every_tag``), is not given to the writer at all:
    its start and end would do nothing but check its attributes (about half the elements of a
    page, and a third of the walk's time).
    """
    start, end, text, special = writer.start, writer.end, writer.text, writer.special
    node: LexborNode | None = top
    parents: list[tuple[LexborNode, str]] = []  # (lexbor's .parent costs more than a list)
    while node is not None:
        tag = node.tag
        if tag == "-text":
            text(node.text_content or "")
        elif tag not in special and tag is not None and not writer.every_tag:
            child = node.first_child  # (a childless one is left as it is, dropped or not)
            if child is not None:
                attributes = node.attributes
                if not (attributes and dropped_for(tag, attributes)):
                    parents.append((node, tag))
                    node = child
                    continue
        elif tag is not None and tag not in _SKIPPED:
            skipped = start(tag, node.attributes)
            if tag in VOID:
                pass
            elif skipped:
                end(tag)  # started a drop: nothing inside it would be kept
            else:
                child = node.first_child
                if child is not None:
                    parents.append((node, tag))
                    node = child
                    continue
                end(tag)
        while True:  # the next node: a sibling, or the end of each parent left behind
            if not parents:
                return
            following = node.next
            if following is not None:
                node = following
                break
            node, tag = parents.pop()
            if tag in special or writer.every_tag:  # else its end does nothing
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


@dataclass(slots=True)
class HtmlDocument:
    """One parse of a page: what the writer walks (the head alone, for the title, when the
    source's head text leaked into the body; then the root of the content), and the trees."""

    head: LexborNode | None
    root: LexborNode | None
    trees: tuple[LexborHTMLParser, ...]
    """The parsers that own those nodes (a node does not keep its tree alive), in the
    source's order: the first holds the page's head, the last its content."""
    main: bool = False
    """Main content was chosen (:meth:`keep_main`), and not given up (:meth:`keep_whole`)."""
    _hidden: list[LexborNode] = field(default_factory=list)

    def keep_main(self) -> None:
        """Hide all of the content's body but its main content (``_main.keep_main``); call
        it once, before :func:`convert` and the cleaning of the ``html`` format."""
        self._hidden = keep_main(self.trees[-1])
        self.main = True

    def keep_whole(self) -> None:
        """Show the whole page again, as if :meth:`keep_main` had not run."""
        unhide(self._hidden)
        self._hidden = []
        self.main = False

    def hide_chrome(self) -> None:
        """With main content, hide the chrome inside it for the ``html`` format's cleaning
        (the walks drop it by its class; the cleaning reads ``hidden``): after the walks."""
        if self.main:
            hide_chrome(self.trees[-1])

    def title(self) -> str:
        """The text of the page's first ``<title>`` (whitespace squeezed), or ""."""
        for tree in self.trees:
            node = tree.css_first("title")
            if node is not None:
                return squeeze(node.text(deep=True))
        return ""


def _head_end(html: str) -> int | None:
    """Where the source's ``</head>`` ends, if it has a head and one."""
    head = _HEAD_START.search(html)
    end = _HEAD_END.search(html, head.end()) if head is not None else None
    return None if end is None else end.end()


def parse(html: str) -> HtmlDocument:
    """The page parsed once, even where its head leaks (its text would be the body's first):
    what stood in ``<head>`` is dropped with it, so the head gives the title and the content
    is what follows ``</head>``. The source up to ``</head>`` alone gives the same head, and
    the same first nodes of the body, as the whole page does (the parser never goes back to a
    node it has passed), so it tells whether the head leaks and gives the title (and
    ``<base>``), and only what follows ``</head>`` is parsed besides (Node's pages, a fifth of
    the corpus's bytes, were parsed twice). Lone surrogates are dropped."""
    end = _head_end(html)
    if end is not None:
        head = LexborHTMLParser(html[:end])
        if head.head is not None and _head_leaks(head):
            rest = LexborHTMLParser(html[end:])
            return HtmlDocument(head.head, rest.root, (head, rest))
    tree = LexborHTMLParser(html)
    if end is not None and tree.head is not None and _head_leaks(tree):
        # (the head alone did not show it; the whole page does)
        rest = LexborHTMLParser(html[end:])
        return HtmlDocument(tree.head, rest.root, (tree, rest))
    return HtmlDocument(None, tree.root, (tree,))


def convert(
    document: HtmlDocument, url: str, markdown: bool, *, main: bool = False
) -> tuple[str, str]:
    """The text or Markdown of ``document``, and its title; Markdown's links are made
    absolute against the page's ``<base href>``, or ``url``. With ``main``, chrome inside
    the main content is dropped too (:meth:`HtmlDocument.keep_main` chose the content)."""
    writer = Writer(
        markdown=markdown,
        base_url=base_url(document.trees[0], url) if markdown else url,
        main=main,
    )
    if document.head is not None:
        _walk(writer, document.head)
    if document.root is not None:
        _walk(writer, document.root)
    writer.finish()
    return writer.result()


def html_to_text(
    html: str, *, base_url: str = "", markdown: bool = False, main_content: bool = True
) -> tuple[str, str]:
    """The readable text (or Markdown) of an HTML document's main content (with
    ``main_content=False``, of the whole page), and its title.

    Never raises on malformed HTML: the parser follows HTML5, which gives every input a tree.
    """
    document = parse(html)
    if main_content:
        document.keep_main()
    return shaped(document, base_url, markdown)


def shaped(document: HtmlDocument, url: str, markdown: bool) -> tuple[str, str]:
    """:func:`convert` with the document's choice of main content; when the main content has
    no text (every element of the page names chrome), the whole page's, and the document
    keeps the whole page from then on (for its other formats)."""
    if document.main:
        text, title = convert(document, url, markdown, main=True)
        if text:
            return text, title
        document.keep_whole()
    return convert(document, url, markdown)
