"""``PostgresStore``: its lifetime (``open``), its instance heartbeat, and the Store methods.

Each open store is one *instance*: it registers a row in ``instances`` and heartbeats it in
real time, from a task in the nursery that :meth:`PostgresStore.open` owns. The live jobs belong
to the fleet: engines claim their turns (``_claims``), the store renews its claims and hears of
new turns through ``LISTEN``, and a gone instance's claims expire for others to take, so no job
is failed for an instance that is gone. (``recover`` and ``resume`` keep their meaning for a
caller that uses them directly; an engine over this store calls neither.)

The methods here only shape parameters and results: the SQL is in ``_sql``, the write path in
``_batch`` (its thread side in ``_pipeline``) and the threads in ``_threads``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast, final

import psycopg
import trio
from psycopg_pool import ConnectionPool

from ..._errors import StoreError
from ..._model import Job, JobStatus, Snapshot, Submitted, TargetState
from ..._util import NoPublicConstructor, raise_single_exception_from_group
from .._protocol import (
    CacheEntry,
    Claim,
    ClaimRider,
    FinishItem,
    HostReport,
    HostRules,
    Limits,
    NewJob,
    Outcome,
    ResumedJob,
    Stored,
)
from .._rules import LIVE_SQL, check_caps, job_from_row, options_json
from .._sql_crawl import CrawlSQL
from .._sql_shared import PostgresCommon
from . import _adopt, _claims, _scopes, _sql
from ._batch import AdmissionsFirst, WriteQueue
from ._cache_reads import CacheReads
from ._schema import SCHEMA_NAME, Conn, Cursor, lock_space, migrate
from ._sql import FinishReply
from ._threads import (
    TimedOut,
    connection_lost,
    connections,
    open_pool,
    run_with_connection,
    sleep_real,
)
from ._wakeups import TurnWakeups

T = TypeVar("T")

log = logging.getLogger("trio_batch.stores.postgres")

_STOP_WRITER_SECONDS = 10
"""At close, how long queued writes may take to commit before the writer is cancelled."""

_DEREGISTER_SECONDS = 5
"""At close, how long deregistering the instance may take (others reap it anyway)."""

_READ_ATTEMPTS = 3
"""Runs of a read whose connection turns out to be gone (a restart, ``pg_terminate_backend``)."""


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """The settings of :meth:`PostgresStore.open` but the DSN, checked when made.

    Each field is the ``open`` argument of the same name (its docstring says what it does);
    ``heartbeat`` None means ``instance_timeout / 3`` (:attr:`beat`).

    Raises:
        ValueError: a setting is out of range or ``schema`` is not a plain identifier.
    """

    schema: str = "trio_batch"
    instance_timeout: float = 30.0
    heartbeat: float | None = None
    pool_size: int = 4
    synchronous_commit: bool = True
    connect_timeout: float = 10.0
    call_timeout: float = 30.0
    claim_timeout: float = 10.0

    def __post_init__(self) -> None:
        schema, instance_timeout = self.schema, self.instance_timeout
        if not isinstance(schema, str) or not SCHEMA_NAME.match(schema):
            raise ValueError(
                f"schema must be a lower-case SQL identifier such as 'trio_batch' (got {schema!r})"
            )

        if not instance_timeout > 0:
            raise ValueError(f"instance_timeout must be > 0 (got {instance_timeout!r})")
        beat = self.beat
        if not 0 < beat < instance_timeout:
            raise ValueError(
                f"heartbeat must be > 0 and < instance_timeout ({instance_timeout}) (got {beat!r})"
            )

        if not isinstance(self.pool_size, int) or self.pool_size < 2:
            raise ValueError(f"pool_size must be an int >= 2 (got {self.pool_size!r})")
        if not self.connect_timeout > 0:
            raise ValueError(f"connect_timeout must be > 0 (got {self.connect_timeout!r})")
        if not self.call_timeout > 0:
            raise ValueError(f"call_timeout must be > 0 (got {self.call_timeout!r})")
        if not self.claim_timeout > 0:
            raise ValueError(f"claim_timeout must be > 0 (got {self.claim_timeout!r})")

    @property
    def beat(self) -> float:
        """Seconds between heartbeats: ``heartbeat``, or a third of ``instance_timeout``."""
        return self.instance_timeout / 3 if self.heartbeat is None else self.heartbeat


CRAWL = CrawlSQL(postgres=True)


@final
class PostgresStore(PostgresCommon, metaclass=NoPublicConstructor):
    """Jobs in PostgreSQL, shared by any number of engines and processes.

    Open it with ``async with PostgresStore.open(dsn) as store``; the schema is created or
    migrated on the first open. Open one store per engine: each store is one *instance* with
    its own heartbeat. It is a ``FleetStore``: every engine on the database takes turns of one
    round robin over all live jobs, whoever admitted them (``docs/postgres.md``, "The fleet").
    ``status``, ``touch`` and ``cancel`` work from any instance. Once the ``open`` block has
    exited, every async method raises :class:`trio.ClosedResourceError`.

    Cancellation: every async method is a checkpoint. Under a cancel that is already pending a
    write raises :class:`trio.Cancelled` and has no effect. Once queued, a write is not
    cancellable: it commits and the method returns its result (or raises its refusal), so the
    caller always knows what was stored. The methods below say only what "no effect" means for
    each. A cancelled read stops its query on the server. The one write that a cancel stops
    is :meth:`cache_put`, which says why.
    """

    _factory = "PostgresStore.open()"

    fleet = True
    """Its rotation belongs to the fleet: engines claim turns from it (``FleetStore``)."""

    def __init__(
        self,
        pool: ConnectionPool[Conn],
        connect: Callable[[], Conn],
        options: PostgresOptions,
    ) -> None:
        self._pool = pool
        self._schema = options.schema
        self._locks = lock_space(options.schema)
        self._instance_timeout = options.instance_timeout
        self._heartbeat = options.beat
        self._limiter = trio.CapacityLimiter(options.pool_size)
        self._instance = secrets.token_hex(8)
        self._call_timeout = options.call_timeout
        # The live jobs this instance admitted: start_target answers from it without waiting
        # for the database. Jobs leave it when they end here or a write finds them not live.
        self._live: set[str] = set()
        self._adopting = False  # once an engine resumes, gone instances' jobs are adopted
        self._admissions = AdmissionsFirst()
        self._queue = WriteQueue(
            connect,
            instance=self._instance,
            timeout=options.call_timeout,
            on_not_live=self._forget,
            admissions=self._admissions,
        )
        self._stopping = threading.Event()
        self._connect = connect
        self._claim_timeout = options.claim_timeout
        self._claims: set[str] = set()  # tokens this instance holds: renewed until stored
        self._wakeups = TurnWakeups()
        self._leases: set[str] = set()  # leases of scopes held by requests outside the rotation
        self._cache_reads = CacheReads(
            lambda keys: self._run_read(lambda conn: _sql.cache_get(conn, keys))
        )

    @property
    def instance_id(self) -> str:
        """This instance's id, as recorded on the jobs it admits."""
        return self._instance

    @property
    def schema(self) -> str:
        """The PostgreSQL schema that holds this store's tables."""
        return self._schema

    def commit_statistics(self) -> tuple[int, int]:
        """``(commits, writes)`` so far: how well writes are grouped."""
        return (self._queue.commits, self._queue.writes)

    @property
    def reconnects(self) -> int:
        """How many times the writer connected again after losing its connection."""
        return self._queue.reconnects

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
        call_timeout: float = 30.0,
        claim_timeout: float = 10.0,
    ) -> AsyncIterator[PostgresStore]:
        """Connect, create or migrate the schema, register this instance and heartbeat it.

        Args:
            dsn: a libpq connection string or URI (``postgresql://user@host:5432/db``).
            instance_timeout: seconds without a heartbeat after which other instances fail
                this instance's live jobs (``interrupted``).
            heartbeat: seconds between heartbeats; default ``instance_timeout / 3``. Each
                heartbeat also fails the live jobs of instances that are gone.
            schema: the PostgreSQL schema holding the tables (created if missing).
            pool_size: connections (and threads) for reads and the heartbeat; the writer holds
                one more connection of its own.
            synchronous_commit: False sets ``synchronous_commit = off`` on this instance's
                connections: commits return before the WAL reaches disk, so a server crash
                may lose the last fraction of a second of writes (never corrupts them).
            connect_timeout: seconds to wait for a connection (the first, and each new one).
            call_timeout: seconds a store call waits for the database's answer (real time).
                Past it the call raises :class:`StoreError` and the query is stopped on the
                server, so nothing was written (see ``docs/postgres.md`` for the one case of a
                write caught in a lost connection). ``math.inf`` waits for ever.
            claim_timeout: seconds a claimed turn stays this instance's without a renewal
                (the store renews its claims every third of it). An instance killed mid-fetch
                holds its targets this long; then another instance fetches them again.

        The writer holds one connection. When it breaks (a server restart, a failover,
        ``pg_terminate_backend``) the writer connects again, with backoff, and sends the
        writes in flight again; they are idempotent, so nothing is lost or counted twice.

        On exit, queued writes are committed, the heartbeat stops and the instance is
        deregistered; its jobs still live (none, if its engine closed first) are then failed by
        the next engine to open or heartbeat. An exception from the block comes out as itself,
        with its ``__cause__`` and ``__context__``, not wrapped in an exception group.

        Cancellation: a cancel while opening leaves nothing behind: the query in progress is
        stopped, the instance is deregistered if it got that far, and the pool is closed. The
        migration is one transaction, so it is applied whole or not at all. Waiting for the
        first connection is not cancellable but is bounded by ``connect_timeout``. Leaving the
        block, by a cancel too, is shielded but bounded: the queued writes get 10 seconds to
        commit and the deregistration 5.

        Raises:
            ValueError: a setting is out of range or ``schema`` is not a plain identifier
                (:class:`PostgresOptions` checks them).
            StoreError: the server cannot be reached, or its schema is newer than this code.
        """
        options = PostgresOptions(
            schema=schema,
            instance_timeout=instance_timeout,
            heartbeat=heartbeat,
            pool_size=pool_size,
            synchronous_commit=synchronous_commit,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            claim_timeout=claim_timeout,
        )
        pool, connect = connections(
            dsn,
            schema=schema,
            pool_size=pool_size,
            synchronous_commit=synchronous_commit,
            connect_timeout=connect_timeout,
        )

        try:
            await trio.to_thread.run_sync(open_pool, pool, connect_timeout)
            store = cls._create(pool, connect, options)
            await store._run(lambda conn: migrate(conn, schema, store._locks), bounded=False)
            await store._run(
                lambda conn: _sql.register(conn, store._instance, store._instance_timeout)
            )

            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(store._queue.run)
                    await nursery.start(store._heartbeat_loop)
                    await nursery.start(store._renew_loop)
                    await nursery.start(store._cache_reads.run)
                    listener_done = store._wakeups.start(
                        store._connect, store._schema, store._stopping
                    )
                    try:
                        yield store
                    finally:
                        with trio.move_on_after(_STOP_WRITER_SECONDS, shield=True):
                            await store._queue.aclose()
                        store._stopping.set()
                        nursery.cancel_scope.cancel("PostgresStore closed")
                        with trio.move_on_after(_STOP_WRITER_SECONDS, shield=True):
                            await listener_done.wait()
            except BaseExceptionGroup as group:
                raise_single_exception_from_group(group)
                raise
            finally:
                with trio.move_on_after(_DEREGISTER_SECONDS, shield=True):
                    try:
                        await store._run(lambda conn: _sql.deregister(conn, store._instance))
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

    async def _run(self, fn: Callable[[Conn], T], *, bounded: bool = True) -> T:
        """Run ``fn`` on a pooled connection in a worker thread; cancellation cancels the query.

        With ``bounded``, a call with no answer within ``call_timeout`` raises StoreError.
        """
        if not bounded:
            return await run_with_connection(self._pool, self._limiter, fn)
        try:
            return await run_with_connection(
                self._pool, self._limiter, fn, answer_within=self._call_timeout
            )
        except TimedOut:
            raise StoreError(
                f"PostgreSQL did not answer within {self._call_timeout:g} s (call_timeout); "
                "the server may be overloaded or a lock held"
            ) from None

    async def _read(self, fn: Callable[[Conn], T]) -> T:
        """A read that sees this instance's running marks (read-your-writes)."""
        self._check_open()
        if self._queue.unsettled_marks:
            await self._queue.barrier()
        return await self._run_read(fn)

    async def _run_read(self, fn: Callable[[Conn], T]) -> T:
        """:meth:`_run` for a read, which runs again (twice at most) on a connection that
        was already gone: the pool checks a connection at checkout without a round trip
        (``_threads.check_idle_connection``), so one the server ended a moment ago may be
        handed out before its goodbye arrived. A read has no effect to repeat."""
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return await self._run(fn)
            except psycopg.OperationalError as exc:
                if not connection_lost(exc):
                    raise
        return await self._run(fn)

    def _forget(self, job_ids: Iterable[str]) -> None:
        self._live.difference_update(job_ids)

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        """Queue ``fn`` (several statements) for the writer; return its value after the commit."""
        return await self._queue.call(fn)

    def _check_open(self) -> None:
        if self._queue.closed:
            raise trio.ClosedResourceError("this PostgresStore is closed")

    async def _heartbeat_loop(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        while True:
            await sleep_real(self._heartbeat, self._stopping)
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
        if not _sql.heartbeat(conn, self._instance):
            log.warning(
                "this instance was taken for dead (its heartbeat stalled); registering again",
                extra={"instance": self._instance},
            )
            _sql.register(conn, self._instance, self._instance_timeout)
        # Live jobs belong to the fleet: a gone instance's claims expire and others take its
        # turns, so its jobs are neither failed nor adopted here.
        _adopt.drop_dead(conn, self._instance)
        _claims.sweep(conn)
        return []

    async def _renew_loop(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Every third of ``claim_timeout`` (real time), move this instance's claims on.

        After a database outage the renewal that gets through keeps the claims still held, so
        a short outage does not make the fleet fetch everything again; a claim another
        instance took meanwhile is dropped from the set (its outcome will not be stored here).
        """
        task_status.started()
        while True:
            await sleep_real(self._claim_timeout / 3, self._stopping)
            tokens = list(self._claims)
            if self._leases:
                with contextlib.suppress(Exception):  # they expire; the next renewal may pass
                    await self._run(
                        lambda conn: _scopes.renew_leases(conn, self._instance, self._claim_timeout)
                    )
            if not tokens:
                continue
            try:
                held = await self._renew(tokens)
            except Exception as exc:
                log.warning(
                    "renewing claims failed with %s",
                    type(exc).__name__,
                    extra={"instance": self._instance, "error_type": type(exc).__name__},
                )
                continue
            self._claims.difference_update(set(tokens) - held)

    async def _renew(self, tokens: list[str]) -> set[str]:
        return await self._run(lambda conn: _claims.renew(conn, tokens, self._claim_timeout))

    # -- the Store protocol -------------------------------------------------------------------

    async def admit(self, job: NewJob, limits: Limits) -> Submitted:
        """Reuse, check caps and insert, atomically across every instance (``Store.admit``).

        Cancellation: if this raises :class:`trio.Cancelled`, nothing was stored; once queued,
        as the class docstring says (the caller always knows whether the job exists).

        Raises:
            TooManyTargets, CallerBusy, Busy: nothing was written.
            trio.ClosedResourceError: the store is closed.
        """

        def handle(cur: Cursor) -> Submitted:
            reused, caller_live, total_live, admitted = _sql.one(cur)
            if reused is not None and reused != job.id:
                return Submitted(str(reused), True)
            if reused is not None:  # a replay of this admission, which had committed
                return Submitted(job.id, False)
            if not admitted:  # nothing was written; raise the first cap broken, in SPEC order
                check_caps(len(job.targets), int(caller_live), int(total_live), limits)
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
            json.dumps([t.url for t in job.targets]),
            json.dumps([options_json(t.options) for t in job.targets]),
            limits.targets_per_job,
            limits.jobs_per_caller,
            limits.jobs_total,
            job.workspace,
            job.retry_of,
            job.webhook,
            json.dumps(list(job.scopes)),
            job.concurrency,
        )
        submitted = await self._admit_alone(params, handle, job if job.crawl else None)
        if not submitted.reused:
            self._live.add(submitted.id)
        return submitted

    async def _admit_alone(
        self,
        params: tuple[object, ...],
        handle: Callable[[Cursor], Submitted],
        crawl: NewJob | None = None,
    ) -> Submitted:
        """Run the admission on a pooled connection of its own, not behind the writer's queue.

        A submit must not wait for the commit of the outcome groups queued before it (one
        instance draining instant targets admitted 139 jobs/s through the writer, ~1,000/s
        idle). It is one call of ``admit_job``, its own transaction, serialised across
        instances by the function's advisory lock. As a queued write, it is not cancellable
        once begun (shielded, bounded by ``call_timeout``). A connection lost mid-call is
        tried once more with the same job id: ``admit_job`` answers a replay of an admission
        that had committed as that admission, so nothing is stored twice. A crawl's books
        (``stores/_sql_crawl``) are written in the same transaction.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()

        def admit(conn: Conn) -> Submitted:
            if crawl is None:
                return handle(conn.execute(_sql.ADMIT.sql, params, prepare=True))
            with conn.transaction():
                submitted = handle(conn.execute(_sql.ADMIT.sql, params, prepare=True))
                if submitted.id == crawl.id:
                    CRAWL.admit(conn, crawl.id, crawl.crawl, crawl.seeds, crawl.skipped)
            return submitted

        with trio.CancelScope(shield=True), self._admissions.admitting():
            try:
                submitted = await self._run(admit)
            except psycopg.OperationalError:
                submitted = await self._run(admit)
        return submitted

    async def recover(self, now: float) -> list[str]:
        """Fail (``interrupted``) the live jobs of this instance and of instances that are gone.

        An engine calls it when it opens. Instances are gone when their heartbeat is older than
        their ``instance_timeout`` or when they closed. A repeat finds nothing more to do.

        Cancellation: if this raises :class:`trio.Cancelled`, no job was failed; once queued,
        as the class docstring says.
        """
        failed = await self._write(lambda conn: _sql.reap(conn, self._instance, now, own_jobs=True))
        self._forget(failed)
        return failed

    async def resume(self, now: float, *, opening: bool = True) -> list[ResumedJob]:
        """Adopt the live jobs of this instance and of instances that are gone (SPEC §7).

        Their running targets go back to pending; the jobs stay live, now this instance's, and
        are returned oldest first. With ``opening`` it takes this instance's own live jobs too
        (as :meth:`recover` does); without, only those of instances gone since, and only after
        a read finds some (an engine calls it every second). From the first call on, the
        heartbeat stops failing gone instances' jobs: they wait for a ``resume``.

        Cancellation: if this raises :class:`trio.Cancelled`, no job was adopted; once queued,
        as the class docstring says.
        """
        self._adopting = True
        me = self._instance
        if not opening and not await self._run(lambda conn: _adopt.orphaned(conn, me)):
            return []
        resumed = await self._write(lambda conn: _adopt.adopt(conn, me, now, own_jobs=opening))
        self._live.update(job.id for job in resumed)
        return resumed

    async def start_target(self, job_id: str, idx: int, now: float) -> bool:
        """Mark the target running; False, writing nothing, when the job is no longer live.

        For a job this instance admitted and still holds live, this answers at once and
        queues the mark for the writer's next batch (read-your-writes: a read through this
        store waits for it). The mark is dropped when the same batch stores the target's
        outcome, whose statement then does its part. A job cancelled from *another* instance
        is noticed by the batch that carries the mark, so one more of its targets may start
        (and be stored) before this returns False. For any other job the mark is committed
        before this returns.

        Cancellation: if this raises :class:`trio.Cancelled`, nothing was marked; once queued,
        as the class docstring says.
        """
        self._check_open()
        if job_id in self._live:
            await trio.lowlevel.checkpoint()
            self._check_open()
            if job_id in self._live:
                self._queue.post_mark(job_id, idx, now)
                return True
        started: bool = await self._queue.execute(
            _sql.START, {"id": job_id, "idx": idx, "now": now}, lambda cur: bool(_sql.one(cur)[0])
        )
        return started

    async def release_target(self, job_id: str, idx: int, now: float) -> None:
        """Put a running target back to pending. A repeat does nothing.

        Cancellation: if this raises :class:`trio.Cancelled`, the target was not released; once
        queued, as the class docstring says.
        """
        await self._queue.execute(_sql.RELEASE, (job_id, idx, now), lambda cur: None)

    async def finish_targets(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        """Store a group of outcomes in one statement (the engine's write path), in order.

        Each item is stored as :meth:`finish_target` stores it. The group is one statement
        over one array, committed with whatever else is queued; if the batch fails in the
        database, each item runs again on its own, so an item that cannot be stored gets its
        exception in its place and the others land. Eviction runs after the commit, in its own
        transaction, and is reported on the last item.

        Cancellation: if this raises :class:`trio.Cancelled`, no outcome was stored; once
        queued, as the class docstring says.
        """
        if not items:
            self._check_open()
            await trio.lowlevel.checkpoint()
            return []

        def after(conn: Conn, value: object) -> FinishReply:
            reply = cast("FinishReply", value)
            if reply.total > max_bytes:
                try:
                    with conn.transaction():
                        evicted = _sql.evict(conn, self._locks, self._instance, max_bytes)
                except Exception as exc:  # the outcomes stand; a later finish evicts
                    log.warning("eviction deferred: %s", type(exc).__name__)
                else:
                    last = reply.results[-1]
                    if evicted and isinstance(last, Stored):
                        reply.results[-1] = Stored(last.terminal, evicted)
            return reply

        if any(o.crawl for _, _, o in items):
            results = await self._finish_mixed(items, now, max_bytes)
        else:
            results = (await self._queue.finish(list(items), now, after)).results
        self._claims.difference_update(o.claim for _, _, o in items if o.claim)
        return results

    async def _finish_mixed(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        """A group with crawl pages: the batch items as one statement, the crawl pages with
        their books (``stores/_sql_crawl``) in a transaction of their own, results in order."""
        plain = [(n, item) for n, item in enumerate(items) if not item[2].crawl]
        crawled = [(n, item) for n, item in enumerate(items) if item[2].crawl]
        results: list[Stored | Exception] = [Stored(None)] * len(items)
        if plain:
            reply = await self._queue.finish([item for _, item in plain], now, _as_reply)
            for (n, _), stored in zip(plain, reply.results, strict=True):
                results[n] = stored
        instance = self._instance
        pages = [item for _, item in crawled]
        try:
            stored_pages = await self._queue.call(
                lambda conn: _crawl_pages(conn, pages, now, instance)
            )
        except Exception as exc:
            stored_pages = [exc] * len(pages)
        for (n, _), stored in zip(crawled, stored_pages, strict=True):
            results[n] = stored
        return results

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        """Store a target's outcome, finish its job if it was the last, evict for bytes.

        A group of one (:meth:`finish_targets`). Eviction runs after the outcome is committed,
        in its own transaction: if it loses a deadlock with another instance, the outcome
        stands and a later finish evicts.

        Cancellation: if this raises :class:`trio.Cancelled`, the outcome was not stored; once
        queued, as the class docstring says.
        """
        (stored,) = await self.finish_targets([(job_id, idx, outcome)], now, max_bytes)
        if isinstance(stored, Exception):
            raise stored
        return stored

    async def cancel(self, job_id: str, now: float) -> Job | None:
        """Cancel a live job from any instance; return it as it was, or None.

        Cancellation: if this raises :class:`trio.Cancelled`, the job was not cancelled; once
        queued, as the class docstring says.
        """

        def handle(cur: Cursor) -> Job | None:
            row = cur.fetchone()
            return None if row is None else job_from_row(row)

        before: Job | None = await self._queue.execute(_sql.CANCEL, (now, now, job_id), handle)
        self._forget((job_id,))
        return before

    async def interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        """Fail the live ones of ``job_ids`` (``interrupted``); return those ids.

        Cancellation: if this raises :class:`trio.Cancelled`, no job was failed; once queued,
        as the class docstring says.
        """
        ids = list(job_ids)
        if not ids:
            self._check_open()
            await trio.lowlevel.checkpoint()
            return []

        def handle(cur: Cursor) -> list[str]:
            failed = {str(r[0]) for r in cur.fetchall()}
            return [job_id for job_id in dict.fromkeys(ids) if job_id in failed]

        failed: list[str] = await self._queue.execute(
            _sql.INTERRUPT, {"ids": ids, "now": now}, handle
        )
        self._forget(ids)
        return failed

    async def touch(self, job_id: str, now: float) -> bool:
        """Move the job's lease to ``now``, from any instance; False for an unknown job.

        Cancellation: if this raises :class:`trio.Cancelled`, the lease did not move; once
        queued, as the class docstring says.
        """
        return await self._queue.execute(_sql.TOUCH, (now, job_id), lambda cur: cur.rowcount > 0)

    async def snapshot(self, job_id: str) -> Snapshot | None:
        """The job and its targets in input order, or None; one consistent read.

        Cancellation: safe to cancel at any point; a read has no effect to undo. The query is
        stopped on the server, and this returns once its connection is back in the pool.
        """
        return await self._read(lambda conn: _sql.snapshot(conn, job_id))

    # -- the fleet's rotation (FleetStore) -----------------------------------------------------

    async def claim_turns(
        self, n: int, now: float, rules: HostRules | None = None, *, spaced: int | None = None
    ) -> list[Claim]:
        """Claim up to ``n`` targets of the fleet's round robin (``FleetStore.claim_turns``).

        One call on a pooled connection, not through the writer: a claim does not wait behind
        the outcomes queued there. The claims are renewed until their outcomes are stored or
        they are released. With ``rules`` (the fleet's budgets per scope), a claim takes the
        locks of the scopes it may need, in scope order, so two claimers never both take a
        scope's last slot and claims on other scopes run at once; the next
        :meth:`wait_for_turns` also ends when the first scope held back by its clock may start
        again.

        Cancellation: if this raises :class:`trio.Cancelled`, the query was stopped on the
        server and nothing was claimed (if the claim had committed before the cancel reached
        the server, this returns it).
        """
        self._check_open()
        await self._admissions.wait()
        self._wakeups.claiming()
        params = self._claim_params(n, now, rules, spaced)
        claimed, free_in = await self._run(lambda conn: _claims.claim(conn, params))
        self._took(claimed, free_in)
        return claimed

    def _claim_params(
        self, n: int, now: float, rules: HostRules | None, spaced: int | None
    ) -> dict[str, object]:
        """A claim's parameters, the same for one on a pooled connection and one riding."""
        return _claims.claim_params(
            self._instance, n, now, self._claim_timeout, self._locks, rules, spaced
        )

    def _took(self, claims: Sequence[Claim], free_in: float | None) -> None:
        """A claim ended (on a pooled connection, or riding with outcomes): renew what it took
        until stored or released; the next wait for turns ends at ``free_in`` at the latest."""
        self._wakeups.claimed(free_in)
        self._claims.update(c.token for c in claims)

    async def lease_scope(
        self, scope: str, rules: HostRules
    ) -> tuple[str | None, float | None, float | None]:
        """Take a slot of ``scope``'s fleet-wide budget for a request outside the rotation
        (``FleetStore.lease_scope``); renewed with the claims until released.

        Cancellation: if this raises :class:`trio.Cancelled`, a lease may have been taken; it
        expires after ``claim_timeout`` (and goes back at once when the engine closes).
        """
        self._check_open()
        got = await self._run(
            lambda conn: _scopes.lease(
                conn, self._instance, scope, rules, self._claim_timeout, self._locks
            )
        )
        if got[0] is not None:
            self._leases.add(got[0])
        return got

    async def release_leases(self, tokens: Sequence[str]) -> None:
        """Give back leases of :meth:`lease_scope` (``FleetStore.release_leases``)."""
        self._check_open()
        if tokens:
            await self._run(lambda conn: _scopes.release_leases(conn, tokens))
        else:
            await trio.lowlevel.checkpoint()
        self._leases.difference_update(tokens)

    async def report_scopes(self, reports: Sequence[HostReport]) -> None:
        """Make what this instance learned of its scopes the fleet's
        (``FleetStore.report_scopes``); a round trip that does not wait for the WAL flush.
        """
        self._check_open()
        if reports:
            await self._run(lambda conn: _scopes.report(conn, reports))
        else:
            await trio.lowlevel.checkpoint()

    async def release_claim(self, claim: Claim, now: float, busy_since: float | None) -> None:
        """Give one turn back to the end of the rotation (``FleetStore.release_claim``).

        Cancellation: if this raises :class:`trio.Cancelled`, the claim is still held. Any
        other error leaves the claim to expire: it is no longer renewed, so another instance
        takes its target after ``claim_timeout``.
        """
        self._check_open()
        try:
            await self._run(lambda conn: _claims.release_one(conn, claim, now, busy_since))
        except Exception:
            self._claims.discard(claim.token)
            raise
        self._claims.discard(claim.token)

    async def release_claims(self, now: float) -> None:
        """Give back every claim this instance holds (``FleetStore.release_claims``).

        Cancellation: if this raises :class:`trio.Cancelled`, the claims are still held (and
        expire after ``claim_timeout`` if nobody releases them).

        It needs the pool only, not the writer: when an application cancels the scope around
        the store and its engine, the cancel ends the writer task before the engine's shielded
        close gets here, and the claims should still go back at once.
        """
        if self._pool.closed:
            raise trio.ClosedResourceError("this PostgresStore is closed")
        tokens = list(self._claims)
        if tokens:
            await self._run(lambda conn: _claims.release_all(conn, tokens, now))
        else:
            await trio.lowlevel.checkpoint()
        self._claims.difference_update(tokens)
        if self._leases:
            await self._run(lambda conn: _scopes.release_instance_leases(conn, self._instance))
            self._leases.clear()

    def ride_claims(self, rider: ClaimRider | None) -> None:
        """Send claims with groups of outcomes, for ``rider`` (``FleetStore.ride_claims``):
        the writer asks it before each batch that stores outcomes and sends the claim in the
        batch's round trip and transaction (``_claims.Ride``), then hands it the claims, which
        are renewed and given back as those of :meth:`claim_turns`."""
        if rider is None:
            self._queue.ride = None
            return

        def ride() -> _claims.Ride | None:
            ask = rider.ask()
            if ask is None:
                return None
            self._wakeups.claiming()
            params = self._claim_params(ask.n, ask.now, ask.rules, ask.spaced)
            return _claims.Ride(params)

        def rode(ride: _claims.Ride) -> None:
            if ride.claims is not None:
                self._took(ride.claims, ride.free_in)
            rider.answered(ride.claims)

        self._queue.ride, self._queue.rode = ride, rode

    async def wait_for_turns(self) -> None:
        """Return when a turn may be free (``FleetStore.wait_for_turns``).

        At once if a notification came since the last :meth:`claim_turns`.
        """
        await self._wakeups.wait()

    async def cache_get(self, key: str) -> CacheEntry | None:
        """The cached entry under ``key``, expired or not, or None.

        The reads that arrive while one query is out go together in the next
        (:class:`~trio_batch.stores._postgres._cache_reads.CacheReads`).

        Cancellation: safe to cancel at any point; a read has no effect to undo. A read not
        sent yet is taken out of the next query; one in a query leaves it to the others.
        """
        self._check_open()
        return await self._cache_reads.get(key)

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        """Store ``entry`` under ``key``, then drop the oldest entries while over ``max_bytes``.

        It runs on a pooled connection, not through the writer: the cache is an optimisation,
        and a cache write that waits on a lock (1 s at most, ``lock_timeout``) must never hold
        up the outcomes queued behind it.

        Cancellation: unlike the other writes, this one is cancellable while it runs, since it
        is not queued. If this raises :class:`trio.Cancelled`, the query was stopped on the
        server and its transaction rolled back: the cache is unchanged, neither the entry
        stored nor anything evicted. If the transaction had committed before the cancel reached
        the server, this returns normally: the entry is stored whole. So a cancel never leaves
        half an entry or a wrong byte count.
        """
        self._check_open()
        await self._run(lambda conn: _sql.cache_put(conn, self._locks, key, entry, max_bytes))


def _crawl_pages(
    conn: Conn, items: Sequence[FinishItem], now: float, instance: str
) -> list[Stored | Exception]:
    """Store crawl pages' outcomes with the crawl's books, in one transaction (the writer's).

    Each page's job row is locked first, so two instances storing pages of one crawl keep its
    books one after the other: a page that is another's (its keys) is removed; else what it
    found is admitted (the job's total grows before the job could end), the outcome is stored
    under its claim (``FINISH_MANY``), counted, and a crawl at its limit stops.
    """
    results: list[Stored | Exception] = []
    for job_id, idx, outcome in items:
        conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        row = conn.execute(
            "SELECT status, options, claim FROM targets WHERE job_id = %s AND idx = %s",
            (job_id, idx),
        ).fetchone()
        lost = bool(outcome.claim) and row is not None and row[2] != outcome.claim
        if row is None or row[0] in ("done", "failed") or lost:
            results.append(Stored(None))
            continue
        if CRAWL.removed(conn, job_id, idx, outcome):
            results.append(Stored(_end_if_complete(conn, job_id, now), removed=True))
            continue
        CRAWL.count(conn, job_id, outcome.skipped)
        found = CRAWL.admit_found(conn, job_id, str(row[1]), outcome.found)
        params = _sql.finish_params([(job_id, idx, outcome)], now, {}, instance, False)
        reply = _sql.finish_reply(conn.execute(_sql.FINISH_MANY.sql, params).fetchall(), 1)
        stored = reply.results[0]
        terminal = stored.terminal if isinstance(stored, Stored) else None
        if outcome.state is TargetState.DONE:
            CRAWL.count(conn, job_id, {}, done=1)
        CRAWL.trim(conn, job_id)
        if terminal is None:
            terminal = _end_if_complete(conn, job_id, now)
        results.append(Stored(terminal, found=found))
    return results


def _as_reply(conn: Conn, value: object) -> FinishReply:
    return cast("FinishReply", value)


def _end_if_complete(conn: Conn, job_id: str, now: float) -> JobStatus | None:
    """End a live job whose every target now has an outcome (a crawl whose last targets were
    removed): done, failed or partial from its counts; its status, or None."""
    row = conn.execute(
        f"""
        UPDATE jobs SET status = CASE
                WHEN targets_failed = 0 THEN 'done'
                WHEN targets_failed >= targets_total THEN 'failed'
                ELSE 'partial' END,
            lease = %(now)s, updated_at = %(now)s
        WHERE id = %(id)s AND status IN {LIVE_SQL} AND targets_done >= targets_total
        RETURNING status
        """,
        {"now": now, "id": job_id},
    ).fetchone()
    return None if row is None else JobStatus(row[0])
