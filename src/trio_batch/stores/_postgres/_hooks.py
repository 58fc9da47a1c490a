"""PostgresStore's webhook delivery state (SPEC §7; the rules are in ``stores/_hooks``).

A mixin, so the store class only names it. ``hook_advance`` is a compare-and-set through the
writer: of two instances that delivered the same event, one advances (the receiver dedupes the
other by its ``webhook-id``). Any instance delivers any job's webhook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .. import _sql_reads as q
from .._hooks import advance_query, due_query, hook_from_row
from .._protocol import HookDue
from ._schema import Conn

T = TypeVar("T")

_OPEN = "hook_open"  # as the partial index jobs_hooks says it


def hooks_due(conn: Conn, now: float, limit: int) -> list[HookDue]:
    sql, params = q.for_postgres(due_query(_OPEN, now, limit))
    return [hook_from_row(r) for r in conn.execute(sql, params).fetchall()]


def hook_advance(conn: Conn, query: q.Query) -> bool:
    return conn.execute(*q.for_postgres(query)).rowcount == 1


class PostgresHooks:
    """``hooks_due`` and ``hook_advance``, for a class with PostgresStore's ``_read``/``_write``."""

    async def _read(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError  # PostgresStore's

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        raise NotImplementedError  # PostgresStore's

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
        return await self._write(lambda conn: hook_advance(conn, query))
