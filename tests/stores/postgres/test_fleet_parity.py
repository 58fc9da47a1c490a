"""A fleet does what one engine does: resume changes nothing there, jobs run concurrently,
and turns still alternate across jobs.

Real clock throughout (the engines wait on worker threads: python-trio/trio#456); every wait
is a bounded poll of the shared database or a hook.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import trio

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    JobStatus,
    Result,
    Target,
    TargetState,
    open_engine,
)
from trio_batch.stores import PostgresStore

from ...support import ALICE, BOB, Recorder, targets
from ..support import wait_status


@asynccontextmanager
async def instance(
    dsn: str, schema: str, fetch: Any, recorder: Recorder | None = None, **config: Any
) -> AsyncIterator[BatchEngine]:
    """One engine on its own store instance of ``schema``."""
    hooks = Recorder() if recorder is None else recorder
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(PostgresStore.open(dsn, schema=schema))
        yield await stack.enter_async_context(
            open_engine(store, fetch, Config(hooks=hooks.hooks(), **config))
        )


class CountingFetch:
    """Counts the fetches of each URL and those running; optionally waits on a gate first."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.fetched: Counter[str] = Counter()
        self.seconds = seconds
        self.gate: trio.Event | None = None
        self.running = 0

    async def __call__(self, caller: Caller, target: Target) -> Result:
        if self.gate is not None:
            await self.gate.wait()
        self.fetched[target.url] += 1
        self.running += 1
        try:
            await trio.sleep(self.seconds)
        finally:
            self.running -= 1
        return Result("ok")


class TestResumeOnAFleet:
    async def test_resume_adopts_nothing_and_fetches_each_target_once(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """``Config.resume`` changes nothing on a fleet: jobs another instance left are run
        through the fleet's claims only, so no target is fetched twice and no job is resumed."""
        stalled = CountingFetch()
        stalled.gate = trio.Event()  # never set: instance A fetches nothing
        async with instance(pg_dsn, pg_schema, stalled, workers=1, jobs_per_caller=3) as a:
            subs = [await a.submit(ALICE, "fleet", targets(f"j{i}", 4)) for i in range(3)]
        fetch = CountingFetch(0.15)  # 12 targets outlast the adoption loop's first look (1 s)
        events = Recorder()
        async with instance(
            pg_dsn, pg_schema, fetch, events, workers=1, resume=True, jobs_per_caller=3
        ) as b:
            for sub in subs:
                await wait_status(b, sub.id, JobStatus.DONE)

        assert 12 == len(fetch.fetched)
        assert {1} == set(fetch.fetched.values())
        assert "resumed" not in events.jobs


class TestConcurrencyOnAFleet:
    async def test_a_job_runs_its_concurrency_across_the_fleet(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A job of ``concurrency`` 4 on three instances has up to 4 targets in flight at once,
        never more, and every target is stored once, in index order in its results."""
        fetches = [CountingFetch(0.2) for _ in range(3)]
        async with AsyncExitStack() as stack:
            engines = [
                await stack.enter_async_context(instance(pg_dsn, pg_schema, f, workers=4))
                for f in fetches
            ]
            sub = await engines[0].submit(ALICE, "fleet", targets("c", 12), concurrency=4)
            most = 0
            with trio.fail_after(30):
                while (job := await engines[0].job(sub.id)) is not None and job.status.live:
                    most = max(most, sum(f.running for f in fetches))
                    await trio.sleep(0.01)
            snap = await engines[1].status(sub.id)

        fetched: Counter[str] = Counter()
        for f in fetches:
            fetched.update(f.fetched)
        assert snap is not None
        assert JobStatus.DONE == snap.job.status, [(t.error, t.hint) for t in snap.targets]
        assert [t.url for t in targets("c", 12)] == [t.url for t in snap.targets]
        assert [TargetState.DONE] * 12 == [t.status for t in snap.targets]
        assert {1} == set(fetched.values())
        assert 12 == len(fetched)
        assert 2 <= most <= 4

    async def test_turns_still_alternate_across_jobs(self, pg_dsn: str, pg_schema: str) -> None:
        """A job of ``concurrency`` 4 beside a serial job never takes the serial job's turn:
        the serial job's first target starts in the first round of turns."""
        fetch = CountingFetch(0.05)
        order: list[str] = []

        async def recording(caller: Caller, target: Target) -> Result:
            order.append(target.url.split("//")[1].split(".")[0])
            return await fetch(caller, target)

        async with instance(pg_dsn, pg_schema, recording, workers=2, jobs_per_caller=2) as a:
            wide = await a.submit(ALICE, "fleet", targets("w", 12), concurrency=4)
            serial = await a.submit(BOB, "fleet", targets("s", 4))
            await wait_status(a, serial.id, JobStatus.DONE)
            await wait_status(a, wide.id, JobStatus.DONE)

        assert 4 == order.count("s")
        assert order.index("s") <= 4, order
