"""The SQL stores' reads for SPEC §7 (``read_job``, ``job_summary``, ``list_jobs``,
``read_targets``): one mixin for both, running the SQL of ``stores/_sql_reads``.

The store class names :class:`SQLiteReads` or :class:`PostgresReads` and gives ``_read`` (its
reader connection, one transaction or one statement: one consistent view). The two differ only
in the dialect (placeholders) and in SQLite's index hint for live listings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from .._model import Job, JobStatus, TargetState, TargetStatus
from . import _sql_reads as q
from ._protocol import JobCursor, JobSummary
from ._rules import job_from_row

T = TypeVar("T")


def _one(cursor: Any, decode: Callable[[Any], T]) -> T | None:
    row = cursor.fetchone()
    return None if row is None else decode(row)


class SQLReads:
    """The four reads, for a class with a SQL store's ``_read``."""

    _postgres: ClassVar[bool] = False

    async def _read(self, fn: Callable[[Any], T]) -> T:
        raise NotImplementedError  # the store's

    def _query(self, query: q.Query) -> q.Query:
        return q.for_postgres(query) if self._postgres else query

    async def read_job(self, job_id: str) -> Job | None:
        sql, params = self._query(q.read_job(job_id))
        return await self._read(lambda conn: _one(conn.execute(sql, params), job_from_row))

    async def job_summary(self, job_id: str) -> JobSummary | None:
        sql, params = self._query(q.job_summary(job_id))
        return await self._read(lambda conn: _one(conn.execute(sql, params), q.summary_from_row))

    async def list_jobs(
        self,
        caller: str,
        statuses: Sequence[JobStatus] | None,
        limit: int,
        before: JobCursor | None,
    ) -> list[JobSummary]:
        # Without statistics SQLite prefers the listing index (no sort) even for status=live,
        # and then walks every finished job of the caller: name the live jobs' partial index.
        hint = not self._postgres and q.only_live(statuses)
        index = "INDEXED BY jobs_live" if hint else ""
        sql, params = self._query(q.list_jobs(caller, statuses, limit, before, index=index))
        return await self._read(
            lambda conn: [q.summary_from_row(r) for r in conn.execute(sql, params).fetchall()]
        )

    async def read_targets(
        self,
        job_id: str,
        after: int,
        limit: int,
        states: Sequence[TargetState] | None,
        *,
        results: bool = True,
    ) -> list[TargetStatus]:
        query = q.read_targets(job_id, after, limit, states, results=results)
        sql, params = self._query(query)
        # decoded in the reader's thread: results may be large JSON
        return await self._read(
            lambda conn: q.targets_from_rows(conn.execute(sql, params).fetchall())
        )


class SQLiteReads(SQLReads):
    """SQLiteStore's reads."""


class PostgresReads(SQLReads):
    """PostgresStore's reads.

    ``shared = True`` tells the engine that other instances write to this store: a follower of
    a job (``BatchEngine.watch``) reads it again once a second, so another instance's outcomes
    reach it within about a second.
    """

    _postgres = True
    shared: ClassVar[bool] = True
