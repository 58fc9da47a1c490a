"""Admissions go before the drain: an outcome group or a claim waits for an admission in flight
and briefly after it, so a burst of submits one after another is not queued behind the drain
(the write queue and the claimer call ``AdmissionsFirst.wait``)."""

from __future__ import annotations

import trio

from trio_batch.stores._postgres._batch import ADMISSION_FIRST, ADMISSION_LINGER, AdmissionsFirst


async def admission(
    first: AdmissionsFirst,
    seconds: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with first.admitting():
        task_status.started()
        await trio.sleep(seconds)


async def burst(
    first: AdmissionsFirst,
    seconds: float,
    gap: float,
    count: int,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``count`` admissions of ``seconds`` each, one after another, ``gap`` apart."""
    for i in range(count):
        with first.admitting():
            if i == 0:
                task_status.started()
            await trio.sleep(seconds)
        await trio.sleep(gap)


async def waited_for(first: AdmissionsFirst) -> float:
    t0 = trio.current_time()
    await first.wait()
    return trio.current_time() - t0


async def test_the_drain_waits_for_an_admission_in_flight_and_its_linger(
    autojump_clock: object,
) -> None:
    """The drain waits for the admission in flight to end, then for ``ADMISSION_LINGER``."""
    first = AdmissionsFirst()
    async with trio.open_nursery() as nursery:
        await nursery.start(admission, first, ADMISSION_FIRST / 4)
        waited = await waited_for(first)
    assert abs(waited - (ADMISSION_FIRST / 4 + ADMISSION_LINGER)) < 1e-9


async def test_a_burst_of_admissions_holds_the_drain_until_it_ends(autojump_clock: object) -> None:
    """Admissions that follow one another closer than the linger hold the drain until the last."""
    first = AdmissionsFirst()
    seconds, gap = ADMISSION_FIRST / 10, ADMISSION_LINGER / 2
    async with trio.open_nursery() as nursery:
        await nursery.start(burst, first, seconds, gap, 3)
        waited = await waited_for(first)
    assert abs(waited - (3 * seconds + 2 * gap + ADMISSION_LINGER)) < 1e-9


async def test_the_drain_waits_no_longer_than_its_bound(autojump_clock: object) -> None:
    """However long an admission takes, the drain waits at most ``ADMISSION_FIRST``."""
    first = AdmissionsFirst()
    async with trio.open_nursery() as nursery:
        await nursery.start(admission, first, 1.0)
        waited = await waited_for(first)
    assert abs(waited - ADMISSION_FIRST) < 1e-9


async def test_a_burst_longer_than_the_bound_holds_each_statement_only_for_the_bound(
    autojump_clock: object,
) -> None:
    """A burst longer than ``ADMISSION_FIRST`` holds each drain only that long, so outcomes still
    land."""
    first = AdmissionsFirst()
    async with trio.open_nursery() as nursery:
        await nursery.start(burst, first, ADMISSION_FIRST / 4, ADMISSION_LINGER / 2, 40)
        assert abs(await waited_for(first) - ADMISSION_FIRST) < 1e-9
        assert abs(await waited_for(first) - ADMISSION_FIRST) < 1e-9
        nursery.cancel_scope.cancel()


async def test_with_no_admission_the_drain_does_not_wait(autojump_clock: object) -> None:
    """With no admission in flight the drain goes at once."""
    first = AdmissionsFirst()
    assert await waited_for(first) == 0


async def test_an_admission_past_its_linger_does_not_hold_the_drain(autojump_clock: object) -> None:
    """An admission that ended more than the linger ago does not hold the drain."""
    first = AdmissionsFirst()
    with first.admitting():
        pass
    await trio.sleep(ADMISSION_LINGER)
    assert await waited_for(first) == 0
