"""``Hooks.turn``: a job's caller class and how long it waited for each turn (its queue wait).

The wait is measured on Trio's clock from the moment the job entered the rotation (at submit,
after each stored target) to the moment a worker takes its turn; the autojump clock makes the
seconds exact.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

import trio

from trio_batch import (
    Caller,
    Config,
    Hooks,
    HostBudget,
    Result,
    Target,
    open_engine,
)
from trio_batch.stores import MemoryStore

from ..support import targets, wait_ended


class Turns:
    """A fetch of one second per target, and the ``turn`` hook's calls in order."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, float]] = []
        self.fetched: list[str] = []

    def hooks(self) -> Hooks:
        return Hooks(turn=lambda caller_class, seconds: self.turns.append((caller_class, seconds)))

    async def fetch(self, caller: Caller, target: Target) -> Result:
        self.fetched.append(target.url)
        await trio.sleep(1.0)
        return Result("ok")


def _waits(turns: Turns) -> list[tuple[str, float]]:
    return [(caller_class, round(seconds, 6)) for caller_class, seconds in turns.turns]


async def test_one_call_per_turn_with_a_wait_that_grows_behind_a_busy_worker(
    autojump_clock: object,
) -> None:
    """One worker, four jobs submitted at once: each waits one second more than the one ahead
    of it; a job's second target waits from when its first was stored."""
    turns = Turns()
    config = Config(workers=1, jobs_per_caller=4, hooks=turns.hooks())
    async with open_engine(MemoryStore(), turns.fetch, config) as engine:
        ids = [(await engine.submit(Caller("a"), "fleet", targets("a", 2))).id]
        later: list[tuple[str, Literal["fleet", "restricted"]]] = [
            ("b", "restricted"),
            ("c", "fleet"),
            ("d", "restricted"),
        ]
        for name, caller_class in later:
            sub = await engine.submit(Caller(name), caller_class, targets(name, 1))
            ids.append(sub.id)
        await wait_ended(engine, *ids)

    assert 5 == len(turns.fetched)
    assert [
        ("fleet", 0.0),  # a0 at 0: the worker was free
        ("restricted", 1.0),  # b0 at 1, behind a0
        ("fleet", 2.0),  # c0 at 2
        ("restricted", 3.0),  # d0 at 3
        ("fleet", 3.0),  # a1 at 4: a came back at 1, when a0 was stored
    ] == _waits(turns)


async def test_a_job_alone_waits_for_nothing(autojump_clock: object) -> None:
    """A job in an idle engine: every turn is taken at once (a wait of zero seconds)."""
    turns = Turns()
    config = Config(workers=2, max_workers=2, hooks=turns.hooks())
    async with open_engine(MemoryStore(), turns.fetch, config) as engine:
        sub = await engine.submit(Caller("a"), "restricted", targets("a", 3))
        await wait_ended(engine, sub.id)

    assert [("restricted", 0.0)] * 3 == _waits(turns)


async def test_a_wait_for_the_host_counts_as_queue_wait(autojump_clock: object) -> None:
    """Two workers, a host budget of one: the second job's turn waits out the first job's
    fetch on its host (a worker was free all along); a job on another host waits nothing."""
    turns = Turns()
    budget = HostBudget(concurrency=1)
    config = Config(workers=2, max_workers=2, hooks=turns.hooks())

    def host(target: Target) -> str:
        return urlsplit(target.url).netloc

    async with open_engine(MemoryStore(), turns.fetch, config, budget=budget, scope=host) as engine:
        first = await engine.submit(Caller("a"), "fleet", targets("x", 1))
        second = await engine.submit(Caller("b"), "restricted", targets("x", 1))
        await trio.sleep(0.5)
        other = await engine.submit(Caller("c"), "fleet", targets("y", 1))
        await wait_ended(engine, first.id, second.id, other.id)

    # x0 of a at 0; y0 of c at 0.5, while b is still passed over; x0 of b at 1.
    assert [("fleet", 0.0), ("fleet", 0.0), ("restricted", 1.0)] == _waits(turns)
