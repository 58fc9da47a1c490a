"""What an engine does for a crawl: its pages' options, the links each page found, its limit.

A crawl is a job whose targets grow (``trio_batch._crawl``). The engine holds a :class:`CrawlRun`
for each crawl it runs: the crawl's rules (``_crawl_rules``), its pages stored done, and each
held target's depth and the page that found it. When a page's fetch returns, :func:`crawled`
reads its links from the result (``meta["links"]``), judges each (depth, scope, patterns,
traps, and robots.txt when the engine was given a check), and builds the outcome that carries
what it found to the store, which admits it with the page, deduplicated. A job starts a page
only while its pages done and in flight stay under its limit, so the limit is exact whatever
the concurrency. An engine over a single store holds a window of its crawl's frontier, read on
from the store (:meth:`~trio_batch.stores.Store.crawl_frontier`) as it runs.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import final

from .._crawl import CrawlSpec, Found
from .._crawl_rules import CrawlRules, canonical_url
from .._model import Caller, Options, Result, TargetState
from ..stores._protocol import Outcome

CrawlAllowed = Callable[[Caller, str], Awaitable[bool]]
"""Whether robots.txt lets ``caller``'s crawl fetch a URL (the web fetcher's ``allows``)."""

# The page formats a crawl needs besides what the caller asked: its links and its metadata
# (its rel=canonical).
_CRAWL_FORMATS = ("links", "metadata")


def page_options(spec: CrawlSpec) -> Options:
    """The options every page of ``spec`` is fetched with: the caller's, plus the formats a
    crawl reads (links, metadata) and robots.txt obeyed unless the caller said otherwise."""
    options = spec.options
    formats = options.formats or ((options.mode,) if options.mode else ("markdown",))
    formats = (*formats, *(f for f in _CRAWL_FORMATS if f not in formats))
    robots = True if options.robots is None else options.robots
    return dataclasses.replace(options, mode="", formats=formats, robots=robots)


@final
class CrawlRun:
    """What an engine holds of a crawl it runs: its rules, its pages done, its held targets'
    depths and finders, and how far it has read the frontier."""

    __slots__ = ("done", "loaded", "more", "pages", "rules", "spec", "wanted_links")

    def __init__(self, spec: CrawlSpec, done: int = 0) -> None:
        self.spec = spec
        self.rules = CrawlRules(spec)
        self.done = done
        self.pages: dict[int, tuple[int, int]] = {}
        """Each held target's depth and the index of the page that found it (-1: a seed)."""
        self.loaded = -1
        """The highest index read from the frontier."""
        self.more = False
        """The store may hold pending targets past ``loaded``."""
        self.wanted_links = "links" in spec.options.formats

    def room(self, in_flight: int) -> bool:
        """Whether another page may start: pages done and in flight stay under the limit."""
        return self.done + in_flight < self.spec.limit

    def hold(self, idx: int, depth: int, parent: int) -> None:
        """Hold target ``idx`` (read from the store, claimed, or a seed)."""
        self.pages[idx] = (depth, parent)
        self.loaded = max(self.loaded, idx)

    def acknowledged(self, idx: int, outcome: Outcome, duplicate: bool, found: int) -> None:
        """A page's outcome was stored (or found to be another's): count it, forget it."""
        self.pages.pop(idx, None)
        if outcome.state is TargetState.DONE and not duplicate:
            self.done += 1
        if found:
            self.more = True


async def crawled(
    run: CrawlRun, caller: Caller, idx: int, result: Result, allowed: CrawlAllowed | None
) -> Outcome:
    """The outcome of crawl page ``idx``: its result (with ``meta["crawl"]``), the links it
    found that may be fetched, its other keys (final URL, ``rel=canonical``), and what its
    links were skipped for."""
    depth, parent = run.pages.get(idx, (0, -1))
    meta = dict(result.meta)
    links = _links(meta)
    if not run.wanted_links:
        meta.pop("links", None)
    meta["crawl"] = {"depth": depth, "found_by": None if parent < 0 else parent}
    found, skipped = await _judge(run, caller, idx, depth + 1, links, allowed)
    page = Result(result.content, meta)
    return Outcome(
        TargetState.DONE,
        result_json=page.to_json(),
        found=found,
        keys=_keys(meta),
        skipped=skipped,
        crawl=True,
    )


def _links(meta: Mapping[str, object]) -> list[str]:
    """The URLs of the page's links (the web fetcher's ``meta["links"]``), in page order."""
    links = meta.get("links")
    if not isinstance(links, list):
        return []
    urls = (link.get("url") if isinstance(link, dict) else None for link in links)
    return [url for url in urls if isinstance(url, str)]


def _keys(meta: Mapping[str, object]) -> list[str]:
    """The page's other keys: its final URL after redirects, its ``rel=canonical``."""
    keys = []
    final = meta.get("url")
    metadata = meta.get("metadata")
    canonical = metadata.get("canonical") if isinstance(metadata, dict) else None
    for url in (final, canonical):
        key = canonical_url(url) if isinstance(url, str) and url else None
        if key is not None and key not in keys:
            keys.append(key)
    return keys


async def _judge(
    run: CrawlRun,
    caller: Caller,
    idx: int,
    depth: int,
    links: Sequence[str],
    allowed: CrawlAllowed | None,
) -> tuple[list[Found], Counter[str]]:
    """The links that may be fetched, once each, and the others counted by reason."""
    found: list[Found] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    for url in links:
        key, reason = run.rules.judge(url, depth)
        if reason:
            skipped[reason] += 1
            continue
        if key in seen:
            continue
        seen.add(key)
        if allowed is not None and not await allowed(caller, url):
            skipped["robots"] += 1
            continue
        found.append(Found(url, key, depth, idx))
    return found, skipped
