"""A crawl on every store: a job whose targets grow, its limit exact, each page stored once.

The site is a function: page n links to pages 2n+1 and 2n+2 (a binary tree), to itself, and
sometimes to a page under another name whose rel=canonical is the first. Real clock on the SQL
stores (their writers are threads: python-trio/trio#456), so waits are bounded polls.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import trio

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    JobStatus,
    Result,
    Target,
    TargetState,
    open_engine,
)
from trio_batch._crawl import CrawlSpec
from trio_batch.stores import PostgresStore, Store

from ..support import wait_ended_polling
from .postgres.support import PG_DSN, SKIP_REASON, open_test_schema

SITE = "https://site.example.test"
ALICE = Caller("alice")


class TreeSite:
    """Page n links to 2n+1, 2n+2 and itself; page ``/alias/n`` is page n under another URL
    (its rel=canonical says so), linked from page n+1's parent. Counts every fetch."""

    def __init__(self, seconds: float = 0.01, pages: int = 10_000) -> None:
        self.seconds = seconds
        self.pages = pages
        self.fetched: collections.Counter[str] = collections.Counter()

    async def __call__(self, caller: Caller, target: Target) -> Result:
        path = target.url[len(SITE) :]
        self.fetched[path] += 1
        await trio.sleep(self.seconds)
        n = int(path.rsplit("/", 1)[1] or 0)
        children = [k for k in (2 * n + 1, 2 * n + 2) if k < self.pages]
        links = [f"{SITE}/{k}" for k in children] + [f"{SITE}/{n}", f"{SITE}/alias/{n + 1}"]
        meta: dict[str, Any] = {
            "url": target.url,
            "links": [{"url": u, "text": "", "internal": True} for u in links],
            "metadata": {"canonical": f"{SITE}/{n}"},
        }
        return Result(f"page {n}", meta)


def start(limit: int, **spec: Any) -> CrawlSpec:
    """A crawl of the tree from its root."""
    return CrawlSpec(f"{SITE}/0", limit=limit, **spec)


async def until_stored(engine: BatchEngine, job_id: str, stored: int) -> None:
    """Wait until the job has stored ``stored`` targets, woken by the engine's watch (it reports
    each outcome stored)."""
    with trio.fail_after(60), engine.watch(job_id) as watch:
        while (job := await engine.job(job_id)) is not None and job.targets_done < stored:
            await watch.wait()


class TestOneCrawl:
    async def test_the_limit_is_exact_and_no_page_is_fetched_twice(self, store: Store) -> None:
        """A crawl of limit 60 at concurrency 6 over a large tree stores exactly 60 pages done,
        each fetched once, the aliases (one canonical) skipped as duplicates, the rest counted
        skipped for the limit."""
        site = TreeSite()
        spec = start(60, max_depth=20, concurrency=6)
        async with open_engine(store, site, Config(workers=6, max_workers=6)) as engine:
            sub = await engine.crawl(ALICE, "fleet", spec)
            await wait_ended_polling(engine, sub.id)
            snap = await engine.status(sub.id)
            info = await store.crawl_info(sub.id)

        assert snap is not None and info is not None
        assert JobStatus.DONE == snap.job.status
        assert 60 == info.done == sum(t.status is TargetState.DONE for t in snap.targets)
        assert [TargetState.DONE] * len(snap.targets) == [t.status for t in snap.targets]
        assert {1} == set(site.fetched.values())
        assert info.skipped["limit"] > 0
        assert info.skipped["duplicate"] > 0  # each page's self-link, and the aliases

    async def test_depth_bounds_the_crawl_and_it_ends_by_itself(self, store: Store) -> None:
        """max_depth 3 over the tree: the start page and three levels of links (1+2+4+8
        pages), then nothing left: the crawl ends below its limit, depth skips counted, and
        each page says its depth and the page that found it."""
        site = TreeSite()
        spec = start(1000, max_depth=3, concurrency=4)
        async with open_engine(store, site, Config(workers=4, max_workers=4)) as engine:
            sub = await engine.crawl(ALICE, "fleet", spec)
            await wait_ended_polling(engine, sub.id)
            snap = await engine.status(sub.id)
            info = await store.crawl_info(sub.id)

        assert snap is not None and info is not None
        pages = sorted(int(t.url.rsplit("/", 1)[1]) for t in snap.targets if "alias" not in t.url)
        assert list(range(15)) == pages
        assert 15 == info.done
        assert info.skipped["depth"] > 0
        by_url = {t.url: t for t in snap.targets}
        page5 = by_url[f"{SITE}/5"].result
        assert page5 is not None
        assert {"depth": 2, "found_by": by_url_index(snap, f"{SITE}/2")} == page5.meta["crawl"]

    async def test_sitemaps_seed_the_crawl_and_robots_skips_are_counted(self, store: Store) -> None:
        """With sitemaps "include", the sitemaps' pages in scope are seeds at depth 0 (one off
        scope and one repeat counted skipped); a link robots.txt disallows is never admitted,
        counted ``robots``; with "only", the sitemaps' pages alone are fetched, no link."""
        site = TreeSite()
        guide = Guide(
            sitemap=[f"{SITE}/40", f"{SITE}/41", f"{SITE}/40#x", "https://elsewhere.test/1"],
            disallowed={f"{SITE}/2"},
        )
        spec = start(1000, max_depth=1, sitemaps="include")
        only = start(1000, max_depth=5, sitemaps="only")
        async with open_engine(store, site, Config(), site_guide=guide) as engine:
            sub = await engine.crawl(ALICE, "fleet", spec)
            await wait_ended_polling(engine, sub.id)
            snap = await engine.status(sub.id)
            info = await store.crawl_info(sub.id)
            sub_only = await engine.crawl(ALICE, "fleet", only)
            await wait_ended_polling(engine, sub_only.id)
            snap_only = await engine.status(sub_only.id)

        assert snap is not None and info is not None and snap_only is not None
        urls = sorted(t.url for t in snap.targets)
        # the start page, its link 1 (2 is disallowed), the sitemaps' 40 and 41 and their links
        # (41's alias of 42 is page 42's only name here; 40's alias of 41 is a duplicate)
        pages = (0, 1, 40, 41, 81, 82, 83, 84, "alias/42")
        assert sorted(f"{SITE}/{n}" for n in pages) == urls
        assert 1 == info.skipped["scope"]  # elsewhere.test, from the sitemap
        assert info.skipped["robots"] >= 1
        assert info.skipped["duplicate"] >= 1  # /40#x is /40
        assert [f"{SITE}/40", f"{SITE}/41"] == [t.url for t in snap_only.targets]

    async def test_robots_txt_is_asked_once_a_link_and_every_time_it_refuses(
        self, store: Store
    ) -> None:
        """A link robots.txt allowed is not asked about again when the next page links it too
        (each page links itself, found first by its parent); a disallowed link that every page
        has is asked about, and counted ``robots``, every time."""
        site = TreeSite(pages=15)  # and a link to /private on every page

        async def fetch(caller: Caller, target: Target) -> Result:
            result = await site(caller, target)
            links = [*result.meta["links"], {"url": f"{SITE}/private", "text": ""}]
            return Result(result.content, {**result.meta, "links": links})

        guide = CountingGuide(sitemap=[], disallowed={f"{SITE}/private"})
        async with open_engine(store, fetch, Config(), site_guide=guide) as engine:
            sub = await engine.crawl(ALICE, "fleet", start(100, max_depth=3))
            await wait_ended_polling(engine, sub.id)
            info = await store.crawl_info(sub.id)

        assert info is not None
        private = f"{SITE}/private"
        assert info.skipped["robots"] > 1  # each stored page that linked it within max_depth
        assert guide.asked[private] >= info.skipped["robots"]  # (and removed aliases too)
        assert [private] == [url for url, n in guide.asked.items() if n > 1]

    async def test_a_page_redirected_off_scope_is_not_stored(self, store: Store) -> None:
        """A page whose fetch ended on another host (a redirect off the site) is removed from
        the crawl and counted skipped ``scope``; the crawl's other pages are stored as ever."""

        async def fetch(caller: Caller, target: Target) -> Result:
            result = await TreeSite(pages=7)(caller, target)
            if target.url == f"{SITE}/2":  # redirected to another site
                return Result("landing", {**result.meta, "url": "https://other.test/landing"})
            return result

        async with open_engine(store, fetch) as engine:
            sub = await engine.crawl(ALICE, "fleet", start(100, max_depth=5))
            await wait_ended_polling(engine, sub.id)
            snap = await engine.status(sub.id)
            info = await store.crawl_info(sub.id)

        assert snap is not None and info is not None
        paths = {t.url[len(SITE) :] for t in snap.targets}
        assert {"/0", "/1", "/3", "/4"} == paths - {p for p in paths if "alias" in p}
        assert 1 == info.skipped["scope"]
        assert len(snap.targets) == snap.job.targets_total == info.done

    async def test_sitemaps_need_a_site_guide(self, store: Store) -> None:
        """A crawl that asks for sitemaps of an engine with no site guide is refused with a
        hint, and nothing is stored."""
        async with open_engine(store, TreeSite()) as engine:
            with pytest.raises(ValueError, match="sitemaps"):
                await engine.crawl(ALICE, "fleet", start(10, sitemaps="include"))
            assert [] == await engine.jobs(ALICE.name)

    async def test_a_crawl_is_one_job_in_the_rotation(self, store: Store) -> None:
        """A batch submitted while a long crawl runs gets its turns at once: its targets all end
        while the crawl is still far from its limit (one worker, the round robin's rule)."""
        site = TreeSite(seconds=0.02)
        spec = start(5000, max_depth=30, concurrency=1)
        config = Config(workers=1, max_workers=1, jobs_per_caller=2)
        async with open_engine(store, site, config) as engine:
            crawl = await engine.crawl(ALICE, "fleet", spec)
            await until_stored(engine, crawl.id, 5)
            batch = await engine.submit(
                Caller("bob"), "fleet", [Target(f"{SITE}/b/{i}") for i in range(3)]
            )
            await wait_ended_polling(engine, batch.id)
            crawled = await engine.job(crawl.id)
            await engine.cancel(crawl.id)

        assert crawled is not None
        assert crawled.targets_done < 5 + 3 * 2  # the batch's 3 turns came in the first rounds


@dataclasses.dataclass
class Guide:
    """A site guide with a fixed sitemap and robots.txt disallowing some URLs."""

    sitemap: list[str]
    disallowed: set[str]

    async def allows(self, caller: Caller, url: str) -> bool:
        return url not in self.disallowed

    async def sitemap_urls(self, caller: Caller, url: str, limit: int) -> list[str]:
        return self.sitemap[:limit]


@dataclasses.dataclass
class CountingGuide(Guide):
    """A :class:`Guide` that counts what it is asked about robots.txt, by URL."""

    asked: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    async def allows(self, caller: Caller, url: str) -> bool:
        self.asked[url] += 1
        return await super().allows(caller, url)


def by_url_index(snap: Any, url: str) -> int:
    """The index of the target of ``url`` in the snapshot."""
    return next(int(t.idx) for t in snap.targets if t.url == url)


@asynccontextmanager
async def fleet(schema: str, fetch: Any, n: int, **config: Any) -> AsyncIterator[list[BatchEngine]]:
    """``n`` engines on their own store instances of ``schema``."""
    async with AsyncExitStack() as stack:
        engines = []
        for _ in range(n):
            store = await stack.enter_async_context(PostgresStore.open(PG_DSN, schema=schema))
            engines.append(
                await stack.enter_async_context(open_engine(store, fetch, Config(**config)))
            )
        yield engines


class TestOnAFleet:
    async def test_three_instances_store_exactly_the_limit(self) -> None:
        """A crawl of limit 200 at concurrency 8 on a fleet of three: exactly 200 pages done,
        none fetched twice, wherever each page was claimed."""
        if not PG_DSN:
            pytest.skip(SKIP_REASON)
        site = TreeSite(seconds=0.02)
        spec = start(200, max_depth=20, concurrency=8)
        async with open_test_schema(PG_DSN) as schema, fleet(schema, site, 3, workers=4) as engines:
            sub = await engines[0].crawl(ALICE, "fleet", spec)
            await wait_ended_polling(engines[1], sub.id)
            snap = await engines[2].status(sub.id)

        assert snap is not None
        assert 200 == sum(t.status is TargetState.DONE for t in snap.targets) == len(snap.targets)
        assert {1} == set(site.fetched.values())


def test_the_spec_round_trips_through_json() -> None:
    """What a crawl's job stores is the spec it was asked with."""
    spec = CrawlSpec(f"{SITE}/", limit=5, include=("/docs/**",), exclude=("*.pdf",))
    spec = dataclasses.replace(spec, concurrency=3)

    assert spec == CrawlSpec.from_json(spec.to_json())
