"""The rotation with host budgets: the site is protected by a budget, callers by the rotation.

Mock clock throughout (MemoryStore works in no thread): a target's fetch takes a known time,
so spacing and waiting are exact. The real-clock spacing against a real site is in tests/web.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
import trio

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    HostBudget,
    JobStatus,
    Result,
    Target,
    TargetState,
    open_engine,
)
from trio_batch._budget import CURRENT_SLOT, HostSlot
from trio_batch._crawl import REDIRECT_SCOPE
from trio_batch.stores import MemoryStore

from ..support import FakeHosts, WallClock, host_of, targets, wait_ended


@asynccontextmanager
async def polite_engine(
    site: FakeHosts, budget: HostBudget, **config: Any
) -> AsyncIterator[BatchEngine]:
    settings: dict[str, Any] = {"jobs_per_caller": 4, "jobs_total": 16, "retry_wait": 0.5}
    settings.update(config)
    async with open_engine(
        MemoryStore(),
        site.fetch,
        Config(**settings),
        wall_clock=WallClock(),
        budget=budget,
        scope=host_of,
    ) as engine:
        yield engine


async def test_five_callers_one_host_see_its_budget_and_another_host_runs_free(
    autojump_clock: object,
) -> None:
    """A budget of 1 in flight and 0.2 s between starts holds for five callers and eight
    workers; a sixth caller on another host finishes in its solo time meanwhile."""
    site = FakeHosts(seconds=0.1)
    budget = HostBudget(concurrency=1, interval=0.2)
    async with polite_engine(site, budget, workers=8, max_workers=8) as engine:
        ids = [
            (await engine.submit(Caller(f"c{i}"), "fleet", targets("shared", 4))).id
            for i in range(5)
        ]
        t0 = trio.current_time()
        solo = await engine.submit(Caller("solo"), "fleet", targets("other", 5))
        await wait_ended(engine, *ids, solo.id)
    assert 1 == site.most["shared.example.test"]
    starts = site.starts["shared.example.test"]
    assert 20 == len(starts)
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.2 - 1e-9
    # Its solo time under the same budget: five starts 0.2 s apart.
    assert site.starts["other.example.test"][-1] - t0 <= 4 * 0.2 * 1.2


async def test_a_passed_over_job_keeps_its_place(autojump_clock: object) -> None:
    """Host x is busy with J1 when J2's turn comes: J2 waits aside, and x serves it before
    J1's next target, which entered the rotation after J2."""
    site = FakeHosts(seconds=1.0)
    budget = HostBudget(concurrency=1)
    async with polite_engine(site, budget, workers=2, max_workers=2) as engine:
        j1 = await engine.submit(Caller("a"), "fleet", targets("x", 2))
        j2 = await engine.submit(Caller("b"), "fleet", targets("x", 1)[:1])
        j3 = await engine.submit(Caller("c"), "fleet", targets("y", 3))
        await wait_ended(engine, j1.id, j2.id, j3.id)
    x = site.order["x.example.test"]
    assert 3 == len(x)
    assert x[0].endswith("/0") and x[2].endswith("/1"), x  # J1 0, J2 0, J1 1
    assert x.count(x[0]) == 2  # J1's first and J2's first are the same URL, from two jobs
    # No worker waited on x: y's three targets ran back to back from the start.
    y = site.starts["y.example.test"]
    assert [0.0, 1.0, 2.0] == [round(t - y[0], 6) for t in y]


async def test_a_429_with_retry_after_holds_the_whole_host_back(autojump_clock: object) -> None:
    """Three callers on a host answering 429 (Retry-After: 2) for 5 s: the host gets at most
    one request per 2 s from all of them together, then every job ends done."""
    site = FakeHosts(seconds=0.1)
    site.busy_until["x.example.test"] = 5.0
    budget = HostBudget(concurrency=2)
    async with polite_engine(site, budget, workers=4, max_workers=4) as engine:
        subs = [await engine.submit(Caller(f"c{i}"), "fleet", targets("x", 2)) for i in range(3)]
        await wait_ended(engine, *(s.id for s in subs))
        jobs = [await engine.job(s.id) for s in subs]
    starts = site.starts["x.example.test"]
    while_busy = [t for t in starts if t < 5.0]
    assert all(b - a >= 2.0 for a, b in itertools.pairwise(while_busy[1:]))
    assert [JobStatus.DONE] * 3 == [j.status for j in jobs if j is not None]


async def test_a_host_blocked_past_the_limit_fails_its_targets_and_holds_no_worker(
    autojump_clock: object,
) -> None:
    """A host that answers 429 past ``block_limit`` fails its job's targets, saying why, while
    the one worker serves another host meanwhile."""
    site = FakeHosts(seconds=0.1)
    site.busy_until["x.example.test"] = 10_000.0
    budget = HostBudget(concurrency=1, block_limit=20.0, max_backoff=4.0)
    async with polite_engine(site, budget, workers=1, max_workers=1, retry_for=3600.0) as engine:
        blocked = await engine.submit(Caller("a"), "fleet", targets("x", 3))
        other = await engine.submit(Caller("b"), "fleet", targets("y", 3))
        await wait_ended(engine, blocked.id, other.id)
        snap = await engine.status(blocked.id)
    assert snap is not None
    assert JobStatus.FAILED == snap.job.status
    assert [TargetState.FAILED] * 3 == [t.status for t in snap.targets]
    assert all("429/503" in (t.error or "") and t.hint for t in snap.targets)
    assert max(t for t in site.starts["x.example.test"]) < 30.0
    y = site.starts["y.example.test"]
    assert y[-1] < 1.0  # the one worker was never held by the blocked host


class TestConcurrencyWithinAJob:
    async def test_four_at_once_over_four_hosts_take_a_quarter_of_the_time(
        self, autojump_clock: object
    ) -> None:
        """40 targets of 0.5 s over four hosts: serial 20 s, at concurrency 4 about 5 s; the
        targets still start in index order."""
        site = FakeHosts(seconds=0.5)
        job = [Target(f"https://h{i % 4}.example.test/{i}") for i in range(40)]
        started: list[int] = []
        fetch = site.fetch

        async def recording(caller: Caller, target: Target) -> Result:
            started.append(int(target.url.rsplit("/", 1)[1]))
            return await fetch(caller, target)

        site.fetch = recording  # type: ignore[method-assign]
        async with polite_engine(
            site, HostBudget(), workers=4, max_workers=4, targets_per_job=40
        ) as engine:
            t0 = trio.current_time()
            sub = await engine.submit(Caller("a"), "fleet", job, concurrency=4)
            await wait_ended(engine, sub.id)
            took = trio.current_time() - t0
            snap = await engine.status(sub.id)
        assert snap is not None
        assert JobStatus.DONE == snap.job.status
        assert list(range(40)) == started
        assert took <= 20.0 / 4 * 1.1
        assert max(site.most.values()) <= 2  # each host within its budget (2 by default)

    async def test_concurrency_one_keeps_the_serial_order(self, autojump_clock: object) -> None:
        """The default: one target of a job at a time, a1 b1 a2 b2 across two jobs."""
        site = FakeHosts(seconds=1.0)
        async with polite_engine(
            site, HostBudget(concurrency=8), workers=1, max_workers=1
        ) as engine:
            a = await engine.submit(Caller("a"), "fleet", targets("a", 2))
            b = await engine.submit(Caller("b"), "fleet", targets("b", 2))
            await wait_ended(engine, a.id, b.id)
        starts = sorted(
            (t, host[0] + url[-1])
            for host in ("a.example.test", "b.example.test")
            for t, url in zip(site.starts[host], site.order[host], strict=True)
        )
        assert ["a0", "b0", "a1", "b1"] == [name for _, name in starts]

    async def test_concurrency_is_part_of_the_request(self, autojump_clock: object) -> None:
        """The same targets with another ``concurrency`` are another job; with the same, the job
        is reused."""
        site = FakeHosts(seconds=1.0)
        async with polite_engine(site, HostBudget(), workers=2, max_workers=2) as engine:
            job = targets("a", 2)
            first = await engine.submit(Caller("a"), "fleet", job)
            again = await engine.submit(Caller("a"), "fleet", job)
            other = await engine.submit(Caller("a"), "fleet", job, concurrency=2)
        assert again.reused and again.id == first.id
        assert not other.reused and other.id != first.id

    async def test_a_concurrency_past_the_limit_is_refused(self, autojump_clock: object) -> None:
        """A ``concurrency`` outside 1 to ``Config.max_concurrency`` is a ValueError naming the
        limit."""
        site = FakeHosts()
        async with polite_engine(site, HostBudget(), max_concurrency=4) as engine:
            with pytest.raises(ValueError, match=r"from 1 to 4 \(Config.max_concurrency"):
                await engine.submit(Caller("a"), "fleet", targets("a", 2), concurrency=5)
            with pytest.raises(ValueError, match="from 1 to 4"):
                await engine.submit(Caller("a"), "fleet", targets("a", 2), concurrency=0)


class TestWorkConservingWithinAJob:
    @staticmethod
    async def _others_end(first_busy: bool) -> tuple[float, FakeHosts]:
        """When the last of six targets on hosts y and z ends, in a serial job that starts
        (or not) with a target on host x answering 429 for 6 s (Retry-After: 2)."""
        site = FakeHosts(seconds=0.5)
        site.busy_until["x.example.test"] = 6.0
        others = [Target(f"https://{'yz'[i % 2]}.example.test/{i + 1}") for i in range(6)]
        job = [Target("https://x.example.test/0"), *others] if first_busy else others
        async with polite_engine(
            site, HostBudget(concurrency=2), workers=2, max_workers=2
        ) as engine:
            t0 = trio.current_time()
            sub = await engine.submit(Caller("a"), "fleet", job)
            await wait_ended(engine, sub.id)
            snap = await engine.status(sub.id)
        assert snap is not None
        assert JobStatus.DONE == snap.job.status
        assert [t.url for t in job] == [t.url for t in snap.targets]  # results in index order
        starts = site.starts["y.example.test"] + site.starts["z.example.test"]
        return max(starts) + site.seconds - t0, site

    async def test_a_waiting_host_holds_no_other_host_of_the_job_back(
        self, autojump_clock: object
    ) -> None:
        """A serial job whose first target's host answers 429 for 6 s runs its other hosts'
        targets meanwhile, one at a time: they end within 1.5x of the same job without it."""
        alone, _ = await self._others_end(first_busy=False)
        behind, site = await self._others_end(first_busy=True)

        assert behind <= 1.5 * alone
        assert behind < 6.0  # before x's backoff ended
        assert 1 == max(site.most.values())  # still one target at a time

    async def test_a_file_sorted_by_host_runs_its_concurrency(self, autojump_clock: object) -> None:
        """40 targets sorted by host (ten each of four hosts), one at a time per host, at
        concurrency 4: four at once (about 5 s), not one host after another (20 s)."""
        site = FakeHosts(seconds=0.5)
        job = [Target(f"https://h{i // 10}.example.test/{i}") for i in range(40)]
        async with polite_engine(
            site, HostBudget(concurrency=1), workers=4, max_workers=4, targets_per_job=40
        ) as engine:
            t0 = trio.current_time()
            sub = await engine.submit(Caller("a"), "fleet", job, concurrency=4)
            await wait_ended(engine, sub.id)
            took = trio.current_time() - t0
            snap = await engine.status(sub.id)
        assert snap is not None
        assert [TargetState.DONE] * 40 == [t.status for t in snap.targets]
        assert took <= 10 * 0.5 * 1.1
        assert 1 == max(site.most.values())
        for host in range(4):  # each host still serves its targets in index order
            order = site.order[f"h{host}.example.test"]
            assert sorted(order, key=lambda u: int(u.rsplit("/", 1)[1])) == order

    async def test_without_budgets_targets_start_in_index_order(
        self, autojump_clock: object
    ) -> None:
        """With no host budget there is nothing to wait for: SPEC's order, target i+1 after i."""
        started: list[str] = []

        async def recording(caller: Caller, target: Target) -> Result:
            started.append(target.url)
            return Result("ok")

        job = [Target(f"https://h{i % 3}.example.test/{i}") for i in range(9)]
        async with open_engine(MemoryStore(), recording, Config(workers=2)) as engine:
            sub = await engine.submit(Caller("a"), "fleet", job)
            await wait_ended(engine, sub.id)
        assert [t.url for t in job] == started


async def test_a_fetch_sees_its_own_slot_and_never_one_from_around_the_engine(
    autojump_clock: object,
) -> None:
    """A fetch reads its target's slot through ``CURRENT_SLOT`` (the web fetcher sends in it)
    and a crawl's scope through ``REDIRECT_SCOPE``. The engine sets them only for a target that
    has one, so an engine opened where they are set (inside another engine's fetch) must still
    run its own fetches with none: no budget, no slot; with a budget, its own slot."""
    seen: list[tuple[object, object]] = []

    async def fetch(caller: Caller, target: Target) -> Result:
        seen.append((CURRENT_SLOT.get(), REDIRECT_SCOPE.get()))
        return Result("ok")

    around = cast("HostSlot", object())
    slot_token = CURRENT_SLOT.set(around)
    scope_token = REDIRECT_SCOPE.set(lambda url: True)
    try:
        async with open_engine(MemoryStore(), fetch, Config()) as engine:
            job = await engine.submit(Caller("c"), "fleet", targets("plain", 3))
            assert await wait_ended(engine, job.id) == [JobStatus.DONE]
        assert seen == [(None, None)] * 3
        seen.clear()
        budget = HostBudget(concurrency=1)
        async with open_engine(
            MemoryStore(), fetch, Config(), budget=budget, scope=host_of
        ) as engine:
            job = await engine.submit(Caller("c"), "fleet", targets("kept", 3))
            assert await wait_ended(engine, job.id) == [JobStatus.DONE]
        assert len(seen) == 3
        assert all(isinstance(slot, HostSlot) and scope is None for slot, scope in seen)
    finally:
        CURRENT_SLOT.reset(slot_token)
        REDIRECT_SCOPE.reset(scope_token)
