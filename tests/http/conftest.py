"""Fixtures for the HTTP API tests: an engine on a MemoryStore, the app, and an httpx client.

The app runs its ASGI lifespan, as under a server (hypercorn sends it; httpx's ASGI transport
does not, so :func:`lifespan` plays the server's part).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("hypercorn")
pytest.importorskip("prometheus_client")

import httpx
from starlette.types import ASGIApp

from tests.support import WallClock
from trio_batch import BatchEngine, Config, open_engine
from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key
from trio_batch.metrics import PrometheusMetrics
from trio_batch.stores import MemoryStore, Store
from trio_batch.testing import ScriptedFetch, asgi_lifespan
from trio_batch.web import precheck

ALICE = "tb_alice-test-key"
BOB = "tb_bob-test-key"


def auth(key: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def make_keys() -> KeyRing:
    return KeyRing(
        [
            KeyRecord("alice", "lab", "fleet", hash_key(ALICE)),
            KeyRecord("bob", "", "restricted", hash_key(BOB)),
        ]
    )


@dataclass
class Api:
    """An app over a live engine, and a client talking to it in-process."""

    client: httpx.AsyncClient
    engine: BatchEngine
    fetch: ScriptedFetch
    metrics: PrometheusMetrics
    wall: WallClock
    app: ASGIApp

    async def submit(self, *urls: str, key: str = ALICE, **extra: Any) -> httpx.Response:
        targets = [{"url": u, **extra} for u in urls]
        return await self.client.post("/v1/batch", json={"targets": targets}, headers=auth(key))

    async def get(self, path: str, key: str = ALICE, **params: Any) -> httpx.Response:
        return await self.client.get(path, params=params, headers=auth(key))


lifespan = asgi_lifespan


@asynccontextmanager
async def open_api(
    config: Config | None = None,
    *,
    fetch: ScriptedFetch | None = None,
    with_fetch: bool = True,
    store: Store | None = None,
    with_lifespan: bool = True,
    **app_kwargs: Any,
) -> AsyncIterator[Api]:
    fetch = fetch if fetch is not None else ScriptedFetch()
    metrics = PrometheusMetrics()
    wall = WallClock()
    base = config or Config(ttl=3600)
    config = Config(
        ttl=base.ttl,
        targets_per_job=base.targets_per_job,
        jobs_per_caller=base.jobs_per_caller,
        jobs_total=base.jobs_total,
        workers=base.workers,
        hooks=metrics.hooks(),
    )
    store = store if store is not None else MemoryStore()
    async with open_engine(store, fetch, config, wall_clock=wall) as engine:
        app_kwargs.setdefault("precheck", precheck)
        app = create_app(
            engine,
            make_keys(),
            fetch=fetch if with_fetch else None,
            metrics=metrics,
            wall_clock=wall,
            **app_kwargs,
        )
        transport = httpx.ASGITransport(app=app)
        async with contextlib.AsyncExitStack() as stack:
            if with_lifespan:
                await stack.enter_async_context(lifespan(app))
            client = await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://api.test")
            )
            yield Api(client, engine, fetch, metrics, wall, app)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with open_api() as a:
        yield a
