"""The SQL of the store: the prepared write statements, and the queries run in worker threads.

Every function here is sync and takes a connection: it runs in a worker thread (see
``_threads``), and knows nothing of Trio or of the write queue. The common writes are single
statements (``Statement``), prepared once per connection, so the write queue can send a batch
of them as one query; the rest are plain functions of several statements, run inside the
transaction their caller opens.

Byte counts are sharded by instance (``counters``, shard = instance id), so instances that
store results at once never wait on one counter row; :func:`fold_shards` moves the shards of
instances that are gone into shard ``''``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import final

from ..._model import Snapshot
from .._protocol import CacheEntry
from .._rules import JOB_COLUMNS, LIVE_SQL, Row, job_from_row, target_from_row
from ._schema import LOCK_CACHE, LOCK_EVICT, Conn, Cursor, advisory_lock


@final
@dataclass(frozen=True, slots=True)
class Statement:
    """A write of one SQL statement: prepared once per connection, batched into one query."""

    name: str
    types: str
    sql: str


# -- the write statements, prepared on each connection the writer uses -------------------------

ADMIT = Statement(
    "tb_admit",
    "(integer, text, text, text, text, double precision, double precision, text, text[], "
    "text[], bigint, bigint, bigint)",
    "SELECT reused, caller_live, total_live, admitted "
    "FROM admit_job($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
)

START = Statement(
    "tb_start_target",
    "(text, integer, double precision)",
    f"""
    WITH j AS (
        UPDATE jobs SET status = 'running', updated_at = $3
        WHERE id = $1 AND status IN {LIVE_SQL} RETURNING id
    ), t AS (
        UPDATE targets SET status = 'running' WHERE job_id IN (SELECT id FROM j) AND idx = $2
    )
    SELECT count(*) FROM j
    """,
)

RELEASE = Statement(
    "tb_release_target",
    "(text, integer, double precision)",
    """
    WITH t AS (
        UPDATE targets SET status = 'pending'
        WHERE job_id = $1 AND idx = $2 AND status = 'running' RETURNING job_id
    )
    UPDATE jobs SET updated_at = $3 WHERE id IN (SELECT job_id FROM t)
    """,
)

# Store the target, count it, and end the job when it was the last, in one statement; the
# CASE over the job's target states is terminal_status() in SQL. Returns the job's status
# before and after, and the stored result bytes of every instance.
FINISH = Statement(
    "tb_finish_target",
    "(text, integer, text, text, text, text, bigint, double precision, text)",
    f"""
    WITH t AS (
        UPDATE targets SET status = $3, result = $4, error = $5, hint = $6
        WHERE job_id = $1 AND idx = $2 AND status NOT IN ('done', 'failed')
        RETURNING job_id
    ), o AS (
        SELECT id, status FROM jobs WHERE id IN (SELECT job_id FROM t) FOR UPDATE
    ), j AS (
        UPDATE jobs AS j SET
            targets_done = j.targets_done + 1,
            bytes = j.bytes + $7,
            updated_at = $8,
            status = CASE
                WHEN o.status IN {LIVE_SQL} AND j.targets_done + 1 = j.targets_total THEN (
                    SELECT CASE
                        WHEN bool_and(x.s = 'done') THEN 'done'
                        WHEN bool_and(x.s = 'failed') THEN 'failed'
                        ELSE 'partial' END
                    FROM (
                        SELECT status AS s FROM targets WHERE job_id = $1 AND idx <> $2
                        UNION ALL SELECT $3
                    ) AS x
                )
                ELSE j.status END,
            lease = CASE
                WHEN o.status IN {LIVE_SQL} AND j.targets_done + 1 = j.targets_total THEN $8
                ELSE j.lease END
        FROM o WHERE j.id = o.id
        RETURNING o.status AS before, j.status AS after
    ), c AS (
        INSERT INTO counters (kind, shard, bytes)
        SELECT 'results', $9, $7 FROM j WHERE $7 <> 0
        ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes
    )
    SELECT j.before, j.after, (SELECT sum(bytes) FROM counters WHERE kind = 'results') + $7
    FROM j
    """,
)

CANCEL = Statement(
    "tb_cancel",
    "(text, double precision)",
    f"""
    UPDATE jobs AS j SET status = 'cancelled', updated_at = $2, lease = $2
    FROM (SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE) AS old
    WHERE j.id = old.id AND old.status IN {LIVE_SQL}
    RETURNING {", ".join("old." + c.strip() for c in JOB_COLUMNS.split(","))}
    """,
)

INTERRUPT = Statement(
    "tb_interrupt",
    "(text[], double precision)",
    f"""
    WITH j AS (
        UPDATE jobs SET status = 'failed', error = 'interrupted', updated_at = $2, lease = $2
        WHERE id = ANY($1) AND status IN {LIVE_SQL}
        RETURNING id
    ), t AS (
        UPDATE targets SET status = 'pending'
        WHERE job_id IN (SELECT id FROM j) AND status = 'running'
    )
    SELECT id FROM j
    """,
)

TOUCH = Statement(
    "tb_touch", "(text, double precision)", "UPDATE jobs SET lease = $2 WHERE id = $1"
)

STATEMENTS = (ADMIT, START, RELEASE, FINISH, CANCEL, INTERRUPT, TOUCH)


def prepare(conn: Conn) -> None:
    """Prepare on ``conn`` those of :data:`STATEMENTS` it lacks (they live as long as it does)."""
    have = {
        r[0]
        for r in conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'tb\\_%'")
    }
    missing = [s for s in STATEMENTS if s.name not in have]
    if missing:
        conn.execute(
            "; ".join(f"PREPARE {s.name} {s.types} AS {s.sql}" for s in missing).encode(),
            prepare=False,
        )


def one(cur: Cursor) -> Row:
    """The row a statement that always returns one row returned."""
    row = cur.fetchone()
    assert row is not None
    return row


# -- instances ---------------------------------------------------------------------------------


def register(conn: Conn, instance: str, timeout: float) -> None:
    """Record ``instance`` as alive, with a counter shard of its own."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO instances (id, pid, timeout) VALUES (%s, %s, %s)",
            (instance, os.getpid(), timeout),
        )
        conn.execute(
            "INSERT INTO counters (kind, shard) VALUES ('results', %s) ON CONFLICT DO NOTHING",
            (instance,),
        )


def deregister(conn: Conn, instance: str) -> None:
    """Forget ``instance``; its jobs still live are then failed by the next reap."""
    with conn.transaction():
        conn.execute("DELETE FROM instances WHERE id = %s", (instance,))
        fold_shards(conn)


def heartbeat(conn: Conn, instance: str) -> bool:
    """Mark ``instance`` alive now; False if its row is gone (another instance reaped it)."""
    cur = conn.execute(
        "UPDATE instances SET heartbeat_at = clock_timestamp() WHERE id = %s", (instance,)
    )
    return cur.rowcount > 0


def fold_shards(conn: Conn) -> None:
    """Move the byte counts of instances that are gone into shard ''."""
    conn.execute(
        """
        WITH gone AS (
            DELETE FROM counters WHERE kind = 'results' AND shard <> ''
                AND shard NOT IN (SELECT id FROM instances)
            RETURNING bytes
        )
        UPDATE counters SET bytes = bytes + (SELECT coalesce(sum(bytes), 0) FROM gone)
        WHERE kind = 'results' AND shard = ''
        """
    )


def reap(conn: Conn, instance: str, now: float, *, own_jobs: bool) -> list[str]:
    """Fail the live jobs of instances that are gone, drop those instances; return the job ids.

    An instance is gone when its heartbeat is older than its declared ``timeout``. The
    calling ``instance`` is never taken for gone: it is running this. With ``own_jobs`` its
    own live jobs are failed too (``recover``: an engine opening on this instance starts with
    none). Failed jobs end ``failed``/``interrupted`` with their running targets pending again,
    and the counter shards of the gone instances are folded into shard ``''``.
    """
    rows = conn.execute(
        f"""
        WITH dead AS (
            DELETE FROM instances
            WHERE id <> %(me)s AND heartbeat_at < clock_timestamp() - timeout * interval '1 second'
            RETURNING id
        ), alive AS (
            SELECT id FROM instances WHERE id NOT IN (SELECT id FROM dead)
        ), j AS (
            UPDATE jobs SET status = 'failed', error = 'interrupted', updated_at = %(now)s,
                lease = %(now)s
            WHERE status IN {LIVE_SQL}
                AND (instance = %(own)s OR instance NOT IN (SELECT id FROM alive))
            RETURNING id
        ), t AS (
            UPDATE targets SET status = 'pending'
            WHERE job_id IN (SELECT id FROM j) AND status = 'running'
        )
        SELECT id FROM j
        """,
        {"me": instance, "own": instance if own_jobs else None, "now": now},
    ).fetchall()
    fold_shards(conn)
    return [str(r[0]) for r in rows]


# -- byte caps -----------------------------------------------------------------------------------


def evict(conn: Conn, locks: int, shard: str, max_bytes: int) -> int:
    """Delete the finished jobs with the oldest lease while results exceed ``max_bytes``.

    Returns how many were deleted; their bytes come off counter ``shard``. Call it inside a
    transaction: it takes the eviction lock, so two instances never both evict for the same
    excess.
    """
    advisory_lock(conn, locks, LOCK_EVICT)
    row = conn.execute(
        f"""
        WITH total AS (
            SELECT coalesce(sum(bytes), 0) AS b FROM counters WHERE kind = 'results'
        ), ordered AS (
            SELECT id, sum(bytes) OVER (ORDER BY lease, seq ROWS UNBOUNDED PRECEDING)
                - bytes AS before
            FROM jobs WHERE status NOT IN {LIVE_SQL}
        ), gone AS (
            DELETE FROM jobs WHERE id IN (
                SELECT o.id FROM ordered AS o, total WHERE total.b - o.before > %(max)s
            )
            RETURNING bytes
        ), c AS (
            INSERT INTO counters (kind, shard, bytes)
            SELECT 'results', %(shard)s, -sum(bytes) FROM gone HAVING count(*) > 0
            ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes
        )
        SELECT count(*) FROM gone
        """,
        {"max": max_bytes, "shard": shard},
    ).fetchone()
    assert row is not None
    return int(row[0])


# -- reads ---------------------------------------------------------------------------------------


def snapshot(conn: Conn, job_id: str) -> Snapshot | None:
    """The job and its targets in input order, or None."""
    # One statement: one consistent view of the job and its targets.
    rows = conn.execute(
        f"""
        SELECT {", ".join("j." + c.strip() for c in JOB_COLUMNS.split(","))},
            t.idx, t.url, t.status, t.result, t.error, t.hint, t.options
        FROM jobs AS j LEFT JOIN targets AS t ON t.job_id = j.id
        WHERE j.id = %s ORDER BY t.idx
        """,
        (job_id,),
    ).fetchall()
    if not rows:
        return None
    targets = [target_from_row(r[9:16]) for r in rows if r[9] is not None]
    return Snapshot(job_from_row(rows[0]), targets)


# -- the web cache -------------------------------------------------------------------------------


def cache_get(conn: Conn, key: str) -> CacheEntry | None:
    """The entry under ``key``, expired or not, or None."""
    row = conn.execute(
        "SELECT body, meta, stored_at, expires_at FROM web_cache WHERE key = %s", (key,)
    ).fetchone()
    return (
        None
        if row is None
        else CacheEntry(bytes(row[0]), str(row[1]), float(row[2]), float(row[3]))
    )


def cache_put(conn: Conn, locks: int, key: str, entry: CacheEntry, max_bytes: int) -> None:
    """Replace the entry under ``key``, then drop the oldest while over ``max_bytes``.

    Call it inside a transaction: it takes the cache lock, so the byte count stays exact.
    """
    advisory_lock(conn, locks, LOCK_CACHE)
    old = conn.execute("DELETE FROM web_cache WHERE key = %s RETURNING bytes", (key,)).fetchone()
    conn.execute(
        "INSERT INTO web_cache (key, body, meta, stored_at, expires_at, bytes) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (key, entry.body, entry.meta_json, entry.stored_at, entry.expires_at, len(entry.body)),
    )
    total = conn.execute(
        "UPDATE counters SET bytes = bytes + %s WHERE kind = 'cache' AND shard = '' "
        "RETURNING bytes",
        (len(entry.body) - (old[0] if old else 0),),
    ).fetchone()
    assert total is not None
    if total[0] <= max_bytes:
        return
    conn.execute(
        """
        WITH ordered AS (
            SELECT key, sum(bytes) OVER (ORDER BY stored_at, seq ROWS UNBOUNDED PRECEDING)
                - bytes AS before
            FROM web_cache
        ), gone AS (
            DELETE FROM web_cache
            WHERE key IN (SELECT key FROM ordered WHERE %(total)s - before > %(max)s)
            RETURNING bytes
        )
        UPDATE counters SET bytes = bytes - (SELECT coalesce(sum(bytes), 0) FROM gone)
        WHERE kind = 'cache' AND shard = ''
        """,
        {"total": total[0], "max": max_bytes},
    )
