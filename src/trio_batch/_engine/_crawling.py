"""What an engine does for a crawl: its pages' options, the links each page found, its limit.

A crawl is a job whose targets grow (``trio_batch._crawl``). The engine holds a :class:`CrawlRun`
for each crawl it runs: the crawl's rules (``_crawl_rules``), its pages stored done, and each
held target's depth and the page that found it. When a page's fetch returns, :func:`crawled`
reads its links from the result (``meta["links"]``), judges each (depth, scope, patterns,
traps, and robots.txt through the engine's :class:`SiteGuide`), and builds the outcome that carries
what it found to the store, which admits it with the page, deduplicated. A job starts a page
only while its pages done and in flight stay under its limit, so the limit is exact whatever
the concurrency. :func:`crawl_seeds` builds a new crawl's seeds: its start page and, as its
``sitemaps`` asks, the site's sitemaps' pages (through the :class:`SiteGuide`), judged by the
same rules, each skipped one counted. An engine over a single store holds a window of its
crawl's frontier, read on from the store (:meth:`~trio_batch.stores.Store.crawl_frontier`)
as it runs.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import Final, Protocol, final

from .._config import Config
from .._crawl import CrawlSpec, Found
from .._crawl_rules import CrawlRules, fetchable_url
from .._model import Caller, Options, Result, TargetState
from ..stores._protocol import Outcome


class SiteGuide(Protocol):
    """What a crawl asks of the web besides its pages: robots.txt for the links it finds, and
    the site's sitemaps for its seeds. ``trio_batch.web.WebSiteGuide`` is one; without one an
    engine's crawls follow every link their rules allow (the fetch still obeys robots.txt)
    and read no sitemap."""

    async def allows(self, caller: Caller, url: str) -> bool:
        """False only when robots.txt disallows ``url`` for this crawler (an unreadable file
        or an address the guard refuses is left to the fetch, which answers for it)."""
        ...

    async def sitemap_urls(self, caller: Caller, url: str, limit: int) -> Sequence[str]:
        """At most ``limit`` page URLs of the sitemaps of ``url``'s site (as ``caller``)."""
        ...


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


ROBOTS_PASSED: Final = 4096
"""Keys of links robots.txt allowed that a :class:`CrawlRun` remembers (about 400 KiB)."""


@final
class CrawlRun:
    """What an engine holds of a crawl it runs: its rules, its pages done, its held targets'
    depths and finders, and how far it has read the frontier."""

    __slots__ = (
        "done",
        "follow",
        "loaded",
        "more",
        "pages",
        "robots",
        "robots_passed",
        "rules",
        "spec",
        "wanted_links",
    )

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
        self.follow = spec.sitemaps != "only"
        """Whether links are followed (not with ``sitemaps="only"``: the sitemaps' pages alone)."""
        self.robots = bool(page_options(spec).robots)
        """Whether links are checked against robots.txt (as its pages are fetched)."""
        self.robots_passed: OrderedDict[str, None] = OrderedDict()
        """The keys of links robots.txt allowed lately, the last :data:`ROBOTS_PASSED` of
        them: a page links what its neighbours link (a menu, a footer), and a key checked a
        moment ago is not checked again. What reaches the store is the same (the link, for
        its dedup); only the guard's parse and the robots lookup of a repeat are saved."""

    def allowed_lately(self, key: str) -> bool:
        """Whether robots.txt allowed ``key`` lately (:attr:`robots_passed`)."""
        if key in self.robots_passed:
            self.robots_passed.move_to_end(key)
            return True
        return False

    def allowed(self, key: str) -> None:
        """Remember that robots.txt allowed ``key`` (bounded: the oldest is forgotten)."""
        self.robots_passed[key] = None
        if len(self.robots_passed) > ROBOTS_PASSED:
            self.robots_passed.popitem(last=False)

    def room(self, in_flight: int) -> bool:
        """Whether another page may start: pages done and in flight stay under the limit."""
        return self.done + in_flight < self.spec.limit

    def hold(self, idx: int, depth: int, parent: int) -> None:
        """Hold target ``idx`` (read from the store, claimed, or a seed)."""
        self.pages[idx] = (depth, parent)
        self.loaded = max(self.loaded, idx)

    def acknowledged(self, idx: int, outcome: Outcome, removed: bool, found: int) -> None:
        """A page's outcome was stored (or found to be another's): count it, forget it."""
        self.pages.pop(idx, None)
        if outcome.state is TargetState.DONE and not removed:
            self.done += 1
        if found:
            self.more = True


async def crawled(
    run: CrawlRun, caller: Caller, idx: int, result: Result, web: SiteGuide | None
) -> Outcome:
    """The outcome of crawl page ``idx``: its result (with ``meta["crawl"]``), the links it
    found that may be fetched, its other keys (final URL, ``rel=canonical``), and what its
    links were skipped for."""
    depth, parent = run.pages.get(idx, (0, -1))
    meta = dict(result.meta)
    final = meta.get("redirect") or meta.get("url")  # a redirect off scope is not followed
    if isinstance(final, str) and final and not run.rules.in_scope(final):
        return Outcome(TargetState.DONE, dropped="scope", crawl=True)
    links = _links(meta)
    if not run.wanted_links:
        meta.pop("links", None)
    meta["crawl"] = {"depth": depth, "found_by": None if parent < 0 else parent}
    found: list[Found] = []
    skipped: Counter[str] = Counter()
    if run.follow:
        found, skipped = await _judge(run, caller, idx, depth + 1, links, web)
    page = Result(result.content, meta)
    return Outcome(
        TargetState.DONE,
        result_json=page.to_json(),
        found=found,
        keys=_keys(run, meta),
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


def _keys(run: CrawlRun, meta: Mapping[str, object]) -> list[str]:
    """The page's other keys: its final URL after redirects, its ``rel=canonical`` (by the
    crawl's rules: in ``domain`` scope ``www.`` folds)."""
    keys = []
    final = meta.get("url")
    metadata = meta.get("metadata")
    canonical = metadata.get("canonical") if isinstance(metadata, dict) else None
    for url in (final, canonical):
        key = run.rules.key(url) if isinstance(url, str) and url else None
        if key is not None and key not in keys:
            keys.append(key)
    return keys


async def _judge(
    run: CrawlRun,
    caller: Caller,
    idx: int,
    depth: int,
    links: Sequence[str],
    web: SiteGuide | None,
) -> tuple[list[Found], Counter[str]]:
    """The links that may be fetched, once each, and the others counted by reason (a link the
    page repeats is a ``duplicate``)."""
    found: list[Found] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    for url in links:
        key, reason = run.rules.judge(url, depth)
        if reason:
            skipped[reason] += 1
            continue
        if key in seen:
            skipped["duplicate"] += 1
            continue
        seen.add(key)
        if run.robots and web is not None and not run.allowed_lately(key):
            if not await web.allows(caller, url):
                skipped["robots"] += 1
                continue
            run.allowed(key)
        found.append(Found(fetchable_url(url), key, depth, idx))
    return found, skipped


def check_crawl(spec: CrawlSpec, config: Config) -> None:
    """Refuse a crawl past an engine's bounds (``ValueError``, naming the setting)."""
    if not isinstance(spec, CrawlSpec):
        raise TypeError(f"spec must be a trio_batch.CrawlSpec (got {type(spec).__name__})")
    if spec.limit > config.max_crawl_pages:
        raise ValueError(
            f"limit must be at most {config.max_crawl_pages} "
            f"(Config.max_crawl_pages; got {spec.limit})"
        )
    if spec.concurrency > config.max_concurrency:
        raise ValueError(
            f"concurrency must be from 1 to {config.max_concurrency} "
            f"(Config.max_concurrency; got {spec.concurrency})"
        )


async def crawl_seeds(
    spec: CrawlSpec, caller: Caller, web: SiteGuide | None
) -> tuple[list[Found], Counter[str]]:
    """A new crawl's seeds (depth 0) and what was skipped of them, by reason: the start page
    (unless ``sitemaps="only"``) and, unless ``sitemaps="skip"``, the pages of the site's
    sitemaps, up to the crawl's frontier cap, each judged by the crawl's rules (scope,
    patterns, traps) and robots.txt as a link is.

    Raises:
        ValueError: the start URL cannot be crawled, or the sitemaps are asked for and the
            engine has no :class:`SiteGuide` to read them.
    """
    rules = CrawlRules(spec)  # refuses a start URL that cannot be crawled
    robots = bool(page_options(spec).robots)
    urls = [] if spec.sitemaps == "only" else [spec.url]
    if spec.sitemaps != "skip":
        if web is None:
            raise ValueError(
                f"sitemaps={spec.sitemaps!r} needs the web fetcher to read them; "
                "leave sitemaps out (or 'skip') with another fetch"
            )
        urls += await web.sitemap_urls(caller, spec.url, spec.frontier_cap)
    seeds: list[Found] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    for url in urls:
        key, reason = rules.judge(url, 0)
        if reason or key in seen:
            skipped[reason or "duplicate"] += 1
            continue
        if robots and web is not None and url != spec.url and not await web.allows(caller, url):
            skipped["robots"] += 1
            continue
        seen.add(key)
        seeds.append(Found(fetchable_url(url), key, 0))
    return seeds, skipped
