"""The round robin on real stores and real clocks: one worker alternates two jobs, every time.

Two outcomes stored by one commit used to wake in an order Trio may shuffle, so a job could
re-enter the rotation out of turn (``a1 b1 a2 b2 b3 a3``). A race hides from the mock clock and
from a single run, so this runs the smallest case many times, on the stores that commit in
groups, with Trio's real clock.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.stores.postgres.support import PG_DSN, SKIP_REASON
from trio_batch import Caller, Config, Hooks, Target, open_engine
from trio_batch.stores import SQLiteStore, Store
from trio_batch.testing import ScriptedFetch

ITERATIONS = int(os.environ.get("TRIO_BATCH_FAIRNESS_ITERATIONS", "200"))


@pytest.fixture(params=["sqlite", "postgres"])
async def durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        async with SQLiteStore.open(tmp_path / "store.sqlite") as sqlite:
            yield sqlite
    else:
        if not PG_DSN:
            pytest.skip(SKIP_REASON)
        from tests.stores.postgres.support import open_test_store

        async with open_test_store(PG_DSN) as pg:
            yield pg


async def alternation(store: Store, run: int) -> list[str]:
    """Two jobs of three targets, both submitted before the first fetch ends; fetch order."""
    a = [Target(f"https://a.example.test/{run}/{i}") for i in range(3)]
    b = [Target(f"https://b.example.test/{run}/{i}") for i in range(3)]
    fetch = ScriptedFetch()
    first = fetch.hold(a[0].url)
    ended = 0
    both_ended = trio.Event()

    def on_job(event: str) -> None:
        nonlocal ended
        if event not in ("created", "reused"):
            ended += 1
            if ended == 2:
                both_ended.set()

    config = Config(workers=1, jobs_per_caller=2, hooks=Hooks(job=on_job))
    async with open_engine(store, fetch, config) as engine:
        await engine.submit(Caller("alice"), "fleet", a)
        await engine.submit(Caller("alice"), "fleet", b)
        first.set()
        with trio.fail_after(30):
            await both_ended.wait()
    return [url.split(".")[0][-1] + str(int(url[-1]) + 1) for url in fetch.calls]


@pytest.mark.slow
async def test_one_worker_alternates_two_jobs_every_time(durable_store: Store) -> None:
    """a1 b1 a2 b2 a3 b3, in every one of many runs, however the store groups its commits."""
    orders = [await alternation(durable_store, run) for run in range(ITERATIONS)]

    wrong = [order for order in orders if order != ["a1", "b1", "a2", "b2", "a3", "b3"]]
    assert [] == wrong, f"{len(wrong)} of {ITERATIONS} runs out of turn"
