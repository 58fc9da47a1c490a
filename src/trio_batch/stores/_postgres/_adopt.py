"""Taking over the live jobs of instances that are gone (``Store.resume``, SPEC §7).

An instance is gone when its heartbeat is older than its declared ``timeout``, or when its row
is missing (it closed, or another instance dropped it as dead). Adoption is a write; the
question "is there anything to adopt?" is a read, so an engine that asks every second costs
the database no commit while every instance is alive.
"""

from __future__ import annotations

from .._protocol import ResumedJob
from .._rules import (
    CRAWL_WINDOW,
    LIVE_SQL,
    PENDING_TARGETS_SQL,
    RESUME_JOB_COLUMNS,
    resumed_job,
)
from ._schema import Conn
from ._sql import fold_shards

_DEAD = "heartbeat_at < clock_timestamp() - timeout * interval '1 second'"


def drop_dead(conn: Conn, instance: str) -> None:
    """Forget the instances that are gone (never ``instance``) and fold their byte shards.

    Their live jobs stay theirs until an :func:`adopt`: a job whose instance is missing is
    a gone instance's job.
    """
    conn.execute(f"DELETE FROM instances WHERE id <> %s AND {_DEAD}", (instance,))
    fold_shards(conn)


def orphaned(conn: Conn, instance: str) -> bool:
    """Whether some live job belongs to an instance that is gone (a read; writes nothing)."""
    row = conn.execute(
        f"""
        SELECT EXISTS (
            SELECT 1 FROM jobs
            WHERE status IN {LIVE_SQL} AND instance <> %(me)s
                AND instance NOT IN (SELECT id FROM instances WHERE NOT ({_DEAD}))
        )
        """,
        {"me": instance},
    ).fetchone()
    return bool(row is not None and row[0])


def adopt(conn: Conn, instance: str, now: float, *, own_jobs: bool) -> list[ResumedJob]:
    """Take over the live jobs of instances that are gone, oldest first.

    As ``_sql.reap``, but the jobs stay live: they move to ``instance`` and their running
    targets go back to pending. With ``own_jobs`` this instance's own live jobs too. Two
    instances adopting at once take each job once (the second's update finds it owned by a
    live instance).
    """
    drop_dead(conn, instance)
    jobs = conn.execute(
        f"""
        UPDATE jobs SET instance = %(me)s, updated_at = %(now)s
        WHERE status IN {LIVE_SQL}
            AND (instance = %(own)s OR instance NOT IN (SELECT id FROM instances))
        RETURNING {RESUME_JOB_COLUMNS}, seq
        """,
        {"me": instance, "own": instance if own_jobs else None, "now": now},
    ).fetchall()
    if not jobs:
        return []
    ids = [str(r[0]) for r in jobs]
    conn.execute(
        "UPDATE targets SET status = 'pending', started_at = NULL, claim = NULL, "
        "claim_until = NULL WHERE job_id = ANY(%s) AND status = 'running'",
        (ids,),
    )
    pending = PENDING_TARGETS_SQL.replace("?", "%s")
    resumed = []
    jobs.sort(key=lambda r: (float(r[4]), int(r[-1])))  # created_at, then seq
    for job in jobs:
        crawl = conn.execute(
            "SELECT spec, done FROM crawls WHERE job_id = %s", (job[0],)
        ).fetchone()
        window = CRAWL_WINDOW if crawl else None  # None: no limit (a batch's are few)
        rows = conn.execute(pending, (job[0], window)).fetchall()
        resumed.append(resumed_job(job, rows, None if crawl is None else (crawl[0], crawl[1])))
    return resumed
