"""The one thread that stops PostgreSQL queries past their deadline (``Watchdog``).

Every pooled call with a deadline (``call_timeout``) registers with it, in place of a thread
of its own per call. The promise: a call still running at its deadline has its query
stopped (and is marked timed out), a call that ended is left alone, and the calls that ended
do not pile up while others are running.
"""

from __future__ import annotations

import threading
import time
from typing import cast

import pytest

pytest.importorskip("psycopg")

from trio_batch.stores._postgres._schema import Conn
from trio_batch.stores._postgres._threads import _WATCHDOG_PRUNE, Held, Watchdog


class FakeConnection:
    """Records the cancel request a stopped query would send."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def cancel_safe(self, timeout: float) -> None:
        self.cancelled.set()


def held_on(conn: FakeConnection) -> Held:
    held = Held()
    held.conn = cast("Conn", conn)
    return held


def test_a_call_past_its_deadline_is_stopped_and_one_that_ended_is_not() -> None:
    """Two deadlines already past: the call that ended is skipped, the running one stopped."""
    ended_conn, running_conn = FakeConnection(), FakeConnection()
    ended, running = held_on(ended_conn), held_on(running_conn)
    ended.done.set()
    watchdog = Watchdog()
    now = time.monotonic()
    watchdog.watch(ended, now - 2)
    watchdog.watch(running, now - 1)

    assert running_conn.cancelled.wait(10)
    assert running.timed_out
    assert not ended_conn.cancelled.is_set()
    assert not ended.timed_out


def test_calls_that_ended_do_not_pile_up() -> None:
    """Thousands of calls that ended before a far deadline keep the heap bounded."""
    watchdog = Watchdog()
    far = time.monotonic() + 3600
    for _ in range(5 * _WATCHDOG_PRUNE):
        held = held_on(FakeConnection())
        watchdog.watch(held, far)
        held.done.set()

    assert len(watchdog._heap) <= _WATCHDOG_PRUNE
