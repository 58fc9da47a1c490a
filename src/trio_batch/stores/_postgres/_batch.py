"""The write path: one queue and one writer task per store, committing writes in groups.

Why group commit: each commit costs a round trip and (with ``synchronous_commit``) a WAL flush,
and an engine under load issues many small writes at once (a target starts, another finishes,
a caller submits). So each write is queued to one writer task, which takes everything queued
and commits it at once. The common writes (admission, start, release and finish of a target,
cancel, interrupt, touch) are single statements, prepared once per connection; a batch of them
goes to the server as one query of ``EXECUTE`` calls, so one round trip and one implicit
transaction commit the lot. Writes of several statements (functions of a connection) join the
batch inside an explicit transaction.

Ordering: admissions go first in a batch. ``admit_job`` takes an advisory lock before any row
lock, so taking it first too keeps instances from deadlocking on each other.

Failure: if a batch fails in the database (a deadlock with another instance, say), it is
rolled back and each write runs again on its own, retried a few times on deadlock or
serialization failure, so one bad write fails alone and never undoes its neighbours.

Cancellation: a cancel already pending when a write is queued raises :class:`trio.Cancelled`
and queues nothing. Once queued, waiting for the write is not cancellable (as with SQLite): its
caller learns the outcome only after the commit, and no write is silently dropped. The engine
relies on both: a caller always knows whether its job exists.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import outcome
import psycopg.errors
import trio
from psycopg import sql
from psycopg_pool import ConnectionPool

from ..._errors import SubmitError
from ._schema import Conn, Cursor
from ._sql import Statement, prepare
from ._threads import run_with_connection

T = TypeVar("T")

_MAX_BATCH = 256
"""Writes committed together at most: bounds the size of one query and of one rollback."""

_RETRIES = 3
"""Attempts for a write that, run on its own, loses a deadlock or a serialization conflict."""


@dataclass(slots=True)
class Write(Generic[T]):
    """A queued write: a function of several statements, or one prepared statement."""

    task: trio.lowlevel.Task
    fn: Callable[[Conn], T] | None = None
    stmt: Statement | None = None
    params: tuple[object, ...] = ()
    handle: Callable[[Cursor], object] | None = None
    """Reads the statement's result (positioned on it) into the write's value."""
    after: Callable[[Conn, object], T] | None = None
    """Runs after the commit, on the handled value (eviction, in its own transaction)."""
    admits: bool = False
    result: outcome.Outcome[T] | None = None


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure))


def _closed_error() -> trio.ClosedResourceError:
    return trio.ClosedResourceError("this PostgresStore was closed")


class WriteQueue:
    """The writes of one store: queued by any task, committed in groups by :meth:`run`."""

    def __init__(self, pool: ConnectionPool[Conn], limiter: trio.CapacityLimiter) -> None:
        self._pool = pool
        self._limiter = limiter
        # Unbounded is safe: it holds at most one write per task waiting on a write.
        self._send, self._recv = trio.open_memory_channel[Write[object]](math.inf)
        self._done = trio.Event()
        self._prepared: weakref.WeakSet[Conn] = weakref.WeakSet()
        self.closed = False
        """True once :meth:`aclose` began or the writer ended: nothing more is queued."""
        self.commits = 0
        self.writes = 0

    async def call(self, fn: Callable[[Conn], T]) -> T:
        """Queue ``fn`` (several statements, one transaction); return its value after commit."""
        return await self._put(Write(trio.lowlevel.current_task(), fn=fn))

    async def execute(
        self,
        stmt: Statement,
        params: tuple[object, ...],
        handle: Callable[[Cursor], object],
        *,
        after: Callable[[Conn, object], T] | None = None,
        admits: bool = False,
    ) -> T:
        """Queue one prepared statement; ``handle`` reads its result into the value returned.

        ``after`` runs on that value once the batch committed, on the same connection.
        """
        item = Write[T](
            trio.lowlevel.current_task(),
            stmt=stmt,
            params=params,
            handle=handle,
            after=after,
            admits=admits,
        )
        return await self._put(item)

    async def _put(self, item: Write[T]) -> T:
        # A cancel already pending ends the call here, before the write exists (as
        # MemorySendChannel.send does). Past this line there is no checkpoint until the write
        # is queued, so the write is either never queued or queued and then waited for.
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.closed:
            raise trio.ClosedResourceError("this PostgresStore is closed")
        self._send.send_nowait(cast("Write[object]", item))

        # Not cancellable, as with SQLite: the caller learns a write's fate only after its
        # commit, and a write is never silently dropped (the engine relies on both).
        def abort(_: object) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task: commit what is queued, in groups, until :meth:`aclose`."""
        task_status.started()
        batch: list[Write[object]] = []
        try:
            async for first in self._recv:
                batch = [first]
                while len(batch) < _MAX_BATCH:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                # Admissions first: their advisory lock is then taken before any row lock.
                batch.sort(key=lambda item: not item.admits)
                try:
                    await run_with_connection(
                        self._pool, self._limiter, functools.partial(self._commit, batch=batch)
                    )
                except Exception as exc:  # e.g. no connection: every write of the batch failed
                    for item in batch:
                        item.result = outcome.Error(exc)
                except BaseException:
                    for item in batch:
                        item.result = outcome.Error(_closed_error())
                    raise
                finally:
                    for item in batch:
                        assert item.result is not None
                        trio.lowlevel.reschedule(item.task, item.result)
                    batch = []
        finally:
            self.closed = True
            self._send.close()
            while True:
                try:
                    item = self._recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                trio.lowlevel.reschedule(item.task, outcome.Error(_closed_error()))
            self._done.set()

    async def aclose(self) -> None:
        """Queue nothing more; return once the writes already queued are committed."""
        self.closed = True
        self._send.close()
        await self._done.wait()

    # -- in the worker thread -----------------------------------------------------------------

    def _commit(self, conn: Conn, batch: list[Write[object]]) -> None:
        """Run ``batch`` in one transaction and one round trip where it can.

        The prepared statements of the batch go to the server as one query (one implicit
        transaction); writes of several statements join them in an explicit transaction. On a
        database error the batch is rolled back and each write runs again on its own.
        """
        self._prepare(conn)
        if len(batch) == 1:
            self._commit_one(conn, batch[0])
        else:
            statements = [item for item in batch if item.stmt is not None]
            functions = [item for item in batch if item.stmt is None]
            try:
                if functions:
                    with conn.transaction():
                        if statements:
                            self._execute_statements(conn, statements)
                        for item in functions:
                            assert item.fn is not None
                            try:
                                item.result = outcome.Value(item.fn(conn))
                            except SubmitError as exc:  # raised before it wrote anything
                                item.result = outcome.Error(exc)
                else:
                    self._execute_statements(conn, statements)
                self.commits += 1
                self.writes += len(batch)
            except Exception as exc:
                for item in batch:
                    item.result = None
                if conn.broken or isinstance(exc, psycopg.errors.QueryCanceled):
                    for item in batch:
                        item.result = outcome.Error(exc)
                else:
                    for item in batch:
                        self._commit_one(conn, item)
        for item in batch:
            if item.after is not None and isinstance(item.result, outcome.Value):
                item.result = outcome.capture(item.after, conn, item.result.value)

    def _commit_one(self, conn: Conn, item: Write[object]) -> None:
        for attempt in range(_RETRIES):
            try:
                if item.stmt is not None:
                    self._execute_statements(conn, [item])  # autocommit: its own transaction
                else:
                    assert item.fn is not None
                    with conn.transaction():
                        result = outcome.capture(item.fn, conn)
                        if isinstance(result, outcome.Error) and not isinstance(
                            result.error, SubmitError
                        ):
                            result.unwrap()  # roll back, and maybe retry
                    item.result = result
                self.commits += 1
                self.writes += 1
                return
            except Exception as exc:
                if not _is_retryable(exc) or attempt == _RETRIES - 1 or conn.broken:
                    item.result = outcome.Error(exc)
                    return

    def _execute_statements(self, conn: Conn, items: list[Write[object]]) -> None:
        """Send the items' prepared statements as one query; hand each its own result."""
        calls = []
        for item in items:
            assert item.stmt is not None
            args = ", ".join(sql.Literal(p).as_string(conn) for p in item.params)
            calls.append(f"EXECUTE {item.stmt.name}({args})")
        cur = conn.execute("; ".join(calls).encode(), prepare=False)
        for n, item in enumerate(items):
            if n:
                cur.nextset()
            assert item.handle is not None
            item.result = outcome.capture(item.handle, cur)

    def _prepare(self, conn: Conn) -> None:
        """Prepare the write statements on ``conn`` once (they live as long as it does)."""
        if conn not in self._prepared:
            prepare(conn)
            self._prepared.add(conn)
