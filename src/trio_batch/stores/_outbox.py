"""Webhook delivery state (SPEC §7), kept on the job's row: the job is the outbox.

A job runs its targets one after the other, so they end in input order: the first
``targets_done`` targets are the ended ones. The store keeps, per job with a webhook (the
columns keep their ``hook_`` names from the schema's first version):

- ``hook_open``: something may still be delivered (set at admission when a webhook is given,
  cleared once the end event is handled);
- ``hook_cursor``: how many target events are handled (delivered or given up);
- ``hook_attempts`` and ``hook_since``: failed attempts of the current event, and when the
  current run of failed attempts began (unix seconds; 0 after a delivery);
- ``hook_next_at``: the current event is not tried again before this unix time.

Target event ``k`` is due when the webhook asks for ``target`` events and ``hook_cursor <= k <
targets_done``; the end event is due when the job is terminal and every target event is handled.
:meth:`WebhookOutbox.hooks_due` returns only jobs with an event due now, so a live job whose next
target has not ended is not returned again and again; the dispatcher is woken by the engine when
a target ends. :meth:`WebhookOutbox.hook_advance` is a compare-and-set on ``(cursor,
attempts)``.

On PostgreSQL several instances' dispatchers share the outboxes, so a dispatcher *claims* the
outboxes it reads (``hooks_due(claim_for=...)``, :func:`claim_query`): ``hook_claim`` (a token)
and ``hook_claim_until`` (a deadline on PostgreSQL's clock), taken with ``FOR UPDATE SKIP
LOCKED`` so two dispatchers never take one job nor wait for each other. Another instance skips
a claimed outbox until the claim is released (``hook_advance``, checking the token in the same
statement) or expires, so a job's events are sent one at a time and in order across the fleet.
The claim lasts one attempt (the delivery timeout plus slack); a dispatcher that dies mid-send
loses it at its deadline and another sends that event again (at least once; the receiver
dedupes by ``webhook-id``). A holder whose claim expired and was taken over advances nothing.

Sweeping (``ttl``) and eviction (``max_bytes``) skip a finished job whose delivery is open: its
end event needs the job's row. A delivery is closed within about an hour of each event's first
attempt (given up after that), so a job is kept at most that much longer than ``ttl`` would keep
it.
"""

from __future__ import annotations

from .._model import JobStatus
from ._protocol import HookDue, wants_target_events
from ._rules import LIVE_SQL, Row

OUTBOX_COLUMNS = (
    "id, caller, webhook, status, targets_done, targets_total, hook_cursor, hook_attempts, "
    "hook_since, hook_next_at"
)
"""The columns :func:`due_from_row` decodes, in its order."""


def is_due(status: JobStatus, cursor: int, targets_done: int, webhook: str) -> bool:
    """Whether an open delivery has an event to send (its ``next_at`` aside)."""
    return not status.live or (cursor < targets_done and wants_target_events(webhook))


def due_from_row(row: Row) -> HookDue:
    """A :class:`HookDue` from a row of :data:`OUTBOX_COLUMNS` (and the claim's token, if
    :func:`claim_query` read it)."""
    return HookDue(
        job_id=str(row[0]),
        caller=str(row[1]),
        webhook=str(row[2]),
        status=JobStatus(row[3]),
        targets_done=int(row[4]),
        targets_total=int(row[5]),
        cursor=int(row[6]),
        attempts=int(row[7]),
        since=float(row[8]),
        next_at=float(row[9]),
        claim=str(row[10]) if len(row) > 10 else "",
    )


def due_query(
    open_sql: str, wants_targets_sql: str, now: float, limit: int
) -> tuple[str, list[object]]:
    """``hooks_due`` in SQL with ``?`` placeholders.

    ``open_sql`` is the backend's "delivery open" test, spelled as its partial index
    ``jobs_hooks`` is, so the index serves the query. ``wants_targets_sql`` is its test of
    :func:`~trio_batch.stores._protocol.wants_target_events`: the stored webhook decoded as
    JSON, ``target`` among its ``events``.
    """
    sql = (
        f"SELECT {OUTBOX_COLUMNS} FROM jobs WHERE {open_sql} AND hook_next_at <= ? "
        f"AND (status NOT IN {LIVE_SQL} OR (hook_cursor < targets_done AND {wants_targets_sql})) "
        "ORDER BY hook_next_at LIMIT ?"
    )
    return sql, [now, limit]


def claim_query(
    open_sql: str, wants_targets_sql: str, now: float, limit: int, claim_for: float
) -> tuple[str, list[object]]:
    """``hooks_due`` with claims (PostgreSQL), ``?`` placeholders: :func:`due_query`'s jobs,
    less those under a live claim, locked (``SKIP LOCKED``), claimed for ``claim_for`` seconds.

    Returns :data:`OUTBOX_COLUMNS` and the claim's token; the rows come in no order.
    """
    columns = ", ".join(f"j.{name}" for name in OUTBOX_COLUMNS.split(", "))
    sql = (
        f"WITH c AS (SELECT id FROM jobs WHERE {open_sql} AND hook_next_at <= ? "
        f"AND (status NOT IN {LIVE_SQL} OR (hook_cursor < targets_done AND {wants_targets_sql})) "
        "AND (hook_claim IS NULL OR hook_claim_until < clock_timestamp()) "
        "ORDER BY hook_next_at LIMIT ? FOR UPDATE SKIP LOCKED) "
        "UPDATE jobs AS j SET "
        "hook_claim = md5(j.id || clock_timestamp()::text || random()::text), "
        "hook_claim_until = clock_timestamp() + ? * interval '1 second' "
        f"FROM c WHERE j.id = c.id RETURNING {columns}, j.hook_claim"
    )
    return sql, [now, limit, claim_for]


def advance_query(
    open_sql: str,
    due: HookDue,
    cursor: int,
    attempts: int,
    since: float,
    next_at: float,
    close: bool,
    *,
    claims: bool = False,
) -> tuple[str, list[object]]:
    """``hook_advance`` in SQL with ``?`` placeholders: one compare-and-set ``UPDATE``.

    With ``claims`` (PostgreSQL) it also needs ``due.claim`` to be the outbox's claim (or, for
    an unclaimed ``due``, no live claim), and releases it.
    """
    sql = (
        "UPDATE jobs SET hook_cursor = ?, hook_attempts = ?, hook_since = ?, hook_next_at = ?, "
        "hook_open = ?"
    )
    where = f" WHERE id = ? AND {open_sql} AND hook_cursor = ? AND hook_attempts = ?"
    params: list[object] = [cursor, attempts, since, next_at, not close]
    params += [due.job_id, due.cursor, due.attempts]
    if claims:
        sql += ", hook_claim = NULL, hook_claim_until = NULL"
        if due.claim:
            where += " AND hook_claim = ?"
            params.append(due.claim)
        else:
            where += " AND (hook_claim IS NULL OR hook_claim_until < clock_timestamp())"
    return sql + where, params
