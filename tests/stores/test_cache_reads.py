"""PostgreSQL's response cache reads, gathered into one query (``CacheReads``).

The promise: reads that arrive while a query is out go together in the next, one query for
all their keys, and each read still answers for its own key alone; a cancelled read troubles
no other; a failed query fails only its own reads; closing the store ends every read waiting.
The store's own cache tests (``test_store_contract.py::TestCache``) run this on PostgreSQL.
"""

from __future__ import annotations

import pytest
import trio

pytest.importorskip("psycopg")

from trio_batch.stores import CacheEntry
from trio_batch.stores._postgres._cache_reads import CacheReads


def entry(key: str) -> CacheEntry:
    return CacheEntry(key.encode(), "{}", 1.0, 2.0)


class FakeDatabase:
    """The query's side: records each query's keys; each query waits for :meth:`answer`."""

    def __init__(self, stored: set[str]) -> None:
        self.stored = stored
        self.queries: list[list[str]] = []
        self._send, self._pending = trio.open_memory_channel[trio.Event](10)
        self.fail: Exception | None = None

    async def read(self, keys: list[str]) -> dict[str, CacheEntry]:
        self.queries.append(keys)
        release = trio.Event()
        self._send.send_nowait(release)
        await release.wait()
        if self.fail is not None:
            raise self.fail
        return {key: entry(key) for key in keys if key in self.stored}

    async def asked(self) -> trio.Event:
        """Wait for the next query; its release."""
        return await self._pending.receive()

    async def answer(self) -> None:
        """Wait for the next query and let it answer."""
        (await self.asked()).set()


async def test_reads_asked_during_a_query_go_together_in_the_next() -> None:
    """The first read goes alone; the four asked while it is out go in one query, each
    answered for its own key (a key asked twice is sent once)."""
    db = FakeDatabase({"a", "c"})
    reads = CacheReads(db.read)
    got: dict[str, CacheEntry | None] = {}

    async def read(name: str, key: str) -> None:
        got[name] = await reads.get(key)

    async with trio.open_nursery() as nursery:
        await nursery.start(reads.run)
        nursery.start_soon(read, "first", "a")
        first = await db.asked()
        for name, key in [("b", "b"), ("c", "c"), ("c again", "c"), ("d", "d")]:
            nursery.start_soon(read, name, key)
        await trio.testing.wait_all_tasks_blocked()
        first.set()
        await db.answer()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()

    assert [["a"], ["b", "c", "d"]] == [sorted(keys) for keys in db.queries]
    assert {"first": entry("a"), "b": None, "c": entry("c"), "c again": entry("c"), "d": None} == (
        got
    )


async def test_a_cancelled_read_is_not_sent_and_troubles_no_other() -> None:
    """A read cancelled while it waits for the next query is left out of it; one cancelled
    while its query is out leaves the answer to the other read of that query."""
    db = FakeDatabase({"a", "b"})
    reads = CacheReads(db.read)
    got: list[CacheEntry | None] = []

    async with trio.open_nursery() as nursery:
        await nursery.start(reads.run)
        in_query = trio.CancelScope()

        async def cancelled_in_query() -> None:
            with in_query:
                await reads.get("a")

        async def kept() -> None:
            got.append(await reads.get("b"))

        nursery.start_soon(cancelled_in_query)
        first = await db.asked()
        waiting = trio.CancelScope()

        async def cancelled_waiting() -> None:
            with waiting:
                await reads.get("never sent")

        nursery.start_soon(cancelled_waiting)
        await trio.testing.wait_all_tasks_blocked()
        waiting.cancel()
        nursery.start_soon(kept)
        await trio.testing.wait_all_tasks_blocked()
        in_query.cancel()
        await trio.testing.wait_all_tasks_blocked()
        first.set()
        await db.answer()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()

    assert [["a"], ["b"]] == db.queries
    assert [entry("b")] == got


async def test_a_failed_query_fails_its_reads_and_the_next_runs() -> None:
    """The query's error reaches each read of that query; the next query answers as usual."""
    db = FakeDatabase({"a"})
    reads = CacheReads(db.read)
    db.fail = OSError("connection lost")
    got: list[CacheEntry | BaseException | None] = []

    async def read() -> None:
        try:
            got.append(await reads.get("a"))
        except OSError as exc:
            got.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(reads.run)
        nursery.start_soon(read)
        await db.answer()
        await trio.testing.wait_all_tasks_blocked()
        db.fail = None
        nursery.start_soon(read)
        await db.answer()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()

    failed, answered = got
    assert isinstance(failed, OSError)
    assert "connection lost" == str(failed)
    assert entry("a") == answered


async def test_closing_ends_every_read_waiting() -> None:
    """The store closes (its nursery is cancelled) with a read in a query and one waiting
    for the next: both raise ``ClosedResourceError``, as a read after the close does."""
    db = FakeDatabase(set())
    reads = CacheReads(db.read)
    errors: list[BaseException] = []

    async def read(key: str) -> None:
        try:
            await reads.get(key)
        except trio.ClosedResourceError as exc:
            errors.append(exc)

    async with trio.open_nursery() as outer, trio.open_nursery() as store:
        await store.start(reads.run)
        outer.start_soon(read, "in a query")
        await db.asked()
        outer.start_soon(read, "waiting")
        await trio.testing.wait_all_tasks_blocked()
        store.cancel_scope.cancel()

    assert 2 == len(errors)
    with pytest.raises(trio.ClosedResourceError):
        await reads.get("after")
