from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, settings

from tests.stores.postgres.support import PG_DSN
from trio_batch.stores import MemoryStore, ServiceStore, SQLiteStore

settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=10, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

STORE_KINDS = ["memory", "sqlite", *(["postgres"] if PG_DSN else [])]


@pytest.fixture(params=STORE_KINDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: os.PathLike[str]
) -> AsyncIterator[ServiceStore]:
    """Every backend, one after the other: the store contract holds on each."""
    kind = request.param
    if kind == "memory":
        yield MemoryStore()
    elif kind == "sqlite":
        async with SQLiteStore.open(os.path.join(tmp_path, "store.sqlite")) as sqlite:
            yield sqlite
    else:
        from tests.stores.postgres.support import open_test_store

        async with open_test_store(PG_DSN) as pg:
            yield pg


@pytest.fixture(params=["memory", "sqlite"])
async def local_store(
    request: pytest.FixtureRequest, tmp_path: os.PathLike[str]
) -> AsyncIterator[ServiceStore]:
    """The stores whose rotation is the engine's own (not a fleet's): memory and SQLite.

    For the promises SPEC rule 7 makes of one process (closing fails the live jobs, opening
    fails what a dead process left); a PostgreSQL fleet keeps its jobs instead
    (tests/stores/postgres/test_fleet.py).
    """
    if request.param == "memory":
        yield MemoryStore()
    else:
        async with SQLiteStore.open(os.path.join(tmp_path, "store.sqlite")) as sqlite:
            yield sqlite
