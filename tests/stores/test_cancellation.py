"""The cancellation contract of the Store protocol, on every backend.

Every method is a checkpoint; a method that raises ``trio.Cancelled`` had no effect; a write
that has begun completes and returns. This is what lets the engine (and its caller) always know
what was stored.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.stores.postgres.support import PG_DSN
from trio_batch import Result, TargetState
from trio_batch.stores import (
    CacheEntry,
    Limits,
    MemoryStore,
    Outcome,
    ServiceStore,
    SQLiteStore,
)

from ..conftest import STORE_KINDS
from . import support

NOW = 1_800_000_000.0
LIMITS = Limits(ttl=3600.0, targets_per_job=8, jobs_per_caller=1, jobs_total=8)

new_job = functools.partial(support.new_job, key="k", now=NOW, url="https://a.example.test/{i}")


async def admitted(store: ServiceStore, job_id: str = "j1") -> str:
    sub = await store.admit(new_job(job_id), LIMITS)
    return sub.id


class TestAlreadyCancelled:
    """Under a cancel that is already pending, every call raises Cancelled and does nothing."""

    async def test_admit_stores_no_job_and_holds_no_cap(self, store: ServiceStore) -> None:
        """A cancelled admit leaves neither the job nor its cap behind."""
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.admit(new_job("j1"), LIMITS)

        assert scope.cancelled_caught
        assert None is await store.snapshot("j1")
        assert (await store.admit(new_job("j2", key="other"), LIMITS)).reused is False

    async def test_cancel_leaves_the_job_live(self, store: ServiceStore) -> None:
        """A cancelled cancel does not cancel the job."""
        job_id = await admitted(store)
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.cancel(job_id, NOW + 1)

        snap = await store.snapshot(job_id)
        assert scope.cancelled_caught
        assert snap is not None
        assert "queued" == snap.job.status

    async def test_touch_leaves_the_lease(self, store: ServiceStore) -> None:
        """A cancelled touch does not move the lease."""
        job_id = await admitted(store)
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.touch(job_id, NOW + 100)

        snap = await store.snapshot(job_id)
        assert scope.cancelled_caught
        assert snap is not None
        assert NOW == snap.job.lease

    async def test_target_writes_leave_the_target(self, store: ServiceStore) -> None:
        """Cancelled start, finish, release and interrupt write nothing."""
        job_id = await admitted(store)
        assert await store.start_target(job_id, 0, NOW)
        done = Outcome(TargetState.DONE, result_json=Result("x").to_json())
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.finish_target(job_id, 0, done, NOW, 10**9),
            lambda: store.release_target(job_id, 0, NOW),
            lambda: store.interrupt([job_id], NOW),
            lambda: store.start_target(job_id, 1, NOW),
        ]
        for call in calls:
            with trio.CancelScope() as scope:
                scope.cancel()
                await call()
            assert scope.cancelled_caught

        snap = await store.snapshot(job_id)
        assert snap is not None
        assert "running" == snap.job.status
        assert ["running", "pending"] == [t.status for t in snap.targets]

    async def test_cache_put_stores_nothing(self, store: ServiceStore) -> None:
        """A cancelled cache_put leaves the cache as it was."""
        entry = CacheEntry(b"body", "{}", NOW, NOW + 60)
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.cache_put("key", entry, 10**6)

        assert scope.cancelled_caught
        assert None is await store.cache_get("key")


class TestCheckpoints:
    """Every method is a checkpoint, also when it has nothing to do."""

    async def test_every_method_checkpoints(self, store: ServiceStore) -> None:
        """assert_checkpoints holds for each Store method, writes and reads alike."""
        job_id = await admitted(store)
        failed = Outcome(TargetState.FAILED, error="e")
        entry = CacheEntry(b"body", "{}", NOW, NOW + 60)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.admit(new_job("j1"), LIMITS),  # a repeat: reused
            lambda: store.start_target(job_id, 0, NOW),
            lambda: store.release_target(job_id, 0, NOW),
            lambda: store.start_target(job_id, 0, NOW),
            lambda: store.finish_target(job_id, 0, failed, NOW, 10**9),
            lambda: store.touch(job_id, NOW),
            lambda: store.touch("unknown", NOW),
            lambda: store.snapshot(job_id),
            lambda: store.snapshot("unknown"),
            lambda: store.cancel(job_id, NOW),
            lambda: store.cancel(job_id, NOW),  # already terminal
            lambda: store.interrupt([], NOW),
            lambda: store.cache_put("key", entry, 10**6),
            lambda: store.cache_get("key"),
        ]
        for call in calls:
            with trio.testing.assert_checkpoints():
                await call()


class TestCancelledMidCall:
    """A cancel that arrives during a call: either it returns (and the write stands) or it
    raises Cancelled (and nothing was written). Never a stored job the caller cannot know of."""

    @pytest.mark.parametrize("checkpoints", [0, 1, 2, 5])
    async def test_admit_either_returns_or_stores_nothing(
        self, store: ServiceStore, checkpoints: int
    ) -> None:
        """Whatever the moment of the cancel, the caller knows whether its job exists."""
        result: list[str] = []

        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def submit() -> None:
                with scope:
                    sub = await store.admit(new_job("j1"), LIMITS)
                    result.append(sub.id)

            nursery.start_soon(submit)
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            scope.cancel()

        snap = await store.snapshot("j1")
        if result:
            assert snap is not None
            assert not scope.cancelled_caught
        else:
            assert scope.cancelled_caught
            assert snap is None


@asynccontextmanager
async def open_store(kind: str, tmp_path: Path) -> AsyncIterator[ServiceStore]:
    if kind == "memory":
        async with MemoryStore() as memory:
            yield memory
    elif kind == "sqlite":
        async with SQLiteStore.open(tmp_path / "closed.sqlite") as sqlite:
            yield sqlite
    else:
        from tests.stores.postgres.support import open_test_store

        async with open_test_store(PG_DSN) as pg:
            yield pg


class TestClosed:
    @pytest.mark.parametrize("kind", STORE_KINDS)
    async def test_every_method_raises_closed_resource_error_after_close(
        self, kind: str, tmp_path: Path
    ) -> None:
        """A store used after its block has exited says so, on every backend."""
        async with open_store(kind, tmp_path) as store:
            job_id = await admitted(store)
        done = Outcome(TargetState.FAILED, error="e")
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.admit(new_job("j2", key="k2"), LIMITS),
            lambda: store.recover(NOW),
            lambda: store.start_target(job_id, 0, NOW),
            lambda: store.release_target(job_id, 0, NOW),
            lambda: store.finish_target(job_id, 0, done, NOW, 10**9),
            lambda: store.cancel(job_id, NOW),
            lambda: store.interrupt([job_id], NOW),
            lambda: store.snapshot(job_id),
            lambda: store.touch(job_id, NOW),
            lambda: store.cache_get("key"),
            lambda: store.cache_put("key", CacheEntry(b"", "{}", NOW, NOW), 10),
        ]
        for call in calls:
            with pytest.raises(trio.ClosedResourceError):
                await call()
