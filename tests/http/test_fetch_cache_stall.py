"""POST /v1/fetch answers in about 2 * CACHE_WAIT when the response cache's store stalls.

The audit locked the ``web_cache`` table from another PostgreSQL session: /v1/fetch answered
after 60 s (the cache read, then the cache write, each waited for ``--pg-call-timeout``, 30 s).
The cache is an optimisation: now a read that has not answered within ``CACHE_WAIT`` is a miss,
and a write that has not finished is left to the store.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
import trio.testing

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema, table_locked
from tests.support import slack
from tests.web.support import URL, StalledCache, stalled_fetcher
from trio_batch import Config, Target, open_engine
from trio_batch.http import create_app
from trio_batch.stores import MemoryStore, ResponseCache, Store
from trio_batch.testing import asgi_lifespan
from trio_batch.web._fetch._cache import CACHE_WAIT

from .support import auth, make_keys

SLACK = 2.0
"""Seconds over 2 * CACHE_WAIT that /v1/fetch may take on an idle machine (real time); on a
loaded one, what the same call took with nothing locked, measured in the test (``slack``)."""


@asynccontextmanager
async def open_fetch_api(
    cache: ResponseCache | StalledCache, store: Store
) -> AsyncIterator[httpx.AsyncClient]:
    """The app over an engine on ``store``; /v1/fetch and the engine share one web fetcher
    (a mock site, fake DNS) whose response cache lives in ``cache``."""
    async with (
        stalled_fetcher(cache) as fetcher,
        open_engine(store, fetcher, Config(ttl=3600)) as engine,
    ):
        app = create_app(engine, make_keys(), fetch=fetcher, access_log_enabled=False)
        transport = httpx.ASGITransport(app=app)
        async with (
            asgi_lifespan(app),
            httpx.AsyncClient(transport=transport, base_url="http://api.test") as client,
        ):
            yield client


class TestStalledCache:
    async def test_fetch_answers_within_twice_the_wait(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """With cache reads and writes both stuck, /v1/fetch still answers 200 with the page."""
        cache = StalledCache(read=True, write=True)
        async with open_fetch_api(cache, MemoryStore()) as client:
            start = trio.current_time()
            response = await client.post("/v1/fetch", json={"url": URL}, headers=auth())
            elapsed = trio.current_time() - start
            assert cache.read_gate is not None and cache.write_gate is not None
            cache.read_gate.set()
            cache.write_gate.set()

        assert response.status_code == 200
        assert response.json()["result"]["content"] == "fresh"
        assert elapsed == pytest.approx(2 * CACHE_WAIT)


@pytest.mark.slow
@pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)
class TestLockedWebCacheTable:
    async def test_fetch_answers_in_seconds_and_the_writer_is_never_held(self) -> None:
        """Under ``LOCK TABLE web_cache IN ACCESS EXCLUSIVE MODE`` from another session,
        /v1/fetch answers 200 within 2 * CACHE_WAIT (plus slack), not 2 * call_timeout; the
        cache write waits on a pooled connection (1 s ``lock_timeout``), never on the store's
        writer, so an admission under the lock commits at once; once the lock goes, the cache
        works again."""
        pytest.importorskip("psycopg")
        from trio_batch.stores import PostgresStore
        from trio_batch.stores._protocol import Limits, NewJob

        limits = Limits(ttl=3600.0, targets_per_job=10, jobs_per_caller=10, jobs_total=10)
        async with (
            open_test_schema(PG_DSN) as schema,
            PostgresStore.open(PG_DSN, schema=schema) as store,
            open_fetch_api(store, store) as client,
        ):
            start = time.monotonic()  # a fetch and an admission with nothing locked: baselines
            assert (await client.post("/v1/fetch", json={"url": URL}, headers=auth())).is_success
            free_fetch = time.monotonic() - start
            start = time.monotonic()
            await store.admit(NewJob("f", "c", "fleet", "f", [Target(URL)], time.time()), limits)
            free_admit = time.monotonic() - start
            other = {"url": URL + "&other=1"}
            async with table_locked(PG_DSN, schema, "web_cache"):
                start = time.monotonic()
                locked = await client.post("/v1/fetch", json=other, headers=auth())
                elapsed = time.monotonic() - start
                job = NewJob("j", "c", "fleet", "k", [Target(URL)], time.time())
                start = time.monotonic()  # a queued write cannot be cancelled: time it
                admitted = await store.admit(job, limits)
                admitting = time.monotonic() - start
            again = await client.post("/v1/fetch", json=other, headers=auth())
            cached = await client.post("/v1/fetch", json=other, headers=auth())

        assert locked.status_code == 200
        assert locked.json()["result"]["meta"]["cached"] is False
        assert elapsed < 2 * CACHE_WAIT + slack(SLACK, free_fetch, times=2)
        assert not admitted.reused
        assert admitting < slack(SLACK, free_admit)  # not call_timeout (30 s) behind a stuck write
        assert again.status_code == 200
        assert cached.json()["result"]["meta"]["cached"] is True
