"""``client.crawl`` (issue 38) under Trio, asyncio and blocking, against a served crawl.

The server runs under Trio in a thread of its own, on a real socket, with the web fetcher and
its site guide over a local site (``bench/crawl_site.py``) served in the same thread, so the
test's own loop is free to be asyncio or none at all.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Iterator

import pytest
import trio
from bench.crawl_site import serve_crawl_site

from trio_batch import Config, open_engine
from trio_batch.client import (
    BatchClient,
    BlockingClient,
    ClientError,
    CrawlProgress,
    open_client,
)
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.web import WebFetcher, WebSiteGuide, precheck

from .support import ALICE, make_keys

Ready = queue.Queue[tuple[str, str, trio.lowlevel.TrioToken, trio.Event]]
SKIPPED_KEYS = {"depth", "scope", "pattern", "robots", "trap", "limit", "duplicate"}


def _serve(ready: Ready) -> None:
    """In a thread: the crawl site, an engine over the web fetcher and the API, until stopped."""

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            site = await serve_crawl_site(nursery, 40)
            config = Config(jobs_per_caller=4, workers=4, max_workers=4)
            async with (
                WebFetcher(allow=site.allow) as fetch,
                open_engine(MemoryStore(), fetch, config, site_guide=WebSiteGuide(fetch)) as engine,
            ):
                app = create_app(
                    engine,
                    make_keys(),
                    fetch=fetch,
                    precheck=functools.partial(precheck, allow=site.allow),
                    access_log_enabled=False,
                )
                start = functools.partial(serve, app, port=0, shutdown_trigger=stop.wait)
                port: int = await nursery.start(lambda task_status: start(task_status=task_status))
                token = trio.lowlevel.current_trio_token()
                ready.put((f"http://127.0.0.1:{port}", site.start, token, stop))
                await stop.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.fixture
def server() -> Iterator[tuple[str, str]]:
    """The API's URL and the site's start page."""
    ready: Ready = queue.Queue()
    thread = threading.Thread(target=_serve, args=(ready,), daemon=True)
    thread.start()
    url, start, token, stop = ready.get(timeout=20)
    try:
        yield url, start
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=20)


async def crawl_round(client: BatchClient, start: str) -> tuple[str, CrawlProgress, int, str]:
    """Crawl, wait, read the status and the results; a bad limit is a ClientError."""
    sub = await client.crawl(start, limit=5, max_depth=2, include=["/**"], concurrency=2)
    end = await client.wait(sub.id)
    status = await client.status(sub.id)
    async with client.results(sub.id, state="done") as stream:
        done = [line async for line in stream]
    with pytest.raises(ClientError) as caught:
        await client.crawl(start, limit=0)
    assert "limit" == caught.value.field and caught.value.hint
    return end["status"], status["crawl"], len(done), str(caught.value.status)


def check(seen: tuple[str, CrawlProgress, int, str]) -> None:
    status, crawl, done, refused = seen
    assert "done" == status
    assert (5, 2, 5) == (crawl["limit"], crawl["max_depth"], crawl["done"])
    assert SKIPPED_KEYS == set(crawl["skipped"])
    assert 5 == done
    assert "400" == refused


async def on_any_loop(url: str, start: str) -> tuple[str, CrawlProgress, int, str]:
    async with open_client(url, ALICE) as client:
        return await crawl_round(client, start)


class TestCrawlOnEveryLoop:
    async def test_under_trio(self, server: tuple[str, str]) -> None:
        """client.crawl under Trio: admitted, waited to done, its status carries ``crawl``."""
        check(await on_any_loop(*server))

    def test_under_asyncio(self, server: tuple[str, str]) -> None:
        """The same under asyncio.run."""
        check(asyncio.run(on_any_loop(*server)))

    def test_blocking(self, server: tuple[str, str]) -> None:
        """BlockingClient.crawl: the same answers, blocking; a repeat is the same job."""
        url, start = server
        with BlockingClient(url, ALICE) as client:
            sub = client.crawl(start, limit=3, max_depth=1)
            end = client.wait(sub.id)
            again = client.crawl(start, limit=3, max_depth=1)
            status = client.status(sub.id)
            batch = client.submit([start])
            client.wait(batch.id)
            batch_status = client.status(batch.id)

        assert "done" == end["status"]
        assert 3 == status["crawl"]["done"]
        assert (sub.id, True) == (again.id, again.reused)
        assert "crawl" not in batch_status
