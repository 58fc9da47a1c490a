"""SQLiteStore's webhook delivery state (SPEC §7; the rules are in ``stores/_hooks``).

A mixin, so the store class only names it: ``hooks_due`` reads on a reader connection,
``hook_advance`` writes through the store's writer thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from .._hooks import advance_query, due_query, hook_from_row
from .._protocol import HookDue

T = TypeVar("T")

_OPEN = "hook_open = 1"  # as the partial index jobs_hooks says it


def hooks_due(conn: sqlite3.Connection, now: float, limit: int) -> list[HookDue]:
    return [hook_from_row(r) for r in conn.execute(*due_query(_OPEN, now, limit)).fetchall()]


class SQLiteHooks:
    """``hooks_due`` and ``hook_advance``, for a class with SQLiteStore's ``_read``/``_write``."""

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        raise NotImplementedError  # SQLiteStore's

    async def _write(
        self, fn: Callable[[sqlite3.Connection], T], *, independent: bool = False
    ) -> T:
        raise NotImplementedError  # SQLiteStore's

    async def hooks_due(self, now: float, limit: int) -> list[HookDue]:
        return await self._read(lambda conn: hooks_due(conn, now, limit))

    async def hook_advance(
        self,
        due: HookDue,
        *,
        cursor: int,
        attempts: int,
        since: float,
        next_at: float,
        close: bool = False,
    ) -> bool:
        query = advance_query(_OPEN, due, cursor, attempts, since, next_at, close)
        # Touches only the job's hook columns: running marks may be folded past it.
        return await self._write(lambda conn: conn.execute(*query).rowcount == 1, independent=True)
