"""The SQLite schema: its versions, opening a connection, and the lock that makes one writer.

Each migration takes the schema from version i to i + 1 in one transaction; the version lives in
``PRAGMA user_version``. A file from a newer trio-batch is refused untouched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3

from ..._errors import StoreError
from .._sql_crawl import CRAWL_TABLES

SCHEMA_VERSION = 6

# The writer connection's own checkpoints (about 32 MiB of WAL): only if the checkpointer
# thread (_checkpoint) falls far behind.
BACKSTOP_PAGES = 8000

# SQLite's names for a file that is not a SQLite database (or no longer reads as one).
NOT_A_DATABASE = frozenset({"SQLITE_NOTADB", "SQLITE_CORRUPT"})

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
    # The listing index of GET /v1/batch (SPEC §7): a page costs its rows.
    "CREATE INDEX jobs_by_caller ON jobs (caller, created_at DESC, id DESC)",
    # SPEC §7: what resume needs to run a job again (the caller's workspace), retry's link, the
    # webhook and its delivery state (hook_*: see stores/_outbox), and each target's times.
    """
    ALTER TABLE jobs ADD COLUMN workspace TEXT NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN retry_of TEXT NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN webhook TEXT NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN hook_open INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_cursor INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_since REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_next_at REAL NOT NULL DEFAULT 0;
    CREATE INDEX jobs_hooks ON jobs (hook_next_at) WHERE hook_open = 1;
    ALTER TABLE targets ADD COLUMN started_at REAL;
    ALTER TABLE targets ADD COLUMN finished_at REAL
    """,
    # A job's concurrency, kept so that a resumed job runs as it was admitted.
    "ALTER TABLE jobs ADD COLUMN concurrency INTEGER NOT NULL DEFAULT 1",
    # Crawls (issue 38): their books (stores/_sql_crawl), the same tables as PostgreSQL's.
    CRAWL_TABLES,
]


def connect(path: str, *, readonly: bool) -> sqlite3.Connection:
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
        # The checkpointer thread copies the WAL back (_checkpoint); this is only a backstop.
        conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
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


def open_writer(path: str) -> sqlite3.Connection:
    """The writer's connection to ``path``, migrated to ``SCHEMA_VERSION``.

    Raises:
        StoreError: ``path`` is not a SQLite database (nothing was written to it), its schema
            is newer, or SQLite cannot open it.
    """
    try:
        conn = connect(path, readonly=False)
    except sqlite3.Error as exc:
        raise open_error(path, exc) from exc
    try:
        migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise open_error(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def open_reader(path: str) -> sqlite3.Connection:
    """A read-only connection to ``path`` that has read its header, so a bad file fails here.

    Raises:
        StoreError: ``path`` is not a SQLite database, or SQLite cannot open it.
    """
    try:
        conn = connect(path, readonly=True)
    except sqlite3.Error as exc:
        raise open_error(path, exc) from exc
    try:
        conn.execute("PRAGMA user_version").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise open_error(path, exc) from exc
    return conn


def open_error(path: str, exc: sqlite3.Error) -> StoreError:
    """The :class:`StoreError` for SQLite's ``exc`` while opening ``path``; raise it from ``exc``.

    SQLite answers "file is not a database" (``SQLITE_NOTADB``) before it writes anything, so a
    file refused this way is left as it was.
    """
    if getattr(exc, "sqlite_errorname", "") in NOT_A_DATABASE:
        return StoreError(f"{path} is not a trio-batch database ({exc}); open another path")
    return StoreError(f"cannot open {path} as a SQLite database ({exc}); check the path")


def check_not_a_folder(path: str) -> None:
    """Refuse a folder before anything (the lock file) is created beside or in it."""
    if os.path.isdir(path):
        raise StoreError(
            f"{path} is a folder, not a database file; open the path of a file in it "
            "(a new one is created)"
        )


def lock_file(path: str) -> tuple[int, bool]:
    """Lock ``path + "-lock"`` for writing: ``(fd, created)``, created if this call made it.

    A lock file may be removed by the open that created it when that open fails
    (:func:`unlock_failed`), so the lock taken here counts only if the file is still the one
    at that path; otherwise this locks the new one.

    Raises:
        StoreError: another writer holds the lock.
        OSError: the lock file cannot be made (a missing folder, no permission).
    """
    lock_path = path + "-lock"
    while True:
        try:
            fd, created = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), True
        except FileExistsError:
            try:
                fd, created = os.open(lock_path, os.O_RDWR), False
            except FileNotFoundError:  # removed since: try again
                continue
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
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, lock_path):
            return fd, created
        os.close(fd)  # locked a file that a failed open had removed: lock the one there now


def unlock_failed(path: str, fd: int, created: bool) -> None:
    """Release the lock of an open that failed, removing the lock file if that open made it."""
    try:
        if created:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + "-lock")
    finally:
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
