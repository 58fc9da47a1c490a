"""Admissions go before the drain: an outcome group or a claim waits for an admission in flight,
briefly (the write queue and the claimer call ``AdmissionsFirst.wait``)."""

from __future__ import annotations

import trio

from trio_batch.stores._postgres._batch import ADMISSION_FIRST, AdmissionsFirst


async def admission(
    first: AdmissionsFirst,
    seconds: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with first.admitting():
        task_status.started()
        await trio.sleep(seconds)


async def test_the_drain_waits_for_an_admission_in_flight(autojump_clock: object) -> None:
    first = AdmissionsFirst()
    async with trio.open_nursery() as nursery:
        await nursery.start(admission, first, ADMISSION_FIRST / 2)
        t0 = trio.current_time()
        await first.wait()
        waited = trio.current_time() - t0
    assert abs(waited - ADMISSION_FIRST / 2) < 1e-9


async def test_the_drain_waits_no_longer_than_its_bound(autojump_clock: object) -> None:
    first = AdmissionsFirst()
    async with trio.open_nursery() as nursery:
        await nursery.start(admission, first, 1.0)
        t0 = trio.current_time()
        await first.wait()
        waited = trio.current_time() - t0
    assert abs(waited - ADMISSION_FIRST) < 1e-9


async def test_with_no_admission_the_drain_does_not_wait(autojump_clock: object) -> None:
    first = AdmissionsFirst()
    t0 = trio.current_time()
    await first.wait()
    assert trio.current_time() == t0
