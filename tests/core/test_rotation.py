"""What the rotation tells a fleet's claimer: each time a worker waits for a job."""

from __future__ import annotations

import trio
import trio.testing

from trio_batch import Caller, Target
from trio_batch._engine._live import LiveJob
from trio_batch._engine._rotation import Rotation, Turn


def _job(job_id: str, *, cancelled: bool = False) -> LiveJob:
    live = LiveJob(job_id, Caller("alice"), 0.0)
    live.add(0, Target("https://example.org/"))
    live.cancelled = cancelled
    return live


async def test_a_worker_woken_for_a_job_it_cannot_take_says_it_waits_again() -> None:
    """A worker woken for a job cancelled meanwhile parks again, and says so: a fleet's
    claimer, which counted that job as ready, claims for the worker again (before, it slept
    with a job pending in the fleet and this worker idle: ``_fleet_turns``)."""
    waits: list[int] = []
    rotation = Rotation(None, lambda live: None, parking=lambda: waits.append(len(waits)))
    taken: list[Turn] = []

    async def worker() -> None:
        taken.append(await rotation.take())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked()
        first = len(waits)
        rotation.put(_job("cancelled", cancelled=True))
        await trio.testing.wait_all_tasks_blocked()
        again = len(waits)
        rotation.put(_job("next"))

    assert (first, again) == (1, 2)
    assert [turn.live.id for turn in taken] == ["next"]
    assert 2 == len(waits)  # a job ready at once is taken without a wait
