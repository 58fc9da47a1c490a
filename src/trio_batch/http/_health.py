"""What ``/healthz`` knows of the database's writes, and log lines that do not repeat per request.

A read proves the database answers, not that it can write: a full disk (SQLite's
``SQLITE_FULL``, PostgreSQL's ``DiskFull``) or a read-only database lets every read through
and fails every write at once. So the app remembers how its writes end
(:class:`WriteHealth`), and the engine says how its own writes end (storing outcomes:
``EngineStatistics.store_error``). A write that failed less than :data:`FAILED_WRITE_SECONDS`
ago, with no write succeeding since, makes ``/healthz`` answer 503.

Why a window and not "until a write succeeds": an instance that a load balancer stopped sending
traffic to makes no more API writes, so the proof of recovery might never come. The engine
tries a failed outcome again at least every 10 s while it waits (``_engine/_storing``), which
keeps its failure fresh for as long as the disk stays full, and its first success after the
disk has room clears it at once.

Each change of state is logged once (writes fail; writes work again, with how many failed
meanwhile), and the per-request warnings of a failing store go through a :class:`LogThrottle`:
the first of a kind at once, then at most one per :data:`LOG_EVERY` seconds saying how many were
left out. A disk full for 20 s with clients polling used to log one line per poll.
"""

from __future__ import annotations

import logging
from typing import final

import trio

from .._engine import EngineStatistics
from .._errors import is_store_outage, iter_chain

_log = logging.getLogger("trio_batch.http")

FAILED_WRITE_SECONDS = 15.0
"""How long a failed write keeps ``/healthz`` at 503 when no write succeeds after it. Longer
than the engine's longest wait between two tries of an outcome it could not store (10 s)."""

LOG_EVERY = 10.0
"""Seconds between two warnings of the same kind while a store keeps failing."""


def outage_type(exc: BaseException) -> str | None:
    """The type name of the database failure in ``exc``'s chain, or None if it holds none."""
    failure = next((e for e in iter_chain(exc) if is_store_outage(e)), None)
    return None if failure is None else type(failure).__name__


@final
class LogThrottle:
    """Lets through the first warning of a kind, then one per :data:`LOG_EVERY` seconds."""

    def __init__(self, every: float = LOG_EVERY) -> None:
        self._every = every
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def allow(self, kind: str) -> int | None:
        """None to leave this line out; else how many of its kind were left out before it."""
        now = trio.current_time()
        last = self._last.get(kind)
        if last is not None and now - last < self._every:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return None

        self._last[kind] = now
        return self._left_out.pop(kind, 0)

    def warning(self, message: str, *args: object, kind: str, error_type: str) -> None:
        """Log ``message % args`` on ``trio_batch.http`` unless the throttle holds it back."""
        left_out = self.allow(kind)
        if left_out is None:
            return
        suffix = f" ({left_out} more like it not logged)" if left_out else ""
        _log.warning(message + suffix, *args, extra={"error_type": error_type})


@final
class WriteHealth:
    """How the API's writes end lately: failing (since when, with what) or working."""

    def __init__(self) -> None:
        self.throttle = LogThrottle()
        self._error: str | None = None
        self._last_failure = 0.0
        self._first_failure = 0.0
        self._failures = 0

    def succeeded(self) -> None:
        """A write landed: the database writes again (logged once if it did not)."""
        if self._error is None:
            return

        _log.warning(
            "writes to the database work again after %.1f s (%d failed meanwhile)",
            trio.current_time() - self._first_failure,
            self._failures,
            extra={"error_type": self._error},
        )
        self._error = None
        self._failures = 0

    def failed(self, error_type: str) -> None:
        """A write failed with a database failure of type ``error_type`` (logged once a spell)."""
        now = trio.current_time()
        if self._error is None or now - self._last_failure >= FAILED_WRITE_SECONDS:
            _log.warning(
                "a write to the database failed with %s; /healthz answers 503 until a write "
                "succeeds (or none fails for %g s)",
                error_type,
                FAILED_WRITE_SECONDS,
                extra={"error_type": error_type},
            )
            self._first_failure = now
            self._failures = 0
        self._error = error_type
        self._last_failure = now
        self._failures += 1

    def problem(self, stats: EngineStatistics) -> tuple[str, str] | None:
        """``/healthz``'s error and hint when the API's or the engine's writes fail, else None."""
        now = trio.current_time()
        failures = []
        if self._error is not None and now - self._last_failure < FAILED_WRITE_SECONDS:
            failures.append(("the API", self._error))
        engine_failed_at = stats.store_error_at
        engine_fresh = (
            engine_failed_at is not None and now - engine_failed_at < FAILED_WRITE_SECONDS
        )
        if stats.store_error is not None and engine_fresh:
            failures.append(("the engine (storing results)", stats.store_error))
        if not failures:
            return None

        who, error_type = failures[0]
        return (
            "the database cannot write",
            f"a write by {who} failed with {error_type} (a full disk, a read-only database); "
            "submits get 503 and running jobs wait meanwhile",
        )
