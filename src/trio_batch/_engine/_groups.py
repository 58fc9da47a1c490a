"""Draining a channel in groups, with a few groups in flight, acknowledged strictly in order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

T = TypeVar("T")
R = TypeVar("R")


async def drain_in_groups(
    recv: trio.MemoryReceiveChannel[T],
    process: Callable[[list[T]], Awaitable[Sequence[R]]],
    acknowledge: Callable[[list[T], Sequence[R]], Awaitable[None]],
    *,
    max_group: int,
    in_flight: int,
) -> None:
    """Run ``process`` on groups of what arrives on ``recv`` until it ends, then return.

    A group is whatever arrived while the previous groups were being processed, up to
    ``max_group`` items, so the groups grow with the load and a lone item is never held back.
    Up to ``in_flight`` groups are processed at once (group k+1 is sent while k commits), but
    ``acknowledge`` runs for one group at a time, in the order the items arrived, whatever
    order the processing ends in. ``process`` should turn its errors into results; an
    exception it raises ends the drain.

    Cancellation: cancels the groups in flight; what they had processed is not acknowledged.
    """
    slots = trio.Semaphore(in_flight)
    previous: trio.Event | None = None

    async def one(group: list[T], previous: trio.Event | None, done: trio.Event) -> None:
        try:
            results = await process(group)
            if previous is not None:
                await previous.wait()
            await acknowledge(group, results)
        finally:
            done.set()
            slots.release()

    async with trio.open_nursery() as nursery:
        async for first in recv:
            await slots.acquire()  # what arrives meanwhile joins this group
            group = [first]
            while len(group) < max_group:
                try:
                    group.append(recv.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            done = trio.Event()
            nursery.start_soon(one, group, previous, done)
            previous = done
