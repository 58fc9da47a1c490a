"""A crawl through the web fetcher over a real local site with the usual traps (issue 38's first
Done-when): the limit exact at concurrency 8, no page fetched twice, nothing robots.txt
disallows, no request off the site, and, without a limit, every reachable page stored once.

The site is ``bench/crawl_site.py`` (500 pages in a tree, a calendar, a counter, a query that
grows, session ids, a ``www.`` twin, slash and ``index.html`` spellings, two URLs with one
canonical, a robots.txt Disallow, redirects on and off the site); its log names every request
by the page it asked for. Real clock (the fetcher and SQLite's writer are threads and sockets:
python-trio/trio#456); the waits are the engine's watch, bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio
from bench.crawl_site import CrawlSite, serve_crawl_site

from trio_batch import BatchEngine, Caller, Config, CrawlSpec, JobStatus, Snapshot, open_engine
from trio_batch.stores import SQLiteStore, Store
from trio_batch.web import WebFetcher, WebSiteGuide

from ..stores.postgres.support import PG_DSN, open_test_schema
from ..support import wait_ended

ALICE = Caller("alice")
PAGES = 500


@asynccontextmanager
async def crawl_engine(site: CrawlSite, store: Store, workers: int) -> AsyncIterator[BatchEngine]:
    """An engine over ``store`` with the web fetcher for ``site``, robots.txt and sitemaps
    read through its site guide, as ``serve`` opens one."""
    config = Config(workers=workers, max_workers=workers)
    async with (
        WebFetcher(allow=site.allow) as fetch,
        open_engine(store, fetch, config, site_guide=WebSiteGuide(fetch)) as engine,
    ):
        yield engine


async def crawled(
    site: CrawlSite, store: Store, spec: CrawlSpec
) -> tuple[Snapshot, dict[str, int]]:
    """Run ``spec`` to its end: the job's snapshot and its crawl's skipped counts."""
    async with crawl_engine(site, store, spec.concurrency) as engine:
        submitted = await engine.crawl(ALICE, "fleet", spec)
        with trio.fail_after(120):
            await wait_ended(engine, submitted.id)
        snap = await engine.status(submitted.id)
        info = await store.crawl_info(submitted.id)
    assert snap is not None and info is not None
    assert info.done == sum(t.status.value == "done" for t in snap.targets)
    return snap, dict(info.skipped)


def page_ids(site: CrawlSite, snap: Snapshot) -> list[str]:
    """The page each stored target is (every spelling of a page is one id)."""
    parts = [urlsplit(t.url) for t in snap.targets]
    return [site.page_of(p.path + (f"?{p.query}" if p.query else "")) for p in parts]


@asynccontextmanager
async def sqlite_or_postgres(kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    if kind == "sqlite":
        async with SQLiteStore.open(str(tmp_path / "crawl.sqlite")) as store:
            yield store
        return
    if not PG_DSN:
        pytest.skip("TRIO_BATCH_TEST_PG is not set")
    from trio_batch.stores import PostgresStore

    async with (
        open_test_schema(PG_DSN) as schema,
        PostgresStore.open(PG_DSN, schema=schema) as store,
    ):
        yield store


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_crawl_of_limit_200_stores_exactly_200_pages_once_each(
    kind: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Limit 200 at concurrency 8 over 500 pages and the traps: exactly 200 distinct pages
    stored done, none requested twice, nothing robots.txt disallows, no request off the site,
    and the crawl ends by itself."""
    site = await serve_crawl_site(nursery, PAGES)
    spec = CrawlSpec(site.start, limit=200, max_depth=10, concurrency=8)
    async with sqlite_or_postgres(kind, tmp_path) as store:
        snap, skipped = await crawled(site, store, spec)

    ids = page_ids(site, snap)
    assert JobStatus.DONE == snap.job.status
    assert 200 == len(ids) == len(set(ids))
    assert [] == site.twice()
    assert [] == site.disallowed()
    assert 0 == site.hosts_hit().get("other", 0) + site.hosts_hit().get("www", 0)
    assert skipped["limit"] > 0


@pytest.mark.slow
async def test_without_a_limit_every_reachable_page_is_stored_once(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """No limit short of the site: the crawl ends having stored every page the tree reaches
    within its depth once (each under one of its spellings), the traps bounded, and every URL
    it did not follow counted by its reason."""
    site = await serve_crawl_site(nursery, PAGES)
    deepest = max(site.depth(i) for i in range(PAGES))
    spec = CrawlSpec(site.start, limit=10_000, max_depth=deepest + 2, concurrency=8)
    async with SQLiteStore.open(str(tmp_path / "crawl.sqlite")) as store:
        snap, skipped = await crawled(site, store, spec)

    ids = page_ids(site, snap)
    assert JobStatus.DONE == snap.job.status
    assert len(ids) == len(set(ids))
    assert site.reachable(deepest) <= set(ids)
    assert [] == site.twice()
    assert [] == site.disallowed()
    assert 0 == site.hosts_hit().get("other", 0) + site.hosts_hit().get("www", 0)
    for reason in ("depth", "scope", "robots", "trap", "duplicate"):
        assert skipped[reason] > 0, reason
    assert len(ids) < PAGES + 200  # the calendar, counter and growing query stayed bounded
