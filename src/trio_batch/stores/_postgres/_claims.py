"""The fleet's rotation in the database: targets claimed, renewed, released (``FleetStore``).

Every live job has a place in one round robin, its ``turn`` (a number from the ``turns``
sequence, taken again each time the job goes back to the end). A claim is one *target*: a
worker of any instance claims the first targets of the live jobs of lowest turn
(``claim_targets``, with ``FOR UPDATE SKIP LOCKED`` on the jobs, as procrastinate, Oban,
graphile-worker and Firecrawl's queue claim work), so two instances never take one target and
never wait for each other's locks; a job holds up to its ``concurrency`` claims across the
fleet, and with host budgets its next target is the first whose host has room. A claim is a
token with a deadline on PostgreSQL's clock, kept on the target's row; the store renews its
claims while the fetches run, and an outcome is stored only while its claim is still the
target's (``FINISH_MANY`` checks the token in the same statement), which also gives its job a
new turn. A claim whose instance died expires, and the next claimer takes the target again:
a fetch may happen twice, an outcome is stored once.

Statements that free a claim (an outcome stored, a claim given back) notify the schema's
channel (:func:`channel`) once each, and so does an admission (a trigger): an idle instance
hears of new work at once; a slow poll covers a lost notification. A claim notifies nobody.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from .._protocol import Claim, HostRules
from .._rules import LIVE_SQL, stored_target
from ._schema import Conn
from ._scopes import SCOPES_FREE_SQL, forget, unflushed, unflushed_transaction

CLAIM_SQL = """
    SELECT * FROM claim_targets(%(space)s, %(instance)s, %(n)s, %(now)s, %(ttl)s, %(scoped)s,
        %(conc)s, %(interval)s, %(block_limit)s, %(spaced)s)
"""

# A busy target's claim given back after its wait: the target pending with its first busy
# time, the job to the end of the rotation.
RELEASE_ONE_SQL = """
    WITH t AS (
        UPDATE targets SET status = 'pending', claim = NULL, claim_until = NULL,
            busy_since = %(busy)s
        WHERE job_id = %(id)s AND idx = %(idx)s AND claim = %(token)s
        RETURNING job_id
    ), j AS (
        UPDATE jobs SET turn = nextval('turns'), updated_at = %(now)s
        WHERE id IN (SELECT job_id FROM t)
    )
    SELECT turns_freed() FROM (SELECT 1 FROM t LIMIT 1) AS one
"""

# Claims given back as an engine closes: the targets pending, the jobs keeping their turns
# (they have waited for them).
RELEASE_ALL_SQL = """
    WITH t AS (
        UPDATE targets SET status = 'pending', claim = NULL, claim_until = NULL
        WHERE claim = ANY(%(tokens)s)
        RETURNING job_id
    )
    SELECT turns_freed() FROM (SELECT 1 FROM t LIMIT 1) AS one
"""

# Expired claims of jobs no longer live (cancelled while a claim holder was dying): nobody
# claims such a target again, so it would stay running for ever; it goes back to pending.
SWEEP_SQL = f"""
    UPDATE targets AS tg SET status = 'pending', claim = NULL, claim_until = NULL
    FROM jobs AS jb
    WHERE tg.claim IS NOT NULL AND tg.claim_until < clock_timestamp()
        AND jb.id = tg.job_id AND jb.status NOT IN {LIVE_SQL}
"""

# The renewal waits for no row lock: a target row another transaction holds (the writer storing
# its outcome, which clears the claim, in its own order of rows) is passed over this time, and
# still counts as held while its committed claim is ours; the next renewal moves it on if it
# still is. Locking them all (the plain UPDATE before) sometimes lost a deadlock to the writer's
# outcome group under a 10,000-target drain: the renewal failed whole, logged, until the next.
RENEW_SQL = """
    WITH free AS (
        SELECT job_id, idx FROM targets WHERE claim = ANY(%(tokens)s) FOR UPDATE SKIP LOCKED
    ), renewed AS (
        UPDATE targets AS t SET claim_until = clock_timestamp() + %(ttl)s * interval '1 second'
        FROM free WHERE t.job_id = free.job_id AND t.idx = free.idx
    )
    SELECT claim FROM targets WHERE claim = ANY(%(tokens)s)
"""


def channel(schema: str) -> str:
    """The notification channel of ``schema``'s turns (an identifier of at most 63 bytes)."""
    return "tbt_" + hashlib.md5(schema.encode()).hexdigest()


def claim_params(
    instance: str,
    n: int,
    now: float,
    ttl: float,
    space: int,
    rules: HostRules | None,
    spaced: int | None,
) -> dict[str, object]:
    """The parameters of :data:`CLAIM_SQL`: up to ``n`` targets for ``instance``."""
    return {
        "space": space,
        "instance": instance,
        "n": n,
        "now": now,
        "ttl": ttl,
        "scoped": rules is not None,
        "conc": 0 if rules is None else rules.concurrency,
        "interval": 0.0 if rules is None else rules.interval,
        "block_limit": 0.0 if rules is None else rules.block_limit,
        "spaced": n if spaced is None else spaced,
    }


def claim(conn: Conn, params: dict[str, object]) -> tuple[list[Claim], float | None]:
    """Claim the targets ``params`` (:func:`claim_params`) ask for, in one transaction; with
    rules, within the fleet's budgets.

    Returns the claims and, with rules, in how many seconds the first scope held back by its
    spacing or backoff may start again (None: none is).
    """
    if not params["scoped"]:
        rows = unflushed(conn, CLAIM_SQL, params)
        return claims_of(rows), None
    with unflushed_transaction(conn):
        claimed = conn.execute(CLAIM_SQL, params)
        free = conn.execute(SCOPES_FREE_SQL)
    return claims_of(claimed.fetchall()), free_in(free.fetchone())


@dataclass(slots=True)
class Ride:
    """A claim sent in the same round trip as a group of outcomes (the writer's batch), for
    workers that will have no turn waiting once those outcomes are stored.

    It runs after the outcomes, in their transaction: a batch rolled back takes its claims
    with it, and a batch sent again after a lost connection carries no ride (a claim that
    committed before the loss expires, and another claimer takes its targets).
    """

    params: dict[str, object]
    """As :func:`claim_params` builds them."""
    claims: list[Claim] | None = None
    """What the ride claimed, once its batch committed; None: it did not run."""
    free_in: float | None = None
    """As :func:`claim` returns it: when the first scope held back may start again."""

    @property
    def scoped(self) -> bool:
        """Whether the claim keeps the fleet's budgets (its parameters carry the rules)."""
        return bool(self.params["scoped"])


def claims_of(rows: Sequence[Sequence[object]]) -> list[Claim]:
    """The claims :data:`CLAIM_SQL` returned."""
    return [_claim_of(row) for row in rows]


def free_in(row: Sequence[object] | None) -> float | None:
    """The seconds :data:`SCOPES_FREE_SQL` answered (None: no scope is held back)."""
    return None if row is None or row[0] is None else float(str(row[0]))


def _claim_of(row: Sequence[object]) -> Claim:
    job_id, idx, token, url, options, caller, workspace, created_at = row[:8]
    has_webhook, busy_since, taken_over, caller_class, concurrency = row[8:13]
    scope, wait, blocked_for, crawl, depth, parent = row[13:19]
    return Claim(
        job_id=str(job_id),
        idx=int(str(idx)),
        token=str(token),
        target=stored_target(str(url), str(options)),
        caller=str(caller),
        workspace=str(workspace),
        created_at=float(str(created_at)),
        has_webhook=bool(has_webhook),
        busy_since=None if busy_since is None else float(str(busy_since)),
        taken_over=bool(taken_over),
        caller_class=str(caller_class),
        concurrency=int(str(concurrency)),
        scope=None if scope is None else str(scope),
        scope_wait=0.0 if wait is None else float(str(wait)),
        scope_blocked_for=None if blocked_for is None else max(0.0, float(str(blocked_for))),
        crawl="" if crawl is None else str(crawl),
        depth=int(str(depth)),
        parent=int(str(parent)),
    )


def release_one(conn: Conn, target: Claim, now: float, busy: float | None) -> None:
    """Give one claim back, its job to the end of the rotation (a repeat, or a lost claim,
    does nothing)."""
    unflushed(
        conn,
        RELEASE_ONE_SQL,
        {"id": target.job_id, "idx": target.idx, "token": target.token, "now": now, "busy": busy},
    )


def release_all(conn: Conn, tokens: Sequence[str], now: float) -> None:
    """Give back the claims ``tokens``; their jobs keep their places."""
    unflushed(conn, RELEASE_ALL_SQL, {"tokens": list(tokens), "now": now})


def renew(conn: Conn, tokens: Sequence[str], ttl: float) -> set[str]:
    """Move the deadlines of ``tokens`` on by ``ttl``; return the ones still held (a row
    another transaction has locked is not waited for: see :data:`RENEW_SQL`)."""
    rows = unflushed(conn, RENEW_SQL, {"tokens": list(tokens), "ttl": ttl})
    return {str(r[0]) for r in rows}


def sweep(conn: Conn) -> None:
    """Give back the expired claims of jobs that are no longer live, and forget the scopes
    and leases idle for long (at each heartbeat)."""
    conn.execute(SWEEP_SQL)
    forget(conn)


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
