"""Target times: every store records when a target's run began and when its outcome was stored,
on the engine's clock (the ``now`` of ``start_target`` and ``finish_targets``)."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from trio_batch import Result, TargetState, TargetStatus
from trio_batch.stores import Outcome, SQLiteStore, Store

from .support import LIMITS, NOW, hold_writer, new_job

MAX_BYTES = 10**9
DONE = Outcome(TargetState.DONE, result_json=Result("fine").to_json())
FAILED = Outcome(TargetState.FAILED, error="boom", hint="try later")


def times(targets: list[TargetStatus]) -> list[tuple[float | None, float | None]]:
    return [(t.started_at, t.finished_at) for t in targets]


async def snapshot_times(store: Store, job_id: str) -> list[tuple[float | None, float | None]]:
    snap = await store.snapshot(job_id)
    assert snap is not None
    return times(snap.targets)


class TestTargetTimes:
    async def test_done_and_failed_targets_have_a_start_then_a_finish(self, store: Store) -> None:
        """A stored target shows its start and the time its outcome was stored; a pending
        target shows neither, a running one only its start."""
        await store.admit(new_job("j1", n=4), LIMITS)
        await store.start_target("j1", 0, NOW + 1)
        await store.admit(new_job("j2", n=3), LIMITS)  # a write between the mark and its outcome
        await store.finish_targets([("j1", 0, DONE)], NOW + 2, MAX_BYTES)
        await store.start_target("j1", 1, NOW + 3)
        await store.finish_targets([("j1", 1, FAILED)], NOW + 5, MAX_BYTES)
        await store.start_target("j1", 2, NOW + 6)

        expected = [(NOW + 1, NOW + 2), (NOW + 3, NOW + 5), (NOW + 6, None), (None, None)]
        assert expected == await snapshot_times(store, "j1")
        assert expected == times(await store.read_targets("j1", -1, 10, None, results=False))

    async def test_a_mark_folded_into_its_outcome_still_gives_the_start(self, store: Store) -> None:
        """A running mark that the store drops into the write of its outcome (SQLite and
        PostgreSQL do) still records when the target began, in a group or alone."""
        await store.admit(new_job("j1", n=3), LIMITS)
        await store.start_target("j1", 0, NOW + 1)
        await store.finish_targets([("j1", 0, DONE)], NOW + 2, MAX_BYTES)
        await store.start_target("j1", 1, NOW + 3)
        await store.start_target("j1", 2, NOW + 4)
        await store.finish_targets([("j1", 1, DONE), ("j1", 2, FAILED)], NOW + 5, MAX_BYTES)
        written = 0
        if isinstance(store, SQLiteStore):
            assert store._writer is not None
            written = store._writer.marks_written
        found = await snapshot_times(store, "j1")

        assert [(NOW + 1, NOW + 2), (NOW + 3, NOW + 5), (NOW + 4, NOW + 5)] == found
        assert 0 == written  # on SQLite, no mark was written on its own

    async def test_a_repeated_outcome_keeps_the_first_times(self, store: Store) -> None:
        """An outcome stored twice keeps the times of the first (a repeat stores nothing)."""
        await store.admit(new_job("j1", n=2), LIMITS)
        await store.start_target("j1", 0, NOW + 1)
        await store.finish_targets([("j1", 0, DONE)], NOW + 2, MAX_BYTES)
        await store.finish_targets([("j1", 0, FAILED)], NOW + 3, MAX_BYTES)

        assert [(NOW + 1, NOW + 2), (None, None)] == await snapshot_times(store, "j1")

    async def test_resume_clears_the_start_of_running_targets(self, store: Store) -> None:
        """A target that was running when its engine went is pending again after
        ``Store.resume``, with no start; stored targets keep their times, and the next run
        records its own start."""
        await store.admit(new_job("j1", n=3), LIMITS)
        await store.start_target("j1", 0, NOW + 1)
        await store.finish_targets([("j1", 0, DONE)], NOW + 2, MAX_BYTES)
        await store.start_target("j1", 1, NOW + 3)
        await store.snapshot("j1")  # the mark is committed

        await store.resume(NOW + 10)
        resumed = await snapshot_times(store, "j1")
        await store.start_target("j1", 1, NOW + 11)
        await store.finish_targets([("j1", 1, DONE)], NOW + 12, MAX_BYTES)
        again = await snapshot_times(store, "j1")

        assert [(NOW + 1, NOW + 2), (None, None), (None, None)] == resumed
        assert [(NOW + 1, NOW + 2), (NOW + 11, NOW + 12), (None, None)] == again

    async def test_a_released_target_shows_no_start(self, store: Store) -> None:
        """A busy target put back to pending shows no start until it runs again."""
        await store.admit(new_job("j1", n=1), LIMITS)
        await store.start_target("j1", 0, NOW + 1)
        await store.release_target("j1", 0, NOW + 2)
        released = await snapshot_times(store, "j1")
        await store.start_target("j1", 0, NOW + 3)
        await store.finish_targets([("j1", 0, DONE)], NOW + 4, MAX_BYTES)

        assert [(None, None)] == released
        assert [(NOW + 3, NOW + 4)] == await snapshot_times(store, "j1")


class TestSQLiteFolding:
    async def test_marks_sent_ahead_of_a_write_fold_with_their_time(self, tmp_path: Path) -> None:
        """Marks that went to the writer ahead of an admission, then met their outcome in the
        same transaction, are folded into it with their own start times."""
        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            await store.admit(new_job("j1", n=3), LIMITS)
            async with trio.open_nursery() as nursery:
                gate = await hold_writer(store, nursery)
                assert await store.start_target("j1", 0, NOW + 1)
                assert await store.start_target("j1", 1, NOW + 2)
                nursery.start_soon(store.admit, new_job("j2", n=3), LIMITS)
                await trio.testing.wait_all_tasks_blocked()
                items = [("j1", 0, DONE), ("j1", 1, FAILED)]
                nursery.start_soon(store.finish_targets, items, NOW + 3, MAX_BYTES)
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            assert store._writer is not None
            written = store._writer.marks_written
            found = await snapshot_times(store, "j1")

        assert 0 == written
        assert [(NOW + 1, NOW + 3), (NOW + 2, NOW + 3), (None, None)] == found
