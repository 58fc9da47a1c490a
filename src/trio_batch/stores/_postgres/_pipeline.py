"""The thread side of the write path: one batch of writes run on the writer's connection.

The writer task (``_batch``) gathers queued writes and hands them here, to run in a worker
thread on its one connection (as Trio keeps the thread side of ``to_thread`` in
``_core/_thread_cache.py``, apart from ``_threads.py``). Nothing here touches Trio: it reads and
sets each :class:`Write`'s ``result``, and raises what the writer task must decide about.

A batch is first sent as one **pipeline** of prepared statements: one round trip, one implicit
transaction and one WAL flush commit the lot. The running marks are one statement (a mark whose
target's outcome is in the batch is dropped: the outcome's statement does its part), a group of
outcomes is one statement over one JSON array, and each write of one prepared statement is one
more; writes of several statements (``fn``) run after the pipeline, each in its own transaction.

When the pipeline fails with a database error (a deadlock, a value the server refuses), the
batch is rolled back and each write runs again on its own, a group of outcomes item by item,
deadlocks retried: so one bad write fails alone, with its own exception, and never undoes its
neighbours. A broken connection raises :class:`ConnectionLost`, and a statement stopped on the
server raises ``QueryCanceled``: the writer task reconnects and replays, or fails the writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import outcome
import psycopg.errors
import trio

from ..._errors import SubmitError
from .._protocol import FinishItem
from ._claims import CLAIM_SQL, Ride, claims_of, free_in
from ._schema import Conn, Cursor
from ._scopes import SCOPES_FREE_SQL
from ._sql import (
    FINISH_MANY,
    START_MANY,
    FinishReply,
    Statement,
    finish_params,
    finish_reply,
    marks_params,
)

T = TypeVar("T")

log = logging.getLogger("trio_batch.stores.postgres")

_RETRIES = 3
"""Attempts for a write that, run on its own, loses a deadlock or a serialization conflict."""

Params = tuple[object, ...] | dict[str, object]


@dataclass(slots=True)
class Mark:
    """A running mark that nobody waits for (``start_target``)."""

    job_id: str
    idx: int
    now: float


@dataclass(slots=True)
class Write(Generic[T]):
    """A queued write: a function of several statements, one prepared statement, a group of
    outcomes, or nothing (a barrier: it returns once everything queued before it committed)."""

    task: trio.lowlevel.Task
    deadline: float
    """``time.monotonic()`` after which it is not sent, or is stopped: a StoreError."""
    fn: Callable[[Conn], T] | None = None
    stmt: Statement | None = None
    params: Params = ()
    handle: Callable[[Cursor], object] | None = None
    """Reads the statement's result (positioned on it) into the write's value."""
    after: Callable[[Conn, object], T] | None = None
    """Runs after the commit, on the handled value (eviction, in its own transaction)."""
    admits: bool = False
    finish: Sequence[FinishItem] = ()
    now: float = 0.0
    result: outcome.Outcome[T] | None = None
    gone: bool | None = None
    """None: not cancellable once queued; False: a barrier; True: its waiter was cancelled."""


class ConnectionLost(Exception):
    """The writer's connection broke; the batch is sent again on a new one."""


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure))


def _check(conn: Conn, exc: Exception) -> None:
    """Raise what the writer task must handle itself: a broken link, a stopped batch."""
    if isinstance(exc, ConnectionLost):
        raise exc
    if conn.broken or conn.closed:
        raise ConnectionLost from exc
    if isinstance(exc, psycopg.errors.QueryCanceled):
        raise exc


class Pipeline:
    """Runs batches of one store's writes on the writer's connection, in a worker thread.

    ``commits`` and ``writes`` count what it committed (for tests and statistics).
    """

    def __init__(self, instance: str) -> None:
        self._instance = instance
        self.commits = 0
        self.writes = 0

    def apply(
        self,
        conn: Conn,
        *,
        marks: list[Mark],
        writes: list[Write[object]],
        finishing: set[tuple[str, int]],
        replay: bool,
        ride: Ride | None = None,
    ) -> set[str]:
        """Run the batch in one round trip; on a database error, write by write.

        ``finishing`` holds the targets whose outcome is among ``writes``: their marks are
        dropped, and their ``started_at`` goes with the outcome. ``replay``: the batch is sent
        again after a lost connection. ``ride``: a claim that goes with the batch, in its
        round trip and its transaction; its claims are set on it if the batch committed whole
        (written one by one after a database error, the batch carries no claim).

        Returns the jobs found not live. Raises :class:`ConnectionLost` if the link broke,
        and ``QueryCanceled`` if the batch was stopped: the caller decides what follows.
        """
        for w in writes:
            w.result = None
        kept = [m for m in marks if (m.job_id, m.idx) not in finishing]
        started = {(m.job_id, m.idx): m.now for m in marks if (m.job_id, m.idx) in finishing}

        try:
            not_live = self._apply_batch(conn, kept, started, writes, replay=replay, ride=ride)
        except Exception as exc:
            _check(conn, exc)
            for w in writes:
                w.result = None

            try:
                not_live = self._apply_marks(conn, kept)
            except Exception as marks_exc:  # never seen; dropping them beats failing forever
                _check(conn, marks_exc)
                log.warning("running marks dropped: %s", type(marks_exc).__name__)
                not_live = set()

            for w in writes:
                self._apply_one(conn, w, started, replay=replay)

        for w in writes:
            if w.after is not None and isinstance(w.result, outcome.Value):
                w.result = outcome.capture(w.after, conn, w.result.value)
        return not_live

    def _apply_batch(
        self,
        conn: Conn,
        kept: list[Mark],
        started: dict[tuple[str, int], float],
        writes: list[Write[object]],
        *,
        replay: bool,
        ride: Ride | None,
    ) -> set[str]:
        statements = [w for w in writes if w.fn is None and (w.stmt or w.finish)]
        cursors: list[Cursor] = []
        marks_cur = claim_cur = free_cur = None
        with conn.pipeline():  # one round trip, one implicit transaction (autocommit)
            if kept:
                marks_cur = conn.cursor()
                marks_cur.execute(START_MANY.sql, marks_params(kept), prepare=True)

            for w in statements:
                cur = conn.cursor()
                if w.finish:
                    params = finish_params(w.finish, w.now, started, self._instance, replay)
                    cur.execute(FINISH_MANY.sql, params, prepare=True)
                else:
                    assert w.stmt is not None
                    cur.execute(w.stmt.sql, _with_replay(w.params, replay), prepare=True)
                cursors.append(cur)

            if ride is not None:  # after the outcomes: the claims see the room they freed
                claim_cur = conn.cursor()
                claim_cur.execute(CLAIM_SQL, ride.params, prepare=True)
                if ride.scoped:
                    free_cur = conn.cursor()
                    free_cur.execute(SCOPES_FREE_SQL, prepare=True)

        self.commits += 1
        self.writes += len(writes)
        not_live = set() if marks_cur is None else {str(r[0]) for r in marks_cur.fetchall()}
        if ride is not None and claim_cur is not None:
            ride.claims = claims_of(claim_cur.fetchall())
            ride.free_in = None if free_cur is None else free_in(free_cur.fetchone())
        for w, cur in zip(statements, cursors, strict=True):
            w.result = outcome.capture(_read, w, cur)

        # What the pipeline did not carry: barriers answer now, functions run one by one.
        for w in writes:
            if w.result is None:
                if w.fn is None:
                    w.result = outcome.Value(None)
                else:
                    self._apply_one(conn, w, started, replay=replay)
        return not_live

    def _apply_marks(self, conn: Conn, marks: list[Mark]) -> set[str]:
        if not marks:
            return set()

        for attempt in range(_RETRIES):
            try:
                rows = conn.execute(START_MANY.sql, marks_params(marks), prepare=True)
                return {str(r[0]) for r in rows.fetchall()}
            except Exception as exc:
                _check(conn, exc)
                if not _is_retryable(exc) or attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _apply_one(
        self, conn: Conn, w: Write[object], started: dict[tuple[str, int], float], *, replay: bool
    ) -> None:
        """Run ``w`` on its own (a group of outcomes item by item), retrying deadlocks."""
        if not w.finish:
            self._apply_statement(conn, w, started, replay=replay)
            return

        reply = FinishReply([], 0)
        for item in w.finish:
            one = Write[object](w.task, w.deadline, finish=(item,), now=w.now)
            self._apply_statement(conn, one, started, replay=replay)
            assert one.result is not None

            try:
                part = cast("FinishReply", one.result.unwrap())
            except Exception as exc:  # this item only: the others still land
                reply.results.append(exc)
                continue

            reply.results.extend(part.results)
            reply.total = max(reply.total, part.total)
            reply.not_live |= part.not_live
        w.result = outcome.Value(reply)

    def _apply_statement(
        self, conn: Conn, w: Write[object], started: dict[tuple[str, int], float], *, replay: bool
    ) -> None:
        for attempt in range(_RETRIES):
            try:
                w.result = self._run_alone(conn, w, started, replay=replay)
            except Exception as exc:
                _check(conn, exc)
                if not _is_retryable(exc) or attempt == _RETRIES - 1:
                    w.result = outcome.Error(exc)
                    return
                continue

            self.commits += 1
            self.writes += 1
            return

    def _run_alone(
        self, conn: Conn, w: Write[object], started: dict[tuple[str, int], float], *, replay: bool
    ) -> outcome.Outcome[object]:
        """One write in a transaction of its own; raises what rolls it back (and may retry)."""
        if w.fn is not None:
            with conn.transaction():
                result = outcome.capture(w.fn, conn)
                if isinstance(result, outcome.Error) and not isinstance(result.error, SubmitError):
                    result.unwrap()  # roll back, and maybe retry
            return result

        if w.finish:
            params = finish_params(w.finish, w.now, started, self._instance, replay)
            cur = conn.execute(FINISH_MANY.sql, params, prepare=True)
            return outcome.capture(_read, w, cur)

        if w.stmt is not None:
            cur = conn.execute(w.stmt.sql, _with_replay(w.params, replay), prepare=True)
            return outcome.capture(_read, w, cur)

        return outcome.Value(None)


def _read(w: Write[object], cur: Cursor) -> object:
    if w.finish:
        return finish_reply(cur.fetchall(), len(w.finish))
    assert w.handle is not None
    return w.handle(cur)


def _with_replay(params: Params, replay: bool) -> Params:
    return {**params, "replay": replay} if isinstance(params, dict) else params
