"""The writer thread: it owns the write connection and commits queued writes in groups.

Every write is a small function queued to the thread, which takes everything queued (up to
``MAX_BATCH``), runs it in one transaction, commits once, and wakes all the waiting Trio tasks
with one ``run_sync_soon``. Only if one write raises is the group rolled back and replayed write
by write, each in a savepoint of its own, so the failing one gets its error and the others land.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import outcome
import trio

T = TypeVar("T")

_log = logging.getLogger("trio_batch")

MAX_BATCH = 512


@dataclass(slots=True)
class Write(Generic[T]):
    fn: Callable[[sqlite3.Connection], T]
    task: trio.lowlevel.Task | None  # None: posted, nobody waits for it
    token: trio.lowlevel.TrioToken
    result: outcome.Outcome[T] | None = None


class Writer:
    """The thread that owns the write connection and commits in groups."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[Write[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="trio-batch-sqlite", daemon=True)
        self.commits = 0
        self.writes = 0
        self.posted = 0  # posted writes not yet committed; only the Trio thread touches it

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then end the thread (blocking; call from a thread)."""
        self._queue.put(None)
        self._thread.join()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Queue ``fn`` and return its result once committed.

        A cancel already pending raises before anything is queued (no effect); once queued,
        the write is not cancellable: the caller learns its fate only after its commit.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        item = Write(fn, trio.lowlevel.current_task(), trio.lowlevel.current_trio_token())
        self._queue.put(item)
        # reschedule() hands us the write's outcome, already unwrapped.
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return result

    def post(self, fn: Callable[[sqlite3.Connection], object]) -> None:
        """Queue a write without waiting for it; it commits before any write queued later."""
        self.posted += 1
        self._queue.put(Write(fn, None, trio.lowlevel.current_trio_token()))

    async def flush(self) -> None:
        """Return once every write posted so far is committed (read-your-writes)."""
        if self.posted:
            await self.run(nothing)

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._commit(batch)
            token = batch[0].token
            token.run_sync_soon(wake, self, batch)

    def _commit(self, batch: list[Write[Any]]) -> None:
        """Run the batch in one transaction; isolate a failing write only when one fails."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for item in batch:
                    item.result = outcome.Value(item.fn(conn))
            except Exception:
                # Rare: undo everything, then run each write in a savepoint of its own so the
                # failing one gets its error and the others still land.
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                for item in batch:
                    conn.execute("SAVEPOINT w")
                    try:
                        item.result = outcome.Value(item.fn(conn))
                    except Exception as exc:
                        conn.execute("ROLLBACK TO w")
                        item.result = outcome.Error(exc)
                    conn.execute("RELEASE w")
            conn.execute("COMMIT")
            self.commits += 1
            self.writes += len(batch)
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            for item in batch:
                item.result = outcome.Error(exc)


def wake(writer: Writer, batch: list[Write[Any]]) -> None:
    for item in batch:
        assert item.result is not None
        if item.task is not None:
            trio.lowlevel.reschedule(item.task, item.result)
            continue
        writer.posted -= 1
        if isinstance(item.result, outcome.Error):
            error = type(item.result.error).__name__
            _log.warning("store write failed with %s", error, extra={"error_type": error})


def nothing(conn: sqlite3.Connection) -> None:
    pass
