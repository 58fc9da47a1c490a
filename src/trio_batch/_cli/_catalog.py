"""Read-only queries over a SQLite store's file that the ``Store`` protocol has no call for.

``Store.list_jobs`` pages one caller's jobs (what ``GET /v1/batch`` needs); the command line's
``jobs`` and ``timeline`` list every caller's, and its job arguments may be id prefixes. Those
are an operator's views of one file, not store operations, so they read the file directly,
read-only (``mode=ro``, ``query_only``): no migration, no writer thread, and they work beside a
writing ``run`` or ``serve``. They read only the ``jobs`` and ``targets`` tables of
``stores/_sqlite/_schema.py``, whose columns here every schema version has.
"""

from __future__ import annotations

import datetime
import os
import sqlite3
from dataclasses import dataclass
from typing import final

import trio

from ..stores._sqlite._schema import NOT_A_DATABASE
from ._common import UsageError, folder_message

__all__ = ["JobRow", "find_ids", "iso", "list_jobs", "resolve_id"]

_MAX_CANDIDATES = 5  # ids named in an "ambiguous prefix" message


def iso(epoch: float) -> str:
    """``epoch`` seconds as an ISO 8601 UTC time, to the millisecond; "" for 0."""
    if not epoch:
        return ""
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@final
@dataclass(frozen=True, slots=True)
class JobRow:
    """One job of a store, with its targets counted by state."""

    id: str
    caller: str
    status: str
    error: str
    targets_total: int
    counts: dict[str, int]
    created_at: float
    updated_at: float


def _connect(db: str) -> sqlite3.Connection:
    if os.path.isdir(db):
        raise UsageError(folder_message(db))
    if not os.path.isfile(db):
        raise UsageError(f"{db} does not exist; pass the store with --db")
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        raise UsageError(_read_error(db, exc)) from None
    return conn


def _read_error(db: str, exc: sqlite3.Error) -> str:
    if getattr(exc, "sqlite_errorname", "") in NOT_A_DATABASE:
        return f"{db} is not a trio-batch database ({exc}); pass another --db"
    return f"cannot read {db}: {exc}; is it a trio-batch database?"


def _list(db: str, ids: list[str] | None) -> list[JobRow]:
    conn = _connect(db)
    try:
        where, params = "", list(ids or [])
        if ids is not None:
            where = f"WHERE id IN ({', '.join('?' * len(ids))})" if ids else "WHERE 0"
        jobs = conn.execute(
            "SELECT id, caller, status, error, targets_total, created_at, updated_at FROM jobs "
            f"{where} ORDER BY created_at, id",
            params,
        ).fetchall()
        counts: dict[str, dict[str, int]] = {}
        target_where = where.replace("WHERE id", "WHERE job_id")
        for job_id, state, n in conn.execute(
            f"SELECT job_id, status, count(*) FROM targets {target_where} GROUP BY job_id, status",
            params,
        ):
            counts.setdefault(job_id, {})[state] = n
    except sqlite3.Error as exc:
        raise UsageError(_read_error(db, exc)) from None
    finally:
        conn.close()
    states = ("pending", "running", "done", "failed")
    return [
        JobRow(
            id=row[0],
            caller=row[1],
            status=row[2],
            error=row[3],
            targets_total=row[4],
            counts={s: counts.get(row[0], {}).get(s, 0) for s in states},
            created_at=row[5],
            updated_at=row[6],
        )
        for row in jobs
    ]


async def list_jobs(db: str, ids: list[str] | None = None) -> list[JobRow]:
    """The jobs of the SQLite store ``db`` (only ``ids`` when given), oldest first.

    Raises:
        UsageError: ``db`` is missing or not a trio-batch database.
    """
    return await trio.to_thread.run_sync(_list, db, ids)


def _find(db: str, prefix: str) -> list[str]:
    conn = _connect(db)
    try:
        rows = conn.execute(
            "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (prefix, prefix + "\U0010ffff", _MAX_CANDIDATES + 1),
        ).fetchall()
    except sqlite3.Error as exc:
        raise UsageError(_read_error(db, exc)) from None
    finally:
        conn.close()
    return [row[0] for row in rows]


async def find_ids(db: str, prefix: str) -> list[str]:
    """Up to six ids of ``db`` that start with ``prefix``, in order."""
    return await trio.to_thread.run_sync(_find, db, prefix)


async def resolve_id(db: str, prefix: str) -> str | None:
    """The one job id of ``db`` that starts with ``prefix``; None when there is none.

    Raises:
        UsageError: several ids start with ``prefix`` (the message counts and names them and
            asks for more characters), or ``db`` cannot be read.
    """
    prefix = prefix.strip().lower()
    if not prefix:
        raise UsageError("the job id is empty; pass an id, or its first characters")
    found = await find_ids(db, prefix)
    if len(found) > 1:
        count = f"{len(found)}" if len(found) <= _MAX_CANDIDATES else f"more than {_MAX_CANDIDATES}"
        names = ", ".join(found[:_MAX_CANDIDATES])
        raise UsageError(
            f"{prefix} is the start of {count} job ids ({names}); give more characters"
        )
    return found[0] if found else None
