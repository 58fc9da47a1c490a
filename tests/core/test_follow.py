"""Following a job: ``BatchEngine.watch`` wakes on the engine's own outcomes, and the reads."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batch import JobStatus, Target, TargetState, open_engine
from trio_batch._engine._watch import JobWatchers
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

from ..support import ALICE

A, B, C = "https://a.test/", "https://b.test/", "https://c.test/"


class TestJobWatchers:
    async def test_a_change_wakes_every_watcher_of_the_job_only(self) -> None:
        """changed(job) wakes that job's watchers, all of them, and no other job's."""
        watchers = JobWatchers()
        woke: list[str] = []

        async def wait(job: str, name: str) -> None:
            with watchers.watch(job) as w:
                await w.wait()
                woke.append(name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "j1", "a")
            nursery.start_soon(wait, "j1", "b")
            nursery.start_soon(wait, "j2", "c")
            await trio.testing.wait_all_tasks_blocked()
            watchers.changed("j1")
            await trio.testing.wait_all_tasks_blocked()
            early = sorted(woke)
            watchers.changed("j2")

        assert ["a", "b"] == early
        assert 0 == watchers.count == watchers.jobs

    async def test_a_change_before_the_wait_is_not_missed(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A change between opening the watch (or the last wait) and the wait returns at once."""
        watchers = JobWatchers()
        with watchers.watch("j") as w:
            watchers.changed("j")
            watchers.changed("j")
            with trio.testing.assert_checkpoints():
                await w.wait()
            with trio.move_on_after(1) as scope:
                await w.wait()

        assert scope.cancelled_caught

    async def test_without_a_change_the_wait_waits(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """No change, no poll: the wait lasts until the caller's own deadline."""
        watchers = JobWatchers()
        with watchers.watch("j") as w, trio.move_on_after(15) as scope:
            await w.wait()

        assert scope.cancelled_caught

    async def test_a_shared_store_polls(self, autojump_clock: trio.testing.MockClock) -> None:
        """With a poll interval, the wait returns after it (the caller reads the store again)."""
        watchers = JobWatchers(poll=1.0)
        with watchers.watch("j") as w:
            t0 = trio.current_time()
            await w.wait()

        assert 1 == pytest.approx(trio.current_time() - t0)

    async def test_the_memo_is_shared_and_emptied_at_a_change(self) -> None:
        """Watchers of a job share one memo; a change empties it."""
        watchers = JobWatchers()
        with watchers.watch("j") as a, watchers.watch("j") as b:
            a.memo["read"] = 1
            shared = b.memo.get("read")
            watchers.changed("j")
            after = b.memo.get("read")

        assert (1, None) == (shared, after)

    async def test_on_a_shared_store_the_memo_lasts_one_poll(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Polling once a second, nothing in the memo is older than a second."""
        watchers = JobWatchers(poll=1.0)
        with watchers.watch("j") as w:
            w.memo["read"] = 1
            await trio.sleep(0.5)
            kept = w.memo.get("read")
            await trio.sleep(0.6)
            gone = w.memo.get("read")

        assert (1, None) == (kept, gone)

    async def test_leaving_frees_the_watcher_and_the_job_entry(self) -> None:
        """The count goes back to zero, and an unwatched job holds nothing."""
        watchers = JobWatchers()
        with watchers.watch("j"), watchers.watch("j"):
            during = (watchers.count, watchers.jobs)
        with watchers.watch("k"):
            pass

        assert (2, 1) == during
        assert (0, 0) == (watchers.count, watchers.jobs)

    async def test_a_cancelled_wait_frees_everything(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A watcher whose task is cancelled mid-wait leaves nothing behind."""
        watchers = JobWatchers()
        with trio.move_on_after(0.01):
            with watchers.watch("j") as w:
                await w.wait()

        assert (0, 0) == (watchers.count, watchers.jobs)

    async def test_close_wakes_waiters_with_closed_resource_error(self) -> None:
        """Closing raises in every wait, now and later; a new watch is refused."""
        watchers = JobWatchers()
        errors: list[BaseException] = []

        async def wait() -> None:
            with watchers.watch("j") as w:
                try:
                    await w.wait()
                except trio.ClosedResourceError as exc:
                    errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            watchers.close()

        assert 1 == len(errors)
        with pytest.raises(trio.ClosedResourceError):
            watchers.watch("j").__enter__()


class TestEngineWatch:
    async def test_each_stored_outcome_wakes_the_watchers(self) -> None:
        """A watcher wakes after each target of its job is stored, and when it settles."""
        fetch = ScriptedFetch()
        gates = [fetch.hold(A), fetch.hold(B)]
        seen: list[tuple[int, str]] = []
        async with open_engine(MemoryStore(), fetch) as engine:
            sub = await engine.submit(ALICE, "fleet", [Target(A), Target(B)])
            with engine.watch(sub.id) as w:
                for gate in gates:
                    gate.set()
                    await w.wait()
                    summary = await engine.summary(sub.id)
                    assert summary is not None
                    seen.append((summary.done, summary.job.status.value))
            watchers = engine.watchers

        assert [(1, "running"), (2, "done")] == seen
        assert 0 == watchers

    async def test_cancel_wakes_the_watchers(self) -> None:
        """Cancelling a job wakes its watchers; the job reads cancelled."""
        fetch = ScriptedFetch()
        fetch.hold(A)
        async with open_engine(MemoryStore(), fetch) as engine:
            sub = await engine.submit(ALICE, "fleet", [Target(A), Target(B)])
            with engine.watch(sub.id) as w:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(engine.cancel, sub.id)
                    await w.wait()
                summary = await engine.summary(sub.id)

        assert summary is not None
        assert JobStatus.CANCELLED == summary.job.status

    async def test_closing_the_engine_ends_every_wait(self) -> None:
        """aclose() wakes the watchers at once with ClosedResourceError; watch() is refused."""
        fetch = ScriptedFetch()
        fetch.hold(A)
        errors: list[BaseException] = []
        async with open_engine(MemoryStore(), fetch) as engine:
            sub = await engine.submit(ALICE, "fleet", [Target(A)])

            async def follower() -> None:
                with engine.watch(sub.id) as w:
                    try:
                        await w.wait()
                    except trio.ClosedResourceError as exc:
                        errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower)
                await trio.testing.wait_all_tasks_blocked()
                await engine.aclose()

        assert 1 == len(errors)
        with pytest.raises(trio.ClosedResourceError):
            engine.watch(sub.id)


class TestEngineReads:
    async def test_jobs_targets_and_summary(self) -> None:
        """The engine's reads page jobs newest first and targets in chunks, filtered."""
        fetch = ScriptedFetch()
        times = iter(range(100, 200))
        async with open_engine(
            MemoryStore(), fetch, wall_clock=lambda: float(next(times))
        ) as engine:
            first = await engine.submit(ALICE, "fleet", [Target(A)])
            await trio.testing.wait_all_tasks_blocked()
            second = await engine.submit(ALICE, "fleet", [Target(A), Target(B), Target(C)])
            await trio.testing.wait_all_tasks_blocked()
            page = await engine.jobs("alice", limit=1)
            older = await engine.jobs(
                "alice", before=(page[0].job.created_at, page[0].job.id), limit=5
            )
            none = await engine.jobs("alice", statuses=[JobStatus.FAILED])
            chunk = await engine.targets(second.id, after=0, limit=1)
            bare = await engine.targets(second.id, states=[TargetState.DONE], results=False)
            summary = await engine.summary(second.id)
            with pytest.raises(ValueError, match=r"^limit must be from 1 to 1000 \(got 0\)$"):
                await engine.jobs("alice", limit=0)

        assert [second.id] == [s.job.id for s in page]
        assert [first.id] == [s.job.id for s in older]
        assert [] == none
        assert [1] == [t.idx for t in chunk]
        assert chunk[0].result is not None
        assert [0, 1, 2] == [t.idx for t in bare]
        assert all(t.result is None for t in bare)
        assert summary is not None
        assert (0, 0, 3, 0) == (summary.pending, summary.running, summary.done, summary.failed)
