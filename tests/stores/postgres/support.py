"""What the PostgreSQL tests share: the DSN to run them on, a fresh schema per test (dropped
afterwards), a store in one, and a lock held from another connection."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from trio_batch.stores import PostgresStore

PG_DSN = os.environ.get("TRIO_BATCH_TEST_PG", "")
SKIP_REASON = (
    "set TRIO_BATCH_TEST_PG to a PostgreSQL DSN (e.g. postgresql://postgres@127.0.0.1:5432/test) "
    "to run the PostgreSQL tests"
)


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it (blocking)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def open_test_schema(dsn: str) -> AsyncIterator[str]:
    """A unique schema name for one test; the schema is dropped when the block exits."""
    schema = f"tb_test_{secrets.token_hex(6)}"
    try:
        yield schema
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(drop_schema, dsn, schema)


@asynccontextmanager
async def open_test_store(
    dsn: str, *, instance_timeout: float = 30.0
) -> AsyncIterator[PostgresStore]:
    """A fresh, isolated ``PostgresStore`` in its own schema, dropped afterwards."""
    from trio_batch.stores import PostgresStore

    async with (
        open_test_schema(dsn) as schema,
        PostgresStore.open(dsn, schema=schema, instance_timeout=instance_timeout) as store,
    ):
        yield store


@asynccontextmanager
async def table_locked(dsn: str, schema: str, table: str) -> AsyncIterator[None]:
    """Another connection holds ``LOCK TABLE schema.table IN ACCESS EXCLUSIVE MODE`` during
    the block (as a migration or ``VACUUM FULL`` would); released however the block ends."""
    import psycopg
    from psycopg import sql

    def lock() -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(dsn)  # not autocommit: the lock lasts until rollback
        conn.execute(
            sql.SQL("LOCK TABLE {}.{} IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
        )
        return conn

    def release(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        conn.rollback()
        conn.close()

    conn = await trio.to_thread.run_sync(lock)
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(release, conn)
