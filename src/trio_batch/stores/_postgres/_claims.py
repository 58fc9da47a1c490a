"""The fleet's rotation in the database: turns claimed, renewed, released (``FleetStore``).

Every live job has a place in one round robin, its ``turn`` (a number from the ``turns``
sequence, taken again each time the job goes back to the end): a worker of any instance claims
the unclaimed live jobs of lowest turn with ``FOR UPDATE SKIP LOCKED``, as procrastinate,
Oban, graphile-worker and Firecrawl's queue claim work, so two instances never take one job and
never wait for each other's locks. A claim is a token with a deadline on PostgreSQL's clock; the
store renews its claims while the fetches run, and an outcome is stored only while its claim is
still the job's (``FINISH_MANY`` checks the token in the same statement), which also gives the
job back to the rotation: claim cleared, a new turn. A claim whose instance died expires, and
the next claimer takes the job again with the same target: a fetch may happen twice, an outcome
is stored once.

A statement-level trigger on ``jobs`` notifies the schema's channel (:func:`channel`) when a
job becomes claimable (admitted, its outcome stored, its claim released), so an idle instance
hears of new work at once; a slow poll covers a lost notification.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from .._protocol import Claim
from .._rules import LIVE_SQL, stored_target
from ._schema import Conn

# The claimable jobs of lowest turn, locked (others skip them), then each one's next target:
# the first not stored from next_idx on (next_idx is a lower bound the finish keeps close).
CLAIM_SQL = f"""
    WITH c AS (
        SELECT id, claim IS NOT NULL AS taken_over, next_idx, turn FROM jobs
        WHERE status IN {LIVE_SQL} AND next_idx < targets_total
            AND (claim IS NULL OR claim_until < clock_timestamp())
        ORDER BY turn
        LIMIT %(n)s
        FOR UPDATE SKIP LOCKED
    ), d AS (
        SELECT c.id, c.taken_over, c.turn, (
            SELECT min(tg.idx) FROM targets AS tg
            WHERE tg.job_id = c.id AND tg.idx >= c.next_idx AND tg.status IN ('pending', 'running')
        ) AS idx
        FROM c
    ), j AS (
        UPDATE jobs AS jb SET
            claim = md5(%(instance)s || jb.id || clock_timestamp()::text || random()::text),
            claim_instance = %(instance)s,
            claim_until = clock_timestamp() + %(ttl)s * interval '1 second',
            next_idx = d.idx, status = 'running', updated_at = %(now)s
        FROM d WHERE jb.id = d.id AND d.idx IS NOT NULL
        RETURNING jb.id, jb.next_idx, jb.claim, jb.caller, jb.workspace, jb.created_at,
            jb.webhook <> '' AS has_webhook, jb.busy_since, d.taken_over, d.turn, jb.caller_class
    ), t AS (
        UPDATE targets AS tg SET status = 'running', started_at = %(now)s
        FROM j WHERE tg.job_id = j.id AND tg.idx = j.next_idx
        RETURNING tg.job_id, tg.url, tg.options
    )
    SELECT j.id, j.next_idx, j.claim, j.caller, j.workspace, j.created_at, j.has_webhook,
        j.busy_since, j.taken_over, t.url, t.options, j.caller_class
    FROM j JOIN t ON t.job_id = j.id
    ORDER BY j.turn
"""

# A turn given back after a busy target's wait: the target pending, the job to the end.
RELEASE_ONE_SQL = """
    WITH j AS (
        UPDATE jobs SET claim = NULL, claim_until = NULL, turn = nextval('turns'),
            busy_since = %(busy)s, updated_at = %(now)s
        WHERE id = %(id)s AND claim = %(token)s
        RETURNING id, next_idx
    )
    UPDATE targets AS tg SET status = 'pending'
    FROM j WHERE tg.job_id = j.id AND tg.idx = j.next_idx AND tg.status = 'running'
"""

# Claims given back as an engine closes: the jobs keep their turn (they have waited for it).
RELEASE_ALL_SQL = """
    WITH j AS (
        UPDATE jobs SET claim = NULL, claim_until = NULL, updated_at = %(now)s
        WHERE claim = ANY(%(tokens)s)
        RETURNING id, next_idx
    )
    UPDATE targets AS tg SET status = 'pending'
    FROM j WHERE tg.job_id = j.id AND tg.idx = j.next_idx AND tg.status = 'running'
"""

# Expired claims of jobs no longer live (cancelled while a claim holder was dying): nobody
# claims such a job again, so its target would stay running for ever; it goes back to pending.
SWEEP_SQL = f"""
    WITH j AS (
        UPDATE jobs SET claim = NULL, claim_until = NULL
        WHERE claim IS NOT NULL AND claim_until < clock_timestamp()
            AND status NOT IN {LIVE_SQL}
        RETURNING id, next_idx
    )
    UPDATE targets AS tg SET status = 'pending'
    FROM j WHERE tg.job_id = j.id AND tg.idx = j.next_idx AND tg.status = 'running'
"""

RENEW_SQL = """
    UPDATE jobs SET claim_until = clock_timestamp() + %(ttl)s * interval '1 second'
    WHERE claim = ANY(%(tokens)s)
    RETURNING claim
"""


def channel(schema: str) -> str:
    """The notification channel of ``schema``'s turns (an identifier of at most 63 bytes)."""
    return "tbt_" + hashlib.md5(schema.encode()).hexdigest()


def unflushed(conn: Conn, query: str, params: dict[str, object]) -> list[TupleRow]:
    """Run ``query`` in a transaction that commits without waiting for the WAL to reach disk.

    A claim, a renewal and a release may be lost in a server crash at no cost: the claim
    reverts to unclaimed, its holder's outcome is refused (the token has moved on), and the
    target is claimed and fetched again, stored once. Not waiting for the flush keeps these
    frequent commits out of the queue of the ones that must be durable (admissions, outcomes).
    The statements go in one round trip (a pipeline).
    """
    with conn.pipeline(), conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO off")
        cur = conn.execute(query, params)
    return cur.fetchall() if cur.description is not None else []


def claim(conn: Conn, instance: str, n: int, now: float, ttl: float) -> list[Claim]:
    """Claim up to ``n`` turns (one statement, its own transaction)."""
    rows = unflushed(conn, CLAIM_SQL, {"n": n, "instance": instance, "now": now, "ttl": ttl})
    return [
        Claim(
            job_id=str(job_id),
            idx=int(idx),
            token=str(token),
            target=stored_target(str(url), str(options)),
            caller=str(caller),
            workspace=str(workspace),
            created_at=float(created_at),
            has_webhook=bool(has_webhook),
            busy_since=None if busy_since is None else float(busy_since),
            taken_over=bool(taken_over),
            caller_class=str(caller_class),
        )
        for (
            job_id,
            idx,
            token,
            caller,
            workspace,
            created_at,
            has_webhook,
            busy_since,
            taken_over,
            url,
            options,
            caller_class,
        ) in rows
    ]


def release_one(conn: Conn, job_id: str, token: str, now: float, busy: float | None) -> None:
    """Give one turn back to the end of the rotation (a repeat, or a lost claim, does nothing)."""
    unflushed(conn, RELEASE_ONE_SQL, {"id": job_id, "token": token, "now": now, "busy": busy})


def release_all(conn: Conn, tokens: Sequence[str], now: float) -> None:
    """Give back the claims ``tokens``; their jobs keep their places."""
    unflushed(conn, RELEASE_ALL_SQL, {"tokens": list(tokens), "now": now})


def renew(conn: Conn, tokens: Sequence[str], ttl: float) -> set[str]:
    """Move the deadlines of ``tokens`` on by ``ttl``; return the ones still held."""
    rows = unflushed(conn, RENEW_SQL, {"tokens": list(tokens), "ttl": ttl})
    return {str(r[0]) for r in rows}


def sweep(conn: Conn) -> None:
    """Give back the expired claims of jobs that are no longer live (at each heartbeat)."""
    conn.execute(SWEEP_SQL)


def listen(
    connect: Callable[[], Conn], schema: str, wake: Callable[[], None], stop: threading.Event
) -> None:
    """Call ``wake`` at each notification of ``schema``'s turns until ``stop`` is set.

    Runs in a thread of its own, on a connection of its own. A lost connection is made again
    after a second, and ``wake`` is called once it is back (what was notified meanwhile is
    lost): the engine then claims, and its slow poll covers the rest.
    """
    listen_sql = sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema)))
    while not stop.is_set():
        try:
            conn = connect()
        except Exception:
            stop.wait(1.0)
            continue
        try:
            conn.execute(listen_sql)
            wake()
            while not stop.is_set():
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    wake()
        except psycopg.Error:
            stop.wait(1.0)
        finally:
            conn.close()
