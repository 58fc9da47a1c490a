"""A fleet does what one engine does: resume changes nothing there, jobs run concurrently,
and turns still alternate across jobs.

Real clock throughout (the engines wait on worker threads: python-trio/trio#456); every wait
is a bounded poll of the shared database or a hook.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    HostBudget,
    JobStatus,
    Result,
    RetryLater,
    Target,
    TargetState,
    open_engine,
)
from trio_batch.stores import PostgresStore, SQLiteStore

from ...support import ALICE, BOB, Recorder, host_of, targets, wait_ended_polling
from .support import open_test_schema


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


@dataclass
class Running:
    """Fetches running now, over every instance that shares it, and the most at once."""

    now: int = 0
    most: int = 0


class CountingFetch:
    """Counts the fetches of each URL and those running; optionally waits on a gate first."""

    def __init__(self, seconds: float = 0.0, running: Running | None = None) -> None:
        self.fetched: Counter[str] = Counter()
        self.seconds = seconds
        self.gate: trio.Event | None = None
        self.running = Running() if running is None else running

    async def __call__(self, caller: Caller, target: Target) -> Result:
        if self.gate is not None:
            await self.gate.wait()
        self.fetched[target.url] += 1
        self.running.now += 1
        self.running.most = max(self.running.most, self.running.now)
        try:
            await trio.sleep(self.seconds)
        finally:
            self.running.now -= 1
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
                assert [JobStatus.DONE] == await wait_ended_polling(b, sub.id)

        assert 12 == len(fetch.fetched)
        assert {1} == set(fetch.fetched.values())
        assert "resumed" not in events.jobs


class TestConcurrencyOnAFleet:
    async def test_a_job_runs_its_concurrency_across_the_fleet(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A job of ``concurrency`` 4 on three instances has up to 4 targets in flight at once,
        never more, and every target is stored once, in index order in its results."""
        running = Running()  # the fleet's, all three instances in this process
        fetches = [CountingFetch(0.2, running) for _ in range(3)]
        async with AsyncExitStack() as stack:
            engines = [
                await stack.enter_async_context(instance(pg_dsn, pg_schema, f, workers=4))
                for f in fetches
            ]
            sub = await engines[0].submit(ALICE, "fleet", targets("c", 12), concurrency=4)
            await wait_ended_polling(engines[0], sub.id, within=30)
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
        assert 2 <= running.most <= 4

    async def test_turns_still_alternate_across_jobs(self, pg_dsn: str, pg_schema: str) -> None:
        """A job of ``concurrency`` 4 beside a serial job never takes the serial job's turn:
        the serial job's first target starts in the first round of turns after it is admitted
        (at most 4 of the wide job's start first: those it held, and one round's share).

        Counted from the serial job's admission: pages of the wide job that started before it
        could not wait for a job not yet there (on a loaded machine 5 did, as the second
        submit took longer than a page)."""
        fetch = CountingFetch(0.05)
        order: list[str] = []

        async def recording(caller: Caller, target: Target) -> Result:
            order.append(target.url.split("//")[1].split(".")[0])
            return await fetch(caller, target)

        async with instance(pg_dsn, pg_schema, recording, workers=2, jobs_per_caller=2) as a:
            wide = await a.submit(ALICE, "fleet", targets("w", 12), concurrency=4)
            serial = await a.submit(BOB, "fleet", targets("s", 4))
            admitted = len(order)
            assert [JobStatus.DONE] == await wait_ended_polling(a, serial.id)
            assert [JobStatus.DONE] == await wait_ended_polling(a, wide.id)

        assert 4 == order.count("s")
        assert order.index("s") - admitted <= 4, (admitted, order)


class BusyFirst:
    """A site: host x answers 429 (``Retry-After: 2``) to its first three requests, the other
    hosts answer after 0.5 s; records when each page ended (Trio's clock)."""

    def __init__(self) -> None:
        self.busy_left = 3
        self.ended: dict[str, float] = {}

    async def __call__(self, caller: Caller, target: Target) -> Result:
        if urlsplit(target.url).hostname == "x.example.test" and self.busy_left:
            self.busy_left -= 1
            raise RetryLater("429 Too Many Requests", after=2.0)
        await trio.sleep(0.5)
        self.ended[target.url] = trio.current_time()
        return Result("ok")


def busy_job(with_busy: bool) -> list[Target]:
    """12 pages on three hosts, after a page on host x that answers 429 three times."""
    pages = [Target(f"https://{'abc'[i % 3]}.example.test/{i}") for i in range(12)]
    return [Target("https://x.example.test/0"), *pages] if with_busy else pages


async def others_took(engines: list[BatchEngine], fetch: BusyFirst, with_busy: bool) -> float:
    """Seconds from the submit until the last of the 12 other pages ended."""
    t0 = trio.current_time()
    sub = await engines[0].submit(ALICE, "fleet", busy_job(with_busy), concurrency=4)
    assert [JobStatus.DONE] == await wait_ended_polling(engines[0], sub.id)
    others = [v for url, v in fetch.ended.items() if "x.example" not in url]
    assert 12 == len(others)
    return max(others) - t0


@pytest.mark.slow
class TestAWaitingHostHoldsNoOtherBack:
    @pytest.mark.parametrize("kind", ["sqlite", "fleet"])
    async def test_the_other_hosts_end_within_1_5x_of_the_job_without_it(
        self, pg_dsn: str, tmp_path: Path, kind: str
    ) -> None:
        """A job (concurrency 4) whose first page's host answers 429 three times (Retry-After:
        2) ends its 12 pages on other hosts within 1.5x of the same job without that page, on
        SQLite and on a fleet of two (real clock, host budgets on)."""
        took = {}
        for with_busy in (False, True):
            fetch = BusyFirst()
            async with AsyncExitStack() as stack:
                schema = await stack.enter_async_context(open_test_schema(pg_dsn))
                engines = []
                for n in range(1 if kind == "sqlite" else 2):
                    if kind == "sqlite":
                        path = tmp_path / f"{with_busy}.sqlite"
                        store: Any = await stack.enter_async_context(SQLiteStore.open(path))
                    else:
                        store = await stack.enter_async_context(
                            PostgresStore.open(pg_dsn, schema=schema)
                        )
                    engine = open_engine(
                        store,
                        fetch,
                        Config(workers=4, max_workers=4, retry_for=60.0),
                        budget=HostBudget(),
                        scope=host_of,
                    )
                    engines.append(await stack.enter_async_context(engine))
                    del n
                took[with_busy] = await others_took(engines, fetch, with_busy)

        assert took[True] <= 1.5 * took[False], took
