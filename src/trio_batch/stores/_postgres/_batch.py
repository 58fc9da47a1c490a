"""The write path's Trio side: one queue and one writer task per store, committing in groups.

Every write is queued to one writer task, which takes everything queued and hands it to the
thread side (``_pipeline``) to send as one **pipeline** of prepared statements: one round trip,
one implicit transaction and one WAL flush commit the lot. A group of outcomes
(``finish_targets``) is one statement over one JSON array parameter (the driver dumps typed
arrays element by element in Python, ``json.dumps`` does it in C); the running marks
(``start_target`` does not wait for them) are one more, and a mark whose target's outcome is in
the same batch is dropped: the outcome's statement does its part. Admissions go first
(``admit_job``'s advisory lock is then taken before any row lock), then the marks; writes of
several statements run after the pipeline, each in its own transaction.

This module is the queue, the writer task, its connection and its deadlines; ``_pipeline`` is
what runs in the worker thread (as Trio splits ``_threads.py`` from
``_core/_thread_cache.py``).

Failure:

- **A database error** (a deadlock, a value the server refuses): the batch is rolled back and
  each write runs again on its own, a group of outcomes item by item, deadlocks retried; so one
  bad write fails alone, with its own exception, and never undoes its neighbours.
- **A lost connection** (a restart, a failover, ``pg_terminate_backend``): the writer connects
  again, with backoff (jittered: the instances that lost one server come back spread out) and a
  bounded number of attempts, and sends the whole batch again. Every write is idempotent on
  such a replay (see ``_sql``): nothing is counted twice, and a replay of a batch that had
  committed answers as the first run would have. If every attempt fails, the writes get a
  :class:`StoreError` and the marks wait for the next batch.
- **No answer in time**: every write has a deadline (``call_timeout``, real time). A write
  still queued then is never sent, and a batch in flight is stopped on the server: what had
  not committed is rolled back and gets a :class:`StoreError`; what had keeps its answer.

Cancellation: a cancel already pending when a write is queued raises :class:`trio.Cancelled`
and queues nothing. Once queued, waiting for the write is not cancellable (as with SQLite): its
caller learns the outcome only after the commit, and no write is silently dropped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar, cast, final

import outcome
import psycopg.errors
import trio

from ..._errors import StoreError
from ..._util import backoff
from .._protocol import FinishItem
from ._claims import Ride
from ._pipeline import ConnectionLost, Mark, Params, Pipeline, Write
from ._schema import Conn, Cursor
from ._sql import FinishReply, Statement
from ._threads import TimedOut, run_with_connection

T = TypeVar("T")

log = logging.getLogger("trio_batch.stores.postgres")

_MAX_BATCH = 256
"""Writes committed together at most: bounds the size of one pipeline and of one rollback."""

_RECONNECT_ATTEMPTS = 8
"""Connection attempts after a lost connection, per batch, before its writes fail."""

_BACKOFF = (0.05, 1.0)
"""The first wait before connecting again, and the longest (it doubles in between)."""

_BACKOFF_JITTER = 0.5
"""Share of each reconnect wait taken off at random: the instances that lost one server (a
failover) come back spread out rather than all at once."""

_MARKS_LINGER = 0.05
"""Seconds a batch of running marks alone waits for a write to join (as SQLite's writer holds
them): a fetch shorter than this has its mark folded into its outcome's write, so it costs no
round trip of its own, and no extra wake-up of the event loop (W2: 0.955 -> 0.967)."""


ADMISSION_FIRST = 0.020
"""The longest a drain's statement (an outcome group, a claim) waits for admissions."""

ADMISSION_LINGER = 0.002
"""Seconds after an admission during which the drain still waits: a caller submitting jobs one
after another sends the next within this, and it should not find the drain's statements, held
back during the last one, all sent ahead of it."""


@final
class AdmissionsFirst:
    """Admissions go before the drain: while one is in flight, and for
    :data:`ADMISSION_LINGER` after one, outcome groups and claims wait (at most
    :data:`ADMISSION_FIRST` each).

    A submit is a caller waiting; an outcome group is work nobody waits on this millisecond. On
    a machine whose cores the drain saturates (its event loop, its writer thread, PostgreSQL),
    an admission otherwise queues behind all three. Waiting only while one is in flight was not
    enough for a caller submitting a burst one job after another: between two of its submits
    the held statements all went, and the next admission queued behind them (one instance
    draining instant targets: 246 admissions/s with no gate, 423-458 with the in-flight wait
    alone, 529-595 with the linger; idle 740-860). The bound keeps the drain going through a
    burst: each of its statements is late by at most :data:`ADMISSION_FIRST`.
    """

    __slots__ = ("_done", "_in_flight", "_last_end")

    def __init__(self) -> None:
        self._in_flight = 0
        self._done = trio.Event()
        self._last_end = -math.inf

    @contextlib.contextmanager
    def admitting(self) -> Iterator[None]:
        """An admission is in flight while the block runs."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            self._last_end = trio.current_time()
            if not self._in_flight:
                self._done.set()
                self._done = trio.Event()

    async def wait(self) -> None:
        """Return once no admission is in flight or lingering, or after :data:`ADMISSION_FIRST`."""
        deadline = trio.current_time() + ADMISSION_FIRST
        while (now := trio.current_time()) < deadline:
            if self._in_flight:
                with trio.move_on_at(deadline):
                    await self._done.wait()
            elif now < self._last_end + ADMISSION_LINGER:
                await trio.sleep_until(min(self._last_end + ADMISSION_LINGER, deadline))
            else:
                break
        await trio.lowlevel.checkpoint()


def _closed_error() -> trio.ClosedResourceError:
    return trio.ClosedResourceError("this PostgresStore was closed")


class WriteQueue:
    """The writes of one store: queued by any task, committed in groups by :meth:`run`."""

    def __init__(
        self,
        connect: Callable[[], Conn],
        *,
        instance: str,
        timeout: float,
        on_not_live: Callable[[Iterable[str]], None],
        admissions: AdmissionsFirst | None = None,
    ) -> None:
        self._connect = connect
        self._admissions = admissions
        self.ride: Callable[[], Ride | None] | None = None
        """Asked before each batch that stores outcomes: a claim to send with it, or None."""
        self.rode: Callable[[Ride], None] = lambda ride: None
        """Told of each ride once its batch ended (its claims None if it did not commit)."""
        self._pipeline = Pipeline(instance)
        self.timeout = timeout
        self._on_not_live = on_not_live
        # Unbounded is safe: it holds at most one write per task waiting on a write, and one
        # mark per target in flight.
        self._send, self._recv = trio.open_memory_channel[Write[object] | Mark](math.inf)
        self._done = trio.Event()
        self._conn: Conn | None = None
        self._carry: list[Mark] = []
        self.unsettled_marks = 0
        """Marks posted and not committed yet: a read waits for them (read-your-writes)."""
        self.closed = False
        """True once :meth:`aclose` began or the writer ended: nothing more is queued."""
        self.reconnects = 0

    @property
    def commits(self) -> int:
        """Transactions committed so far (for tests and statistics)."""
        return self._pipeline.commits

    @property
    def writes(self) -> int:
        """Writes committed so far (for tests and statistics)."""
        return self._pipeline.writes

    def timeout_error(self, *, lost: bool = False) -> StoreError:
        what = (
            "the connection was lost and the write may or may not have been applied"
            if lost  # it may have committed just before the connection went
            else "the write was not applied; the server may be overloaded or a lock held"
        )
        return StoreError(
            f"PostgreSQL did not answer within {self.timeout:g} s (call_timeout): {what}"
        )

    # -- the Trio side --------------------------------------------------------------------------

    def post_mark(self, job_id: str, idx: int, now: float) -> None:
        """Queue a running mark; nobody waits for it. Call only while the queue is open."""
        self.unsettled_marks += 1
        self._send.send_nowait(Mark(job_id, idx, now))

    async def call(self, fn: Callable[[Conn], T]) -> T:
        """Queue ``fn`` (several statements, one transaction); return its value after commit."""
        return await self._put(Write(trio.lowlevel.current_task(), self._deadline(), fn=fn))

    async def barrier(self) -> None:
        """Return once everything queued before (the marks too) is committed."""
        await self._put(Write[None](trio.lowlevel.current_task(), self._deadline(), gone=False))

    async def finish(
        self,
        items: Sequence[FinishItem],
        now: float,
        after: Callable[[Conn, object], FinishReply],
    ) -> FinishReply:
        """Queue a group of outcomes: one statement; ``after`` runs once it committed."""
        item = Write[FinishReply](
            trio.lowlevel.current_task(), self._deadline(), finish=items, now=now, after=after
        )
        return await self._put(item)

    async def execute(
        self,
        stmt: Statement,
        params: Params,
        handle: Callable[[Cursor], object],
        *,
        admits: bool = False,
    ) -> T:
        """Queue one prepared statement; ``handle`` reads its result into the value returned.

        A dict of ``params`` gets ``replay``: True when the batch is sent again after a lost
        connection.
        """
        task = trio.lowlevel.current_task()
        item = Write[T](task, self._deadline(), stmt=stmt, params=params, handle=handle)
        item.admits = admits
        return await self._put(item)

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

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
            if item.gone is None:
                return trio.lowlevel.Abort.FAILED
            item.gone = True  # a barrier has no effect: its waiter may leave at once
            return trio.lowlevel.Abort.SUCCEEDED

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task: connect, then commit what is queued, in groups, until :meth:`aclose`.

        Raises:
            StoreError: the first connection failed (before ``task_status.started()``).
        """
        self._conn = await trio.to_thread.run_sync(self._connect)
        task_status.started()

        writes: list[Write[object]] = []
        try:
            async for first in self._recv:
                items = [first]
                self._take_queued(items)
                if not any(isinstance(i, Write) for i in items):
                    await self._linger(items)

                marks = self._carry + [m for m in items if isinstance(m, Mark)]
                self._carry = []
                writes = [w for w in items if isinstance(w, Write)]

                # Admissions first: their advisory lock is then taken before any row lock.
                writes.sort(key=lambda w: not w.admits)
                ride = None
                try:
                    if self._admissions is not None:
                        await self._admissions.wait()
                    if self.ride is not None and any(w.finish for w in writes):
                        ride = self.ride()
                    await self._commit(marks, writes, ride)
                except BaseException:
                    for w in writes:
                        w.result = outcome.Error(_closed_error())
                    raise
                finally:
                    if ride is not None:  # the claims first: a worker may be waiting for one
                        self.rode(ride)
                    # Each waiter learns its write's fate, whatever ended the commit.
                    for w in writes:
                        assert w.result is not None
                        if not w.gone:
                            trio.lowlevel.reschedule(w.task, w.result)
                    writes = []
        finally:
            self.closed = True
            self._send.close()

            # What was queued and never taken fails as closed; its waiters are woken.
            while True:
                try:
                    item = self._recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                if isinstance(item, Write) and not item.gone:
                    trio.lowlevel.reschedule(item.task, outcome.Error(_closed_error()))

            if self._conn is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._conn.close)
            self._done.set()

    def _take_queued(self, items: list[Write[object] | Mark]) -> None:
        while len(items) < _MAX_BATCH:
            try:
                items.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return

    async def _linger(self, items: list[Write[object] | Mark]) -> None:
        """Marks alone: wait :data:`_MARKS_LINGER` for a write to carry them (nobody waits
        for marks, and a round trip of marks alone would delay the outcomes coming next)."""
        with trio.move_on_after(_MARKS_LINGER):
            while len(items) < _MAX_BATCH and not any(isinstance(i, Write) for i in items):
                try:
                    items.append(await self._recv.receive())
                except trio.EndOfChannel:
                    return
                self._take_queued(items)

    async def aclose(self) -> None:
        """Queue nothing more; return once the writes already queued are committed."""
        self.closed = True
        self._send.close()
        await self._done.wait()

    async def _commit(
        self, marks: list[Mark], writes: list[Write[object]], ride: Ride | None
    ) -> None:
        """Commit ``marks`` and ``writes`` (and ``ride``'s claim with them), connecting again
        and replaying if the link breaks (without the claim: see :class:`Ride`)."""
        replay = False
        attempts = 0
        # A mark whose target's outcome is in this batch is dropped (the outcome's statement
        # does its part), on every run of the batch: so a replay never re-opens a target that
        # the first run stored, even when that outcome has meanwhile timed out.
        finishing = {(job_id, idx) for w in writes for job_id, idx, _ in w.finish}

        while True:
            # A write past its deadline is not sent (again): it fails as not answered in time.
            now = time.monotonic()
            for w in writes:
                if w.result is None and w.deadline <= now:
                    w.result = outcome.Error(self.timeout_error(lost=replay))
            live = [w for w in writes if w.result is None]
            if not live and not marks:
                return

            budget = min((w.deadline for w in live), default=now + self.timeout) - now
            try:
                if self._conn is None:
                    raise ConnectionLost
                not_live = await run_with_connection(
                    self._conn,
                    None,
                    functools.partial(
                        self._pipeline.apply,
                        marks=marks,
                        writes=live,
                        finishing=finishing,
                        replay=replay,
                        ride=None if replay else ride,
                    ),
                    answer_within=budget,
                )
            except (TimedOut, psycopg.errors.QueryCanceled) as exc:
                # Stopped (our deadline, or the server's statement_timeout): rolled back.
                error: Exception = (
                    self.timeout_error(lost=replay) if isinstance(exc, TimedOut) else exc
                )
            except ConnectionLost as lost:
                attempts = await self._reconnect(attempts, lost.__cause__)
                if self._conn is not None:
                    replay = True
                    continue
                error = StoreError(
                    "lost the connection to PostgreSQL and could not connect again "
                    f"({_RECONNECT_ATTEMPTS} attempts); the write may not have been applied"
                )
            else:
                self.unsettled_marks -= len(marks)
                self._on_not_live(not_live)
                for w in live:
                    if isinstance(w.result, outcome.Value) and isinstance(
                        w.result.value, FinishReply
                    ):
                        self._on_not_live(w.result.value.not_live)
                return

            for w in (w for w in live if w.result is None):  # the committed keep their answer
                w.result = outcome.Error(error)
            self._carry = [m for m in marks if (m.job_id, m.idx) not in finishing]
            return

    async def _reconnect(self, attempts: int, cause: BaseException | None) -> int:
        """Replace the broken connection; return the attempts used (this batch's so far)."""
        log.warning(
            "lost the connection to PostgreSQL (%s); connecting again",
            type(cause).__name__,
            extra={"error_type": type(cause).__name__},
        )
        old, self._conn = self._conn, None
        if old is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(old.close)

        while attempts < _RECONNECT_ATTEMPTS:
            attempts += 1
            await trio.sleep(backoff(attempts, *_BACKOFF, jitter=_BACKOFF_JITTER))

            try:
                self._conn = await trio.to_thread.run_sync(self._connect)
            except Exception as exc:
                log.warning(
                    "could not connect to PostgreSQL again (%s)",
                    type(exc).__name__,
                    extra={"error_type": type(exc).__name__},
                )
                continue
            self.reconnects += 1
            break

        return attempts
