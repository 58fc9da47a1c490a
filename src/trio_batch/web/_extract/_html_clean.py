"""The ``html`` format: a page's main content as clean HTML.

What the text drops is dropped here too (``_html_tags``: scripts, styles, navigation, sidebars,
footers, hidden elements, permalink marks), then comments, and every attribute but the few that
carry content (``href`` and ``src``, made absolute; ``alt``, ``title``, ``colspan``,
``rowspan``). It edits lexbor's tree in place, so it runs last on a document
(``_html.HtmlDocument``). ``mode=html`` is not this: it stays the page's source.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Final

from ._html_tags import DROP, DROP_CLASSES, DROP_ROLES, PERMALINK_CLASSES

if TYPE_CHECKING:
    from selectolax.lexbor import LexborHTMLParser, LexborNode

KEPT: Final = frozenset({"href", "src", "alt", "title", "colspan", "rowspan"})
_URLS: Final = frozenset({"href", "src"})
_DROPPED: Final = ", ".join(
    [
        *sorted(DROP - {"head"}),
        "[hidden]",
        '[aria-hidden="true"]',
        *(f'[role="{role}"]' for role in sorted(DROP_ROLES)),
        *(f".{name}" for name in sorted(DROP_CLASSES)),
        *(f'a[href^="#"].{name}' for name in sorted(PERMALINK_CLASSES)),
    ]
)
"""One CSS selector for what the text drops for its tag, attributes or classes."""


def _in_quote(node: LexborNode) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.tag == "blockquote":
            return True
        parent = parent.parent
    return False


def clean_html(tree: LexborHTMLParser, base: str) -> str:
    """The body's content as clean HTML (the tree is edited: call it last)."""
    body = tree.body
    if body is None:
        return ""
    for node in body.css(_DROPPED):
        node.decompose()
    for node in body.css("footer"):
        if not _in_quote(node):
            node.decompose()
    comments = []
    resolved: dict[str, str] = {}
    for node in body.traverse(include_text=True):
        tag = node.tag
        if tag == "-comment":
            comments.append(node)
            continue
        if tag is None or tag.startswith("-"):
            continue
        attrs = node.attrs
        for name in [name for name in attrs.keys() if name not in KEPT]:  # noqa: SIM118
            del attrs[name]
        for name in _URLS:
            value = attrs.get(name)
            if value:
                url = resolved.get(value)
                if url is None:
                    url = resolved[value] = _joined(base, value)
                if url:
                    attrs[name] = url
                else:
                    del attrs[name]
    for node in comments:
        node.decompose()
    return (body.inner_html or "").strip() + "\n"


def _joined(base: str, value: str) -> str:
    """``value`` made absolute; "" for a script or data URL (nothing to follow, and a
    ``javascript:`` link in HTML an agent may show is a hazard)."""
    try:
        url = urllib.parse.urljoin(base, value.strip())
    except ValueError:
        return ""
    return "" if url.lower().startswith(("javascript:", "vbscript:", "data:")) else url
