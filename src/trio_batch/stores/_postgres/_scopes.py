"""The fleet's budgets per host in the database: room, leases, reports (``FleetStore``).

A host's budget is kept under its *scope* (host and port). What the fleet has in flight on a
scope is its targets under a live claim (``_claims``) plus the live leases of requests made
outside the rotation (``POST /v1/fetch``, a redirect to another host, robots.txt, the
browser's proxy). Whether a scope may start one more is :func:`room`, one SQL fragment that the
claims and the leases both use, the database's twin of ``HostBudget``'s rule (a test holds the
three to one answer, state by state).

Two claimers, or a claimer and a lease, never both take a scope's last slot: each takes the
scope's advisory lock (:func:`lock_key`) before it counts, in a fixed order (sorted by scope),
so they wait for each other only on the scopes they share, and never in a circle. There is no
fleet-wide lock.

Clocks (spacing, the site's ``Crawl-delay``, a 429's backoff) live in the ``scopes`` table,
written by the claims (``next_start``) and by what instances report (:func:`report`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psycopg
from psycopg.rows import TupleRow

from .._protocol import HostReport, HostRules

Conn = psycopg.Connection[TupleRow]  # as _schema's: this module sits below it


def room(held: str, conc: str, interval: str, block_limit: str) -> str:
    """The columns ``free``, ``blocked`` and ``spacing`` of scope row ``s`` (LEFT JOINed: NULL
    for a scope with no clock) with ``held`` of its slots in use.

    ``free``: how many more targets may start now (<= 0: none): none while a backoff or the
    spacing runs; one probe after a backoff until a request succeeds; one at a time for a
    scope that spaces its starts; else up to ``conc``. ``blocked``: the scope has been pushed
    back for ``block_limit`` seconds (its targets fail with a hint; a lease is refused).
    The arguments are SQL expressions (columns or parameters).
    """
    spacing = f"greatest({interval}, coalesce(s.crawl_delay, 0))"
    return f"""CASE
            WHEN s.blocked_until > clock_timestamp() OR s.next_start > clock_timestamp() THEN 0
            WHEN s.blocked_since IS NOT NULL THEN 1 - {held}
            WHEN {spacing} > 0 THEN least(1, {conc} - {held})
            ELSE {conc} - {held}
        END AS free,
        coalesce(s.blocked_until > clock_timestamp() AND s.blocked_since
            < clock_timestamp() - {block_limit} * interval '1 second', false) AS blocked,
        {spacing} AS spacing"""


def held(scope_is: str) -> str:
    """The scopes of the fleet's slots in use, one row a slot: a target under a live claim (in
    flight, or about to be) and a live lease; ``scope_is`` picks the scopes (``= ANY(x)``,
    ``= %(scope)s``)."""
    return f"""
            SELECT tg.scope FROM targets AS tg
            WHERE tg.claim IS NOT NULL AND tg.claim_until >= clock_timestamp()
                AND tg.scope {scope_is}
            UNION ALL
            SELECT scope FROM scope_leases WHERE until >= clock_timestamp() AND scope {scope_is}
        """


def lock_key(space: str, scope: str) -> str:
    """The advisory lock of ``scope`` in schema lock space ``space`` (SQL expressions): a
    bigint, so it never meets the two-number locks of ``_schema`` (PostgreSQL keeps the two
    forms apart)."""
    return f"(({space})::bigint << 32) | (hashtext({scope})::bigint & 4294967295)"


# A request outside the rotation takes a lease of its scope's budget, under the claims' rule
# and after the scope's lock: its token, or (no token) in how many seconds the scope's clock
# ends (None: when a slot frees) and how long it has been pushed back (None: it is well).
LEASE_SQL = f"""
    WITH h AS (
        SELECT count(*) AS n FROM ({held("= %(scope)s")}) AS x
    ), v AS (
        SELECT {room("h.n", "%(conc)s", "%(interval)s", "%(block_limit)s")},
        CASE WHEN s.blocked_until > clock_timestamp()
            THEN extract(epoch FROM s.blocked_until - clock_timestamp())
            WHEN s.next_start > clock_timestamp()
            THEN extract(epoch FROM s.next_start - clock_timestamp()) END AS free_in,
        extract(epoch FROM clock_timestamp() - s.blocked_since) AS blocked_for
        FROM h LEFT JOIN scopes AS s ON s.scope = %(scope)s
    ), lease AS (
        INSERT INTO scope_leases (token, scope, instance, until)
        SELECT md5(%(instance)s || random()::text || clock_timestamp()::text), %(scope)s,
            %(instance)s, clock_timestamp() + %(ttl)s * interval '1 second'
        FROM v WHERE v.free > 0 AND NOT v.blocked
        RETURNING token
    ), paced AS (
        INSERT INTO scopes AS sc (scope, next_start)
        SELECT %(scope)s, clock_timestamp() + v.spacing * interval '1 second'
        FROM v WHERE v.free > 0 AND NOT v.blocked AND v.spacing > 0
        ON CONFLICT (scope) DO UPDATE SET next_start = excluded.next_start,
            touched_at = clock_timestamp()
    )
    SELECT (SELECT token FROM lease), v.free_in, v.blocked_for FROM v
"""
LOCK_SCOPE_SQL = f"SELECT pg_advisory_xact_lock({lock_key('%(space)s', '%(scope)s')})"
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


@contextlib.contextmanager
def unflushed_transaction(conn: Conn) -> Iterator[None]:
    """The statements run in the block are one transaction, sent in one round trip, whose
    commit does not wait for the WAL to reach disk.

    One pipeline on a connection in autocommit mode is one implicit transaction, committed at
    its end (or rolled back whole by an error). ``conn.transaction()`` inside a pipeline would
    cost a second round trip: the driver syncs once for the statements and again for the
    ``COMMIT`` (a claim on PostgreSQL: ~5 ms with both, from the claimer's thread, under W1).
    """
    with conn.pipeline():
        conn.execute(_NO_FLUSH)
        try:
            yield
        except BaseException:
            # The pipeline's end commits what was sent: an error raised here, not by the
            # server, must leave nothing of the block committed (as a transaction block would).
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
            raise


_NO_FLUSH = "SELECT set_config('synchronous_commit', 'off', true)"
"""``SET LOCAL synchronous_commit TO off`` for an implicit transaction: as a statement, it
would warn that no transaction block is open and do nothing."""


def unflushed(
    conn: Conn, query: str, params: dict[str, object], *, lock: str | None = None
) -> list[tuple[object, ...]]:
    """Run ``query`` in a transaction that commits without waiting for the WAL to reach disk,
    after the statement ``lock`` if given (a lock held until the commit).

    A claim, a lease, a renewal and a release may be lost in a server crash at no cost: the
    claim reverts to unclaimed, its holder's outcome is refused (the token has moved on), and
    the target is claimed and fetched again, stored once. Not waiting for the flush keeps these
    frequent commits out of the queue of the ones that must be durable (admissions, outcomes).
    The statements go in one round trip (:func:`unflushed_transaction`).
    """
    with unflushed_transaction(conn):
        if lock is not None:
            conn.execute(lock, params)
        cur = conn.execute(query, params)
    return cur.fetchall() if cur.description is not None else []


def lease(
    conn: Conn, instance: str, scope: str, rules: HostRules, ttl: float, space: int
) -> tuple[str | None, float | None, float | None]:
    """Take a lease of ``scope``'s budget: its token, or none and when to try again, and how
    long the scope has been pushed back (None: it is well)."""
    params = {
        "scope": scope,
        "instance": instance,
        "ttl": ttl,
        "conc": rules.concurrency,
        "interval": rules.interval,
        "block_limit": rules.block_limit,
        "space": space,
    }
    rows = unflushed(conn, LEASE_SQL, params, lock=LOCK_SCOPE_SQL)
    token, free_in, blocked_for = rows[0] if rows else (None, None, None)
    return (
        None if token is None else str(token),
        None if free_in is None else float(str(free_in)),
        None if blocked_for is None else max(0.0, float(str(blocked_for))),
    )


def release_leases(conn: Conn, tokens: Sequence[str]) -> None:
    """Give back the leases ``tokens`` (a request outside the rotation ended)."""
    unflushed(conn, RELEASE_LEASES_SQL, {"tokens": list(tokens)})


def renew_leases(conn: Conn, instance: str, ttl: float) -> None:
    """Move the deadlines of ``instance``'s leases on by ``ttl``."""
    unflushed(conn, RENEW_LEASES_SQL, {"instance": instance, "ttl": ttl})


def release_instance_leases(conn: Conn, instance: str) -> None:
    """Give back every lease of ``instance`` (it stops)."""
    unflushed(conn, RELEASE_INSTANCE_LEASES_SQL, {"instance": instance})


def report(conn: Conn, reports: Sequence[HostReport]) -> None:
    """Store what instances learned of their scopes (one transaction, one round trip), in
    scope order, so two reporters never wait for each other in a circle."""
    with unflushed_transaction(conn):
        for r in sorted(reports, key=lambda r: r.scope):
            conn.execute(
                _REPORTS[r.kind], {"scope": r.scope, "seconds": r.seconds, "ago": max(0.0, r.ago)}
            )


def forget(conn: Conn) -> None:
    """Forget the scopes idle for long and the leases long expired (at each heartbeat)."""
    conn.execute(FORGET_SCOPES_SQL)
    conn.execute(FORGET_LEASES_SQL)
