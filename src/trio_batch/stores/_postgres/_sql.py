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

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, final

from ..._model import JobStatus, Snapshot
from .._protocol import CacheEntry, FinishItem, Stored
from .._rules import (
    JOB_COLUMNS,
    LIVE_SQL,
    TARGET_COLUMNS,
    Row,
    job_from_row,
    target_from_row,
)
from ._schema import LOCK_CACHE, LOCK_EVICT, Conn, Cursor, advisory_lock


class MarkLike(Protocol):
    """A running mark: which target, and when."""

    job_id: str
    idx: int
    now: float


@final
@dataclass(frozen=True, slots=True)
class Statement:
    """A write of one SQL statement, sent prepared (psycopg's ``prepare=True``) and batched."""

    name: str
    sql: str

    def __post_init__(self) -> None:
        # One line: the driver caches its parse of queries up to 4 kB only.
        object.__setattr__(self, "sql", " ".join(self.sql.split()))


# -- the write statements ------------------------------------------------------------------------

ADMIT = Statement(
    "admit",
    "SELECT reused, caller_live, total_live, admitted FROM admit_job("
    "%s, %s, %s, %s, %s, %s, %s, %s, ARRAY(SELECT json_array_elements_text(%s::json)), "
    "ARRAY(SELECT json_array_elements_text(%s::json)), %s, %s, %s, %s, %s, %s, "
    "ARRAY(SELECT json_array_elements_text(%s::json)), %s)",
)

START = Statement(
    "start_target",
    f"""
    WITH j AS (
        UPDATE jobs SET status = 'running', updated_at = %(now)s
        WHERE id = %(id)s AND status IN {LIVE_SQL} RETURNING id
    ), t AS (
        UPDATE targets SET status = 'running', started_at = %(now)s
        WHERE job_id IN (SELECT id FROM j) AND idx = %(idx)s
            AND status IN ('pending', 'running')
    )
    SELECT count(*) FROM j
    """,
)

# The running marks of a batch, in one statement; returns the jobs that were no longer live
# (their marks wrote nothing). A replay is harmless: a mark never shares a batch with its
# target's outcome (the writer drops such a mark and the outcome's statement does its part).
START_MANY = Statement(
    "start_targets",
    f"""
    WITH m AS (
        SELECT e.x->>0 AS job_id, (e.x->>1)::int AS idx, (e.x->>2)::float8 AS now
        FROM json_array_elements(%(marks)s::json) AS e (x)
    ), j AS (
        UPDATE jobs SET status = 'running', updated_at = g.now
        FROM (SELECT job_id, max(now) AS now FROM m GROUP BY job_id) AS g
        WHERE jobs.id = g.job_id AND jobs.status IN {LIVE_SQL}
        RETURNING jobs.id
    ), t AS (
        UPDATE targets SET status = 'running', started_at = m.now FROM m
        WHERE targets.job_id = m.job_id AND targets.idx = m.idx
            AND targets.status IN ('pending', 'running') AND m.job_id IN (SELECT id FROM j)
    )
    SELECT DISTINCT job_id FROM m WHERE job_id NOT IN (SELECT id FROM j)
    """,
)

RELEASE = Statement(
    "release_target",
    """
    WITH t AS (
        UPDATE targets SET status = 'pending'
        WHERE job_id = %s AND idx = %s AND status = 'running' RETURNING job_id
    )
    UPDATE jobs SET updated_at = %s WHERE id IN (SELECT job_id FROM t)
    """,
)

# A group of outcomes in one statement (the engine's write path), over one bound array: store each
# target not stored yet, count them per job, end the jobs whose last target this is
# (terminal_status() in SQL, from the counts on the job's locked row) and add the bytes to this
# instance's counter shard. One row per item stored: its ordinal (from 1), job, the terminal status
# it gave its job (or NULL) and the stored result bytes of every instance after the statement; a row
# of ordinal 0 with those bytes when nothing was stored; a row of ordinal -1 for each job that was
# not live.
#
# ``claim`` (a fleet's claim of the target, stores/_postgres/_claims): an item with a claim is
# stored only while that claim is still its target's, and storing it frees the claim and gives
# the job a new turn at the end of the rotation; the statement then notifies the fleet once
# (turns_freed). A replay finds the claim already cleared by its first run and reports what is
# stored, as below.
#
# ``started`` marks items whose running mark the writer dropped (same batch): the statement
# does the mark's part (a queued job becomes running; a target that has its outcome keeps it,
# as with start_target). ``replay`` (the batch is sent again after a lost connection) reports an
# item already stored with the same outcome, whose job ended at this very ``now``, as the item
# that ended it: so a replay of a batch that had committed stores nothing twice and answers as
# the first run did. Jobs given back to the fleet's rotation take their new turns in the order
# their outcomes came (nt), not in the order of a join.
#
# Each stored item adds itself to its job's count of failed targets when it failed, and nothing
# else: a target stored is never stored again (``tg.status NOT IN ('done', 'failed')``, rechecked
# on the row's latest version) and no statement turns a failed target back, so the row it replaces
# was never failed. (A join of each item's previous row, once needed for that, made the planner
# scan the whole targets table for every group while its statistics were young.) The jobs are
# locked by key (``= ANY``) for the same reason.
FINISH_MANY = Statement(
    "finish_targets",
    f"""
    WITH v AS (
        SELECT DISTINCT ON (job_id, idx) * FROM (
            SELECT e.x->>0 AS job_id, (e.x->>1)::int AS idx, e.x->>2 AS state,
                e.x->>3 AS result, e.x->>4 AS error, e.x->>5 AS hint,
                (e.x->>6)::bigint AS size, (e.x->>7)::bool AS started,
                (e.x->>8)::float8 AS start, e.x->>9 AS claim, e.ord
            FROM json_array_elements(%(items)s::json) WITH ORDINALITY AS e (x, ord)
        ) AS v
        ORDER BY job_id, idx, ord
    ), o AS (
        SELECT id, status, targets_done, targets_failed, targets_total FROM jobs
        WHERE id = ANY(ARRAY(SELECT DISTINCT job_id FROM v)) FOR UPDATE
    ), t AS (
        UPDATE targets AS tg SET status = v.state, result = v.result, error = v.error,
            hint = v.hint, started_at = coalesce(v.start, tg.started_at), finished_at = %(now)s,
            claim = NULL, claim_until = NULL, busy_since = NULL
        FROM v
        WHERE tg.job_id = v.job_id AND tg.idx = v.idx AND tg.status NOT IN ('done', 'failed')
            AND (v.claim = '' OR tg.claim = v.claim)
        RETURNING v.ord, v.job_id, v.idx, v.state, v.size, v.claim <> '' AS claimed,
            (v.state = 'failed')::int AS failed
    ), r AS (
        SELECT t.*, row_number() OVER (PARTITION BY t.job_id ORDER BY t.ord) AS rank FROM t
    ), a AS (
        SELECT job_id, count(*) AS n, sum(size) AS bytes, bool_or(claimed) AS claimed,
            sum(failed) AS failed
        FROM t GROUP BY job_id
    ), nt AS (
        SELECT q.job_id, nextval('turns') AS turn FROM (
            SELECT job_id, min(ord) AS first FROM t WHERE claimed GROUP BY job_id ORDER BY 2
        ) AS q
    ), fin AS (
        SELECT o.id, o.status, o.targets_done, o.targets_total, a.n, a.bytes, a.claimed, a.failed,
            CASE WHEN o.status IN {LIVE_SQL} AND o.targets_done < o.targets_total
                AND o.targets_done + a.n >= o.targets_total THEN (CASE
                    WHEN o.targets_failed + a.failed <= 0 THEN 'done'
                    WHEN o.targets_failed + a.failed >= o.targets_total THEN 'failed'
                    ELSE 'partial' END
            ) END AS terminal,
            o.id IN (SELECT job_id FROM v WHERE started) AS started, nt.turn
        FROM o LEFT JOIN a ON a.job_id = o.id LEFT JOIN nt ON nt.job_id = o.id
    ), j AS (
        UPDATE jobs AS jb SET
            targets_done = jb.targets_done + coalesce(fin.n, 0),
            targets_failed = jb.targets_failed + coalesce(fin.failed, 0),
            bytes = jb.bytes + coalesce(fin.bytes, 0),
            updated_at = %(now)s,
            status = CASE
                WHEN fin.terminal IS NOT NULL THEN fin.terminal
                WHEN fin.started AND jb.status = 'queued' THEN 'running'
                ELSE jb.status END,
            lease = CASE WHEN fin.terminal IS NOT NULL THEN %(now)s ELSE jb.lease END,
            turn = coalesce(fin.turn, jb.turn)
        FROM fin
        WHERE jb.id = fin.id AND (fin.n IS NOT NULL OR (fin.started AND fin.status IN {LIVE_SQL}))
    ), c AS (
        INSERT INTO counters (kind, shard, bytes)
        SELECT 'results', %(instance)s, sum(size) FROM t HAVING coalesce(sum(size), 0) <> 0
        ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes
    ), rp AS (
        SELECT DISTINCT ON (v.job_id) v.ord, v.job_id, jb.status AS terminal
        FROM v JOIN targets AS tg ON tg.job_id = v.job_id AND tg.idx = v.idx
            JOIN jobs AS jb ON jb.id = v.job_id
        WHERE %(replay)s AND v.ord NOT IN (SELECT ord FROM t)
            AND tg.status = v.state AND tg.result IS NOT DISTINCT FROM v.result
            AND tg.error = v.error AND tg.hint = v.hint
            AND jb.status IN ('done', 'failed', 'partial')
            AND jb.lease = %(now)s AND jb.updated_at = %(now)s
        ORDER BY v.job_id, v.ord DESC
    ), total AS (
        SELECT (SELECT coalesce(sum(bytes), 0) FROM counters WHERE kind = 'results')
            + (SELECT coalesce(sum(size), 0) FROM t) AS b,
            (SELECT count(*) FROM (
                SELECT turns_freed() FROM (SELECT 1 FROM t WHERE claimed LIMIT 1) AS one
            ) AS n) AS freed
    )
    SELECT r.ord, r.job_id, CASE WHEN fin.targets_done + r.rank = fin.targets_total
        THEN fin.terminal END, total.b
    FROM r JOIN fin ON fin.id = r.job_id, total
    UNION ALL SELECT rp.ord, rp.job_id, rp.terminal, total.b FROM rp, total
    UNION ALL SELECT 0, NULL, NULL, total.b FROM total
    UNION ALL SELECT -1, o.id, NULL, 0 FROM o WHERE o.status NOT IN {LIVE_SQL}
    """,
)

CANCEL = Statement(
    "cancel",
    f"""
    UPDATE jobs AS j SET status = 'cancelled', updated_at = %s, lease = %s
    FROM (SELECT {JOB_COLUMNS} FROM jobs WHERE id = %s FOR UPDATE) AS old
    WHERE j.id = old.id AND old.status IN {LIVE_SQL}
    RETURNING {", ".join("old." + c.strip() for c in JOB_COLUMNS.split(","))}
    """,
)

# ``replay``: a batch sent again after a lost connection also reports the jobs its first run
# failed (same ``now``), so the caller hears of them once.
INTERRUPT = Statement(
    "interrupt",
    f"""
    WITH j AS (
        UPDATE jobs SET status = 'failed', error = 'interrupted', updated_at = %(now)s,
            lease = %(now)s
        WHERE id = ANY(%(ids)b::text[]) AND (status IN {LIVE_SQL} OR (%(replay)s
            AND status = 'failed' AND error = 'interrupted' AND lease = %(now)s))
        RETURNING id
    ), t AS (
        UPDATE targets SET status = 'pending', claim = NULL, claim_until = NULL
        WHERE job_id IN (SELECT id FROM j) AND status = 'running'
    )
    SELECT id FROM j
    """,
)

TOUCH = Statement("touch", "UPDATE jobs SET lease = %s WHERE id = %s")


@dataclass(slots=True)
class FinishReply:
    """What a group of outcomes did: one result per item, and what the store must know."""

    results: list[Stored | Exception]
    total: int
    """Stored result bytes of every instance afterwards (the eviction check)."""
    not_live: set[str] = field(default_factory=set)
    """Jobs of the group that were no longer live, or that the group ended."""


def marks_params(marks: Sequence[MarkLike]) -> dict[str, object]:
    """The parameters of :data:`START_MANY` for ``marks``.

    Groups travel as one JSON array (rows of arrays) rather than as typed arrays: the driver
    dumps a typed array element by element in Python, ``json.dumps`` does it in C.
    """
    return {"marks": json.dumps([(m.job_id, m.idx, m.now) for m in marks])}


def finish_params(
    items: Sequence[FinishItem],
    now: float,
    started: Mapping[tuple[str, int], float],
    instance: str,
    replay: bool,
) -> dict[str, object]:
    """The parameters of :data:`FINISH_MANY` for ``items``; ``started``: dropped marks' times."""
    rows = [
        (
            job_id,
            idx,
            o.state.value,
            o.result_json,
            o.error,
            o.hint,
            o.size,
            (job_id, idx) in started,
            started.get((job_id, idx)),
            o.claim,
        )
        for job_id, idx, o in items
    ]
    return {"items": json.dumps(rows), "now": now, "instance": instance, "replay": replay}


def finish_reply(rows: Sequence[Row], n: int) -> FinishReply:
    """Read the rows :data:`FINISH_MANY` returned for ``n`` items."""
    reply = FinishReply([Stored(None)] * n, 0)
    for ordinal, job_id, terminal, total in rows:
        if ordinal > 0:
            reply.results[ordinal - 1] = Stored(None if terminal is None else JobStatus(terminal))
            if terminal is not None:
                reply.not_live.add(str(job_id))
        elif ordinal == 0:
            reply.total = int(total)
        else:
            reply.not_live.add(str(job_id))
    return reply


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
    """Move the byte counts of instances that are gone into shard '', and the live-job counts
    of connections that are gone (or at zero) into theirs (``live_jobs``, migration 14)."""
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
    conn.execute(FOLD_LIVE_JOBS)
    conn.execute("DELETE FROM live_jobs WHERE shard = '' AND n = 0")


# The live-job counts (``live_jobs``) of connections that are gone fold into shard '' (a
# connection's shard is its backend's pid), and counts at zero go; callers in order, so two
# instances folding at once take the rows of shard '' in one order.
FOLD_LIVE_JOBS = """
    WITH gone AS (
        DELETE FROM live_jobs WHERE shard <> '' AND (n = 0
            OR shard NOT IN (SELECT pid::text FROM pg_stat_activity WHERE pid IS NOT NULL))
        RETURNING caller, n
    )
    INSERT INTO live_jobs AS l (caller, shard, n)
    SELECT caller, '', sum(n) FROM gone GROUP BY caller HAVING sum(n) <> 0 ORDER BY caller
    ON CONFLICT ON CONSTRAINT live_jobs_pkey DO UPDATE SET n = l.n + excluded.n
"""


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
            UPDATE targets SET status = 'pending', claim = NULL, claim_until = NULL
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
            FROM jobs WHERE status NOT IN {LIVE_SQL} AND NOT hook_open
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
            {", ".join("t." + c.strip() for c in TARGET_COLUMNS.split(","))}
        FROM jobs AS j LEFT JOIN targets AS t ON t.job_id = j.id
        WHERE j.id = %s ORDER BY t.idx
        """,
        (job_id,),
    ).fetchall()
    if not rows:
        return None
    n = len(JOB_COLUMNS.split(","))
    m = n + len(TARGET_COLUMNS.split(","))
    targets = [target_from_row(r[n:m]) for r in rows if r[n] is not None]
    return Snapshot(job_from_row(rows[0]), targets)


# -- the web cache -------------------------------------------------------------------------------


def cache_get(conn: Conn, keys: list[str]) -> dict[str, CacheEntry]:
    """The entries under ``keys``, expired or not; a key with none is left out."""
    rows = conn.execute(
        "SELECT key, body, meta, stored_at, expires_at FROM web_cache WHERE key = ANY(%s)",
        (keys,),
    ).fetchall()
    return {
        str(row[0]): CacheEntry(bytes(row[1]), str(row[2]), float(row[3]), float(row[4]))
        for row in rows
    }


def cache_put(conn: Conn, locks: int, key: str, entry: CacheEntry, max_bytes: int) -> None:
    """Replace the entry under ``key``, then drop the oldest while over ``max_bytes``.

    One transaction of its own (or a savepoint), holding the cache lock so the byte count stays
    exact; it gives up after waiting 1 s for a lock (``LockNotAvailable``): a cache can wait.
    """
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '1s'")
        _cache_put(conn, locks, key, entry, max_bytes)


def _cache_put(conn: Conn, locks: int, key: str, entry: CacheEntry, max_bytes: int) -> None:
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
