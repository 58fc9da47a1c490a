"""Main content: the part of a page an agent asked for, without the page's chrome.

Two steps, on the one parse of the page, before the writer's walk:

1. **Choose** (:func:`keep_main`, here): the element that holds the content. A ``<main>`` (or
   ``role="main"``) or an ``<article>`` that holds most of the page's text is the content;
   otherwise the text blocks (``<p>``, ``<pre>``, ``<td>``, a ``<div>``'s own text) are
   scored, as Readability does: each block of 25 characters or more gives its parent a score
   (one, plus its commas, plus one a hundred characters, three at most), its grandparent half
   of it and the next three levels less; a container's score starts from its tag and from
   the words of its class and id (``article``, ``content``, ``post`` count for it;
   ``comment``, ``sidebar``, ``share``, ``related`` against it), and is scaled by the share
   of its text that is not link text.
   The best container wins; a parent whose score is higher, or that holds three of the best
   five, or that has it as its only child, is taken instead; and siblings that score well
   (more easily when of its tag and class), or are paragraphs of prose, join it, with the
   heading before each. Everything else on the path from the body down to it is hidden
   (``hidden``), so the walk drops it as it drops any hidden element. When the best container
   is the body, or the page has no text blocks, nothing is hidden: the whole page is the
   content. The content, its ancestors, the best container and the chain of children that
   hold most of the content's text are marked (``MAIN``) as never chrome.
2. **Prune** (:func:`dropped_for_main`, called by the writer for each element with
   attributes): inside the content, elements whose class names chrome (comments, sharing,
   related stories, promotions, newsletters, cookie and app banners, sidebars,
   breadcrumbs...) and does not also name content, or whose whole id is such a name, and
   ``<aside>`` (not a footnote's) and dialogs, are dropped, as navigation and footers always
   are.

Its cost is a few CSS queries (in C) and a Python step per text block and per parent: on the
302 documentation pages of ``bench/real_pages``, about 1 ms a page against 4.2 ms for the
whole page's text (the walk then skips what is hidden).

Links and metadata still read the whole page (an agent that maps a site wants its menus); the
``html`` format is the cleaned main content, since its cleaning drops hidden elements too
(:func:`hide_chrome` hides the chrome inside the content for it). When the main content has no
text at all, the whole page is shaped instead (:func:`unhide`; ``_html.shaped``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ._html_tags import CACHED_CLASS, dropped_for

if TYPE_CHECKING:
    from selectolax.lexbor import LexborHTMLParser, LexborNode

CHROME: Final = re.compile(
    r"comment|disqus|replies|respond|sidebar|side-bar|widget|share|sharing|social|related"
    r"|recommend|promo|sponsor|advert|-ad-|^ads?$|^ad-|-ads?$|banner|cookie|consent|gdpr"
    r"|newsletter|subscri|signup|sign-up|popup|modal|breadcrumb|masthead|menu|toolbar"
    r"|pagination|pager|trending|most-?popular|outbrain|taboola|skip-?link|print-?only"
    r"|author-?bio|byline-?social|read-?more|also-?read|more-?stories|footer|header|tags",
    re.I,
)
"""Words of a class that name page chrome (substrings, as Readability matches them)."""
CHROME_ID: Final = re.compile(
    r"(?:comments?|respond|disqus_thread|sidebar|secondary|related(?:[-_]\w+)?"
    r"|share(?:[-_]\w+)?|social(?:[-_]\w+)?|newsletter\w*|cookie[-_]?(?:banner|consent|notice)"
    r"|ads?|banner|breadcrumbs?|masthead|site[-_]?(?:header|footer)|promo\w*)$",
    re.I,
)
"""An id that names page chrome, whole: ids are often made from a section's title in
documentation (``http.cookiejar``, ``email.headerregistry``), so no substring of one is."""
CONTENT: Final = re.compile(
    r"article|body|content|entry|main|post-?text|story|text|column|page|mathjax", re.I
)
"""Words that name content: an element whose class has one is never chrome."""
_NEGATIVE: Final = re.compile(
    r"comment|sidebar|share|social|related|promo|sponsor|advert|banner|footer|masthead"
    r"|widget|meta|outbrain|shopping|tags|scroll|contact|hidden|media|nav|menu",
    re.I,
)
_POSITIVE: Final = re.compile(
    r"article|body|content|entry|hentry|h-entry|main|page|post|text|blog|story", re.I
)
_CHROME_ROLES: Final = frozenset({"banner", "dialog", "alertdialog"})
CHROME_TAGS: Final = frozenset({"aside", "dialog"})
"""Tags that are chrome inside the main content, but for notes (``_KEPT_ASIDES``)."""
_KEPT_ASIDES: Final = re.compile(
    r"footnote|citation|note|admonition|callout|tip|warning|caution|example|definition", re.I
)
"""Classes of an ``<aside>`` that is part of the text: Sphinx's footnotes, notes."""
_TAG_SCORES: Final = {
    "div": 5,
    "article": 5,
    "section": 3,
    "main": 5,
    "pre": 3,
    "td": 3,
    "blockquote": 3,
    "form": -3,
    "ol": -3,
    "ul": -3,
    "dl": -3,
    "dd": -3,
    "dt": -3,
    "li": -3,
    "address": -3,
    "th": -5,
}
_BLOCKS: Final = "p, pre, td, div"
"""Text blocks: a ``<div>`` counts by its own text only (its text nodes, not its children's),
as the paragraph it is on pages that write their text in ``<div>``s."""
_SECTIONS: Final = frozenset({"section", "article"})
_HEADINGS: Final = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "hgroup"})
_MIN_BLOCK: Final = 25
_NAMES_CHARS: Final = 500
"""How much of a class or id is read for its words (a 9 MiB class is no one's name)."""
_WRAPPER_CHILDREN: Final = 50
_SPINE_DEPTH: Final = 40
"""How deep the chain of wrappers is followed (each step reads its children's text)."""
_SEMANTIC_SHARE: Final = 0.5
"""The share of the page's text a ``<main>`` or ``<article>`` must hold to be the content."""
_DIVIDERS: Final = (1, 2, 6, 9, 12)
"""What a block's score is divided by for its parent, grandparent and up (Readability's)."""
_COMMAS = re.compile(r"[,\u060c\ufe50\ufe10\ufe11\u2e41\u2e34\u2e32\uff0c]")
_SENTENCE_END = re.compile(r"\.( |$)")


def dropped_for_main(tag: str, attributes: dict[str, str | None]) -> bool:
    """``dropped_for``, and page chrome inside the main content: an ``<aside>`` or dialog,
    a banner or dialog role, a modal, and a class or id that names chrome but not content."""
    if len(attributes) == 1:
        classes = attributes.get("class")
        if classes is not None and len(classes) <= CACHED_CLASS:
            return _dropped_for_class(tag, classes)
    return _dropped_for_main(tag, attributes)


@functools.lru_cache(maxsize=4096)
def _dropped_for_class(tag: str, classes: str) -> bool:
    """:func:`dropped_for_main` of an element whose one attribute is its class, remembered:
    the answer then depends on the tag and the class alone, and a page repeats both (a
    highlighted code block is a ``<span class="n">`` a word, each told to the writer: two
    fifths of the calls on 302 documentation pages)."""
    return _dropped_for_main(tag, {"class": classes})


def _dropped_for_main(tag: str, attributes: dict[str, str | None]) -> bool:
    if dropped_for(tag, attributes):
        return True
    if MAIN in attributes:
        return False
    if tag in CHROME_TAGS:
        classes = attributes.get("class")
        return not (classes and _KEPT_ASIDES.search(classes[:_NAMES_CHARS]))
    if attributes.get("role") in _CHROME_ROLES:
        return True
    if attributes.get("aria-modal") == "true":
        return True
    if tag in _NEVER_CHROME:
        return False
    classes = attributes.get("class")
    if classes and _chrome_class(classes[:_NAMES_CHARS]):
        return True
    ident = attributes.get("id")
    return (
        ident is not None and tag != "section" and CHROME_ID.match(ident[:_NAMES_CHARS]) is not None
    )


@functools.lru_cache(maxsize=4096)
def _chrome_class(classes: str) -> bool:
    """Whether a class names chrome and not content: remembered, as a page repeats its
    classes (``CHROME``'s search, a long alternation, cost 5 us a call, a twelfth of the
    text of a page with main content on 302 documentation pages)."""
    return CHROME.search(classes) is not None and CONTENT.search(classes) is None


MAIN: Final = "data-main-content"
"""The mark of the main content and of the elements that hold it, which are never chrome
(a page's content sits inside a ``div#ad-portal`` or a ``widget Blog`` as often as not)."""
_NEVER_CHROME: Final = frozenset(
    {"html", "body", "main", "article", "a", "span", "code", "pre", "td", "th", "tr", "tbody"}
)


def _names(attributes: dict[str, str | None]) -> str:
    """The class and the id, one string."""
    classes = (attributes.get("class") or "")[:_NAMES_CHARS]
    ident = (attributes.get("id") or "")[:_NAMES_CHARS]
    if classes and ident:
        return f"{classes} {ident}"
    return classes or ident


@dataclass(slots=True)
class _Candidate:
    node: LexborNode
    score: float


def _weight(node: LexborNode) -> float:
    """A container's score before its blocks: its tag, and the words of its class and id."""
    score = float(_TAG_SCORES.get(node.tag or "", 0))
    names = _names(node.attributes)
    if names:
        if _NEGATIVE.search(names):
            score -= 25
        if _POSITIVE.search(names):
            score += 25
    return score


def _link_density(
    node: LexborNode, length: int | None = None, known: dict[int, int] | None = None
) -> float:
    """The share of ``node``'s text that is link text; ``known`` keeps each link's length
    (nested candidates hold the same links)."""
    total = len(node.text(deep=True)) if length is None else length
    if not total:
        return 0.0
    links = 0
    for a in node.css("a"):
        if known is None:
            links += len(a.text(deep=True))
            continue
        key = a.mem_id
        size = known.get(key)
        if size is None:
            size = known[key] = len(a.text(deep=True))
        links += size
    return min(links / total, 1.0)


def _semantic(body: LexborNode) -> LexborNode | None:
    """The ``<main>`` or ``<article>`` that holds most of the page's text, if one does."""
    found = body.css("main, [role=main], article")
    if not found:
        return None
    total = len(body.text(deep=True))
    best: LexborNode | None = None
    best_length = 0
    for node in found:
        length = len(node.text(deep=True))
        if length > best_length:
            best, best_length = node, length
    if best is not None and best_length >= _SEMANTIC_SHARE * total:
        return best
    return None


def _scored(body: LexborNode) -> dict[int, _Candidate]:
    """The containers of the page's text blocks (the body too), each with its score.

    A block's score goes to its parent, half of it to its grandparent and a sixth, a ninth
    and a twelfth further up; blocks are summed by parent first, so each parent's chain is
    walked once (most blocks share a parent with others)."""
    parents: dict[int, LexborNode] = {}
    sums: dict[int, float] = {}
    for block in body.css(_BLOCKS):
        text = block.text(deep=block.tag != "div")
        length = len(text)
        if length < _MIN_BLOCK or len(text.strip()) < _MIN_BLOCK:
            continue
        parent = block.parent
        if parent is None:
            continue
        commas = text.count(",") if text.isascii() else len(_COMMAS.findall(text))
        key = parent.mem_id
        if key not in parents:
            parents[key] = parent
        sums[key] = sums.get(key, 0.0) + 1 + commas + min(length // 100, 3)
    candidates: dict[int, _Candidate] = {}
    for key, first in parents.items():
        score = sums[key]
        node: LexborNode | None = first
        for level in range(5):
            if node is None or node.tag in ("html", None):
                break
            found = candidates.get(node.mem_id)
            if found is None:
                found = candidates[node.mem_id] = _Candidate(node, _weight(node))
            found.score += score / _DIVIDERS[level]
            node = node.parent
    return candidates


def _ancestors(node: LexborNode) -> list[int]:
    """The keys of ``node``'s ancestors below the body."""
    out = []
    parent = node.parent
    while parent is not None and parent.tag not in ("body", "html", None):
        out.append(parent.mem_id)
        parent = parent.parent
    return out


def _best(candidates: dict[int, _Candidate]) -> tuple[LexborNode, LexborNode] | None:
    """The container with the best score (scaled by its share of text outside links), and
    where the content is: that container moved up where its ancestors hold more of it;
    ``None`` when it is the whole page."""
    ranked = sorted(candidates.values(), key=lambda c: c.score, reverse=True)[:5]
    best = 0.0
    scaled: list[_Candidate] = []
    known: dict[int, int] = {}
    for candidate in ranked:  # (scaling only lowers a score: one under 3/4 of the best is out)
        if not scaled or candidate.score >= 0.75 * best:
            candidate.score *= 1 - _link_density(candidate.node, known=known)
            best = max(best, candidate.score)
            scaled.append(candidate)
    ranked = sorted(scaled, key=lambda c: c.score, reverse=True)
    top = ranked[0]
    if top.score <= 0 or top.node.tag == "body":
        return None
    node = top.node
    close = [_ancestors(c.node) for c in ranked[1:] if c.score >= 0.75 * top.score]
    if len(close) >= 3:
        for key in _ancestors(node):
            if sum(key in chain for chain in close) >= 3:
                node = candidates[key].node if key in candidates else _find(node, key)
                break
    return top.node, _climb(node, candidates)


def _find(node: LexborNode, key: int) -> LexborNode:
    """The ancestor of ``node`` with ``key``."""
    parent = node.parent
    while parent is not None and parent.mem_id != key:
        parent = parent.parent
    return parent if parent is not None else node


def _climb(node: LexborNode, candidates: dict[int, _Candidate]) -> LexborNode:
    """Readability's climb: a parent that scores higher than the node is the content, and so
    is the parent of an only child."""
    found = candidates.get(node.mem_id)
    last = found.score if found is not None else 0.0
    threshold = last / 3
    parent = node.parent
    while parent is not None and parent.tag not in ("body", "html", None):
        scored = candidates.get(parent.mem_id)
        if scored is not None:
            if scored.score < threshold:
                break
            if scored.score > last:
                node = parent
                break
            last = scored.score
        parent = parent.parent
    parent = node.parent
    while parent is not None and parent.tag not in ("body", "html", None):
        if len(_elements(parent)) != 1:
            break
        node, parent = parent, parent.parent
    return node


def _elements(node: LexborNode) -> list[LexborNode]:
    """``node``'s element children."""
    out = []
    child = node.first_child
    while child is not None:
        if child.is_element_node:
            out.append(child)
        child = child.next
    return out


def _joins(
    sibling: LexborNode, top: LexborNode, score: float, scores: dict[int, _Candidate]
) -> bool:
    """Whether a sibling of the content joins it: it scores well enough (more easily when it
    is of the content's kind: the same tag and class, as a document's next ``<section>``),
    or it is a paragraph of prose."""
    threshold = max(10.0, score * 0.2)
    bonus = 0.0
    classes = top.attributes.get("class")
    same = sibling.tag == top.tag and sibling.attributes.get("class") == classes
    if same and (classes or top.tag in _SECTIONS):
        bonus = score * 0.2
    scored = scores.get(sibling.mem_id)
    if scored is not None and scored.score + bonus >= threshold:
        return True
    if sibling.tag != "p":
        return False
    text = sibling.text(deep=True)
    length = len(text)
    density = _link_density(sibling, length)
    if length > 80:
        return density < 0.25
    return 0 < length and density == 0 and _SENTENCE_END.search(text) is not None


def _joined(
    parent: LexborNode, top: LexborNode, score: float, scores: dict[int, _Candidate]
) -> list[LexborNode]:
    """``top`` and the siblings that join it, in order; a heading joins with the sibling it
    stands before."""
    children = _elements(parent)
    kept = [child.mem_id == top.mem_id or _joins(child, top, score, scores) for child in children]
    for i in range(len(children) - 2, -1, -1):
        if not kept[i] and kept[i + 1] and children[i].tag in _HEADINGS:
            kept[i] = True
    return [child for child, keep in zip(children, kept, strict=True) if keep]


def keep_main(tree: LexborHTMLParser) -> list[LexborNode]:
    """Hide all of ``tree``'s body but its main content (see the module's docstring); the
    elements it hid (:func:`unhide` shows them again)."""
    body = tree.body
    if body is None:
        return []
    chosen = _semantic(body)
    if chosen is not None:
        if chosen.tag == "body":
            return []
        kept = [chosen]
        hidden = _around(body, kept)
    else:
        scores = _scored(body)
        found_best = _best(scores) if scores else None
        if found_best is None:
            return []
        top, best = found_best
        parent = best.parent
        if parent is None:
            return []
        found = scores.get(best.mem_id)
        kept = _joined(parent, best, found.score if found else 0.0, scores)
        hidden = _around(body, kept)
        _mark(top)
    hidden = [node for node in hidden if "hidden" not in node.attributes]
    for node in hidden:
        node.attrs["hidden"] = ""
    for node in kept:
        _mark(node)
    spine = kept[0] if len(kept) == 1 else kept[0].parent
    if spine is not None:
        _mark(_spine(spine))
    return hidden


def unhide(hidden: list[LexborNode]) -> None:
    """Show the elements :func:`keep_main` hid again: the whole page."""
    for node in hidden:
        del node.attrs["hidden"]


def hide_chrome(tree: LexborHTMLParser) -> None:
    """Hide what :func:`dropped_for_main` drops in the walk, for the ``html`` format's
    cleaning (which reads ``hidden``, not classes): once the walks are done."""
    body = tree.body
    if body is None:
        return
    for node in body.css("[class], [id], [role], [aria-modal], aside, dialog"):
        attributes = node.attributes
        if "hidden" not in attributes and dropped_for_main(node.tag or "", attributes):
            node.attrs["hidden"] = ""


def _around(body: LexborNode, kept: list[LexborNode]) -> list[LexborNode]:
    """Every element from ``body`` down to ``kept`` (siblings under one parent) that is
    neither one of them nor one of their ancestors."""
    out = []
    keep = {node.mem_id for node in kept}
    parent = kept[0].parent
    while parent is not None:
        out += [child for child in _elements(parent) if child.mem_id not in keep]
        if parent.tag in ("body", None) or parent.mem_id == body.mem_id:
            break
        keep = {parent.mem_id}
        parent = parent.parent
    return out


def _spine(node: LexborNode) -> LexborNode:
    """The deepest element under ``node`` down a chain of children that each hold most of
    their parent's text: where the content is, even inside a wrapper whose class names
    chrome (``panel-two-col-sidebar-right``)."""
    length = len(node.text(deep=True))
    for _level in range(_SPINE_DEPTH):
        if not length:
            break
        largest, size = None, 0
        children = _elements(node)
        if len(children) > _WRAPPER_CHILDREN:
            break  # a wrapper holds a few elements, not a document's many blocks
        for child in children:
            child_length = len(child.text(deep=True))
            if child_length > size:
                largest, size = child, child_length
        if largest is None or size * 2 < length:
            break
        node, length = largest, size
    return node


def _mark(node: LexborNode) -> None:
    """Mark ``node`` and its ancestors as the main content (``MAIN``): never chrome."""
    marked: LexborNode | None = node
    while marked is not None and marked.tag not in ("body", "html", None):
        marked.attrs[MAIN] = ""
        marked = marked.parent
