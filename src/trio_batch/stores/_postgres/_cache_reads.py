"""The response cache's reads of one instance, gathered into one query (``CacheReads``).

A read alone is a worker thread's round trip and a query. With instant pages the eight
workers of a ``serve`` instance are mostly in their cache read at the same time (under
``bench.fleet``'s saturation, 1-5 other reads were in flight as each one began), and the
reads were a large share of what an instance spends a target: without them the instances
of that bench spent 1.1 ms of CPU a target, not 1.8. Here the reads that arrive while one
query is out wait for it to end and go together in the next: one thread hop and one query
(``key = ANY(...)``) for all their keys, as the writer groups the outcomes.

What a read promises is unchanged: the entry under its key as the database had it when the
query ran (the query runs after the read was asked), or None. A cancelled read leaves the
query to the others in it (or, not sent yet, is taken out of the next); only closing the store
stops a query, and then every read waiting raises. A failed query fails each read in it with
the same error, and the next query is sent as usual.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import final

import trio

from .._protocol import CacheEntry


@dataclass(eq=False, slots=True)
class _Read:
    """One read waiting for its entry."""

    done: trio.Event = field(default_factory=trio.Event)
    entry: CacheEntry | None = None
    error: Exception | None = None


@final
class CacheReads:
    """Cache reads gathered: :meth:`get` from any task, :meth:`run` in the store's nursery."""

    def __init__(self, read: Callable[[list[str]], Awaitable[dict[str, CacheEntry]]]) -> None:
        """``read`` returns the entries found under some keys (a query on a pooled
        connection); a key with no entry is left out."""
        self._read = read
        self._waiting: dict[str, list[_Read]] = {}  # keys of the next query, and their reads
        self._asked = trio.Event()  # set when a read joins the next query
        self._closed = False

    async def get(self, key: str) -> CacheEntry | None:
        """The entry under ``key``, or None; raises what the query raised.

        Cancellation: safe at any point; a read not sent yet is taken out of the next query.
        """
        if self._closed:
            raise _closed()
        read = _Read()
        self._waiting.setdefault(key, []).append(read)
        self._asked.set()
        try:
            await read.done.wait()
        except BaseException:
            reads = self._waiting.get(key, [])
            if read in reads:
                reads.remove(read)
                if not reads:
                    del self._waiting[key]
            raise
        if read.error is not None:
            raise read.error
        return read.entry

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send the waiting reads' keys, one query at a time, until the store closes; then
        every read still waiting, in a query or not, raises ``trio.ClosedResourceError``."""
        task_status.started()
        try:
            while True:
                await self._asked.wait()
                self._asked = trio.Event()
                batch, self._waiting = self._waiting, {}
                if batch:
                    await self._answer(batch)
        finally:
            self._closed = True
            _settle(self._waiting, {}, _closed())

    async def _answer(self, batch: dict[str, list[_Read]]) -> None:
        try:
            found = await self._read(list(batch))
        except Exception as exc:
            _settle(batch, {}, exc)
        except BaseException:  # the store closes: the query was stopped
            _settle(batch, {}, _closed())
            raise
        else:
            _settle(batch, found, None)


def _closed() -> trio.ClosedResourceError:
    """What a read raises once the store is closed."""
    return trio.ClosedResourceError("this PostgresStore is closed")


def _settle(
    batch: dict[str, list[_Read]], found: dict[str, CacheEntry], error: Exception | None
) -> None:
    """Wake every read of ``batch`` with its entry, or with ``error``."""
    for key, reads in batch.items():
        for read in reads:
            read.entry, read.error = found.get(key), error
            read.done.set()
