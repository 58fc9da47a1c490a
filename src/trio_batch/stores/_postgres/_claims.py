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

from .._protocol import Claim, HostReport, HostRules
from .._rules import LIVE_SQL, stored_target
from ._schema import Conn


def _take(chosen: str, more: str) -> str:
    """The claims' common tail: the jobs of ``d`` that are ``chosen`` get a claim (a token, this
    instance, a deadline on the database's clock) and their next target runs (CTEs j and t);
    ``more`` adds columns of ``d`` to what j returns."""
    return f"""j AS (
        UPDATE jobs AS jb SET
            claim = md5(%(instance)s || jb.id || clock_timestamp()::text || random()::text),
            claim_instance = %(instance)s,
            claim_until = clock_timestamp() + %(ttl)s * interval '1 second',
            next_idx = d.idx, status = 'running', updated_at = %(now)s
        FROM d WHERE jb.id = d.id AND {chosen}
        RETURNING jb.id, jb.next_idx, jb.claim, jb.caller, jb.workspace, jb.created_at,
            jb.webhook <> '' AS has_webhook, jb.busy_since, d.taken_over, d.turn,
            jb.caller_class{more}
    ), t AS (
        UPDATE targets AS tg SET status = 'running', started_at = %(now)s
        FROM j WHERE tg.job_id = j.id AND tg.idx = j.next_idx
        RETURNING tg.job_id, tg.url, tg.options
    )"""


def _held(scope_is: str) -> str:
    """The scopes of the fleet's slots in use, one row a slot: a claimed job's next target (a
    claim is a target in flight, or about to be) and a lease, live on the database's clock;
    ``scope_is`` picks the scopes (``IS NOT NULL``: all; ``= %(scope)s``: one)."""
    return f"""
            SELECT tg.scope FROM jobs AS jb
            JOIN targets AS tg ON tg.job_id = jb.id AND tg.idx = jb.next_idx
            WHERE jb.claim IS NOT NULL AND jb.claim_until >= clock_timestamp()
                AND tg.scope {scope_is}
            UNION ALL
            SELECT scope FROM scope_leases WHERE until >= clock_timestamp() AND scope {scope_is}
        """


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
    ), {_take("d.idx IS NOT NULL", "")}
    SELECT j.id, j.next_idx, j.claim, j.caller, j.workspace, j.created_at, j.has_webhook,
        j.busy_since, j.taken_over, t.url, t.options, j.caller_class
    FROM j JOIN t ON t.job_id = j.id
    ORDER BY j.turn
"""

# The same with budgets per scope (HostRules), run alone (LOCK_CLAIM) so that two claimers
# never both see a scope's last free slot. ``held``: the fleet's claimed targets per scope (a
# claim is a target in flight, or about to be); ``room``: how many more each scope with a
# clock or a claim may start now; a job whose next target's scope has no room is passed over
# before the LIMIT (keeping its turn), and of the jobs locked, each scope takes only its room,
# oldest turn first. A scope blocked past block_limit has room: its targets are claimed to
# fail with a hint (the claim carries the scope's state, which the engine's budget takes in).
# A scope that spaces its starts is claimed only among the first ``spaced`` turns (those for
# idle workers), so its target starts at once and the spacing holds between starts too.
CLAIM_SCOPED_SQL = f"""
    WITH held AS (
        SELECT x.scope, count(*) AS n FROM ({_held("IS NOT NULL")}) AS x
        GROUP BY x.scope
    ), room AS (
        SELECT coalesce(h.scope, s.scope) AS scope, CASE
            WHEN s.blocked_until > clock_timestamp() AND s.blocked_since
                < clock_timestamp() - %(block_limit)s * interval '1 second' THEN %(n)s
            WHEN s.blocked_until > clock_timestamp() OR s.next_start > clock_timestamp() THEN 0
            WHEN s.blocked_since IS NOT NULL THEN 1 - coalesce(h.n, 0)
            WHEN greatest(%(interval)s, s.crawl_delay) > 0
                THEN least(1, %(conc)s - coalesce(h.n, 0))
            ELSE %(conc)s - coalesce(h.n, 0)
        END AS free
        FROM held AS h FULL JOIN scopes AS s ON s.scope = h.scope
    ), c AS (
        SELECT jb.id, jb.claim IS NOT NULL AS taken_over, jb.turn, nx.idx, nx.scope FROM jobs AS jb
        CROSS JOIN LATERAL (
            SELECT tg.idx, tg.scope FROM targets AS tg
            WHERE tg.job_id = jb.id AND tg.idx >= jb.next_idx
                AND tg.status IN ('pending', 'running')
            ORDER BY tg.idx LIMIT 1
        ) AS nx
        WHERE jb.status IN {LIVE_SQL} AND jb.next_idx < jb.targets_total
            AND (jb.claim IS NULL OR jb.claim_until < clock_timestamp())
            AND NOT EXISTS (SELECT 1 FROM room WHERE room.scope = nx.scope AND room.free <= 0)
        ORDER BY jb.turn
        LIMIT %(n)s
        FOR UPDATE OF jb SKIP LOCKED
    ), d AS (
        SELECT c.*, c.scope IS NULL OR (
            coalesce(room.free, CASE WHEN %(interval)s > 0 THEN 1 ELSE %(conc)s END)
                >= row_number() OVER (PARTITION BY c.scope ORDER BY c.turn)
            AND (greatest(%(interval)s, coalesce(s.crawl_delay, 0)) = 0
                OR row_number() OVER (ORDER BY c.turn) <= %(spaced)s)
        ) AS fits
        FROM c LEFT JOIN room ON room.scope = c.scope LEFT JOIN scopes AS s ON s.scope = c.scope
    ), paced AS (
        INSERT INTO scopes AS s (scope, next_start)
        SELECT d.scope, clock_timestamp()
            + greatest(%(interval)s, coalesce(max(s0.crawl_delay), 0)) * interval '1 second'
        FROM d LEFT JOIN scopes AS s0 ON s0.scope = d.scope
        WHERE d.fits AND d.scope IS NOT NULL
        GROUP BY d.scope
        HAVING greatest(%(interval)s, coalesce(max(s0.crawl_delay), 0)) > 0
        ON CONFLICT (scope) DO UPDATE SET next_start = excluded.next_start,
            touched_at = clock_timestamp()
    ), {_take("d.fits", ", d.scope")}
    SELECT j.id, j.next_idx, j.claim, j.caller, j.workspace, j.created_at, j.has_webhook,
        j.busy_since, j.taken_over, t.url, t.options, j.caller_class, j.scope,
        CASE WHEN s.blocked_until > clock_timestamp()
            THEN extract(epoch FROM s.blocked_until - clock_timestamp()) END,
        extract(epoch FROM clock_timestamp() - s.blocked_since)
    FROM j JOIN t ON t.job_id = j.id LEFT JOIN scopes AS s ON s.scope = j.scope
    ORDER BY j.turn
"""

# A request outside the rotation takes a lease of its scope's budget, under the same rules and
# the same lock as the claims: its token, or (no token) in how many seconds the scope's clock
# ends (None: when a slot frees) and how long it has been pushed back (None: it is well).
LEASE_SQL = f"""
    WITH s AS (
        SELECT * FROM scopes WHERE scope = %(scope)s
    ), held AS (
        SELECT count(*) AS n FROM ({_held("= %(scope)s")}) AS x
    ), v AS (
        SELECT CASE
            WHEN s.blocked_until > clock_timestamp() OR s.next_start > clock_timestamp() THEN false
            WHEN s.blocked_since IS NOT NULL THEN held.n < 1
            ELSE held.n < %(conc)s
        END AS ok,
        greatest(%(interval)s, coalesce(s.crawl_delay, 0)) AS spacing,
        CASE WHEN s.blocked_until > clock_timestamp()
            THEN extract(epoch FROM s.blocked_until - clock_timestamp())
            WHEN s.next_start > clock_timestamp()
            THEN extract(epoch FROM s.next_start - clock_timestamp()) END AS free_in,
        extract(epoch FROM clock_timestamp() - s.blocked_since) AS blocked_for
        FROM held LEFT JOIN s ON true
    ), lease AS (
        INSERT INTO scope_leases (token, scope, instance, until)
        SELECT md5(%(instance)s || random()::text || clock_timestamp()::text), %(scope)s,
            %(instance)s, clock_timestamp() + %(ttl)s * interval '1 second'
        FROM v WHERE v.ok
        RETURNING token
    ), paced AS (
        INSERT INTO scopes AS sc (scope, next_start)
        SELECT %(scope)s, clock_timestamp() + v.spacing * interval '1 second'
        FROM v WHERE v.ok AND v.spacing > 0
        ON CONFLICT (scope) DO UPDATE SET next_start = excluded.next_start,
            touched_at = clock_timestamp()
    )
    SELECT (SELECT token FROM lease), v.free_in, v.blocked_for FROM v
"""
RENEW_LEASES_SQL = """
    UPDATE scope_leases SET until = clock_timestamp() + %(ttl)s * interval '1 second'
    WHERE instance = %(instance)s
"""
RELEASE_LEASES_SQL = "DELETE FROM scope_leases WHERE token = ANY(%(tokens)s)"
RELEASE_INSTANCE_LEASES_SQL = "DELETE FROM scope_leases WHERE instance = %(instance)s"
FORGET_LEASES_SQL = "DELETE FROM scope_leases WHERE until < clock_timestamp() - interval '1 min'"

# When the first scope held back by its clock (spacing, backoff) may start again, in seconds.
SCOPES_FREE_SQL = """
    SELECT extract(epoch FROM min(greatest(next_start, blocked_until)) - clock_timestamp())
    FROM scopes WHERE greatest(next_start, blocked_until) > clock_timestamp()
"""

# What an instance learned of a scope (HostReport), made the fleet's. A backoff counts once
# per rate-limit event: a report of a request started before the last event counted is one
# the fleet has already counted. A success after the backoff makes the scope well again.
REPORT_BACKOFF_SQL = """
    INSERT INTO scopes AS s (scope, blocked_until, blocked_since, backoff_at)
    VALUES (%(scope)s, clock_timestamp() + %(seconds)s * interval '1 second', clock_timestamp(),
        clock_timestamp())
    ON CONFLICT (scope) DO UPDATE SET
        blocked_until = greatest(s.blocked_until, excluded.blocked_until),
        blocked_since = coalesce(s.blocked_since, excluded.blocked_since),
        backoff_at = excluded.backoff_at, touched_at = clock_timestamp()
    WHERE s.backoff_at < clock_timestamp() - %(ago)s * interval '1 second'
"""
REPORT_RECOVERED_SQL = """
    UPDATE scopes SET blocked_since = NULL, touched_at = clock_timestamp()
    WHERE scope = %(scope)s AND blocked_until <= clock_timestamp()
        AND backoff_at < clock_timestamp() - %(ago)s * interval '1 second'
"""
REPORT_PACED_SQL = """
    INSERT INTO scopes AS s (scope, crawl_delay) VALUES (%(scope)s, %(seconds)s)
    ON CONFLICT (scope) DO UPDATE SET crawl_delay = excluded.crawl_delay,
        touched_at = clock_timestamp()
    WHERE s.crawl_delay <> excluded.crawl_delay
"""
_REPORTS = {
    "backoff": REPORT_BACKOFF_SQL,
    "recovered": REPORT_RECOVERED_SQL,
    "paced": REPORT_PACED_SQL,
}

# Scopes whose clocks all ran out long ago are forgotten: rows follow the hosts in use.
FORGET_SCOPES_SQL = """
    DELETE FROM scopes WHERE blocked_since IS NULL
        AND greatest(next_start, blocked_until, touched_at) < clock_timestamp() - interval '10 min'
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


def claim(
    conn: Conn,
    instance: str,
    n: int,
    now: float,
    ttl: float,
    rules: HostRules | None = None,
    lock: tuple[int, int] = (0, 0),
    spaced: int | None = None,
) -> tuple[list[Claim], float | None]:
    """Claim up to ``n`` turns (its own transaction); with ``rules``, within the fleet's budgets.

    Returns the claims and, with ``rules``, in how many seconds the first scope held back by
    its spacing or backoff may start again (None: none is).
    """
    if rules is None:
        rows = unflushed(conn, CLAIM_SQL, {"n": n, "instance": instance, "now": now, "ttl": ttl})
        return [_claim_of(row) for row in rows], None
    params = {
        "n": n,
        "instance": instance,
        "now": now,
        "ttl": ttl,
        "conc": rules.concurrency,
        "interval": rules.interval,
        "block_limit": rules.block_limit,
        "spaced": n if spaced is None else spaced,
    }
    with conn.pipeline(), conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO off")
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock)
        claimed = conn.execute(CLAIM_SCOPED_SQL, params)
        free = conn.execute(SCOPES_FREE_SQL)
    wait = free.fetchone()
    claims = [_claim_of(row) for row in claimed.fetchall()]
    return claims, None if wait is None or wait[0] is None else float(wait[0])


def _claim_of(row: TupleRow) -> Claim:
    job_id, idx, token, caller, workspace, created_at, has_webhook, busy_since = row[:8]
    taken_over, url, options, caller_class = row[8:12]
    scope, wait, blocked_for = row[12:15] if len(row) > 12 else (None, None, None)
    return Claim(
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
        scope=None if scope is None else str(scope),
        scope_wait=0.0 if wait is None else float(wait),
        scope_blocked_for=None if blocked_for is None else max(0.0, float(blocked_for)),
    )


def lease(
    conn: Conn,
    instance: str,
    scope: str,
    rules: HostRules,
    ttl: float,
    lock: tuple[int, int],
) -> tuple[str | None, float | None, float | None]:
    """Take a lease of ``scope``'s budget: its token, or none and when to try again, and how
    long the scope has been pushed back (None: it is well)."""
    params = {
        "scope": scope,
        "instance": instance,
        "ttl": ttl,
        "conc": rules.concurrency,
        "interval": rules.interval,
    }
    with conn.pipeline(), conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO off")
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock)
        cur = conn.execute(LEASE_SQL, params)
    token, free_in, blocked_for = cur.fetchone() or (None, None, None)
    return (
        None if token is None else str(token),
        None if free_in is None else float(free_in),
        None if blocked_for is None else max(0.0, float(blocked_for)),
    )


def release_leases(conn: Conn, tokens: Sequence[str]) -> None:
    """Give back the leases ``tokens`` (a request outside the rotation ended)."""
    unflushed(conn, RELEASE_LEASES_SQL, {"tokens": list(tokens)})


def report(conn: Conn, reports: Sequence[HostReport]) -> None:
    """Store what instances learned of their scopes (one transaction, one round trip)."""
    with conn.pipeline(), conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO off")
        for r in reports:
            conn.execute(
                _REPORTS[r.kind], {"scope": r.scope, "seconds": r.seconds, "ago": max(0.0, r.ago)}
            )


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


def renew_leases(conn: Conn, instance: str, ttl: float) -> None:
    """Move the deadlines of ``instance``'s leases on by ``ttl``."""
    unflushed(conn, RENEW_LEASES_SQL, {"instance": instance, "ttl": ttl})


def release_instance_leases(conn: Conn, instance: str) -> None:
    """Give back every lease of ``instance`` (it stops)."""
    unflushed(conn, RELEASE_INSTANCE_LEASES_SQL, {"instance": instance})


def sweep(conn: Conn) -> None:
    """Give back the expired claims of jobs that are no longer live, and forget the scopes
    idle for long (at each heartbeat)."""
    conn.execute(SWEEP_SQL)
    conn.execute(FORGET_SCOPES_SQL)
    conn.execute(FORGET_LEASES_SQL)


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
