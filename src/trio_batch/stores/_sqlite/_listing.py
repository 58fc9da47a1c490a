"""SQLiteStore's reads for SPEC §7 (``job_summary``, ``list_jobs``, ``read_targets``).

A mixin, so the store class only names it; the SQL is shared with PostgreSQL
(``stores/_sql_reads``). Each read runs on a reader connection in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..._model import Job, JobStatus, TargetState, TargetStatus
from .. import _sql_reads as q
from .._protocol import JobCursor, JobSummary
from .._rules import job_from_row

T = TypeVar("T")


def read_job(conn: sqlite3.Connection, job_id: str) -> Job | None:
    row = conn.execute(*q.read_job(job_id)).fetchone()
    return None if row is None else job_from_row(row)


def job_summary(conn: sqlite3.Connection, job_id: str) -> JobSummary | None:
    row = conn.execute(*q.job_summary(job_id)).fetchone()
    return None if row is None else q.summary_from_row(row)


def list_jobs(
    conn: sqlite3.Connection,
    caller: str,
    statuses: Sequence[JobStatus] | None,
    limit: int,
    before: JobCursor | None,
) -> list[JobSummary]:
    # Without statistics SQLite prefers the listing index (no sort) even for status=live,
    # and then walks every finished job of the caller: name the live jobs' partial index.
    index = "INDEXED BY jobs_live" if q.only_live(statuses) else ""
    rows = conn.execute(*q.list_jobs(caller, statuses, limit, before, index=index)).fetchall()
    return [q.summary_from_row(r) for r in rows]


def read_targets(
    conn: sqlite3.Connection,
    job_id: str,
    after: int,
    limit: int,
    states: Sequence[TargetState] | None,
    results: bool,
) -> list[TargetStatus]:
    sql, params = q.read_targets(job_id, after, limit, states, results=results)
    return q.targets_from_rows(conn.execute(sql, params).fetchall())


class SQLiteReads:
    """The three reads, for a class with SQLiteStore's ``_read``."""

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        raise NotImplementedError  # SQLiteStore's

    async def read_job(self, job_id: str) -> Job | None:
        return await self._read(lambda conn: read_job(conn, job_id))

    async def job_summary(self, job_id: str) -> JobSummary | None:
        return await self._read(lambda conn: job_summary(conn, job_id))

    async def list_jobs(
        self,
        caller: str,
        statuses: Sequence[JobStatus] | None,
        limit: int,
        before: JobCursor | None,
    ) -> list[JobSummary]:
        return await self._read(lambda conn: list_jobs(conn, caller, statuses, limit, before))

    async def read_targets(
        self,
        job_id: str,
        after: int,
        limit: int,
        states: Sequence[TargetState] | None,
        *,
        results: bool = True,
    ) -> list[TargetStatus]:
        return await self._read(
            lambda conn: read_targets(conn, job_id, after, limit, states, results)
        )
