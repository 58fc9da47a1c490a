"""PostgresStore's reads for SPEC §7 (``job_summary``, ``list_jobs``, ``read_targets``).

A mixin, so the store class only names it; the SQL is shared with SQLite
(``stores/_sql_reads``). Each read is one statement, so it sees one consistent view.

``shared = True`` tells the engine that other instances write to this store: a follower of a
job (``BatchEngine.watch``) reads it again once a second, so another instance's outcomes reach
it within about a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, TypeVar

from ..._model import Job, JobStatus, TargetState, TargetStatus
from .. import _sql_reads as q
from .._protocol import JobCursor, JobSummary
from .._rules import job_from_row
from ._schema import Conn

T = TypeVar("T")


def read_job(conn: Conn, job_id: str) -> Job | None:
    row = conn.execute(*q.for_postgres(q.read_job(job_id))).fetchone()
    return None if row is None else job_from_row(row)


def job_summary(conn: Conn, job_id: str) -> JobSummary | None:
    row = conn.execute(*q.for_postgres(q.job_summary(job_id))).fetchone()
    return None if row is None else q.summary_from_row(row)


def list_jobs(
    conn: Conn,
    caller: str,
    statuses: Sequence[JobStatus] | None,
    limit: int,
    before: JobCursor | None,
) -> list[JobSummary]:
    sql, params = q.for_postgres(q.list_jobs(caller, statuses, limit, before))
    return [q.summary_from_row(r) for r in conn.execute(sql, params).fetchall()]


def read_targets(
    conn: Conn,
    job_id: str,
    after: int,
    limit: int,
    states: Sequence[TargetState] | None,
    results: bool,
) -> list[TargetStatus]:
    sql, params = q.for_postgres(q.read_targets(job_id, after, limit, states, results=results))
    return q.targets_from_rows(conn.execute(sql, params).fetchall())


class PostgresReads:
    """The three reads, for a class with PostgresStore's ``_read``."""

    shared: ClassVar[bool] = True

    async def _read(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError  # PostgresStore's

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
