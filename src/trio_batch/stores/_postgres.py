"""The PostgreSQL store: several engines, in one process or many, over one database.

psycopg 3's async API runs on asyncio only, so this store runs sync psycopg in threads: every
database call checks a connection out of a ``psycopg_pool.ConnectionPool`` *inside* a worker
thread, under a ``CapacityLimiter`` as large as the pool. When the waiting Trio task is
cancelled, a server-side cancel (``Connection.cancel_safe``) stops the query, so cancellation
really ends the work instead of waiting for it.

Write path (group commit): each write is queued to one writer task per store. The writer takes
everything queued and commits it at once. The common writes (admission, start, release and finish
of a target, cancel, interrupt, touch) are single statements, prepared once per connection; a
batch of them goes to the server as one query of ``EXECUTE`` calls, so one round trip and one
implicit transaction commit the lot. Admission calls the ``admit_job`` SQL function, which takes
a transaction-scoped advisory lock first, so caps and idempotency hold across every instance;
admissions go first in a batch. Writes of several statements join the batch inside an explicit
transaction. If a batch fails in the database (a deadlock with another instance, say), it is
rolled back and each write runs again on its own. Waiting for a write is not cancellable (as
with SQLite): its caller learns the outcome after the commit, and no write is silently dropped.

Instances: every open store registers a row in ``instances`` and heartbeats it (in real time,
from a task in the nursery that ``open`` owns); each job records the instance that admitted it.
Any instance fails (``interrupted``) the live jobs of instances whose heartbeat is older than
their declared timeout, at each of its heartbeats and in :meth:`PostgresStore.recover`.
A job cancelled from another instance is noticed by its owner at the next ``start_target``,
which returns False (polling; see ``docs/postgres.md``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import re
import secrets
import threading
import time
import weakref
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast, final

import outcome
import trio

from .._errors import StoreError, SubmitError
from .._model import (
    LIVE_STATUSES,
    Job,
    JobStatus,
    Snapshot,
    Submitted,
)
from ._protocol import CacheEntry, Limits, NewJob, Outcome, Stored
from ._rules import (
    JOB_COLUMNS,
    LIVE_SQL,
    check_caps,
    job_from_row,
    options_json,
    target_from_row,
)

try:
    import psycopg
    import psycopg.errors
    from psycopg import sql
    from psycopg.rows import TupleRow
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'trio-batch[postgres]'"
    ) from exc

T = TypeVar("T")
Conn = psycopg.Connection[TupleRow]
Cursor = psycopg.Cursor[TupleRow]

log = logging.getLogger("trio_batch.stores.postgres")

SCHEMA_VERSION = 3

# Second key of the transaction-scoped advisory locks; the first is derived from the schema.
_LOCK_MIGRATE = 0
_LOCK_ADMIT = 1
_LOCK_EVICT = 2
_LOCK_CACHE = 3

# Each migration takes the schema from version i to i + 1; all of them run in one transaction
# behind an advisory lock, so two instances migrating at once do it one after the other.
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE instances (
        id text PRIMARY KEY,
        pid integer NOT NULL,
        timeout double precision NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE jobs (
        seq bigserial NOT NULL,
        id text PRIMARY KEY,
        caller text NOT NULL,
        caller_class text NOT NULL,
        key text NOT NULL,
        status text NOT NULL,
        error text NOT NULL DEFAULT '',
        targets_total integer NOT NULL,
        targets_done integer NOT NULL DEFAULT 0,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        lease double precision NOT NULL,
        bytes bigint NOT NULL DEFAULT 0,
        instance text NOT NULL
    );
    CREATE INDEX jobs_by_key ON jobs (caller, key, created_at DESC, seq DESC);
    CREATE INDEX jobs_live_by_caller ON jobs (caller) WHERE status IN {LIVE_SQL};
    CREATE INDEX jobs_live_by_instance ON jobs (instance) WHERE status IN {LIVE_SQL};
    CREATE INDEX jobs_finished ON jobs (lease, seq) WHERE status NOT IN {LIVE_SQL};
    CREATE TABLE targets (
        job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        idx integer NOT NULL,
        url text NOT NULL,
        options text NOT NULL,
        status text NOT NULL,
        result text,
        error text NOT NULL DEFAULT '',
        hint text NOT NULL DEFAULT '',
        PRIMARY KEY (job_id, idx)
    );
    -- Stored result bytes, one shard per instance (so instances never wait on each other's
    -- counter row) plus shard '' that absorbs the shards of instances that are gone.
    CREATE TABLE counters (
        kind text NOT NULL,
        shard text NOT NULL,
        bytes bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (kind, shard)
    );
    INSERT INTO counters (kind, shard) VALUES ('results', '')
    """,
    """
    CREATE TABLE web_cache (
        key text PRIMARY KEY,
        seq bigserial NOT NULL,
        body bytea NOT NULL,
        meta text NOT NULL,
        stored_at double precision NOT NULL,
        expires_at double precision NOT NULL,
        bytes bigint NOT NULL
    );
    CREATE INDEX web_cache_by_age ON web_cache (stored_at, seq);
    INSERT INTO counters (kind, shard) VALUES ('cache', '')
    """,
    # Admission in one round trip: reuse, caps, insert and sweep in one function call.
    f"""
    CREATE FUNCTION admit_job(
        p_lock integer, p_id text, p_caller text, p_class text, p_key text,
        p_now double precision, p_ttl double precision, p_instance text,
        p_urls text[], p_opts text[],
        p_targets_per_job bigint, p_jobs_per_caller bigint, p_jobs_total bigint,
        OUT reused text, OUT caller_live bigint, OUT total_live bigint, OUT admitted boolean
    ) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    DECLARE
        prev record;
        gone bigint;
        freed bigint;
    BEGIN
        admitted := false;
        caller_live := 0;
        total_live := 0;
        -- Serialises admissions across instances until the transaction ends. In READ
        -- COMMITTED each statement below takes a new snapshot, so it sees every admission
        -- committed before the lock was granted.
        PERFORM pg_advisory_xact_lock(p_lock, {_LOCK_ADMIT});
        SELECT id, status, lease INTO prev FROM jobs
        WHERE caller = p_caller AND key = p_key
        ORDER BY created_at DESC, seq DESC LIMIT 1;
        IF FOUND AND prev.status IN ('queued', 'running', 'done', 'partial')
                AND prev.lease >= p_now - p_ttl THEN
            reused := prev.id;
            RETURN;
        END IF;
        SELECT count(*) FILTER (WHERE caller = p_caller), count(*)
        INTO caller_live, total_live
        FROM jobs WHERE status IN {LIVE_SQL};
        IF cardinality(p_urls) > p_targets_per_job OR caller_live >= p_jobs_per_caller
                OR total_live >= p_jobs_total THEN
            RETURN;  -- refused: the caller raises the first cap broken (check_caps)
        END IF;
        INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, created_at,
            updated_at, lease, instance)
        VALUES (p_id, p_caller, p_class, p_key, 'queued', cardinality(p_urls), p_now, p_now,
            p_now, p_instance);
        INSERT INTO targets (job_id, idx, url, options, status)
        SELECT p_id, t.i - 1, t.u, t.o, 'pending'
        FROM unnest(p_urls, p_opts) WITH ORDINALITY AS t (u, o, i);
        WITH g AS (
            DELETE FROM jobs WHERE status NOT IN {LIVE_SQL} AND lease < p_now - p_ttl
            RETURNING bytes
        )
        SELECT count(*), coalesce(sum(bytes), 0) INTO gone, freed FROM g;
        IF gone > 0 THEN
            INSERT INTO counters (kind, shard, bytes) VALUES ('results', p_instance, -freed)
            ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes;
        END IF;
        admitted := true;
    END
    $$
    """,
]


def _statements(migration: str) -> list[str]:
    """The statements of a migration: split on ``;`` except inside a ``$$`` function body."""
    if "$$" in migration:
        return [migration]
    return [part for part in migration.split(";") if part.strip()]


_MAX_BATCH = 256
_RETRIES = 3
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _lock_space(schema: str) -> int:
    """A stable signed 32-bit number for ``schema``: the first key of its advisory locks."""
    value = zlib.crc32(f"trio_batch:{schema}".encode())
    return value - 2**32 if value >= 2**31 else value


# -- running sync psycopg from Trio ------------------------------------------------------------


class _Withdrawn(Exception):
    """The call was cancelled before it got a connection; nothing ran."""


@dataclass(slots=True)
class _Held:
    """The connection a worker thread is using, so a cancel can reach its query."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    conn: Conn | None = None
    cancelled: bool = False

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            if self.conn is not None:
                with contextlib.suppress(Exception):
                    self.conn.cancel_safe(timeout=2.0)


@final
@dataclass(frozen=True, slots=True)
class _Statement:
    """A write of one SQL statement: prepared once per connection, batched into one query."""

    name: str
    types: str
    sql: str


@dataclass(slots=True)
class _Write(Generic[T]):
    """A queued write: a function of several statements, or one prepared statement."""

    task: trio.lowlevel.Task
    fn: Callable[[Conn], T] | None = None
    stmt: _Statement | None = None
    params: tuple[object, ...] = ()
    handle: Callable[[Cursor], object] | None = None
    """Reads the statement's result (positioned on it) into the write's value."""
    after: Callable[[Conn, object], T] | None = None
    """Runs after the commit, on the handled value (eviction, in its own transaction)."""
    admits: bool = False
    result: outcome.Outcome[T] | None = None


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure))


@final
class PostgresStore:
    """Jobs in PostgreSQL, shared by any number of engines and processes.

    Open it with ``async with PostgresStore.open(dsn) as store``; the schema is created or
    migrated on the first open. Open one store per engine: each store is one *instance* with
    its own heartbeat, and an engine that opens fails the live jobs of its own instance and of
    instances that are gone (see :meth:`recover`). ``status``, ``touch`` and ``cancel`` work
    from any instance; a job is worked only by the instance that admitted it.
    """

    def __init__(
        self,
        pool: ConnectionPool[Conn],
        *,
        schema: str,
        instance_timeout: float,
        heartbeat: float,
        pool_size: int,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._locks = _lock_space(schema)
        self._instance_timeout = instance_timeout
        self._heartbeat = heartbeat
        self._limiter = trio.CapacityLimiter(pool_size)
        self._instance = secrets.token_hex(8)
        # Unbounded is safe: it holds at most one write per task waiting on a write.
        self._send, self._recv = trio.open_memory_channel[_Write[object]](math.inf)
        self._closed = False
        self._stopping = threading.Event()
        self._writer_done = trio.Event()
        self._prepared: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._commits = 0
        self._writes = 0

    @property
    def instance_id(self) -> str:
        """This instance's id, as recorded on the jobs it admits."""
        return self._instance

    @property
    def schema(self) -> str:
        return self._schema

    def commit_statistics(self) -> tuple[int, int]:
        """``(commits, writes)`` so far: how well writes are grouped."""
        return (self._commits, self._writes)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        dsn: str,
        *,
        instance_timeout: float = 30.0,
        heartbeat: float | None = None,
        schema: str = "trio_batch",
        pool_size: int = 4,
        synchronous_commit: bool = True,
        connect_timeout: float = 10.0,
    ) -> AsyncIterator[PostgresStore]:
        """Connect, create or migrate the schema, register this instance and heartbeat it.

        Args:
            dsn: a libpq connection string or URI (``postgresql://user@host:5432/db``).
            instance_timeout: seconds without a heartbeat after which other instances fail
                this instance's live jobs (``interrupted``).
            heartbeat: seconds between heartbeats; default ``instance_timeout / 3``. Each
                heartbeat also fails the live jobs of instances that are gone.
            schema: the PostgreSQL schema holding the tables (created if missing).
            pool_size: connections (and threads) this instance uses at most.
            synchronous_commit: False sets ``synchronous_commit = off`` on this instance's
                connections: commits return before the WAL reaches disk, so a server crash
                may lose the last fraction of a second of writes (never corrupts them).
            connect_timeout: seconds to wait for the first connection.

        On exit, queued writes are committed, the heartbeat stops and the instance is
        deregistered; its jobs still live (none, if its engine closed first) are then failed by
        the next engine to open or heartbeat.

        Raises:
            ValueError: a setting is out of range or ``schema`` is not a plain identifier.
            StoreError: the server cannot be reached, or its schema is newer than this code.
        """
        if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
            raise ValueError(
                f"schema must be a lower-case SQL identifier such as 'trio_batch' (got {schema!r})"
            )
        if not instance_timeout > 0:
            raise ValueError(f"instance_timeout must be > 0 (got {instance_timeout!r})")
        beat = instance_timeout / 3 if heartbeat is None else heartbeat
        if not 0 < beat < instance_timeout:
            raise ValueError(
                f"heartbeat must be > 0 and < instance_timeout ({instance_timeout}) (got {beat!r})"
            )
        if not isinstance(pool_size, int) or pool_size < 2:
            raise ValueError(f"pool_size must be an int >= 2 (got {pool_size!r})")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be > 0 (got {connect_timeout!r})")

        settings = sql.SQL("SET search_path TO {}").format(sql.Identifier(schema))

        def configure(conn: Conn) -> None:
            conn.execute(settings)
            if not synchronous_commit:
                conn.execute("SET synchronous_commit TO off")

        pool: ConnectionPool[Conn] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            configure=configure,
            open=False,
            name=f"trio-batch-{schema}",
            timeout=connect_timeout,
        )
        try:
            await trio.to_thread.run_sync(_open_pool, pool, connect_timeout)
            store = cls(
                pool,
                schema=schema,
                instance_timeout=instance_timeout,
                heartbeat=beat,
                pool_size=pool_size,
            )
            await store._run(lambda conn: _migrate(conn, schema, store._locks))
            await store._run(store._register)
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(store._writer)
                    await nursery.start(store._heartbeat_loop)
                    try:
                        yield store
                    finally:
                        with trio.move_on_after(10, shield=True):
                            await store._stop_writer()
                        store._stopping.set()
                        nursery.cancel_scope.cancel("PostgresStore closed")
            except BaseExceptionGroup as group:
                if len(group.exceptions) == 1 and not isinstance(
                    group.exceptions[0], BaseExceptionGroup
                ):
                    raise group.exceptions[0] from None
                raise
            finally:
                with trio.move_on_after(5, shield=True):
                    try:
                        await store._run(store._deregister)
                    except Exception as exc:
                        log.warning(
                            "could not deregister the instance: %s",
                            type(exc).__name__,
                            extra={"instance": store._instance},
                        )
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(pool.close)

    # -- plumbing -----------------------------------------------------------------------------

    async def _run(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn`` on a pooled connection in a worker thread; cancellation cancels the query."""
        async with self._limiter:
            task = trio.lowlevel.current_task()
            token = trio.lowlevel.current_trio_token()
            held = _Held()
            pool = self._pool

            def work() -> T:
                with pool.connection() as conn:  # getconn() blocks: it must be in the thread
                    with held.lock:
                        if held.cancelled:
                            raise _Withdrawn
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
            except (_Withdrawn, psycopg.errors.QueryCanceled):
                if held.cancelled:
                    await trio.lowlevel.checkpoint()  # raises the pending trio.Cancelled
                raise
            return result

    async def _sleep_real(self, seconds: float) -> None:
        """Wait ``seconds`` of real time (heartbeats are real time even under a mock clock)."""
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        state = {"aborted": False}

        def wake() -> None:
            if not state["aborted"]:
                trio.lowlevel.reschedule(task)

        def deliver(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(wake)

        def abort(_: object) -> trio.lowlevel.Abort:
            state["aborted"] = True
            return trio.lowlevel.Abort.SUCCEEDED

        trio.lowlevel.start_thread_soon(lambda: self._stopping.wait(seconds), deliver)
        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        """Queue ``fn`` (several statements) for the writer; return its value after the commit."""
        return await self._enqueue(_Write(trio.lowlevel.current_task(), fn=fn))

    async def _execute(
        self,
        stmt: _Statement,
        params: tuple[object, ...],
        handle: Callable[[Cursor], object],
        *,
        after: Callable[[Conn, object], T] | None = None,
        admits: bool = False,
    ) -> T:
        """Queue one prepared statement for the writer; ``handle`` reads its result."""
        item = _Write[T](
            trio.lowlevel.current_task(),
            stmt=stmt,
            params=params,
            handle=handle,
            after=after,
            admits=admits,
        )
        return await self._enqueue(item)

    async def _enqueue(self, item: _Write[T]) -> T:
        if self._closed:
            raise trio.ClosedResourceError("this PostgresStore is closed")
        self._send.send_nowait(cast("_Write[object]", item))

        # Not cancellable, as with SQLite: the caller learns a write's fate only after its
        # commit, and a write is never silently dropped (the engine relies on both).
        def abort(_: object) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    async def _writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        batch: list[_Write[object]] = []
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
                    await self._run(functools.partial(self._commit, batch=batch))
                except Exception as exc:  # e.g. no connection: every write of the batch failed
                    for item in batch:
                        item.result = outcome.Error(exc)
                except BaseException:
                    for item in batch:
                        item.result = outcome.Error(
                            trio.ClosedResourceError("this PostgresStore was closed")
                        )
                    raise
                finally:
                    for item in batch:
                        assert item.result is not None
                        trio.lowlevel.reschedule(item.task, item.result)
                    batch = []
        finally:
            self._closed = True
            self._send.close()
            while True:
                try:
                    item = self._recv.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                trio.lowlevel.reschedule(
                    item.task,
                    outcome.Error(trio.ClosedResourceError("this PostgresStore was closed")),
                )
            self._writer_done.set()

    async def _stop_writer(self) -> None:
        self._closed = True
        self._send.close()
        await self._writer_done.wait()

    def _commit(self, conn: Conn, batch: list[_Write[object]]) -> None:
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
                self._commits += 1
                self._writes += len(batch)
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

    def _commit_one(self, conn: Conn, item: _Write[object]) -> None:
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
                self._commits += 1
                self._writes += 1
                return
            except Exception as exc:
                if not _is_retryable(exc) or attempt == _RETRIES - 1 or conn.broken:
                    item.result = outcome.Error(exc)
                    return

    def _execute_statements(self, conn: Conn, items: list[_Write[object]]) -> None:
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
        if conn in self._prepared:
            return
        have = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM pg_prepared_statements WHERE name LIKE 'tb\\_%'"
            )
        }
        missing = [s for s in _STATEMENTS if s.name not in have]
        if missing:
            conn.execute(
                "; ".join(f"PREPARE {s.name} {s.types} AS {s.sql}" for s in missing).encode(),
                prepare=False,
            )
        self._prepared.add(conn)

    def _register(self, conn: Conn) -> None:
        with conn.transaction():
            conn.execute(
                "INSERT INTO instances (id, pid, timeout) VALUES (%s, %s, %s)",
                (self._instance, os.getpid(), self._instance_timeout),
            )
            conn.execute(
                "INSERT INTO counters (kind, shard) VALUES ('results', %s) ON CONFLICT DO NOTHING",
                (self._instance,),
            )

    def _deregister(self, conn: Conn) -> None:
        with conn.transaction():
            conn.execute("DELETE FROM instances WHERE id = %s", (self._instance,))
            _fold_shards(conn)

    async def _heartbeat_loop(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        while True:
            await self._sleep_real(self._heartbeat)
            try:
                failed = await self._run(self._beat)
            except Exception as exc:
                log.warning(
                    "heartbeat failed with %s",
                    type(exc).__name__,
                    extra={"instance": self._instance, "error_type": type(exc).__name__},
                )
                continue
            if failed:
                log.warning(
                    "failed %d live jobs of instances that stopped heartbeating",
                    len(failed),
                    extra={"jobs": len(failed), "instance": self._instance},
                )

    def _beat(self, conn: Conn) -> list[str]:
        cur = conn.execute(
            "UPDATE instances SET heartbeat_at = clock_timestamp() WHERE id = %s",
            (self._instance,),
        )
        if cur.rowcount == 0:
            log.warning(
                "this instance was taken for dead (its heartbeat stalled); registering again",
                extra={"instance": self._instance},
            )
            self._register(conn)
        return _reap(conn, self._instance, None, time.time())

    # -- the Store protocol -------------------------------------------------------------------

    async def admit(self, job: NewJob, limits: Limits) -> Submitted:
        def handle(cur: Cursor) -> Submitted:
            reused, caller_live, total_live, admitted = _one(cur)
            if reused is not None:
                return Submitted(reused, True)
            if not admitted:  # nothing was written; raise the first cap broken, in SPEC order
                check_caps(len(job.targets), caller_live, total_live, limits)
                raise AssertionError("admit_job refused a job that breaks no cap")
            return Submitted(job.id, False)

        params = (
            self._locks,
            job.id,
            job.caller,
            job.caller_class,
            job.key,
            job.now,
            limits.ttl,
            self._instance,
            [t.url for t in job.targets],
            [options_json(t.options) for t in job.targets],
            limits.targets_per_job,
            limits.jobs_per_caller,
            limits.jobs_total,
        )
        return await self._execute(_ADMIT, params, handle, admits=True)

    async def recover(self, now: float) -> list[str]:
        """Fail (``interrupted``) the live jobs of this instance and of instances that are gone.

        An engine calls it when it opens. Instances are gone when their heartbeat is older than
        their ``instance_timeout`` or when they closed. A repeat finds nothing more to do.
        """
        return await self._write(lambda conn: _reap(conn, self._instance, self._instance, now))

    async def start_target(self, job_id: str, idx: int, now: float) -> bool:
        return await self._execute(_START, (job_id, idx, now), lambda cur: bool(_one(cur)[0]))

    async def release_target(self, job_id: str, idx: int, now: float) -> None:
        await self._execute(_RELEASE, (job_id, idx, now), lambda cur: None)

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        size = outcome.size
        params = (
            job_id,
            idx,
            outcome.state.value,
            outcome.result_json,
            outcome.error,
            outcome.hint,
            size,
            now,
            self._instance,
        )

        def after(conn: Conn, row: object) -> Stored:
            if row is None:  # unknown job, or this target was already stored
                return Stored(None)
            before, status, stored_bytes = cast("tuple[str, str, int]", row)
            terminal = None
            if before in LIVE_STATUSES and status not in LIVE_STATUSES:
                terminal = JobStatus(status)
            evicted = 0
            if stored_bytes > max_bytes:
                # Its own transaction: if it loses a deadlock with another instance, the
                # stored outcome stands and a later finish evicts.
                try:
                    with conn.transaction():
                        evicted = self._evict(conn, max_bytes)
                except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable) as exc:
                    log.warning("eviction deferred: %s", type(exc).__name__)
            return Stored(terminal, evicted)

        return await self._execute(_FINISH, params, lambda cur: cur.fetchone(), after=after)

    async def cancel(self, job_id: str, now: float) -> Job | None:
        def handle(cur: Cursor) -> Job | None:
            row = cur.fetchone()
            return None if row is None else job_from_row(row)

        return await self._execute(_CANCEL, (job_id, now), handle)

    async def interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        ids = list(job_ids)
        if not ids:
            await trio.lowlevel.checkpoint()
            return []

        def handle(cur: Cursor) -> list[str]:
            failed = {str(r[0]) for r in cur.fetchall()}
            return [job_id for job_id in dict.fromkeys(ids) if job_id in failed]

        return await self._execute(_INTERRUPT, (ids, now), handle)

    async def touch(self, job_id: str, now: float) -> bool:
        return await self._execute(_TOUCH, (job_id, now), lambda cur: cur.rowcount > 0)

    async def snapshot(self, job_id: str) -> Snapshot | None:
        self._check_open()
        return await self._run(lambda conn: _snapshot(conn, job_id))

    async def cache_get(self, key: str) -> CacheEntry | None:
        self._check_open()
        return await self._run(lambda conn: _cache_get(conn, key))

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        await self._write(lambda conn: self._cache_put(conn, key, entry, max_bytes))

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this PostgresStore is closed")

    # -- SQL that needs the instance ----------------------------------------------------------

    def _lock(self, conn: Conn, which: int) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (self._locks, which))

    def _evict(self, conn: Conn, max_bytes: int) -> int:
        # One evictor at a time across instances, so two never both evict for the same excess.
        self._lock(conn, _LOCK_EVICT)
        row = conn.execute(
            f"""
            WITH total AS (
                SELECT coalesce(sum(bytes), 0) AS b FROM counters WHERE kind = 'results'
            ), ordered AS (
                SELECT id, sum(bytes) OVER (ORDER BY lease, seq ROWS UNBOUNDED PRECEDING)
                    - bytes AS before
                FROM jobs WHERE status NOT IN {LIVE_SQL}
            ), gone AS (
                DELETE FROM jobs WHERE id IN (
                    SELECT o.id FROM ordered AS o, total WHERE total.b - o.before > %(max)s
                )
                RETURNING bytes
            ), c AS (
                INSERT INTO counters (kind, shard, bytes)
                SELECT 'results', %(shard)s, -sum(bytes) FROM gone HAVING count(*) > 0
                ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes
            )
            SELECT count(*) FROM gone
            """,
            {"max": max_bytes, "shard": self._instance},
        ).fetchone()
        assert row is not None
        return int(row[0])

    def _cache_put(self, conn: Conn, key: str, entry: CacheEntry, max_bytes: int) -> None:
        self._lock(conn, _LOCK_CACHE)
        old = conn.execute(
            "DELETE FROM web_cache WHERE key = %s RETURNING bytes", (key,)
        ).fetchone()
        conn.execute(
            "INSERT INTO web_cache (key, body, meta, stored_at, expires_at, bytes) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (key, entry.body, entry.meta_json, entry.stored_at, entry.expires_at, len(entry.body)),
        )
        total = conn.execute(
            "UPDATE counters SET bytes = bytes + %s WHERE kind = 'cache' AND shard = '' "
            "RETURNING bytes",
            (len(entry.body) - (old[0] if old else 0),),
        ).fetchone()
        assert total is not None
        if total[0] <= max_bytes:
            return
        conn.execute(
            """
            WITH ordered AS (
                SELECT key, sum(bytes) OVER (ORDER BY stored_at, seq ROWS UNBOUNDED PRECEDING)
                    - bytes AS before
                FROM web_cache
            ), gone AS (
                DELETE FROM web_cache
                WHERE key IN (SELECT key FROM ordered WHERE %(total)s - before > %(max)s)
                RETURNING bytes
            )
            UPDATE counters SET bytes = bytes - (SELECT coalesce(sum(bytes), 0) FROM gone)
            WHERE kind = 'cache' AND shard = ''
            """,
            {"total": total[0], "max": max_bytes},
        )


def _open_pool(pool: ConnectionPool[Conn], timeout: float) -> None:
    try:
        pool.open(wait=True, timeout=timeout)
    except PoolTimeout as exc:
        pool.close()
        # The driver's text names the host: keep it out of the message (it may be logged).
        raise StoreError(
            f"could not connect to PostgreSQL within {timeout:g} s: check that the server runs, "
            "that the DSN is right, and that this user may connect"
        ) from exc


def _migrate(conn: Conn, schema: str, locks: int) -> None:
    """Bring the schema to ``SCHEMA_VERSION`` in one transaction, one migrator at a time."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (locks, _LOCK_MIGRATE))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (0)")
            version = 0
        else:
            version = int(row[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"schema {schema!r} has version {version}, newer than this trio-batch knows "
                f"({SCHEMA_VERSION}): upgrade trio-batch"
            )
        for target_version in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _statements(MIGRATIONS[target_version - 1]):
                conn.execute(statement.encode())
            conn.execute("UPDATE schema_version SET version = %s", (target_version,))


# -- SQL, run in a worker thread ---------------------------------------------------------------


def _fold_shards(conn: Conn) -> None:
    """Move the byte counts of instances that are gone into shard ''."""
    conn.execute(
        """
        WITH gone AS (
            DELETE FROM counters WHERE kind = 'results' AND shard <> ''
                AND shard NOT IN (SELECT id FROM instances)
            RETURNING bytes
        )
        UPDATE counters SET bytes = bytes + (SELECT coalesce(sum(bytes), 0) FROM gone)
        WHERE kind = 'results' AND shard = ''
        """
    )


def _reap(conn: Conn, me: str, own: str | None, now: float) -> list[str]:
    """Fail the live jobs of instances that are gone (and of ``own``); drop those instances."""
    rows = conn.execute(
        f"""
        WITH dead AS (
            DELETE FROM instances
            WHERE id <> %(me)s AND heartbeat_at < clock_timestamp() - timeout * interval '1 second'
            RETURNING id
        ), alive AS (
            SELECT id FROM instances WHERE id NOT IN (SELECT id FROM dead)
        ), j AS (
            UPDATE jobs SET status = 'failed', error = 'interrupted', updated_at = %(now)s,
                lease = %(now)s
            WHERE status IN {LIVE_SQL}
                AND (instance = %(own)s OR instance NOT IN (SELECT id FROM alive))
            RETURNING id
        ), t AS (
            UPDATE targets SET status = 'pending'
            WHERE job_id IN (SELECT id FROM j) AND status = 'running'
        )
        SELECT id FROM j
        """,
        {"me": me, "own": own, "now": now},
    ).fetchall()
    _fold_shards(conn)
    return [str(r[0]) for r in rows]


def _one(cur: Cursor) -> TupleRow:
    row = cur.fetchone()
    assert row is not None
    return row


# -- the write statements, prepared on each connection the writer uses -------------------------

_ADMIT = _Statement(
    "tb_admit",
    "(integer, text, text, text, text, double precision, double precision, text, text[], "
    "text[], bigint, bigint, bigint)",
    "SELECT reused, caller_live, total_live, admitted "
    "FROM admit_job($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
)

_START = _Statement(
    "tb_start_target",
    "(text, integer, double precision)",
    f"""
    WITH j AS (
        UPDATE jobs SET status = 'running', updated_at = $3
        WHERE id = $1 AND status IN {LIVE_SQL} RETURNING id
    ), t AS (
        UPDATE targets SET status = 'running' WHERE job_id IN (SELECT id FROM j) AND idx = $2
    )
    SELECT count(*) FROM j
    """,
)

_RELEASE = _Statement(
    "tb_release_target",
    "(text, integer, double precision)",
    """
    WITH t AS (
        UPDATE targets SET status = 'pending'
        WHERE job_id = $1 AND idx = $2 AND status = 'running' RETURNING job_id
    )
    UPDATE jobs SET updated_at = $3 WHERE id IN (SELECT job_id FROM t)
    """,
)

# Store the target, count it, and end the job when it was the last, in one statement; the
# CASE over the job's target states is terminal_status() in SQL. Returns the job's status
# before and after, and the stored result bytes of every instance.
_FINISH = _Statement(
    "tb_finish_target",
    "(text, integer, text, text, text, text, bigint, double precision, text)",
    f"""
    WITH t AS (
        UPDATE targets SET status = $3, result = $4, error = $5, hint = $6
        WHERE job_id = $1 AND idx = $2 AND status NOT IN ('done', 'failed')
        RETURNING job_id
    ), o AS (
        SELECT id, status FROM jobs WHERE id IN (SELECT job_id FROM t) FOR UPDATE
    ), j AS (
        UPDATE jobs AS j SET
            targets_done = j.targets_done + 1,
            bytes = j.bytes + $7,
            updated_at = $8,
            status = CASE
                WHEN o.status IN {LIVE_SQL} AND j.targets_done + 1 = j.targets_total THEN (
                    SELECT CASE
                        WHEN bool_and(x.s = 'done') THEN 'done'
                        WHEN bool_and(x.s = 'failed') THEN 'failed'
                        ELSE 'partial' END
                    FROM (
                        SELECT status AS s FROM targets WHERE job_id = $1 AND idx <> $2
                        UNION ALL SELECT $3
                    ) AS x
                )
                ELSE j.status END,
            lease = CASE
                WHEN o.status IN {LIVE_SQL} AND j.targets_done + 1 = j.targets_total THEN $8
                ELSE j.lease END
        FROM o WHERE j.id = o.id
        RETURNING o.status AS before, j.status AS after
    ), c AS (
        INSERT INTO counters (kind, shard, bytes)
        SELECT 'results', $9, $7 FROM j WHERE $7 <> 0
        ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes
    )
    SELECT j.before, j.after, (SELECT sum(bytes) FROM counters WHERE kind = 'results') + $7
    FROM j
    """,
)

_CANCEL = _Statement(
    "tb_cancel",
    "(text, double precision)",
    f"""
    UPDATE jobs AS j SET status = 'cancelled', updated_at = $2, lease = $2
    FROM (SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE) AS old
    WHERE j.id = old.id AND old.status IN {LIVE_SQL}
    RETURNING {", ".join("old." + c.strip() for c in JOB_COLUMNS.split(","))}
    """,
)

_INTERRUPT = _Statement(
    "tb_interrupt",
    "(text[], double precision)",
    f"""
    WITH j AS (
        UPDATE jobs SET status = 'failed', error = 'interrupted', updated_at = $2, lease = $2
        WHERE id = ANY($1) AND status IN {LIVE_SQL}
        RETURNING id
    ), t AS (
        UPDATE targets SET status = 'pending'
        WHERE job_id IN (SELECT id FROM j) AND status = 'running'
    )
    SELECT id FROM j
    """,
)

_TOUCH = _Statement(
    "tb_touch", "(text, double precision)", "UPDATE jobs SET lease = $2 WHERE id = $1"
)

_STATEMENTS = (_ADMIT, _START, _RELEASE, _FINISH, _CANCEL, _INTERRUPT, _TOUCH)


def _snapshot(conn: Conn, job_id: str) -> Snapshot | None:
    # One statement: one consistent view of the job and its targets.
    rows = conn.execute(
        f"""
        SELECT {", ".join("j." + c.strip() for c in JOB_COLUMNS.split(","))},
            t.idx, t.url, t.status, t.result, t.error, t.hint, t.options
        FROM jobs AS j LEFT JOIN targets AS t ON t.job_id = j.id
        WHERE j.id = %s ORDER BY t.idx
        """,
        (job_id,),
    ).fetchall()
    if not rows:
        return None
    targets = [target_from_row(r[9:16]) for r in rows if r[9] is not None]
    return Snapshot(job_from_row(rows[0]), targets)


def _cache_get(conn: Conn, key: str) -> CacheEntry | None:
    row = conn.execute(
        "SELECT body, meta, stored_at, expires_at FROM web_cache WHERE key = %s", (key,)
    ).fetchone()
    return None if row is None else CacheEntry(bytes(row[0]), row[1], row[2], row[3])
