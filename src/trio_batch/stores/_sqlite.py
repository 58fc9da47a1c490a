"""The SQLite store: one file, one process, group commit through one writer thread.

Write path: every write is a small function queued to a single writer thread, which owns the
write connection. The thread takes everything queued, runs it in one transaction (each write in
its own savepoint, so one refused admission does not undo its neighbours), commits once, and
wakes all the waiting Trio tasks with one ``run_sync_soon``. A write returns only after its
commit. Reads run in worker threads on their own connections; WAL lets them proceed while the
writer commits.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, final

import outcome
import trio

from .._errors import StoreError, SubmitError
from .._model import (
    LIVE_STATUSES,
    REUSABLE_STATUSES,
    Job,
    Snapshot,
    Submitted,
    TargetState,
)
from .._util import NoPublicConstructor
from ._protocol import CacheEntry, Limits, NewJob, Outcome, Stored
from ._rules import (
    JOB_COLUMNS,
    LIVE_SQL,
    check_caps,
    job_from_row,
    options_json,
    target_from_row,
    terminal_status,
)

T = TypeVar("T")

_log = logging.getLogger("trio_batch")

SCHEMA_VERSION = 2

# Each migration takes the schema from version i to i + 1, inside one transaction.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        caller TEXT NOT NULL,
        caller_class TEXT NOT NULL,
        key TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT NOT NULL DEFAULT '',
        targets_total INTEGER NOT NULL,
        targets_done INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        lease REAL NOT NULL,
        bytes INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX jobs_by_key ON jobs (caller, key);
    CREATE INDEX jobs_live ON jobs (status) WHERE status IN ('queued', 'running');
    CREATE INDEX jobs_finished ON jobs (lease) WHERE status NOT IN ('queued', 'running');
    CREATE TABLE targets (
        job_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        url TEXT NOT NULL,
        options TEXT NOT NULL,
        status TEXT NOT NULL,
        result TEXT,
        error TEXT NOT NULL DEFAULT '',
        hint TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (job_id, idx)
    ) WITHOUT ROWID;
    -- live job counts per caller, and under caller '' the total and the stored result bytes
    CREATE TABLE counters (
        caller TEXT PRIMARY KEY,
        live INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    INSERT INTO counters (caller) VALUES ('');
    """,
    """
    CREATE TABLE web_cache (
        key TEXT PRIMARY KEY,
        body BLOB NOT NULL,
        meta TEXT NOT NULL,
        stored_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        bytes INTEGER NOT NULL
    );
    CREATE INDEX web_cache_by_age ON web_cache (stored_at);
    INSERT INTO counters (caller) VALUES (char(0) || 'web_cache');
    """,
]

_MAX_BATCH = 512


@dataclass(slots=True)
class _Write(Generic[T]):
    fn: Callable[[sqlite3.Connection], T]
    task: trio.lowlevel.Task | None  # None: posted, nobody waits for it
    token: trio.lowlevel.TrioToken
    result: outcome.Outcome[T] | None = None


class _Writer:
    """The thread that owns the write connection and commits in groups."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[_Write[Any] | None] = queue.SimpleQueue()
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
        item = _Write(fn, trio.lowlevel.current_task(), trio.lowlevel.current_trio_token())
        self._queue.put(item)
        # reschedule() hands us the write's outcome, already unwrapped.
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return result

    def post(self, fn: Callable[[sqlite3.Connection], object]) -> None:
        """Queue a write without waiting for it; it commits before any write queued later."""
        self.posted += 1
        self._queue.put(_Write(fn, None, trio.lowlevel.current_trio_token()))

    async def flush(self) -> None:
        """Return once every write posted so far is committed (read-your-writes)."""
        if self.posted:
            await self.run(_nothing)

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < _MAX_BATCH:
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
            token.run_sync_soon(_wake, self, batch)

    def _commit(self, batch: list[_Write[Any]]) -> None:
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


def _wake(writer: _Writer, batch: list[_Write[Any]]) -> None:
    for item in batch:
        assert item.result is not None
        if item.task is not None:
            trio.lowlevel.reschedule(item.task, item.result)
            continue
        writer.posted -= 1
        if isinstance(item.result, outcome.Error):
            error = type(item.result.error).__name__
            _log.warning("store write failed with %s", error, extra={"error_type": error})


def _connect(path: str, *, readonly: bool) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
        )
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":
            conn.close()
            raise StoreError(f"could not switch {path} to WAL mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
    else:
        conn.execute("PRAGMA query_only = ON")
    return conn


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the schema to ``SCHEMA_VERSION``, one migration per transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {version}, newer than this trio-batch knows "
            f"({SCHEMA_VERSION}): upgrade trio-batch"
        )
    for target_version in range(version + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[target_version - 1].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {target_version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _lock(path: str) -> int:
    fd = os.open(path + "-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"{path} is already open for writing by another SQLiteStore. SQLite serves one "
            "process; to share jobs between several processes use PostgresStore "
            "(pip install 'trio-batch[postgres]'), or open this file read-only "
            "(SQLiteStore.open(path, readonly=True))"
        ) from None
    return fd


@final
class SQLiteStore(metaclass=NoPublicConstructor):
    """Jobs in one SQLite file (WAL), for one process.

    Open it with ``async with SQLiteStore.open(path) as store``; the schema is created or
    migrated on the first open. A second writer on the same file (another process, or another
    store in this one) is refused with a :class:`~trio_batch.StoreError`; ``readonly=True``
    opens for reading beside a writer (e.g. ``trio-batch status`` while a server runs).

    ``start_target`` does not wait for its commit: being the file's only writer, the store knows
    which jobs are live without asking the file, and the running mark is queued before the
    target's outcome, so it always lands first, and a read through this store first waits for
    the marks already posted (read-your-writes). A reader in another process may see a target
    ``pending`` for the moment (one group commit) between its fetch starting and the mark
    landing. Every other write returns only after its commit.

    Cancellation: every method is a checkpoint. Under a cancel that is already pending a write
    raises :class:`trio.Cancelled` and has no effect; once queued it is not cancellable and
    returns after its commit. Reads can be cancelled at any point.
    """

    _factory = "SQLiteStore.open()"

    def __init__(self, path: str, writer: _Writer | None, readers: int) -> None:
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
            StoreError: the file is open for writing elsewhere, or its schema is newer.
            ValueError: ``path`` is ``:memory:`` (use ``MemoryStore``).
        """
        path = os.fspath(path)
        if path == ":memory:" or path.startswith("file:"):
            raise ValueError(
                "SQLiteStore needs a file path; for an in-memory store use MemoryStore()"
            )
        if readonly:
            if not await trio.Path(path).exists():
                raise StoreError(f"{path} does not exist; nothing to read")
            store = cls._create(path, None, readers)
            try:
                yield store
            finally:
                await store._close()
            return
        lock_fd = _lock(path)
        try:
            conn = await trio.to_thread.run_sync(_open_writer, path)
        except BaseException:
            os.close(lock_fd)
            raise
        writer = _Writer(conn)
        writer.start()
        store = cls._create(path, writer, readers)
        try:
            yield store
        finally:
            with trio.CancelScope(shield=True):
                await store._close()
                await trio.to_thread.run_sync(writer.stop)
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

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._writer is None:
            raise StoreError(f"{self._path} was opened read-only")
        if self._closed:
            raise trio.ClosedResourceError("this SQLiteStore is closed")
        return await self._writer.run(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise trio.ClosedResourceError("this SQLiteStore is closed")
        if self._writer is not None:
            await self._writer.flush()  # a running mark posted before this read is visible
        async with self._read_limiter:
            conn = self._readers.pop() if self._readers else None
            used, result = await trio.to_thread.run_sync(_read_in_thread, self._path, conn, fn)
            self._readers.append(used)
            return result.unwrap()

    # -- the Store protocol -------------------------------------------------------------------

    async def admit(self, job: NewJob, limits: Limits) -> Submitted:
        submitted = await self._write(lambda conn: _admit(conn, job, limits))
        if isinstance(submitted, SubmitError):
            raise submitted
        if not submitted.reused:
            self._live.add(submitted.id)
        return submitted

    async def recover(self, now: float) -> list[str]:
        failed = await self._write(lambda conn: _interrupt(conn, _live_ids(conn), now))
        for job_id in failed:
            self._live.discard(job_id)
        return failed

    async def start_target(self, job_id: str, idx: int, now: float) -> bool:
        """Queue the running mark and return at once (see the class docstring)."""
        if self._writer is None:
            raise StoreError(f"{self._path} was opened read-only")
        await trio.lowlevel.checkpoint()
        if job_id not in self._live:
            return False
        self._writer.post(lambda conn: _start_target(conn, job_id, idx, now))
        return True

    async def release_target(self, job_id: str, idx: int, now: float) -> None:
        await self._write(lambda conn: _release_target(conn, job_id, idx, now))

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        stored = await self._write(
            lambda conn: _finish_target(conn, job_id, idx, outcome, now, max_bytes)
        )
        if stored.terminal is not None:
            self._live.discard(job_id)
        return stored

    async def cancel(self, job_id: str, now: float) -> Job | None:
        before = await self._write(lambda conn: _cancel(conn, job_id, now))
        if before is not None:
            self._live.discard(job_id)
        return before

    async def interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        ids = list(job_ids)
        if not ids:
            await trio.lowlevel.checkpoint()
            return []
        failed = await self._write(lambda conn: _interrupt(conn, ids, now))
        for job_id in failed:
            self._live.discard(job_id)
        return failed

    async def touch(self, job_id: str, now: float) -> bool:
        return await self._write(lambda conn: _touch(conn, job_id, now))

    async def snapshot(self, job_id: str) -> Snapshot | None:
        return await self._read(lambda conn: _snapshot(conn, job_id))

    async def cache_get(self, key: str) -> CacheEntry | None:
        return await self._read(lambda conn: _cache_get(conn, key))

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        await self._write(lambda conn: _cache_put(conn, key, entry, max_bytes))


def _nothing(conn: sqlite3.Connection) -> None:
    pass


def _read_in_thread(
    path: str, conn: sqlite3.Connection | None, fn: Callable[[sqlite3.Connection], T]
) -> tuple[sqlite3.Connection, outcome.Outcome[T]]:
    if conn is None:
        conn = _connect(path, readonly=True)
    conn.execute("BEGIN")  # one snapshot for the whole read
    try:
        return conn, outcome.capture(fn, conn)
    finally:
        conn.execute("COMMIT")


def _open_writer(path: str) -> sqlite3.Connection:
    conn = _connect(path, readonly=False)
    try:
        migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


# -- SQL, run in the writer thread (or a reader thread for _snapshot) ----------------------------


def _admit(conn: sqlite3.Connection, job: NewJob, limits: Limits) -> Submitted | SubmitError:
    previous = conn.execute(
        "SELECT id, status, lease FROM jobs WHERE caller = ? AND key = ? "
        "ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (job.caller, job.key),
    ).fetchone()
    if (
        previous is not None
        and previous[1] in REUSABLE_STATUSES
        and previous[2] >= job.now - limits.ttl
    ):
        return Submitted(previous[0], True)
    caller_row = conn.execute(
        "SELECT live FROM counters WHERE caller = ?", (job.caller,)
    ).fetchone()
    total_row = conn.execute("SELECT live FROM counters WHERE caller = ''").fetchone()
    try:
        check_caps(len(job.targets), caller_row[0] if caller_row else 0, total_row[0], limits)
    except SubmitError as refused:  # returned, not raised: a refusal is no write error
        return refused
    conn.execute(
        "INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, created_at, "
        "updated_at, lease) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
        (
            job.id,
            job.caller,
            job.caller_class,
            job.key,
            len(job.targets),
            job.now,
            job.now,
            job.now,
        ),
    )
    conn.executemany(
        "INSERT INTO targets (job_id, idx, url, options, status) VALUES (?, ?, ?, ?, 'pending')",
        [(job.id, i, t.url, options_json(t.options)) for i, t in enumerate(job.targets)],
    )
    _add_live(conn, job.caller, 1)
    _sweep(conn, job.now - limits.ttl)
    return Submitted(job.id, False)


def _add_live(conn: sqlite3.Connection, caller: str, delta: int) -> None:
    conn.execute(
        "INSERT INTO counters (caller, live) VALUES (?, ?) "
        "ON CONFLICT (caller) DO UPDATE SET live = live + excluded.live",
        (caller, delta),
    )
    conn.execute("UPDATE counters SET live = live + ? WHERE caller = ''", (delta,))
    if delta < 0:
        conn.execute("DELETE FROM counters WHERE caller = ? AND live <= 0", (caller,))


def _end(
    conn: sqlite3.Connection, job_id: str, caller: str, status: str, now: float, error: str = ""
) -> None:
    conn.execute(
        "UPDATE jobs SET status = ?, error = ?, updated_at = ?, lease = ? WHERE id = ?",
        (status, error, now, now, job_id),
    )
    _add_live(conn, caller, -1)


def _delete_jobs(conn: sqlite3.Connection, rows: Sequence[tuple[str, int]]) -> None:
    conn.executemany("DELETE FROM targets WHERE job_id = ?", [(r[0],) for r in rows])
    conn.executemany("DELETE FROM jobs WHERE id = ?", [(r[0],) for r in rows])
    conn.execute(
        "UPDATE counters SET bytes = bytes - ? WHERE caller = ''", (sum(r[1] for r in rows),)
    )


def _sweep(conn: sqlite3.Connection, cutoff: float) -> None:
    rows = conn.execute(
        f"SELECT id, bytes FROM jobs WHERE status NOT IN {LIVE_SQL} AND lease < ?", (cutoff,)
    ).fetchall()
    if rows:
        _delete_jobs(conn, rows)


def _evict(conn: sqlite3.Connection, max_bytes: int, stored: int) -> int:
    evicted = 0
    while stored > max_bytes:
        row = conn.execute(
            f"SELECT id, bytes FROM jobs WHERE status NOT IN {LIVE_SQL} "
            "ORDER BY lease, rowid LIMIT 1"
        ).fetchone()
        if row is None:
            break
        _delete_jobs(conn, [row])
        stored -= row[1]
        evicted += 1
    return evicted


def _start_target(conn: sqlite3.Connection, job_id: str, idx: int, now: float) -> bool:
    cur = conn.execute(
        f"UPDATE jobs SET status = 'running', updated_at = ? WHERE id = ? AND status IN {LIVE_SQL}",
        (now, job_id),
    )
    if cur.rowcount == 0:
        return False
    conn.execute(
        "UPDATE targets SET status = 'running' WHERE job_id = ? AND idx = ?", (job_id, idx)
    )
    return True


def _release_target(conn: sqlite3.Connection, job_id: str, idx: int, now: float) -> None:
    cur = conn.execute(
        "UPDATE targets SET status = 'pending' WHERE job_id = ? AND idx = ? AND status = 'running'",
        (job_id, idx),
    )
    if cur.rowcount:
        conn.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (now, job_id))


def _finish_target(
    conn: sqlite3.Connection, job_id: str, idx: int, result: Outcome, now: float, max_bytes: int
) -> Stored:
    cur = conn.execute(
        "UPDATE targets SET status = ?, result = ?, error = ?, hint = ? "
        "WHERE job_id = ? AND idx = ? AND status NOT IN ('done', 'failed')",
        (result.state.value, result.result_json, result.error, result.hint, job_id, idx),
    )
    if cur.rowcount == 0:
        return Stored(None)
    size = result.size
    caller, status, total, done = conn.execute(
        "UPDATE jobs SET targets_done = targets_done + 1, bytes = bytes + ?, updated_at = ? "
        "WHERE id = ? RETURNING caller, status, targets_total, targets_done",
        (size, now, job_id),
    ).fetchone()
    stored = conn.execute(
        "UPDATE counters SET bytes = bytes + ? WHERE caller = '' RETURNING bytes", (size,)
    ).fetchone()[0]
    terminal = None
    if status in LIVE_STATUSES and done == total:
        states = [
            TargetState(r[0])
            for r in conn.execute("SELECT DISTINCT status FROM targets WHERE job_id = ?", (job_id,))
        ]
        terminal = terminal_status(states)
        _end(conn, job_id, caller, terminal.value, now)
    return Stored(terminal, _evict(conn, max_bytes, stored))


def _cancel(conn: sqlite3.Connection, job_id: str, now: float) -> Job | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None or row[2] not in LIVE_STATUSES:
        return None
    _end(conn, job_id, row[1], "cancelled", now)
    return job_from_row(row)


def _live_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(f"SELECT id FROM jobs WHERE status IN {LIVE_SQL}")]


def _interrupt(conn: sqlite3.Connection, job_ids: Sequence[str], now: float) -> list[str]:
    failed = []
    for job_id in job_ids:
        row = conn.execute("SELECT caller, status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row[1] not in LIVE_STATUSES:
            continue
        conn.execute(
            "UPDATE targets SET status = 'pending' WHERE job_id = ? AND status = 'running'",
            (job_id,),
        )
        _end(conn, job_id, row[0], "failed", now, "interrupted")
        failed.append(job_id)
    return failed


def _touch(conn: sqlite3.Connection, job_id: str, now: float) -> bool:
    return conn.execute("UPDATE jobs SET lease = ? WHERE id = ?", (now, job_id)).rowcount > 0


def _snapshot(conn: sqlite3.Connection, job_id: str) -> Snapshot | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return None
    targets = [
        target_from_row(r)
        for r in conn.execute(
            "SELECT idx, url, status, result, error, hint, options FROM targets "
            "WHERE job_id = ? ORDER BY idx",
            (job_id,),
        )
    ]
    return Snapshot(job_from_row(row), targets)


_CACHE_COUNTER = "\x00web_cache"  # no caller name holds NUL, so this row is never a caller's


def _cache_get(conn: sqlite3.Connection, key: str) -> CacheEntry | None:
    row = conn.execute(
        "SELECT body, meta, stored_at, expires_at FROM web_cache WHERE key = ?", (key,)
    ).fetchone()
    return None if row is None else CacheEntry(bytes(row[0]), row[1], row[2], row[3])


def _cache_put(conn: sqlite3.Connection, key: str, entry: CacheEntry, max_bytes: int) -> None:
    old = conn.execute("SELECT bytes FROM web_cache WHERE key = ?", (key,)).fetchone()
    conn.execute(
        "INSERT OR REPLACE INTO web_cache (key, body, meta, stored_at, expires_at, bytes) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (key, entry.body, entry.meta_json, entry.stored_at, entry.expires_at, len(entry.body)),
    )
    delta = len(entry.body) - (old[0] if old else 0)
    conn.execute("UPDATE counters SET bytes = bytes + ? WHERE caller = ?", (delta, _CACHE_COUNTER))
    while True:
        total = conn.execute(
            "SELECT bytes FROM counters WHERE caller = ?", (_CACHE_COUNTER,)
        ).fetchone()[0]
        if total <= max_bytes:
            return
        oldest = conn.execute(
            "SELECT key, bytes FROM web_cache ORDER BY stored_at, rowid LIMIT 1"
        ).fetchone()
        if oldest is None:
            return
        conn.execute("DELETE FROM web_cache WHERE key = ?", (oldest[0],))
        conn.execute(
            "UPDATE counters SET bytes = bytes - ? WHERE caller = ?", (oldest[1], _CACHE_COUNTER)
        )
