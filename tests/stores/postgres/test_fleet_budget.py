"""Budgets per host across a fleet: every instance on one PostgreSQL database keeps one budget.

Two engines, each with its own ``HostBudget`` and store instance, claim turns of one rotation;
the database's ``scopes`` and the claims in flight make the budgets the fleet's. Real clock
throughout (the stores work in threads, python-trio/trio#456); the margins are generous and the
site records what it received, as a site operator would see it.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import trio

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    HostBudget,
    JobStatus,
    Target,
    TargetState,
    open_engine,
)
from trio_batch.stores import PostgresStore

from ...support import FakeHosts, Recorder, host_of, targets, wait_ended_polling


@asynccontextmanager
async def polite_fleet(
    dsn: str, schema: str, site: FakeHosts, budgets: list[HostBudget], **config: Any
) -> AsyncIterator[tuple[list[BatchEngine], Recorder]]:
    """One engine per budget, each on its own store instance of ``schema``; one recorder."""
    settings: dict[str, Any] = {"jobs_per_caller": 4, "jobs_total": 16, "workers": 4}
    settings.update(config)
    rec = Recorder()
    async with AsyncExitStack() as stack:
        engines = []
        for budget in budgets:
            store = await stack.enter_async_context(PostgresStore.open(dsn, schema=schema))
            engine = open_engine(
                store,
                site.fetch,
                Config(hooks=rec.hooks(), max_workers=8, **settings),
                budget=budget,
                scope=host_of,
            )
            engines.append(await stack.enter_async_context(engine))
        yield engines, rec


async def test_one_budget_for_five_callers_on_two_instances(pg_dsn: str, pg_schema: str) -> None:
    """Budget 1 in flight and 0.2 s between starts, jobs admitted by both instances of eight
    workers in all: the host never sees two requests at once, and its starts come 0.2 s apart
    (claims are spaced; a start late after its claim may come closer to the next), and a sixth
    caller on another host is not held back by it."""
    site = FakeHosts(seconds=0.05)
    budgets = [HostBudget(concurrency=1, interval=0.2) for _ in range(2)]
    async with polite_fleet(pg_dsn, pg_schema, site, budgets) as ((a, b), _):
        ids = []
        for i in range(5):
            engine = a if i % 2 else b
            ids.append((await engine.submit(Caller(f"c{i}"), "fleet", targets("shared", 3))).id)
        t0 = trio.current_time()
        solo = await a.submit(Caller("solo"), "fleet", targets("other", 3))
        assert [JobStatus.DONE] == await wait_ended_polling(b, solo.id)
        solo_seconds = trio.current_time() - t0
        assert [JobStatus.DONE] * 5 == await wait_ended_polling(b, *ids)
        shared_seconds = trio.current_time() - t0
    assert 1 == site.most["shared.example.test"]
    starts = site.starts["shared.example.test"]
    assert 15 == len(starts)
    # The fleet spaces its claims; a fetch that starts late after its claim (a loaded machine)
    # brings the next start closer, never the claims: the starts are 0.2 s apart on the whole,
    # and no two of them less than half of it (unspaced, they would be 0.05 s apart).
    assert (starts[-1] - starts[0]) / (len(starts) - 1) >= 0.19
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.1
    # The other host's three targets (spaced by 0.2 s too) ran while the shared one queued.
    assert solo_seconds < shared_seconds / 2


async def test_a_429_seen_by_one_instance_holds_back_the_fleet(pg_dsn: str, pg_schema: str) -> None:
    """A host answering 429 (Retry-After: 2) for 3 s to callers on two instances gets at most
    one request per 2 s from the fleet together; then every job ends done."""
    site = FakeHosts(seconds=0.05)
    budgets = [HostBudget(concurrency=2) for _ in range(2)]
    async with polite_fleet(pg_dsn, pg_schema, site, budgets, retry_for=60.0) as ((a, b), _):
        site.busy_until["x.example.test"] = trio.current_time() + 3.0
        ids = []
        for i in range(4):
            engine = a if i % 2 else b
            ids.append((await engine.submit(Caller(f"c{i}"), "fleet", targets("x", 2))).id)
        assert [JobStatus.DONE] * 4 == await wait_ended_polling(a, *ids)
    busy_end = site.busy_until["x.example.test"]
    starts = site.starts["x.example.test"]
    # Requests started before the first 429 came back are one event; after it, one per 2 s.
    while_busy = [t for t in starts if starts[0] + site.seconds < t < busy_end]
    assert all(b - a >= 1.9 for a, b in itertools.pairwise(while_busy)), while_busy
    assert len(starts) >= 8


async def test_a_host_blocked_past_the_limit_fails_on_every_instance(
    pg_dsn: str, pg_schema: str
) -> None:
    """A host that always answers 429: past the block limit its targets fail with a hint on
    both instances, whoever saw the 429s; a job on another host ends done meanwhile."""
    site = FakeHosts(seconds=0.02)
    site.retry_after = None
    budgets = [HostBudget(concurrency=1, block_limit=1.0, max_backoff=0.4) for _ in range(2)]
    async with polite_fleet(pg_dsn, pg_schema, site, budgets, retry_for=60.0) as ((a, b), _):
        site.busy_until["x.example.test"] = trio.current_time() + 3600.0
        blocked = [
            (await a.submit(Caller("a"), "fleet", targets("x", 3))).id,
            (await b.submit(Caller("b"), "fleet", targets("x", 3))).id,
        ]
        fine = await b.submit(Caller("c"), "fleet", targets("y", 3))
        assert [JobStatus.DONE] == await wait_ended_polling(a, fine.id)
        assert [JobStatus.FAILED] * 2 == await wait_ended_polling(a, *blocked)
        snaps = [await a.status(job_id) for job_id in blocked]
    for snap in snaps:
        assert snap is not None
        assert [TargetState.FAILED] * 3 == [t.status for t in snap.targets]
        assert all("429/503" in (t.error or "") or "busy" in (t.error or "") for t in snap.targets)
        assert all(t.hint for t in snap.targets)
    assert len(site.starts["x.example.test"]) <= 8  # backed off, not hammered


async def test_requests_outside_the_rotation_share_the_fleets_budget(
    pg_dsn: str, pg_schema: str
) -> None:
    """Requests that take their slot with HostBudget.acquire (POST /v1/fetch, a redirect to
    another host, robots.txt) on both instances, beside jobs of both on the same host: with a
    budget of one, the host never sees two at once; the leases go back as each one ends."""
    site = FakeHosts(seconds=0.03)
    budgets = [HostBudget(concurrency=1) for _ in range(2)]
    async with polite_fleet(pg_dsn, pg_schema, site, budgets) as ((a, b), _):
        ids = [
            (await a.submit(Caller("a"), "fleet", targets("x", 4))).id,
            (await b.submit(Caller("b"), "fleet", targets("x", 4))).id,
        ]

        async def outside(budget: HostBudget) -> None:
            slot = await budget.acquire("x.example.test")
            try:
                await site.fetch(Caller("fetch"), Target("https://x.example.test/fetch"))
            finally:
                slot.release()

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(outside, budgets[i % 2])
        assert [JobStatus.DONE] * 2 == await wait_ended_polling(a, *ids)
    assert 1 == site.most["x.example.test"]
    assert 14 == len(site.starts["x.example.test"])
