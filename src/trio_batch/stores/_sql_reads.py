"""The reads of SPEC §7 in SQL, once for SQLite and PostgreSQL: a job's row, its counts, a page of a
caller's jobs (newest first, on the ``(caller, created_at, id)`` index), and a chunk of a job's
targets. Each is one statement, so it sees one consistent view without a transaction.

The builders return ``(sql, params)`` with ``?`` placeholders; :func:`for_postgres` turns them
into psycopg's ``%s``. The decoders turn the rows into the protocol's types.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._model import JobStatus, TargetState, TargetStatus
from ._protocol import JobCursor, JobSummary
from ._rules import JOB_COLUMNS, Row, job_from_row, target_from_row

LISTING_INDEX = "CREATE INDEX jobs_by_caller ON jobs (caller, created_at DESC, id DESC)"
"""The index that makes a page of ``list_jobs`` cost its rows (a schema migration adds it)."""

_JOB = ", ".join(f"j.{c.strip()}" for c in JOB_COLUMNS.split(","))
_PAGE = ", ".join(f"p.{c.strip()}" for c in JOB_COLUMNS.split(","))
_COUNTS = ", ".join(
    f"COALESCE(SUM(CASE WHEN t.status = '{s.value}' THEN 1 ELSE 0 END), 0)" for s in TargetState
)
_N_JOB = len(JOB_COLUMNS.split(","))

Query = tuple[str, list[object]]


def for_postgres(query: Query) -> Query:
    """The same query with psycopg's placeholders."""
    sql, params = query
    return sql.replace("?", "%s"), params


def read_job(job_id: str) -> Query:
    return f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", [job_id]


def job_summary(job_id: str) -> Query:
    sql = (
        f"SELECT {_JOB}, {_COUNTS} FROM jobs AS j LEFT JOIN targets AS t ON t.job_id = j.id "
        f"WHERE j.id = ? GROUP BY {_JOB}"
    )
    return sql, [job_id]


_LIVE_SQL = "status IN ('queued', 'running')"
"""The live jobs, written as the partial indexes on them are (SQLite uses such an index only
when the query holds its very WHERE term)."""


def only_live(statuses: Sequence[JobStatus] | None) -> bool:
    """Whether a listing asks for some live jobs and no others (a store may read its live-job
    index then: the listing's WHERE holds the index's own term)."""
    return bool(statuses) and all(JobStatus(s).live for s in statuses or ())


def list_jobs(
    caller: str,
    statuses: Sequence[JobStatus] | None,
    limit: int,
    before: JobCursor | None,
    *,
    index: str = "",
) -> Query:
    where = ["caller = ?"]
    params: list[object] = [caller]
    if statuses is not None:
        # Literal values (from the enum), so a planner can prove that a partial index on the
        # live statuses applies: status=live then reads the few live jobs, not the listing.
        values = ", ".join(f"'{JobStatus(s).value}'" for s in statuses)
        where.append(f"status IN ({values})" if statuses else "1 = 0")
        if only_live(statuses):  # queued or running alone: the index's term, then the status
            where.append(_LIVE_SQL)
    if before is not None:
        # A range on the index's second column, then a filter for the ties.
        where.append("created_at <= ? AND (created_at < ? OR id < ?)")
        params += [before[0], before[0], before[1]]
    columns = ", ".join(c.strip() for c in JOB_COLUMNS.split(","))
    sql = (
        f"WITH p AS (SELECT {columns} FROM jobs {index} WHERE {' AND '.join(where)} "
        "ORDER BY created_at DESC, id DESC LIMIT ?) "
        f"SELECT {_PAGE}, {_COUNTS} FROM p LEFT JOIN targets AS t ON t.job_id = p.id "
        f"GROUP BY {_PAGE} ORDER BY p.created_at DESC, p.id DESC"
    )
    return sql, [*params, limit]


def read_targets(
    job_id: str, after: int, limit: int, states: Sequence[TargetState] | None, *, results: bool
) -> Query:
    where = "job_id = ? AND idx > ?"
    params: list[object] = [job_id, after]
    if states is not None:
        if not states:
            where += " AND 1 = 0"
        else:
            where += f" AND status IN ({', '.join('?' for _ in states)})"
            params += [s.value for s in states]
    result = "result" if results else "NULL"
    sql = (
        f"SELECT idx, url, status, {result}, error, hint, options, started_at, finished_at "
        f"FROM targets WHERE {where} ORDER BY idx LIMIT ?"
    )
    return sql, [*params, limit]


def summary_from_row(row: Row) -> JobSummary:
    """Decode a row of :func:`job_summary` or :func:`list_jobs`."""
    pending, running, done, failed = (int(n) for n in row[_N_JOB : _N_JOB + 4])
    return JobSummary(job_from_row(row), pending, running, done, failed)


def targets_from_rows(rows: Sequence[Row]) -> list[TargetStatus]:
    return [target_from_row(r) for r in rows]
