"""SQLiteStore's write path for groups of outcomes: one transaction, no savepoint unless an item
fails, and running marks that wait for the next write (folded into it when it stores their
target's outcome). MemoryStore is the reference for every answer."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import pytest
import trio
import trio.testing
from hypothesis import settings, strategies as st
from hypothesis.stateful import rule

from trio_batch import JobStatus, Result, Snapshot, TargetState
from trio_batch.stores import MemoryStore, Outcome, SQLiteStore, Store, Stored

from .support import CAP, LIMITS, NOW, StoreAgreement, hold_writer, new_job

MAX_BYTES = 10**9
DONE = Outcome(TargetState.DONE, result_json=Result("x" * 40).to_json())
CORRUPT = Outcome(TargetState.DONE, result_json=cast("str", object()))  # no SQL type binds it

Script = Callable[[Store], Awaitable[object]]


async def snapshots(store: Store, *job_ids: str) -> list[Snapshot | None]:
    return [await store.snapshot(job_id) for job_id in job_ids]


def statements(store: SQLiteStore) -> list[str]:
    """Every SQL statement the writer's connection runs from now on."""
    seen: list[str] = []
    assert store._writer is not None
    store._writer._conn.set_trace_callback(seen.append)
    return seen


class TestFinishTargets:
    async def test_a_failing_item_gets_its_error_and_the_others_land(self, tmp_path: Path) -> None:
        """One item that cannot be stored gets its exception in its place; the others land."""
        items = [("j1", 0, DONE), ("j2", 0, CORRUPT), ("nope", 0, DONE), ("j2", 1, DONE)]
        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            for job_id in ("j1", "j2"):
                await store.admit(new_job(job_id), LIMITS)
            seen = statements(store)
            results = await store.finish_targets(items, NOW, MAX_BYTES)
            j1, j2 = await snapshots(store, "j1", "j2")

        assert isinstance(results[1], sqlite3.Error)
        assert [Stored(None), Stored(None), Stored(None)] == [results[0], *results[2:]]
        assert j1 is not None and j2 is not None
        assert [TargetState.DONE, TargetState.PENDING] == [t.status for t in j1.targets]
        assert [TargetState.PENDING, TargetState.DONE] == [t.status for t in j2.targets]
        assert (1, 1) == (j1.job.targets_done, j2.job.targets_done)
        assert any(s.startswith("SAVEPOINT") for s in seen)  # the replay isolated each item

    async def test_a_group_runs_without_savepoints(self, tmp_path: Path) -> None:
        """A group whose items all store runs as plain statements in one transaction."""
        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            for job_id in ("j1", "j2", "j3"):
                await store.admit(new_job(job_id, n=1), LIMITS)
            seen = statements(store)
            items = [(job_id, 0, DONE) for job_id in ("j1", "j2", "j3")]
            results = await store.finish_targets(items, NOW, MAX_BYTES)

        assert [Stored(JobStatus.DONE)] * 3 == results
        assert (1, 1) == (seen.count("BEGIN IMMEDIATE"), seen.count("COMMIT"))
        assert not [s for s in seen if "SAVEPOINT" in s]

    async def test_a_group_agrees_with_memory_on_repeats_endings_and_eviction(
        self, tmp_path: Path
    ) -> None:
        """Repeats, unknown jobs, jobs that end and evictions within one group answer as
        MemoryStore answers them item by item."""
        big = Outcome(TargetState.DONE, result_json=Result("y" * 300).to_json())
        failed = Outcome(TargetState.FAILED, error="e", hint="h")

        async def script(store: Store) -> object:
            for job_id in ("j1", "j2", "j3"):
                await store.admit(new_job(job_id), LIMITS)
            await store.start_target("j1", 0, NOW + 1)
            first = await store.finish_targets(
                [("j1", 0, big), ("j1", 1, failed), ("j1", 0, DONE), ("gone", 0, DONE)],
                NOW + 2,
                700,
            )
            second = await store.finish_targets(
                [("j2", 0, big), ("j2", 1, big), ("j3", 0, big), ("j3", 1, DONE)], NOW + 3, 700
            )
            return first, second, await snapshots(store, "j1", "j2", "j3")

        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            actual = await script(store)
        expected = await script(MemoryStore())

        assert expected == actual


class TestRunningMarks:
    async def test_a_mark_is_folded_into_the_write_of_its_outcome(self, tmp_path: Path) -> None:
        """A running mark whose outcome the next write stores is never written on its own,
        and the job still went running on the way (as MemoryStore has it)."""

        async def script(store: Store) -> object:
            await store.admit(new_job("j1"), LIMITS)
            await store.start_target("j1", 0, NOW + 1)
            await store.start_target("j1", 0, NOW + 1)  # a repeat folds as well
            stored = await store.finish_targets([("j1", 0, DONE)], NOW + 2, MAX_BYTES)
            return stored, await store.snapshot("j1")

        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            actual = await script(store)
            assert store._writer is not None
            written, posted = store._writer.marks_written, store._writer.posted
        expected = await script(MemoryStore())

        assert expected == actual
        assert (0, 0) == (written, posted)  # nothing left for a read to wait for

    async def test_a_held_mark_is_visible_to_another_reader_after_the_next_write(
        self, tmp_path: Path
    ) -> None:
        """A reader on another connection sees a target running once the store's next write
        commits, before its outcome is stored; then it sees the outcome."""
        path = tmp_path / "jobs.sqlite"
        async with SQLiteStore.open(path) as store:
            await store.admit(new_job("j1"), LIMITS)
            async with SQLiteStore.open(path, readonly=True) as reader:
                assert await store.start_target("j1", 0, NOW + 1)
                await store.admit(new_job("j2"), LIMITS)  # the next write, of another job
                running = await reader.snapshot("j1")
                await store.finish_targets([("j1", 0, DONE)], NOW + 2, MAX_BYTES)
                done = await reader.snapshot("j1")

        assert running is not None and done is not None
        assert ("running", TargetState.RUNNING) == (running.job.status, running.targets[0].status)
        assert TargetState.DONE == done.targets[0].status

    async def test_marks_sent_ahead_of_an_admission_fold_into_a_later_group(
        self, tmp_path: Path
    ) -> None:
        """Marks that went to the writer before an admission still fold into their outcome's
        write when both land in the same transaction; the answers do not change."""
        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            await store.admit(new_job("j1"), LIMITS)
            results: list[object] = []
            async with trio.open_nursery() as nursery:
                gate = await hold_writer(store, nursery)
                assert await store.start_target("j1", 0, NOW + 1)

                async def admit_then_finish() -> None:
                    results.append(await store.admit(new_job("j2"), LIMITS))

                async def finish() -> None:
                    results.append(await store.finish_targets([("j1", 0, DONE)], NOW, MAX_BYTES))

                nursery.start_soon(admit_then_finish)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(finish)
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            assert store._writer is not None
            commits, written = store._writer.commits, store._writer.marks_written
            snap = await store.snapshot("j1")

        assert 0 == written
        assert snap is not None
        assert ("running", TargetState.DONE) == (snap.job.status, snap.targets[0].status)
        assert 3 == commits  # the first admission, the held write, then everything else


class GroupAgreement(StoreAgreement):
    """The store machine with groups: ``finish_targets`` of several items, marks held first."""

    @rule(
        picks=st.lists(
            st.tuples(st.integers(0, 7), st.integers(0, 2), st.booleans(), st.booleans()),
            min_size=1,
            max_size=4,
        )
    )
    def finish_group(self, picks: list[tuple[int, int, bool, bool]]) -> None:
        known = sorted(self.lengths)
        items = []
        starts = []
        for pick, idx, ok, start in picks:
            job_id = known[pick % len(known)] if known else "none"
            if job_id in self.lengths and idx >= self.lengths[job_id]:
                continue
            outcome = (
                Outcome(TargetState.DONE, result_json=Result("x" * 150).to_json())
                if ok
                else Outcome(TargetState.FAILED, error="e", hint="h")
            )
            items.append((job_id, idx, outcome))
            if start and job_id in self.lengths:
                starts.append((job_id, idx))

        async def run(store: Store) -> object:
            started = [await store.start_target(j, i, self.now) for j, i in starts]
            return started, await store.finish_targets(items, self.now, CAP)

        self.both(run)


GroupAgreement.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestSQLiteGroupsAgreeWithMemory = pytest.mark.slow(GroupAgreement.TestCase)
