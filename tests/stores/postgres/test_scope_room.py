"""One rule in three places, held to one answer: may this host start one more request now?

``HostBudget`` decides it in Python for one instance; on a fleet the claims and the leases
decide it in SQL with one fragment (``_scopes.room``). This table feeds the same host states
(well, busy, spacing, a backoff running, probing after one, blocked past the limit) to both and
requires the same answer: whether one more may start, and whether the host is blocked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import trio

from trio_batch import HostBudget, HostSlot
from trio_batch.stores._postgres._scopes import room

CONCURRENCY = 2
BLOCK_LIMIT = 30.0


@dataclass(frozen=True)
class HostState:
    """A host's state, as seconds from now (None: that clock is not running)."""

    name: str
    in_flight: int = 0
    backoff_left: float | None = None  # a backoff runs this much longer
    pushed_back_for: float | None = None  # unwell (no success) since this long ago
    spacing_left: float | None = None  # the next start may come this much later
    interval: float = 0.0
    crawl_delay: float = 0.0


STATES = [
    HostState("well, idle"),
    HostState("well, one in flight", in_flight=1),
    HostState("well, full", in_flight=CONCURRENCY),
    HostState("spaced, due", interval=1.0),
    HostState("spaced, one in flight, due", in_flight=1, interval=1.0),
    HostState("spaced, not due", interval=1.0, spacing_left=0.5),
    HostState("crawl-delay, not due", crawl_delay=5.0, spacing_left=3.0),
    HostState("backoff running", backoff_left=2.0, pushed_back_for=1.0),
    HostState("probing, none in flight", pushed_back_for=5.0),
    HostState("probing, its probe in flight", in_flight=1, pushed_back_for=5.0),
    HostState("blocked past the limit", backoff_left=2.0, pushed_back_for=BLOCK_LIMIT + 1),
    HostState("pushed back, under the limit", backoff_left=2.0, pushed_back_for=BLOCK_LIMIT - 1),
]


def budget_answer(state: HostState) -> tuple[bool, bool]:
    """``HostBudget``'s answer for ``state``: (may start one more, blocked)."""
    budget = HostBudget(concurrency=CONCURRENCY, interval=state.interval, block_limit=BLOCK_LIMIT)
    now = trio.current_time()
    scope = budget._scope("h:443", now)
    scope.in_flight = state.in_flight
    scope.crawl_delay = state.crawl_delay
    if state.backoff_left is not None:
        scope.blocked_until = now + state.backoff_left
    if state.pushed_back_for is not None:
        scope.blocked_since = now - state.pushed_back_for
    scope.next_start = -math.inf if state.spacing_left is None else now + state.spacing_left
    got = budget.try_start("h:443")
    if isinstance(got, HostSlot):
        return True, False
    return False, got.blocked


ROOM_SQL = f"""
    SELECT q.free > 0 AND NOT q.blocked, q.blocked FROM (
        SELECT {room("%(n)s", "%(conc)s", "%(interval)s", "%(limit)s")}
        FROM (
            SELECT
                CASE WHEN %(backoff)s::float8 IS NULL THEN '-infinity'::timestamptz
                    ELSE clock_timestamp() + %(backoff)s::float8 * interval '1 second'
                END AS blocked_until,
                CASE WHEN %(since)s::float8 IS NULL THEN NULL
                    ELSE clock_timestamp() - %(since)s::float8 * interval '1 second'
                END AS blocked_since,
                CASE WHEN %(spacing)s::float8 IS NULL THEN '-infinity'::timestamptz
                    ELSE clock_timestamp() + %(spacing)s::float8 * interval '1 second'
                END AS next_start,
                %(delay)s::float8 AS crawl_delay
        ) AS s
    ) AS q
"""


def sql_answer(dsn: str, state: HostState) -> tuple[bool, bool]:
    """The fleet's answer (``_scopes.room`` on PostgreSQL) for ``state``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            ROOM_SQL,
            {
                "n": state.in_flight,
                "conc": CONCURRENCY,
                "interval": state.interval,
                "limit": BLOCK_LIMIT,
                "backoff": state.backoff_left,
                "since": state.pushed_back_for,
                "spacing": state.spacing_left,
                "delay": state.crawl_delay,
            },
        ).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


@pytest.mark.parametrize("state", STATES, ids=lambda s: s.name)
async def test_the_fleet_and_one_budget_give_one_answer(pg_dsn: str, state: HostState) -> None:
    """For every host state, ``HostBudget`` and the claims' and leases' SQL agree on whether
    one more request may start now and whether the host is blocked."""
    expected = budget_answer(state)

    assert expected == await trio.to_thread.run_sync(sql_answer, pg_dsn, state)


def test_the_table_covers_every_answer() -> None:
    """The states above include a host that may start, one that may not, and one blocked."""
    answers: set[tuple[bool, bool]] = set()

    async def collect() -> None:
        for state in STATES:
            answers.add(budget_answer(state))

    trio.run(collect)

    assert {(True, False), (False, False), (False, True)} == answers
