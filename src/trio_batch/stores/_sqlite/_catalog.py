"""Read-only views of a SQLite store's file for an operator, beside whatever process writes it.

``Store.list_jobs`` pages one caller's jobs (what ``GET /v1/batch`` needs); an operator's
``trio-batch jobs`` and ``timeline`` list every caller's, and name jobs by the first characters
of their ids. These are views of one file, not store operations, so they read it directly and
read-only (``mode=ro``, ``query_only``): no migration, no writer thread, no lock, and they work
while a ``run`` or ``serve`` writes it. They read only the ``jobs`` and ``targets`` columns that
every schema version of ``_schema`` has.

Whether another process writes the file, and which one, is read from the writer's lock
(``_schema.lock_file``) and, on Linux, ``/proc/locks``.

Each function here runs in a thread (``SQLiteStore`` wraps them). A failure of SQLite's
becomes a :class:`~trio_batch.StoreError` raised from it, as ``_schema.open_error`` does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator

from ..._errors import StoreError
from ..._model import Job, JobStatus
from .._protocol import JobSummary
from ._schema import NOT_A_DATABASE

_COUNTED = ("pending", "running", "done", "failed")


def is_not_a_database(exc: BaseException) -> bool:
    """Whether ``exc`` (or the SQLite error it was raised from) says the file is no database."""
    cause = exc if isinstance(exc, sqlite3.Error) else exc.__cause__
    return getattr(cause, "sqlite_errorname", "") in NOT_A_DATABASE


@contextlib.contextmanager
def _reading(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``path`` for one view, closed after it; SQLite's errors in
    opening or reading become :class:`~trio_batch.StoreError` raised from them."""
    conn = None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA query_only = ON")
        yield conn
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read {path}: {exc}") from exc
    finally:
        if conn is not None:
            conn.close()


def list_all_jobs(path: str, ids: list[str] | None) -> list[JobSummary]:
    """The jobs of the file ``path`` (only ``ids`` when given), oldest first, with their
    targets counted by state.

    Raises:
        StoreError: SQLite cannot read ``path`` as a trio-batch store (raised from its error).
    """
    with _reading(path) as conn:
        where, params = "", list(ids or [])
        if ids is not None:
            where = f"WHERE id IN ({', '.join('?' * len(ids))})" if ids else "WHERE 0"
        jobs = conn.execute(
            "SELECT id, caller, status, error, targets_total, targets_done, created_at, "
            f"updated_at, lease FROM jobs {where} ORDER BY created_at, id",
            params,
        ).fetchall()

        counts: dict[str, dict[str, int]] = {}
        target_where = where.replace("WHERE id", "WHERE job_id")
        for job_id, state, n in conn.execute(
            f"SELECT job_id, status, count(*) FROM targets {target_where} GROUP BY job_id, status",
            params,
        ):
            counts.setdefault(job_id, {})[state] = n

    return [_summary(row, counts.get(row[0], {})) for row in jobs]


_JobRow = tuple[str, str, str, str, int, int, float, float, float]


def _summary(row: _JobRow, counts: dict[str, int]) -> JobSummary:
    job_id, caller, status, error, total, done, created_at, updated_at, lease = row
    job = Job(
        id=job_id,
        caller=caller,
        status=JobStatus(status),
        error=error,
        targets_total=total,
        targets_done=done,
        created_at=created_at,
        updated_at=updated_at,
        lease=lease,
    )
    pending, running, finished, failed = (counts.get(state, 0) for state in _COUNTED)
    return JobSummary(job, pending=pending, running=running, done=finished, failed=failed)


def find_job_ids(path: str, prefix: str, limit: int) -> list[str]:
    """Up to ``limit`` job ids of the file ``path`` that start with ``prefix``, in order.

    Raises:
        StoreError: SQLite cannot read ``path`` as a trio-batch store (raised from its error).
    """
    with _reading(path) as conn:
        rows = conn.execute(
            "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (prefix, prefix + "\U0010ffff", limit),
        ).fetchall()

    return [row[0] for row in rows]


def is_locked(path: str) -> bool:
    """Whether another process (or another store in this one) holds ``path``'s write lock."""
    try:
        fd = os.open(path + "-lock", os.O_RDONLY)
    except OSError:
        return False

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def lock_holder(path: str) -> str:
    """Who holds ``path``'s write lock: "pid N, name", or "" if unknown.

    Reads ``/proc/locks`` (Linux); elsewhere, or when it cannot tell, returns "".
    """
    try:
        inode = os.stat(path + "-lock").st_ino
        with open("/proc/locks", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""

    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[4] == str(os.getpid()):
            continue
        if fields[5].rsplit(":", 1)[-1] == str(inode):
            pid = fields[4]
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                    return f"pid {pid}, {f.read().strip()}"
            except OSError:
                return f"pid {pid}"
    return ""
