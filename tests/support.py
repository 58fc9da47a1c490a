"""What every test room shares: the callers, a movable wall clock, an event recorder and a
site of hosts that records what it received (for the host budgets)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

import trio

from trio_batch import Caller, Hooks, Result, RetryLater, Target

T = TypeVar("T")

ALICE = Caller("alice")
BOB = Caller("bob")


class WallClock:
    """A wall clock the test moves by hand (for leases and TTL)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    """Hooks that record every call, and a way to wait for a condition on them."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.targets: list[tuple[BaseException | None, float, int]] = []
        self.job_seconds: list[float] = []
        self.depths: list[int] = []
        self.inflights: list[int] = []
        self.retries: list[float] = []
        self.evictions: list[int] = []
        self.claims: list[tuple[int, int]] = []
        self._changed = trio.Event()

    def hooks(self) -> Hooks:
        return Hooks(
            job=self._add(self.jobs),
            target=lambda err, secs, size: self._record(self.targets, (err, secs, size)),
            job_seconds=self._add(self.job_seconds),
            depth=self._add(self.depths),
            inflight=self._add(self.inflights),
            retry=self._add(self.retries),
            evicted=self._add(self.evictions),
            claimed=lambda turns, taken_over: self._record(self.claims, (turns, taken_over)),
        )

    def _add(self, into: list[T]) -> Callable[[T], None]:
        return lambda value: self._record(into, value)

    def _record(self, into: list[T], value: T) -> None:
        into.append(value)
        self._changed.set()
        self._changed = trio.Event()

    def terminal(self) -> int:
        return sum(e in ("done", "partial", "failed", "cancelled") for e in self.jobs)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (on hook events, not on time) until ``condition()`` holds."""
        while not condition():
            await self._changed.wait()

    async def wait_terminal(self, count: int) -> None:
        await self.wait_until(lambda: self.terminal() >= count)


def targets(prefix: str, n: int) -> list[Target]:
    return [Target(f"https://{prefix}.example.test/page/{i}") for i in range(n)]


def url(prefix: str, i: int) -> str:
    return f"https://{prefix}.example.test/page/{i}"


def host_of(target: Target) -> str:
    return urlsplit(target.url).netloc


class Site:
    """A fetch function over hosts that record when each request started, in which order, and
    how many were in flight at once; a host answers 429 until its ``busy_until``."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds
        self.starts: dict[str, list[float]] = {}
        self.order: dict[str, list[str]] = {}
        self.in_flight: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.busy_until: dict[str, float] = {}  # answer 429 before this time
        self.retry_after: float | None = 2.0

    async def fetch(self, caller: Caller, target: Target) -> Result:
        host = host_of(target)
        self.starts.setdefault(host, []).append(trio.current_time())
        self.order.setdefault(host, []).append(target.url)
        self.in_flight[host] = self.in_flight.get(host, 0) + 1
        self.most[host] = max(self.most.get(host, 0), self.in_flight[host])
        try:
            await trio.sleep(self.seconds)
            if trio.current_time() < self.busy_until.get(host, -1.0):
                raise RetryLater("429 Too Many Requests", after=self.retry_after)
            return Result("ok")
        finally:
            self.in_flight[host] -= 1
