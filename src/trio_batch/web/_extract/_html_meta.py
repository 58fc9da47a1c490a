"""A page's links and metadata, read from the tree lexbor already built for its text.

Both run only when a target's ``formats`` ask for them, in the shaping worker, on the same parse
as the text (``_html.HtmlDocument``, whose trees they read in the source's order): lexbor's CSS
engine finds the elements in C, and Python only reads their attributes. Everything is bounded
whatever the page holds: at most ``MAX_LINKS`` links with ``MAX_TEXT_CHARS`` of anchor text
each, at most ``MAX_META_KEYS`` metadata values of ``MAX_META_CHARS`` each, and at most
``MAX_JSON_LD_CHARS`` of JSON-LD read.

Links are every ``<a href>`` and ``<area href>`` of the page, navigation included (an agent
that maps a site wants its menus), made absolute against ``<base href>`` or the final URL,
without their fragment, ``http``/``https`` only (``javascript:``, ``mailto:``, ``data:``...
are left out), in document order, each URL once with its first non-empty anchor text.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from selectolax.lexbor import LexborHTMLParser, LexborNode

MAX_LINKS: Final = 1_000
MAX_URL_CHARS: Final = 2_048
"""Longest link kept (the pre-check's limit on a target URL too)."""
MAX_TEXT_CHARS: Final = 200
MAX_META_KEYS: Final = 200
MAX_META_CHARS: Final = 2_000
MAX_JSON_LD_CHARS: Final = 200_000
"""JSON-LD read for dates, in all (the first scripts only)."""

_SPACE = re.compile(r"\s+")
_META_NAMES: Final = frozenset({"description", "keywords", "author", "robots", "generator"})
_PREFIXES: Final = ("og:", "twitter:", "article:")
_DATES: Final = {"article:published_time": "published", "article:modified_time": "modified"}
_LD_DATES: Final = {"datePublished": "published", "dateModified": "modified"}


def _clean(value: str, most: int) -> str:
    text = _SPACE.sub(" ", value[: most * 4]).strip()
    return text[:most]


def base_url(tree: LexborHTMLParser, url: str) -> str:
    """What the page's relative links are relative to: its first ``<base href>`` (itself made
    absolute against ``url``) when that is http(s), else ``url``.

    Only the head is searched (the HTML5 parser puts every ``<base>`` before the body there),
    so Markdown, which asks on every page, does not pay for a query of the whole tree."""
    head = tree.head
    node = head.css_first("base[href]") if head is not None else None
    href = (node.attributes.get("href") or "").strip() if node is not None else ""
    if not href:
        return url
    try:
        joined = urllib.parse.urljoin(url, href[:MAX_URL_CHARS])
    except ValueError:
        return url
    return joined if joined.startswith(("http://", "https://")) else url


def _absolute(base: str, href: str) -> str | None:
    """``href`` made absolute and fragment-free, or ``None`` if it is not an http(s) URL."""
    href = href.strip()
    if not href or href.startswith("#") or len(href) > MAX_URL_CHARS:
        return None
    try:
        url = urllib.parse.urldefrag(urllib.parse.urljoin(base, href)).url
        parts = urllib.parse.urlsplit(url)
        _port = parts.port  # raises on a port out of range
    except ValueError:  # a bad port or IPv6 literal
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return url


def _host(url: str) -> str:
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _select(trees: Sequence[LexborHTMLParser], selector: str) -> Iterator[LexborNode]:
    """The nodes of ``trees`` (one page's, in order) that ``selector`` matches."""
    for tree in trees:
        yield from tree.css(selector)


def page_links(trees: Sequence[LexborHTMLParser], url: str) -> list[dict[str, object]]:
    """The links of the page whose trees are ``trees`` (its head's first):
    ``{"url", "text", "internal"}`` each (``internal``: the same host as ``url``, the page's
    final URL), at most ``MAX_LINKS``."""
    base = base_url(trees[0], url)
    host = _host(url)
    found: dict[str, dict[str, object]] = {}
    resolved: dict[str, str | None] = {}  # pages repeat hrefs: resolve each once
    for node in _select(trees, "a[href], area[href]"):
        href = node.attributes.get("href") or ""
        target = resolved.get(href, "")
        if target == "":
            target = resolved[href] = _absolute(base, href) if len(resolved) < 50_000 else None
        if target is None:
            continue
        link = found.get(target)
        if link is None:
            if len(found) >= MAX_LINKS:
                continue
            link = found[target] = {"url": target, "text": "", "internal": _host(target) == host}
        if not link["text"]:
            link["text"] = _anchor_text(node)
    return list(found.values())


def _anchor_text(node: LexborNode) -> str:
    """The link's text; for a link around an image only, the image's ``alt`` (or the link's
    ``title``)."""
    text = _clean(node.text(deep=True), MAX_TEXT_CHARS)
    if text:
        return text
    image = node.css_first("img[alt]")
    alt = image.attributes.get("alt") if image is not None else None
    return _clean(alt or node.attributes.get("title") or "", MAX_TEXT_CHARS)


def page_metadata(trees: Sequence[LexborHTMLParser], url: str, title: str) -> dict[str, str]:
    """The metadata of the page whose trees are ``trees`` (its head's first), keyed by each
    tag's own name: ``title``, ``lang``, ``description``, ``keywords``, ``author``,
    ``canonical`` (absolute), ``og:*``, ``twitter:*``, ``article:*``, and
    ``published``/``modified`` (from ``article:*`` times, else JSON-LD's
    ``datePublished``/``dateModified``). The first of a repeated tag wins."""
    found: dict[str, str] = {}

    def put(key: str, value: str | None) -> None:
        if value and key not in found and len(found) < MAX_META_KEYS:
            cleaned = _clean(value, MAX_META_CHARS)
            if cleaned:
                found[key] = cleaned

    put("title", title)
    root = trees[0].css_first("html")
    put("lang", root.attributes.get("lang") if root is not None else None)
    for node in _select(trees, "meta[content]"):
        attributes = node.attributes
        name = (attributes.get("property") or attributes.get("name") or "").strip().lower()
        if name in _META_NAMES or name.startswith(_PREFIXES):
            put(name[:100], attributes.get("content"))
            if name in _DATES:
                put(_DATES[name], attributes.get("content"))
    canonical = next(_select(trees, 'link[rel~="canonical" i][href]'), None)
    if canonical is not None:
        put("canonical", _absolute(base_url(trees[0], url), canonical.attributes.get("href") or ""))
    if "published" not in found or "modified" not in found:
        for key, value in _json_ld_dates(trees).items():
            put(key, value)
    return found


def _json_ld_dates(trees: Sequence[LexborHTMLParser]) -> dict[str, str]:
    """``published``/``modified`` from the page's JSON-LD (top level, a list, or ``@graph``)."""
    dates: dict[str, str] = {}
    budget = MAX_JSON_LD_CHARS
    for node in _select(trees, 'script[type="application/ld+json"]'):
        source = node.text(deep=True)
        budget -= len(source)
        if budget < 0:
            break
        try:
            data = json.loads(source)
        except (ValueError, RecursionError):
            continue
        items = data if isinstance(data, list) else [data]
        for item in items[:100]:
            graph = item.get("@graph") if isinstance(item, dict) else None
            for thing in [item, *(graph[:100] if isinstance(graph, list) else [])]:
                if not isinstance(thing, dict):
                    continue
                for field, key in _LD_DATES.items():
                    value = thing.get(field)
                    if isinstance(value, str) and key not in dates:
                        dates[key] = value
    return dates
