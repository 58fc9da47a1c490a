"""HostBudget: a scope's slots, spacing and backoff, each on its own clock (mock clock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batch import HostBlocked, HostBudget, HostSlot, Waiting


def start(budget: HostBudget, scope: str = "a:443") -> HostSlot:
    got = budget.try_start(scope)
    assert isinstance(got, HostSlot), got
    return got


def refused(budget: HostBudget, scope: str = "a:443") -> Waiting:
    got = budget.try_start(scope)
    assert isinstance(got, Waiting), got
    return got


async def test_concurrency_caps_a_scope_and_not_the_others(autojump_clock: object) -> None:
    """``concurrency`` caps the requests in flight to one scope; another scope is not held back."""
    budget = HostBudget(concurrency=2)
    first, _ = start(budget), start(budget)
    assert Waiting("host_busy", None) == refused(budget)
    start(budget, "b:443")  # another host is not held back
    first.release()
    start(budget)


async def test_interval_spaces_starts(autojump_clock: object) -> None:
    """``interval`` spaces the starts on a scope, and a refused start says when it may go."""
    budget = HostBudget(concurrency=5, interval=0.2)
    start(budget).release()
    waiting = refused(budget)
    assert "host_busy" == waiting.reason
    assert waiting.deadline == pytest.approx(trio.current_time() + 0.2)
    await trio.sleep(0.2)
    start(budget)


async def test_crawl_delay_spaces_longer_and_says_so(autojump_clock: object) -> None:
    """A robots.txt Crawl-delay longer than ``interval`` spaces the scope and is named as the
    reason."""
    budget = HostBudget(interval=0.1)
    start(budget).release()
    budget.set_crawl_delay("a:443", 1.0)  # read from robots.txt during the first fetch
    waiting = refused(budget)
    assert "crawl_delay" == waiting.reason
    await trio.sleep(0.9)
    refused(budget)
    await trio.sleep(0.1)
    start(budget)


async def test_retry_after_pushes_the_scope_back_once_per_event(autojump_clock: object) -> None:
    """Two responses in flight both answer 429: one event, one push back, not two."""
    budget = HostBudget(concurrency=2)
    a, b = start(budget), start(budget)
    a.release(rate_limited=True, retry_after=2.0)
    await trio.sleep(0.5)
    b.release(rate_limited=True, retry_after=2.0)  # was in flight when the backoff began
    assert 1 == budget.backoffs
    waiting = refused(budget)
    assert "backoff" == waiting.reason
    assert waiting.deadline == pytest.approx(2.0 + trio.current_time() - 0.5)
    await trio.sleep(1.5)
    probe = start(budget)
    assert Waiting("host_busy", None) == refused(budget)  # one probe until a success
    probe.release()
    start(budget), start(budget)  # well again: both slots


async def test_backoff_without_retry_after_grows(autojump_clock: object) -> None:
    """Each 429 or 503 without Retry-After backs the scope off longer than the one before."""
    budget = HostBudget(concurrency=1)
    waits = []
    for _ in range(4):
        while not isinstance(got := budget.try_start("a:443"), HostSlot):
            assert got.deadline is not None
            await trio.sleep_until(got.deadline)
        t0 = trio.current_time()
        got.release(rate_limited=True)
        waiting = refused(budget)
        assert waiting.deadline is not None
        waits.append(waiting.deadline - t0)
    assert waits == sorted(waits)
    assert waits[-1] > 3 * waits[0]


async def test_a_long_retry_after_is_capped_and_counted(autojump_clock: object) -> None:
    """A Retry-After past ``max_backoff`` is cut to it and counted in ``capped_retry_after``."""
    budget = HostBudget(max_backoff=60.0)
    start(budget).release(rate_limited=True, retry_after=7200.0)
    assert 1 == budget.capped_retry_after
    waiting = refused(budget)
    assert waiting.deadline == pytest.approx(trio.current_time() + 60.0)


async def test_a_scope_blocked_past_the_limit_is_reported_blocked(autojump_clock: object) -> None:
    """A scope backed off for longer than ``block_limit`` is blocked: ``acquire`` raises
    HostBlocked."""
    budget = HostBudget(block_limit=10.0, max_backoff=4.0)
    start(budget).release(rate_limited=True, retry_after=4.0)
    blocked = False
    while not blocked:
        got = budget.try_start("a:443")
        if isinstance(got, HostSlot):
            got.release(rate_limited=True, retry_after=4.0)
            continue
        blocked = got.blocked
        if not blocked:
            assert got.deadline is not None
            await trio.sleep_until(got.deadline)
    assert 10.0 <= trio.current_time() < 16.0
    with pytest.raises(HostBlocked, match="429/503"):
        await budget.acquire("a:443")


async def test_acquire_waits_for_a_slot(autojump_clock: object) -> None:
    """``acquire`` waits while the scope is full and returns a slot once one is released."""
    budget = HostBudget(concurrency=1)
    held = start(budget)
    got: list[HostSlot] = []

    async def other() -> None:
        got.append(await budget.acquire("a:443"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.testing.wait_all_tasks_blocked()
        assert [] == got
        held.release()
    assert 1 == len(got)


async def test_idle_scopes_are_forgotten(autojump_clock: object) -> None:
    """Scopes with nothing to remember are dropped, so a budget over many hosts stays small."""
    budget = HostBudget(interval=1.0)
    for i in range(1000):
        start(budget, f"h{i}:443").release()
    await trio.sleep(1.0)
    start(budget, "last:443").release()
    assert budget.scopes <= 1


def test_settings_are_checked() -> None:
    """A budget setting out of range is a ValueError naming it."""
    with pytest.raises(ValueError, match="concurrency"):
        HostBudget(concurrency=0)
    with pytest.raises(ValueError, match="interval"):
        HostBudget(interval=-1)
    with pytest.raises(ValueError, match="max_backoff"):
        HostBudget(max_backoff=0)
