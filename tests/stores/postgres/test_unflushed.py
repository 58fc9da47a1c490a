"""A claim's, a lease's and a report's transaction (``_scopes.unflushed_transaction``): one
pipeline, committed whole or not at all, without waiting for the WAL to reach disk."""

from __future__ import annotations

import psycopg
import pytest

from trio_batch.stores._postgres._scopes import unflushed_transaction


class Failed(Exception):
    """An error raised in the block, by the caller's code rather than by the server."""


def connect(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection in autocommit mode with a table of its own, as the pool's are."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE TEMP TABLE rows (x integer)")
    return conn


def test_the_block_commits_whole_without_a_flush_and_leaves_the_setting_as_it_was(
    pg_dsn: str,
) -> None:
    """Inside the block the commit is asynchronous; its statements land together; after it,
    the connection's own setting (durable commits) is back."""
    with connect(pg_dsn) as conn:
        with unflushed_transaction(conn):
            conn.execute("INSERT INTO rows VALUES (1)")
            inside = conn.execute("SELECT current_setting('synchronous_commit')")
            conn.execute("INSERT INTO rows VALUES (2)")
        after = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        stored = conn.execute("SELECT count(*) FROM rows").fetchone()

        assert ("off",) == inside.fetchone()
        assert ("on",) == after
        assert (2,) == stored


def insert_then(conn: psycopg.Connection[tuple[object, ...]], statement: str | None) -> None:
    """In one block: insert a row, then run ``statement`` (None: raise :class:`Failed`)."""
    with unflushed_transaction(conn):
        conn.execute("INSERT INTO rows VALUES (1)")
        if statement is None:
            raise Failed
        conn.execute(statement)


def test_an_error_raised_in_the_block_commits_nothing_of_it(pg_dsn: str) -> None:
    """The pipeline's end would commit what the block sent; an error of the caller's own in
    the middle of the block rolls it back instead, as a transaction block does."""
    with connect(pg_dsn) as conn:
        with pytest.raises(Failed):
            insert_then(conn, None)
        stored = conn.execute("SELECT count(*) FROM rows").fetchone()

        assert (0,) == stored


def test_a_server_error_in_the_block_commits_nothing_of_it(pg_dsn: str) -> None:
    """A statement the server refuses takes the block's other statements with it."""
    with connect(pg_dsn) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            insert_then(conn, "SELECT 1 / 0")
        stored = conn.execute("SELECT count(*) FROM rows").fetchone()

        assert (0,) == stored
