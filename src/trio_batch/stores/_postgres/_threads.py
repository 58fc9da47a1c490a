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
import heapq
import itertools
import math
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, final

import outcome
import psycopg.errors
import trio
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..._errors import StoreError
from ._schema import Conn

T = TypeVar("T")

_CANCEL_TIMEOUT = 2.0
"""Seconds to wait for the server to accept a cancel request (``cancel_safe``)."""


class Withdrawn(Exception):
    """The call was cancelled before it got a connection; nothing ran."""


class TimedOut(Exception):
    """The call got no answer within its timeout; its query was stopped (rolled back)."""


@dataclass(slots=True)
class Held:
    """The connection a worker thread is using, so a cancel can reach its query."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    conn: Conn | None = None
    cancelled: bool = False
    timed_out: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Withdraw the call, or stop its query (blocking: run it in a thread)."""
        with self.lock:
            self.cancelled = True
            if self.conn is not None:
                with contextlib.suppress(Exception):
                    self.conn.cancel_safe(timeout=_CANCEL_TIMEOUT)

    def expire(self) -> None:
        """Stop the query if the call is still running: its deadline passed (blocking: the
        watchdog's thread runs it)."""
        with self.lock:
            if self.conn is not None and not self.done.is_set():
                self.timed_out = True
                with contextlib.suppress(Exception):
                    self.conn.cancel_safe(timeout=_CANCEL_TIMEOUT)


@final
class Watchdog:
    """One thread that stops the queries still running past their deadline, for every call.

    Each call with a deadline started a thread of its own that waited for it (two more thread
    switches a call, on the start and on the end): under a fleet's load on two cores, a
    pooled call then cost the instance several times its own work. Here a call only pushes its
    deadline on a heap; the thread sleeps until the earliest one, stops that call's query if it
    still runs, and goes on. It starts with the first deadline and ends after
    :data:`_WATCHDOG_IDLE` seconds with none (Trio's thread cache does the same with its
    threads); the calls that ended before their deadline are dropped from the heap lazily.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Held]] = []
        self._order = itertools.count()
        self._running = False

    def watch(self, held: Held, deadline: float) -> None:
        """Stop ``held``'s query if it still runs at ``deadline`` (``time.monotonic``)."""
        with self._cond:
            if len(self._heap) >= _WATCHDOG_PRUNE:
                self._heap = [entry for entry in self._heap if not entry[2].done.is_set()]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (deadline, next(self._order), held))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="trio-batch watchdog", daemon=True).start()
            elif self._heap[0][2] is held:  # earlier than what the thread sleeps for
                self._cond.notify()

    def _run(self) -> None:
        while (held := self._next_expired()) is not None:
            held.expire()  # outside the lock: a cancel request waits on the network

    def _next_expired(self) -> Held | None:
        """The next call past its deadline, waiting for it; None once idle for long."""
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done.is_set():
                    heapq.heappop(self._heap)
                if not self._heap:
                    if not self._cond.wait(_WATCHDOG_IDLE) and not self._heap:
                        self._running = False
                        return None
                    continue
                left = self._heap[0][0] - time.monotonic()
                if left <= 0:
                    return heapq.heappop(self._heap)[2]
                self._cond.wait(left)


_WATCHDOG_IDLE = 10.0
"""Seconds the watchdog's thread waits with no deadline before it ends."""

_WATCHDOG_PRUNE = 1024
"""Deadlines on the heap past which the ended calls' are dropped before a push."""

WATCHDOG = Watchdog()


Source = ConnectionPool[Conn] | Conn
"""Where a call gets its connection: checked out of a pool, or one connection held for it."""


async def run_with_connection(
    source: Source,
    limiter: trio.CapacityLimiter | None,
    fn: Callable[[Conn], T],
    *,
    answer_within: float = math.inf,
) -> T:
    """Run ``fn`` on a connection in a worker thread; a cancel stops its query.

    ``source`` is a pool (the connection is checked out inside the thread) or a connection
    this caller holds. With a finite ``answer_within`` (seconds of real time, not Trio's clock, so a
    mock clock cannot fire it early), a query still running then is stopped on the server and
    :class:`TimedOut` is raised; so is waiting longer than that for a pooled connection.

    Cancellation: this is a checkpoint. A cancel stops the query on the server and then
    raises :class:`trio.Cancelled` once the thread has handed the connection back; whether
    ``fn`` had an effect is then up to ``fn`` (a transaction it opened is rolled back). If
    ``fn`` finished before the cancel reached the server, its value is returned.
    """
    async with contextlib.nullcontext() if limiter is None else limiter:
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        held = Held()
        started = time.monotonic()

        def work() -> T:
            with contextlib.ExitStack() as stack:
                if isinstance(source, ConnectionPool):
                    wait = max(0.0, answer_within - (time.monotonic() - started))
                    try:  # getconn() blocks: it must be in the thread
                        conn = stack.enter_context(
                            source.connection(timeout=None if math.isinf(wait) else wait)
                        )
                    except PoolTimeout as exc:
                        raise TimedOut from exc
                else:
                    conn = source
                with held.lock:
                    if held.cancelled:
                        raise Withdrawn
                    held.conn = conn
                if not math.isinf(answer_within):
                    WATCHDOG.watch(held, started + answer_within)
                try:
                    return fn(conn)
                finally:
                    held.done.set()
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
        except (Withdrawn, psycopg.errors.QueryCanceled) as exc:
            if held.cancelled:
                await trio.lowlevel.checkpoint()  # raises the pending trio.Cancelled
            if held.timed_out:
                raise TimedOut from exc
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


WRITER_SETTINGS = (
    "SET plan_cache_mode TO force_generic_plan",
    "SET enable_seqscan TO off",
    "SET enable_hashjoin TO off",
    "SET enable_mergejoin TO off",
    "SET jit TO off",
)
"""The writer connection's session settings.

The writer's statements are prepared once and run thousands of times over arrays whose sizes
vary: they are planned once (planning cost more than running), and by key: each touches a few
rows by primary key, and a plan made while a table is young and small would otherwise scan it
whole, batch after batch, as it grows. No sequential scan is not enough for that: a group of
outcomes planned on a young ``targets`` table joined its items by hash to a scan of the whole
primary-key index (W1 on PostgreSQL: 1.3 of the group's 1.6 ms over 4,000 targets, growing
with the table); with no hash or merge join, each item is one index probe, whatever the
table's size when the plan was made. The joins this leaves as nested loops between a
statement's own intermediate results are bounded by the batch (at most 256 writes). A plan
that must scan anyway then costs over ``jit_above_cost``: with JIT on, the server would spend
0.2-0.4 s compiling each such statement (recover, evict).
"""


def connections(
    dsn: str, *, schema: str, pool_size: int, synchronous_commit: bool, connect_timeout: float
) -> tuple[ConnectionPool[Conn], Callable[[], Conn]]:
    """The readers' pool (not open yet), and how the writer makes its own connection."""
    settings = sql.SQL("SET search_path TO {}").format(sql.Identifier(schema))

    def configure(conn: Conn) -> None:
        conn.execute(settings)
        if not synchronous_commit:
            conn.execute("SET synchronous_commit TO off")

    def connect() -> Conn:
        """The writer's own connection (blocking: run it in a thread)."""
        try:
            conn = psycopg.Connection.connect(
                dsn, autocommit=True, connect_timeout=max(1, math.ceil(connect_timeout))
            )
        except psycopg.OperationalError as exc:
            # The driver's text names the host: keep it out of the message (it may be logged).
            raise StoreError(
                f"could not connect to PostgreSQL ({type(exc).__name__}): check that the "
                "server runs, that the DSN is right, and that this user may connect"
            ) from None
        try:
            configure(conn)
            for setting in WRITER_SETTINGS:
                conn.execute(setting)
        except BaseException:
            conn.close()
            raise
        return conn

    pool: ConnectionPool[Conn] = ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,
        kwargs={"autocommit": True},
        configure=configure,
        # A connection the server dropped (a restart) is found and replaced at checkout,
        # not handed to a reader.
        check=check_idle_connection,
        open=False,
        name=f"trio-batch-{schema}",
        timeout=connect_timeout,
    )
    return pool, connect


def check_idle_connection(conn: Conn) -> None:
    """Raise if a pooled connection is no longer usable; the pool then replaces it.

    A healthy idle connection has nothing to read: the server speaks only when asked (these
    connections do not ``LISTEN``). One the server dropped (a restart, a failover,
    ``pg_terminate_backend``) has its error message or the end of the stream waiting. So the
    check looks at the socket first, without a round trip, and asks the server (an empty
    query, psycopg's own check) only when something is there. Asking every time cost a round
    trip at each checkout: one more per claim and per cache read (bench.fleet).
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection itself was gone (the server ended the session, or
    the stream broke), not that the statement failed: a read may then run again on another."""
    if isinstance(exc, (psycopg.errors.AdminShutdown, psycopg.errors.CrashShutdown)):
        return True
    return type(exc) is psycopg.OperationalError and exc.sqlstate is None


def open_pool(pool: ConnectionPool[Conn], timeout: float) -> None:
    """Open ``pool``, waiting for its first connection (blocking: run it in a thread)."""
    try:
        pool.open(wait=True, timeout=timeout)
    except PoolTimeout as exc:
        pool.close()
        # The driver's text names the host: keep it out of the message (it may be logged).
        raise StoreError(
            f"could not connect to PostgreSQL within {timeout:g} s: check that the server runs, "
            "that the DSN is right, and that this user may connect"
        ) from exc
