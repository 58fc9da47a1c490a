"""A pool of slots shared fairly by callers, and idle never: :class:`FairPool`.

The fetcher (fetch slots) and the shaper (worker processes) both lend slots of a pool to
callers. A fixed share per caller (a caller may hold at most ``n - 1`` of ``n``) keeps a second
caller from waiting, but it leaves slots idle whenever one caller is alone, which is most of the
time: a ``trio-batch run`` is one caller, and one shaping worker of two sat idle through it
(issue 28). So the limit binds only under contention, as the engine's host budgets and its
rotation do:

- while no one waits, any caller takes any free slot, up to the whole pool;
- when a slot comes back and callers wait, it goes to the waiting caller that holds the fewest
  slots (of equals, the one whose oldest request came first), so shares even out as slots come
  back; a caller that waits behind another that holds every slot waits for one slot's work at
  most (the first to end).

An optional per-caller ``cap`` is a hard limit, kept for operators who want one.

The state per caller lives only while the caller holds or waits for a slot (the names come from
API keys and clients, so a dict of every caller ever seen would grow without bound).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import final

import trio


@dataclass(eq=False, slots=True)
class _Waiter:
    task: trio.lowlevel.Task
    order: int


@dataclass(slots=True)
class _Caller:
    held: int = 0
    waiters: deque[_Waiter] = field(default_factory=deque)


@final
@dataclass(frozen=True, slots=True)
class FairPoolStatistics:
    """A snapshot of a :class:`FairPool`."""

    held: int
    """Slots lent out now."""
    waiting: int
    """Requests waiting for a slot."""
    callers: int
    """Callers holding or waiting for a slot."""


@final
class FairPool:
    """``size`` slots lent to callers by name: work-conserving, fair under contention.

    Use ``async with pool.slot(caller):``, or :meth:`acquire` and :meth:`release`.
    """

    def __init__(self, size: int, *, cap: int | None = None) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one slot (got {size!r})")
        self._size = size
        self._free = size
        self._cap = size if cap is None else max(1, cap)
        self._callers: dict[str, _Caller] = {}
        self._order = itertools.count()

    @property
    def size(self) -> int:
        """Slots in all."""
        return self._size

    def statistics(self) -> FairPoolStatistics:
        """The pool's state now."""
        return FairPoolStatistics(
            held=self._size - self._free,
            waiting=sum(len(c.waiters) for c in self._callers.values()),
            callers=len(self._callers),
        )

    def held(self, caller: str) -> int:
        """Slots ``caller`` holds now."""
        state = self._callers.get(caller)
        return 0 if state is None else state.held

    @asynccontextmanager
    async def slot(self, caller: str) -> AsyncIterator[None]:
        """Hold one slot for ``caller`` through the block."""
        await self.acquire(caller)
        try:
            yield
        finally:
            self.release(caller)

    async def acquire(self, caller: str) -> None:
        """Take a slot for ``caller``: at once if one is free (and the caller is under its
        cap), else when one comes back and it is this caller's turn.

        Cancellation: a checkpoint; if it raises :class:`trio.Cancelled`, no slot was taken
        (a request cancelled while waiting leaves the queue).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        state = self._callers.get(caller)
        if state is None:
            state = self._callers[caller] = _Caller()
        if self._free and state.held < self._cap:
            # Free slots and an eligible waiter never coexist (``_dispatch``), so this jumps
            # no queue.
            self._free -= 1
            state.held += 1
            await trio.lowlevel.cancel_shielded_checkpoint()
            return

        task = trio.lowlevel.current_task()
        waiter = _Waiter(task, next(self._order))
        state.waiters.append(waiter)

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            state.waiters.remove(waiter)
            self._forget(caller, state)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def release(self, caller: str) -> None:
        """Give back a slot ``caller`` holds; it goes to the waiter whose turn it is."""
        state = self._callers.get(caller)
        if state is None or not state.held:
            raise RuntimeError(f"release of a slot the caller does not hold ({self!r})")
        state.held -= 1
        self._free += 1
        self._dispatch()
        self._forget(caller, state)

    def _dispatch(self) -> None:
        """Lend free slots to waiters: the caller holding fewest first, then the oldest."""
        while self._free:
            best: _Caller | None = None
            for state in self._callers.values():
                if not state.waiters or state.held >= self._cap:
                    continue
                if (
                    best is None
                    or state.held < best.held
                    or (state.held == best.held and state.waiters[0].order < best.waiters[0].order)
                ):
                    best = state
            if best is None:
                return
            waiter = best.waiters.popleft()
            best.held += 1
            self._free -= 1
            trio.lowlevel.reschedule(waiter.task)

    def _forget(self, caller: str, state: _Caller) -> None:
        if not state.held and not state.waiters:
            self._callers.pop(caller, None)

    def __repr__(self) -> str:
        stats = self.statistics()
        return f"<FairPool {stats.held}/{self._size} held, {stats.waiting} waiting>"
