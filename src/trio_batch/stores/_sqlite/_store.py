"""``SQLiteStore``: the Store protocol over the writer thread and a pool of reader threads."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar, final

import outcome
import trio

from ..._errors import StoreError, SubmitError
from ..._model import (
    Job,
    Snapshot,
    Submitted,
)
from ..._util import NoPublicConstructor
from .._protocol import (
    CacheEntry,
    FinishItem,
    JobSummary,
    Limits,
    NewJob,
    Outcome,
    ResumedJob,
    Stored,
)
from .._sql_shared import SQLiteCommon
from . import _catalog as catalog, _sql as sql
from ._checkpoint import Checkpointer
from ._schema import check_not_a_folder, connect, lock_file, open_reader, open_writer, unlock_failed
from ._writer import Writer

T = TypeVar("T")


@final
class SQLiteStore(SQLiteCommon, metaclass=NoPublicConstructor):
    """Jobs in one SQLite file (WAL), for one process.

    Open it with ``async with SQLiteStore.open(path) as store``; the schema is created or
    migrated on the first open. A second writer on the same file (another process, or another
    store in this one) is refused with a :class:`~trio_batch.StoreError`; ``readonly=True``
    opens for reading beside a writer (e.g. ``trio-batch status`` while a server runs).

    ``start_target`` does not wait for its commit: being the file's only writer, the store knows
    which jobs are live without asking the file. The running mark waits for the store's next
    write and commits with it, before it (or within about 50 ms if no write comes); when that
    write stores the target's outcome, the mark is folded into it instead of written, since no
    reader could have seen it. A read through this store first waits for the marks already
    posted (read-your-writes); a reader on another connection may see a target ``pending`` until
    then. Outcomes are stored in groups (``finish_targets``): one transaction, a few statements
    per outcome, no savepoint unless an item fails. Every other write returns only after its
    commit. Checkpoints run in a thread of their own, so the writer never waits for their
    fsyncs; durability is WAL with ``synchronous=NORMAL``.

    Cancellation: every method is a checkpoint. Under a cancel that is already pending a write
    raises :class:`trio.Cancelled` and has no effect; once queued it is not cancellable and
    returns after its commit. Reads can be cancelled at any point.
    """

    _factory = "SQLiteStore.open()"

    def __init__(self, path: str, writer: Writer | None, readers: int) -> None:
        self._path = path
        self._writer = writer
        self._readers: list[sqlite3.Connection] = []
        self._read_limiter = trio.CapacityLimiter(readers)
        self._closed = False
        # This store is the file's only writer, so it can mirror the set of live jobs exactly.
        self._live: set[str] = set()

    @property
    def path(self) -> str:
        return self._path

    def commit_statistics(self) -> tuple[int, int]:
        """``(commits, writes)`` so far: how well writes are grouped."""
        if self._writer is None:
            return (0, 0)
        return (self._writer.commits, self._writer.writes)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, path: str | os.PathLike[str], *, readonly: bool = False, readers: int = 4
    ) -> AsyncIterator[SQLiteStore]:
        """Open (and create or migrate) the store at ``path``.

        Cancellation: cancelling the open leaves no lock or thread behind. Leaving the block
        waits (shielded) for the writes already queued to commit, then closes the file.

        Raises:
            StoreError: the file is open for writing elsewhere, its schema is newer, ``path`` is
                a folder or a file that is not a SQLite database (left as it was, with no lock
                file beside it), or SQLite cannot open it.
            ValueError: ``path`` is ``:memory:`` (use ``MemoryStore``).
        """
        path = os.fspath(path)
        if path == ":memory:" or path.startswith("file:"):
            raise ValueError(
                "SQLiteStore needs a file path; for an in-memory store use MemoryStore()"
            )
        await trio.to_thread.run_sync(check_not_a_folder, path)
        if readonly:
            if not await trio.Path(path).exists():
                raise StoreError(f"{path} does not exist; nothing to read")
            first_reader = await trio.to_thread.run_sync(open_reader, path)
            store = cls._create(path, None, readers)
            store._readers.append(first_reader)
            try:
                yield store
            finally:
                await store._close()
            return
        lock_fd, created = lock_file(path)
        try:
            conn = await trio.to_thread.run_sync(open_writer, path)
        except BaseException:
            unlock_failed(path, lock_fd, created)
            raise
        checkpointer = Checkpointer(path)
        checkpointer.start()
        writer = Writer(conn, sql.start_targets, checkpointer.committed)
        writer.start()
        store = cls._create(path, writer, readers)
        try:
            yield store
        finally:
            with trio.CancelScope(shield=True):
                await store._close()
                writer.send_marks()
                await trio.to_thread.run_sync(writer.stop)
                await trio.to_thread.run_sync(checkpointer.stop)
                conn.close()
                os.close(lock_fd)

    async def _close(self) -> None:
        self._closed = True
        borrowers = [object() for _ in range(int(self._read_limiter.total_tokens))]
        for borrower in borrowers:  # wait for reads in flight
            await self._read_limiter.acquire_on_behalf_of(borrower)
        for conn in self._readers:
            conn.close()
        self._readers.clear()
        await trio.lowlevel.checkpoint()

    # -- plumbing -----------------------------------------------------------------------------

    async def _write(
        self, fn: Callable[[sqlite3.Connection], T], *, independent: bool = False
    ) -> T:
        if self._writer is None:
            raise StoreError(f"{self._path} was opened read-only")
        if self._closed:
            raise trio.ClosedResourceError("this SQLiteStore is closed")
        return await self._writer.run(fn, independent=independent)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise trio.ClosedResourceError("this SQLiteStore is closed")
        if self._writer is not None:
            await self._writer.flush()  # a running mark posted before this read is visible
        async with self._read_limiter:
            conn = self._readers.pop() if self._readers else None
            used, result = await trio.to_thread.run_sync(read_in_thread, self._path, conn, fn)
            self._readers.append(used)
            return result.unwrap()

    # -- the Store protocol -------------------------------------------------------------------

    async def admit(self, job: NewJob, limits: Limits) -> Submitted:
        # An admission touches only its new job (and finished ones in the sweep), so running
        # marks may be folded past it into their outcome's write.
        submitted = await self._write(lambda conn: sql.admit(conn, job, limits), independent=True)
        if isinstance(submitted, SubmitError):
            raise submitted
        if not submitted.reused:
            self._live.add(submitted.id)
        return submitted

    async def recover(self, now: float) -> list[str]:
        failed = await self._write(lambda conn: sql.interrupt(conn, sql.live_ids(conn), now))
        for job_id in failed:
            self._live.discard(job_id)
        return failed

    async def resume(self, now: float, *, opening: bool = True) -> list[ResumedJob]:
        if not opening:  # one writer: every live job is already this process's
            if self._closed:
                raise trio.ClosedResourceError("this SQLiteStore is closed")
            await trio.lowlevel.checkpoint()
            return []
        resumed = await self._write(lambda conn: sql.resume(conn, now))
        self._live.update(job.id for job in resumed)
        return resumed

    async def start_target(self, job_id: str, idx: int, now: float) -> bool:
        """Queue the running mark and return at once (see the class docstring)."""
        if self._writer is None:
            raise StoreError(f"{self._path} was opened read-only")
        if self._closed:
            raise trio.ClosedResourceError("this SQLiteStore is closed")
        await trio.lowlevel.checkpoint()
        if job_id not in self._live:
            return False
        self._writer.post_mark(job_id, idx, now)
        return True

    async def release_target(self, job_id: str, idx: int, now: float) -> None:
        await self._write(lambda conn: sql.release_target(conn, job_id, idx, now))

    async def finish_targets(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        """Store the outcomes in one write (one transaction, no savepoint unless one fails).

        A running mark still queued for one of these targets is not written: this write
        applies it (see ``_writer.Finish``).
        """
        if self._writer is None:
            raise StoreError(f"{self._path} was opened read-only")
        if self._closed:
            raise trio.ClosedResourceError("this SQLiteStore is closed")
        items = list(items)
        results = await self._writer.run_finish(
            lambda conn, marked, isolate: sql.finish_targets(
                conn, items, now, max_bytes, marked, isolate
            ),
            {(job_id, idx) for job_id, idx, _ in items},
        )
        live = self._live
        for (job_id, _, _), stored in zip(items, results, strict=True):
            if type(stored) is Stored and stored.terminal is not None:
                live.discard(job_id)
        return results

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        (stored,) = await self.finish_targets([(job_id, idx, outcome)], now, max_bytes)
        if isinstance(stored, Exception):
            raise stored
        return stored

    async def cancel(self, job_id: str, now: float) -> Job | None:
        before = await self._write(lambda conn: sql.cancel(conn, job_id, now))
        if before is not None:
            self._live.discard(job_id)
        return before

    async def interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        ids = list(job_ids)
        if not ids:
            await trio.lowlevel.checkpoint()
            return []
        failed = await self._write(lambda conn: sql.interrupt(conn, ids, now))
        for job_id in failed:
            self._live.discard(job_id)
        return failed

    async def touch(self, job_id: str, now: float) -> bool:
        return await self._write(lambda conn: sql.touch(conn, job_id, now))

    async def snapshot(self, job_id: str) -> Snapshot | None:
        return await self._read(lambda conn: sql.snapshot(conn, job_id))

    async def cache_get(self, key: str) -> CacheEntry | None:
        return await self._read(lambda conn: sql.cache_get(conn, key))

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        await self._write(lambda conn: sql.cache_put(conn, key, entry, max_bytes))

    # -- read-only views of a file, for an operator (no open store needed) ---------------------

    @classmethod
    async def list_all_jobs(
        cls, path: str | os.PathLike[str], ids: Sequence[str] | None = None
    ) -> list[JobSummary]:
        """Every caller's jobs in the file ``path`` (only ``ids`` when given), oldest first.

        An operator's view (``trio-batch jobs``, ``timeline``), not a store operation: it reads
        the file read-only without opening a store, so no migration, no lock, and it works
        beside the process that writes the file. It reads what every schema version has.

        Raises:
            StoreError: SQLite cannot read ``path`` as a trio-batch store; raised from SQLite's
                error (:meth:`is_not_a_database` tells a file that is no database).
        """
        wanted = None if ids is None else list(ids)
        return await trio.to_thread.run_sync(catalog.list_all_jobs, os.fspath(path), wanted)

    @classmethod
    async def find_job_ids(cls, path: str | os.PathLike[str], prefix: str, limit: int) -> list[str]:
        """Up to ``limit`` job ids of the file ``path`` that start with ``prefix``, in order.

        Read as :meth:`list_all_jobs` reads, for naming a job by the first characters of its id.

        Raises:
            StoreError: as for :meth:`list_all_jobs`.
        """
        return await trio.to_thread.run_sync(catalog.find_job_ids, os.fspath(path), prefix, limit)

    @staticmethod
    def is_not_a_database(exc: BaseException) -> bool:
        """Whether ``exc`` (a :class:`~trio_batch.StoreError` from opening or reading a file, or
        SQLite's own error) says the file is not a SQLite database; such a file is left as it
        was."""
        return catalog.is_not_a_database(exc)

    @staticmethod
    def is_locked(path: str | os.PathLike[str]) -> bool:
        """Whether a writing store (in another process, or this one) holds the file ``path``."""
        return catalog.is_locked(os.fspath(path))

    @staticmethod
    def lock_holder(path: str | os.PathLike[str]) -> str:
        """Which process writes the file ``path``: "pid N, name", or "" when it cannot tell
        (no writer, or not on Linux, where ``/proc/locks`` says it)."""
        return catalog.lock_holder(os.fspath(path))


def read_in_thread(
    path: str, conn: sqlite3.Connection | None, fn: Callable[[sqlite3.Connection], T]
) -> tuple[sqlite3.Connection, outcome.Outcome[T]]:
    if conn is None:
        conn = connect(path, readonly=True)
    conn.execute("BEGIN")  # one snapshot for the whole read
    try:
        return conn, outcome.capture(fn, conn)
    finally:
        conn.execute("COMMIT")
