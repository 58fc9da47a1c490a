"""Drive a long-lived Trio run from synchronous Hypothesis rules, via Trio's guest mode.

Hypothesis runs the rules of a ``RuleBasedStateMachine`` as plain synchronous calls, and a
``trio.run`` per rule would close every nursery (an engine's, a store's) when the rule returns.
So one run per example is started with ``trio.lowlevel.start_guest_run`` as the guest of a tiny
host loop: a ``queue.SimpleQueue`` of callbacks that the test thread pumps until the rule's call
has an answer. Trio thus runs in the test's own thread (plain tracebacks, nothing shared across
threads), an engine opened in one rule stays open across rules, and a crash of the run is
re-raised at the next step. A nursery must be exited by the task that entered it, so
:meth:`TrioGuestDriver.enter` holds each ``async with`` open in one holder task. (The
``hypothesis-trio`` package would do this, but it no longer imports with current Hypothesis and
fails under Trio's strict exception groups.)
"""

from __future__ import annotations

import queue
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import outcome
import trio
import trio.testing

T = TypeVar("T")


class TrioGuestDriver:
    """One Trio guest run, hosted by the calling thread, for the life of one Hypothesis example."""

    def __init__(self, clock: trio.abc.Clock | None = None) -> None:
        self._queue: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._done: outcome.Outcome[None] | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._exits: list[trio.Event] = []
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self._queue.put,
            done_callback=self._on_done,
            clock=clock,
        )
        self._pump_until(lambda: self._nursery is not None)

    def _on_done(self, result: outcome.Outcome[None]) -> None:
        self._done = result

    async def _main(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _pump_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            if self._done is not None:
                self._done.unwrap()
                raise RuntimeError("the trio run ended unexpectedly")
            self._queue.get()()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` inside the guest run and return its result."""
        box: list[outcome.Outcome[T]] = []

        async def runner() -> None:
            box.append(await outcome.acapture(fn, *args))

        nursery = self._nursery
        assert nursery is not None
        self._queue.put(lambda: nursery.start_soon(runner))
        self._pump_until(lambda: bool(box))
        return box[0].unwrap()

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Hold ``async with manager`` open in one task until :meth:`close`."""

        async def start() -> T:
            async def holder(task_status: trio.TaskStatus[tuple[T, trio.Event]]) -> None:
                leave = trio.Event()
                async with manager as value:
                    task_status.started((value, leave))
                    await leave.wait()

            assert self._nursery is not None
            value: T
            value, leave = await self._nursery.start(holder)
            self._exits.append(leave)
            return value

        return self.call(start)

    def close(self) -> None:
        while self._exits:
            leave = self._exits.pop()

            async def fire(leave: trio.Event = leave) -> None:
                leave.set()
                await trio.testing.wait_all_tasks_blocked()

            self.call(fire)
        assert self._stop is not None
        self._queue.put(self._stop.set)
        self._pump_until(lambda: self._done is not None)
        assert self._done is not None
        self._done.unwrap()
