"""What both SQL stores do the same way: SPEC §7's reads (``read_job``, ``job_summary``,
``list_jobs``, ``read_targets``, the SQL of ``stores/_sql_reads``; a crawl's frontier and answer,
``stores/_sql_crawl``) and the webhook delivery state
(``hooks_due``, ``hook_advance``, the SQL of ``stores/_outbox``; PostgreSQL's dispatchers
claim the outboxes they read, SQLite's one needs no claim). One mixin for both.

The store class names :class:`SQLiteCommon` or :class:`PostgresCommon` and gives ``_read`` (its
reader connection, one transaction or one statement: one consistent view) and ``_write``. The
two differ only in the dialect (placeholders, how "delivery open" is spelled as its partial index
says it, how the stored webhook's JSON is read), SQLite's index hint for live listings, and how
SQLite's writer queues an outbox write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from .._crawl import CrawlInfo
from .._model import Job, JobStatus, Target, TargetState, TargetStatus
from . import _sql_reads as q
from ._outbox import advance_query, claim_query, due_from_row, due_query
from ._protocol import HookDue, JobCursor, JobSummary
from ._rules import job_from_row, stored_target
from ._sql_crawl import CrawlSQL

T = TypeVar("T")


def _one(cursor: Any, decode: Callable[[Any], T]) -> T | None:
    row = cursor.fetchone()
    return None if row is None else decode(row)


class SQLCommon:
    """The reads and the webhook state, for a class with a SQL store's ``_read``."""

    _postgres: ClassVar[bool] = False
    _outbox_open: ClassVar[str]
    """The "delivery open" test, spelled as the partial index ``jobs_hooks`` is, so it serves."""
    _wants_targets: ClassVar[str]
    """Whether the stored webhook's decoded JSON has ``target`` among its ``events``."""

    async def _read(self, fn: Callable[[Any], T]) -> T:
        raise NotImplementedError  # the store's

    async def _write_outbox(self, fn: Callable[[Any], bool]) -> bool:
        raise NotImplementedError  # below, per store

    async def _write_claims(self, fn: Callable[[Any], list[HookDue]]) -> list[HookDue]:
        raise NotImplementedError  # PostgresCommon's

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

    async def crawl_frontier(
        self, job_id: str, after: int, limit: int
    ) -> list[tuple[int, Target, int, int]]:
        crawl = CrawlSQL(self._postgres)
        rows = await self._read(lambda conn: crawl.frontier(conn, job_id, after, limit))
        return [(i, stored_target(url, options), d, p) for i, url, options, d, p in rows]

    async def crawl_info(self, job_id: str) -> CrawlInfo | None:
        crawl = CrawlSQL(self._postgres)
        return await self._read(lambda conn: crawl.info(conn, job_id))

    async def hooks_due(
        self, now: float, limit: int, *, claim_for: float | None = None
    ) -> list[HookDue]:
        if claim_for is not None and self._postgres:
            return await self._claim_hooks(now, limit, claim_for)

        sql, params = self._query(due_query(self._outbox_open, self._wants_targets, now, limit))
        return await self._read(
            lambda conn: [due_from_row(r) for r in conn.execute(sql, params).fetchall()]
        )

    async def _claim_hooks(self, now: float, limit: int, claim_for: float) -> list[HookDue]:
        """Claim the due outboxes for this reader, one statement (``stores/_outbox``)."""
        query = claim_query(self._outbox_open, self._wants_targets, now, limit, claim_for)
        sql, params = self._query(query)

        def claim(conn: Any) -> list[HookDue]:
            return [due_from_row(r) for r in conn.execute(sql, params).fetchall()]

        claimed = await self._write_claims(claim)
        return sorted(claimed, key=lambda due: due.next_at)

    async def hook_advance(
        self,
        due: HookDue,
        *,
        cursor: int,
        attempts: int,
        since: float,
        next_at: float,
        close: bool = False,
    ) -> bool:
        query = advance_query(
            self._outbox_open, due, cursor, attempts, since, next_at, close, claims=self._postgres
        )
        sql, params = self._query(query)
        return await self._write_outbox(lambda conn: conn.execute(sql, params).rowcount == 1)


class SQLiteCommon(SQLCommon):
    """SQLiteStore's."""

    _outbox_open = "hook_open = 1"
    _wants_targets = (
        "EXISTS (SELECT 1 FROM json_each(NULLIF(webhook, ''), '$.events') WHERE value = 'target')"
    )

    async def _write(self, fn: Callable[[Any], T], *, independent: bool = False) -> T:
        raise NotImplementedError  # SQLiteStore's

    async def _write_outbox(self, fn: Callable[[Any], bool]) -> bool:
        # Touches only the job's outbox columns: running marks may be folded past it.
        return await self._write(fn, independent=True)


class PostgresCommon(SQLCommon):
    """PostgresStore's.

    ``shared = True`` tells the engine that other instances write to this store: a follower of
    a job (``BatchEngine.watch``) reads it again once a second, so another instance's outcomes
    reach it within about a second. Any instance delivers any job's webhook, one at a time:
    a dispatcher claims the outboxes it reads (``hooks_due(claim_for=...)``), another skips
    them until ``hook_advance`` releases the claim or it expires (``stores/_outbox``).
    """

    _postgres = True
    _outbox_open = "hook_open"
    _wants_targets = """NULLIF(webhook, '')::jsonb -> 'events' @> '["target"]'"""
    shared: ClassVar[bool] = True

    async def _write(self, fn: Callable[[Any], T]) -> T:
        raise NotImplementedError  # PostgresStore's

    async def _write_outbox(self, fn: Callable[[Any], bool]) -> bool:
        return await self._write(fn)

    async def _write_claims(self, fn: Callable[[Any], list[HookDue]]) -> list[HookDue]:
        return await self._write(fn)
