"""Running sync psycopg from Trio: a thread per call, and a cancel that reaches the server.

psycopg 3's async API runs on asyncio only, so this store runs the sync driver in worker
threads. :func:`run_with_connection` is the bridge. It is the subtlest code of the store,
because of one rule: **never abandon a thread that holds a connection.**

Why not ``trio.to_thread.run_sync``? It offers two behaviours on cancel, and both are wrong
here. By default it waits for the thread, so a cancelled ``pg_sleep(10)`` still takes ten
seconds and cancellation does not end the work. With ``abandon_on_cancel=True`` the task
returns at once, but the thread runs on holding a pooled connection, its query still runs on
the server, and its outcome (a write that committed after all, say) reaches nobody.

What the bridge does instead:

- The connection is checked out of the pool *inside* the worker thread, since
  ``ConnectionPool.getconn`` blocks. The thread publishes it in a :class:`Held` so that a cancel
  can find it.
- On a Trio cancel, the abort function starts a helper thread that sends the server a cancel
  request for that connection (``Connection.cancel_safe``, which itself blocks on the network,
  hence a thread), and returns ``Abort.FAILED``: the task keeps waiting. The query fails with
  ``QueryCanceled``, the thread returns the connection to the pool, and only then does the task
  wake up and raise :class:`trio.Cancelled`. A cancel that comes before the thread got its
  connection withdraws the call: nothing runs.
- The cancel is sent while holding :attr:`Held.lock`, and the worker clears
  :attr:`Held.conn` under the same lock once its call returns. So a late cancel can never hit
  the connection after it went back to the pool, where it might be running someone else's
  query.
- A call whose query finished before the cancel reached the server returns its value; the
  cancel is then raised at the caller's next checkpoint, as Trio allows.

Each call runs under a ``CapacityLimiter`` as large as the pool, so no thread waits in
``getconn`` for a connection that another Trio task holds.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import outcome
import psycopg.errors
import trio
from psycopg_pool import ConnectionPool

from ._schema import Conn

T = TypeVar("T")

_CANCEL_TIMEOUT = 2.0
"""Seconds to wait for the server to accept a cancel request (``cancel_safe``)."""


class Withdrawn(Exception):
    """The call was cancelled before it got a connection; nothing ran."""


@dataclass(slots=True)
class Held:
    """The connection a worker thread is using, so a cancel can reach its query."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    conn: Conn | None = None
    cancelled: bool = False

    def cancel(self) -> None:
        """Withdraw the call, or stop its query (blocking: run it in a thread)."""
        with self.lock:
            self.cancelled = True
            if self.conn is not None:
                with contextlib.suppress(Exception):
                    self.conn.cancel_safe(timeout=_CANCEL_TIMEOUT)


async def run_with_connection(
    pool: ConnectionPool[Conn], limiter: trio.CapacityLimiter, fn: Callable[[Conn], T]
) -> T:
    """Run ``fn`` on a pooled connection in a worker thread; a cancel stops its query.

    Cancellation: this is a checkpoint. A cancel stops the query on the server and then
    raises :class:`trio.Cancelled` once the thread has handed the connection back; whether
    ``fn`` had an effect is then up to ``fn`` (a transaction it opened is rolled back). If
    ``fn`` finished before the cancel reached the server, its value is returned.
    """
    async with limiter:
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        held = Held()

        def work() -> T:
            with pool.connection() as conn:  # getconn() blocks: it must be in the thread
                with held.lock:
                    if held.cancelled:
                        raise Withdrawn
                    held.conn = conn
                try:
                    return fn(conn)
                finally:
                    with held.lock:
                        held.conn = None

        def deliver(result: outcome.Outcome[T]) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        def abort(_: object) -> trio.lowlevel.Abort:
            # Never abandon the thread: it holds a connection. Stop its query instead,
            # and keep waiting until the thread hands the connection back.
            if not held.cancelled:
                trio.lowlevel.start_thread_soon(held.cancel, lambda _: None)
            return trio.lowlevel.Abort.FAILED

        trio.lowlevel.start_thread_soon(work, deliver)
        try:
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        except (Withdrawn, psycopg.errors.QueryCanceled):
            if held.cancelled:
                await trio.lowlevel.checkpoint()  # raises the pending trio.Cancelled
            raise
        return result


async def sleep_real(seconds: float, stop: threading.Event) -> None:
    """Wait ``seconds`` of real time, or until ``stop`` is set.

    Heartbeats are real time even under Trio's mock clock, which would otherwise jump them
    forward whenever every task waits on a worker thread. Cancellation: this is a checkpoint
    with no effect; the waiting thread ends with the timeout or when ``stop`` is set.
    """
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    aborted = False

    def wake() -> None:
        if not aborted:
            trio.lowlevel.reschedule(task)

    def deliver(_: object) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(wake)

    def abort(_: object) -> trio.lowlevel.Abort:
        nonlocal aborted
        aborted = True
        return trio.lowlevel.Abort.SUCCEEDED

    trio.lowlevel.start_thread_soon(lambda: stop.wait(seconds), deliver)
    await trio.lowlevel.wait_task_rescheduled(abort)
