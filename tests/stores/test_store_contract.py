"""The store contract: every backend behaves like MemoryStore, the reference."""

from __future__ import annotations

import contextlib
import functools

import pytest
import trio

from trio_batch import (
    Busy,
    CallerBusy,
    JobStatus,
    Result,
    TargetState,
    TooManyTargets,
)
from trio_batch.stores import CacheEntry, Limits, Outcome, ServiceStore

from . import support

LIMITS = Limits(ttl=100.0, targets_per_job=4, jobs_per_caller=2, jobs_total=3)
"""Caps small enough for a test to reach each."""

new_job = functools.partial(support.new_job, grep=True)  # options stored: see the snapshot test


def done(content: str = "ok") -> Outcome:
    return Outcome(TargetState.DONE, result_json=Result(content, {"n": 1}).to_json())


FAILED = Outcome(TargetState.FAILED, error="boom", hint="try later")


async def finish_all(store: ServiceStore, job_id: str, outcomes: list[Outcome], now: float) -> None:
    for idx, outcome in enumerate(outcomes):
        assert await store.start_target(job_id, idx, now)
        await store.finish_target(job_id, idx, outcome, now, 10**9)


class TestAdmit:
    async def test_insert_then_snapshot(self, store: ServiceStore) -> None:
        """An admitted job reads back queued, with its targets and options in order."""
        sub = await store.admit(new_job("j1"), LIMITS)
        snap = await store.snapshot("j1")

        assert ("j1", False) == tuple(sub)
        assert snap is not None
        assert (JobStatus.QUEUED, 2, 0, 1000.0, 1000.0) == (
            snap.job.status,
            snap.job.targets_total,
            snap.job.targets_done,
            snap.job.created_at,
            snap.job.lease,
        )
        assert [(0, "https://x.test/j1/0", "g0"), (1, "https://x.test/j1/1", "g1")] == [
            (t.idx, t.url, t.options.grep) for t in snap.targets
        ]
        assert await store.snapshot("other") is None

    async def test_same_key_reuses(self, store: ServiceStore) -> None:
        """A second admission with the caller's key returns the first job."""
        await store.admit(new_job("j1", key="k"), LIMITS)
        again = await store.admit(new_job("j2", key="k"), LIMITS)

        assert ("j1", True) == tuple(again)
        assert await store.snapshot("j2") is None

    async def test_caps_in_order(self, store: ServiceStore) -> None:
        """TooManyTargets, then CallerBusy, then Busy; a refusal writes nothing."""
        with pytest.raises(TooManyTargets):
            await store.admit(new_job("big", n=5), LIMITS)
        await store.admit(new_job("a1"), LIMITS)
        await store.admit(new_job("a2"), LIMITS)
        with pytest.raises(CallerBusy):
            await store.admit(new_job("a3"), LIMITS)
        await store.admit(new_job("b1", caller="bob"), LIMITS)
        with pytest.raises(Busy):
            await store.admit(new_job("c1", caller="carol"), LIMITS)

        assert await store.snapshot("a3") is None
        assert await store.snapshot("c1") is None

    async def test_ending_jobs_frees_caps(self, store: ServiceStore) -> None:
        """Done, cancelled and interrupted jobs stop counting against the caps."""
        for job_id in ("a1", "a2"):
            await store.admit(new_job(job_id, n=1), LIMITS)
        await finish_all(store, "a1", [done()], 1001.0)
        assert await store.cancel("a2", 1001.0) is not None
        await store.admit(new_job("a3", n=1), LIMITS)
        await store.admit(new_job("a4", n=1), LIMITS)
        assert ["a3", "a4"] == await store.interrupt(["a3", "a4", "nope"], 1002.0)
        sub = await store.admit(new_job("a5", n=1), LIMITS)

        assert not sub.reused

    async def test_reuse_scope(self, store: ServiceStore) -> None:
        """Failed and cancelled jobs are not reused; expired leases are not reused."""
        await store.admit(new_job("f1", key="kf", n=1), LIMITS)
        await finish_all(store, "f1", [FAILED], 1000.0)
        assert not (await store.admit(new_job("f2", key="kf", n=1), LIMITS)).reused
        await store.admit(new_job("c1", key="kc", n=1, caller="bob"), LIMITS)
        await store.cancel("c1", 1000.0)
        assert not (await store.admit(new_job("c2", key="kc", n=1, caller="bob"), LIMITS)).reused
        await finish_all(store, "f2", [done()], 1000.0)
        await finish_all(store, "c2", [done()], 1000.0)
        assert (await store.admit(new_job("f3", key="kf", n=1, now=1100.0), LIMITS)).reused
        late = await store.admit(new_job("f4", key="kf", n=1, now=1100.5), LIMITS)

        assert ("f4", False) == tuple(late)

    async def test_sweep_removes_expired_finished_jobs(self, store: ServiceStore) -> None:
        """Admission sweeps finished jobs whose lease is older than ttl, never live ones."""
        await store.admit(new_job("old", n=1), LIMITS)
        await store.admit(new_job("live", n=1, caller="bob"), LIMITS)
        await finish_all(store, "old", [done()], 1000.0)
        await store.admit(new_job("new", n=1, caller="carol", now=1200.0), LIMITS)

        assert await store.snapshot("old") is None
        assert await store.snapshot("live") is not None

    async def test_concurrent_admissions_respect_caps(self, store: ServiceStore) -> None:
        """Many admissions at once never pass jobs_per_caller."""
        admitted: list[str] = []

        async def admit(i: int) -> None:
            with contextlib.suppress(CallerBusy):
                admitted.append((await store.admit(new_job(f"j{i}"), LIMITS)).id)

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(admit, i)

        assert 2 == len(admitted)


class TestTargets:
    async def test_lifecycle_to_partial(self, store: ServiceStore) -> None:
        """running, then done and failed: the job ends partial with its lease moved."""
        await store.admit(new_job("j"), LIMITS)
        assert await store.start_target("j", 0, 1001.0)
        await store.touch("j", 1000.0)  # the running mark may land with the next write
        snap = await store.snapshot("j")
        assert snap is not None
        assert (JobStatus.RUNNING, TargetState.RUNNING) == (
            snap.job.status,
            snap.targets[0].status,
        )
        first = await store.finish_target("j", 0, done("hello"), 1002.0, 10**9)
        assert await store.start_target("j", 1, 1003.0)
        last = await store.finish_target("j", 1, FAILED, 1004.0, 10**9)
        snap = await store.snapshot("j")

        assert (None, JobStatus.PARTIAL) == (first.terminal, last.terminal)
        assert snap is not None
        assert (JobStatus.PARTIAL, 2, 1004.0, 1004.0) == (
            snap.job.status,
            snap.job.targets_done,
            snap.job.lease,
            snap.job.updated_at,
        )
        assert Result("hello", {"n": 1}) == snap.targets[0].result
        assert ("boom", "try later", None) == (
            snap.targets[1].error,
            snap.targets[1].hint,
            snap.targets[1].result,
        )

    @pytest.mark.parametrize(
        ("outcomes", "status"),
        [([done(), done()], JobStatus.DONE), ([FAILED, FAILED], JobStatus.FAILED)],
    )
    async def test_all_same_outcome(
        self, store: ServiceStore, outcomes: list[Outcome], status: JobStatus
    ) -> None:
        """All done is done; all failed is failed."""
        await store.admit(new_job("j"), LIMITS)
        await finish_all(store, "j", outcomes, 1001.0)
        snap = await store.snapshot("j")

        assert snap is not None and status == snap.job.status

    async def test_finishing_twice_counts_once(self, store: ServiceStore) -> None:
        """Storing the same target again changes nothing."""
        await store.admit(new_job("j"), LIMITS)
        await store.start_target("j", 0, 1001.0)
        await store.finish_target("j", 0, done("first"), 1001.0, 10**9)
        repeat = await store.finish_target("j", 0, done("second"), 1002.0, 10**9)
        snap = await store.snapshot("j")

        assert repeat.terminal is None
        assert snap is not None
        assert (1, Result("first", {"n": 1})) == (snap.job.targets_done, snap.targets[0].result)

    @pytest.mark.parametrize("grouped", [False, True], ids=["apart", "grouped"])
    async def test_a_running_mark_leaves_a_stored_outcome_alone(
        self, store: ServiceStore, grouped: bool
    ) -> None:
        """A running mark of a target that has its outcome changes nothing, and a second outcome
        for it counts nothing, stored apart or in one group with the job's last (SQLite and
        PostgreSQL fold a mark into its outcome's write). Found by the groups machine: the mark
        re-opened the target, so the job counted 3 targets done of 2 (SQLite) or ended partial
        with both targets done (memory)."""
        await store.admit(new_job("j", n=2), LIMITS)
        await store.finish_target("j", 0, done("first"), 1001.0, 10**9)
        assert await store.start_target("j", 0, 1002.0)  # the job is live: True
        items = [("j", 1, done("last")), ("j", 0, FAILED)]
        if grouped:
            stored = await store.finish_targets(items, 1002.0, 10**9)
        else:
            stored = [await store.finish_target(j, i, o, 1002.0, 10**9) for j, i, o in items]
        snap = await store.snapshot("j")

        assert [JobStatus.DONE, None] == [getattr(s, "terminal", s) for s in stored]
        assert snap is not None
        assert (JobStatus.DONE, 2) == (snap.job.status, snap.job.targets_done)
        assert [TargetState.DONE] * 2 == [t.status for t in snap.targets]
        assert Result("first", {"n": 1}) == snap.targets[0].result

    async def test_release_puts_target_back(self, store: ServiceStore) -> None:
        """A busy target goes back to pending; a repeat does nothing."""
        await store.admit(new_job("j"), LIMITS)
        await store.start_target("j", 0, 1001.0)
        await store.release_target("j", 0, 1002.0)
        await store.release_target("j", 0, 1003.0)
        snap = await store.snapshot("j")

        assert snap is not None
        assert TargetState.PENDING == snap.targets[0].status

    async def test_start_refused_once_not_live(self, store: ServiceStore) -> None:
        """start_target returns False for a cancelled or unknown job and writes nothing."""
        await store.admit(new_job("j"), LIMITS)
        await store.cancel("j", 1001.0)

        assert not await store.start_target("j", 0, 1002.0)
        assert not await store.start_target("nope", 0, 1002.0)
        snap = await store.snapshot("j")
        assert snap is not None and TargetState.PENDING == snap.targets[0].status


class TestCancelInterrupt:
    async def test_cancel_keeps_status_when_inflight_target_lands(
        self, store: ServiceStore
    ) -> None:
        """A target stored after cancel is kept, and the job stays cancelled."""
        await store.admit(new_job("j"), LIMITS)
        await store.start_target("j", 0, 1001.0)
        before = await store.cancel("j", 1002.0)
        stored = await store.finish_target("j", 0, done(), 1003.0, 10**9)
        snap = await store.snapshot("j")

        assert before is not None and JobStatus.RUNNING == before.status
        assert stored.terminal is None
        assert snap is not None
        assert (JobStatus.CANCELLED, TargetState.DONE, TargetState.PENDING) == (
            snap.job.status,
            snap.targets[0].status,
            snap.targets[1].status,
        )
        assert await store.cancel("j", 1004.0) is None

    async def test_interrupt_and_recover(self, store: ServiceStore) -> None:
        """Interrupted jobs fail with 'interrupted' and running targets go back to pending."""
        await store.admit(new_job("a"), LIMITS)
        await store.admit(new_job("b", caller="bob"), LIMITS)
        await store.start_target("a", 0, 1001.0)
        assert ["a", "b"] == sorted(await store.recover(1002.0))
        assert [] == await store.recover(1003.0)
        snap = await store.snapshot("a")

        assert snap is not None
        assert (JobStatus.FAILED, "interrupted", TargetState.PENDING) == (
            snap.job.status,
            snap.job.error,
            snap.targets[0].status,
        )


class TestTouchEvict:
    async def test_touch(self, store: ServiceStore) -> None:
        """touch moves the lease; unknown ids are False."""
        await store.admit(new_job("j"), LIMITS)

        assert await store.touch("j", 1050.0)
        assert not await store.touch("nope", 1050.0)
        snap = await store.snapshot("j")
        assert snap is not None and 1050.0 == snap.job.lease

    async def test_eviction_by_lease_order(self, store: ServiceStore) -> None:
        """Over the byte cap the least recently leased finished jobs go; live ones stay."""
        limits = Limits(ttl=10**6, targets_per_job=4, jobs_per_caller=10, jobs_total=10)
        for i, job_id in enumerate(("a", "b", "c")):
            await store.admit(new_job(job_id, n=1, now=1000.0 + i), limits)
        await store.admit(new_job("live", n=2, now=1000.0), limits)
        await store.start_target("live", 0, 1000.0)
        await store.finish_target("live", 0, done("L" * 300), 1000.0, 10**9)
        for i, job_id in enumerate(("a", "b", "c")):
            await store.start_target(job_id, 0, 1010.0 + i)
            await store.finish_target(job_id, 0, done("x" * 300), 1010.0 + i, 10**9)
        await store.touch("a", 1100.0)
        await store.admit(new_job("d", n=1, now=1101.0), limits)
        await store.start_target("d", 0, 1101.0)
        stored = await store.finish_target("d", 0, done("y" * 300), 1101.0, 1000)

        assert 2 == stored.evicted
        assert await store.snapshot("b") is None
        assert await store.snapshot("c") is None
        for kept in ("a", "d", "live"):
            assert await store.snapshot(kept) is not None


class TestCache:
    async def test_put_get_replace_and_cap(self, store: ServiceStore) -> None:
        """Entries read back as stored; the oldest go first over the byte cap."""
        assert await store.cache_get("k1") is None
        await store.cache_put("k1", CacheEntry(b"a" * 10, "{}", 1.0, 2.0), 100)
        await store.cache_put("k1", CacheEntry(b"b" * 40, '{"x":1}', 3.0, 4.0), 100)
        await store.cache_put("k2", CacheEntry(b"c" * 40, "{}", 5.0, 6.0), 100)
        assert CacheEntry(b"b" * 40, '{"x":1}', 3.0, 4.0) == await store.cache_get("k1")
        await store.cache_put("k3", CacheEntry(b"d" * 40, "{}", 7.0, 8.0), 100)

        assert await store.cache_get("k1") is None
        assert await store.cache_get("k2") is not None
        assert await store.cache_get("k3") is not None

    async def test_reads_at_once_each_get_their_own_entry(self, store: ServiceStore) -> None:
        """Reads asked together (PostgreSQL sends them in one query) each answer for their own
        key: an entry, or None for a key with none, the same key read twice alike."""
        entries = {
            f"k{i}": CacheEntry(bytes([i]) * 8, f'{{"i":{i}}}', i, i + 1.0) for i in range(4)
        }
        for key, entry in entries.items():
            await store.cache_put(key, entry, 10**6)
        keys = [*entries, "absent-1", "k2", "absent-2", "k0"]
        got: dict[int, CacheEntry | None] = {}

        async def read(i: int, key: str) -> None:
            got[i] = await store.cache_get(key)

        async with trio.open_nursery() as nursery:
            for i, key in enumerate(keys):
                nursery.start_soon(read, i, key)

        assert [entries.get(key) for key in keys] == [got[i] for i in range(len(keys))]
