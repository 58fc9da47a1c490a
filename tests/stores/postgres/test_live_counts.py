"""The live jobs an admission counts for the caps (``live_jobs``, migration 14).

An admission no longer reads every live job: each job's moves in and out of the live statuses
keep a count per caller, in a shard per connection. These tests hold the counts against the
jobs themselves after each way a job becomes or stops being live, after the shards of closed
connections are folded, and on a schema whose live jobs predate the counts.
"""

from __future__ import annotations

import pytest
from psycopg import sql

from trio_batch import CallerBusy, Result, TargetState
from trio_batch.stores import PostgresStore
from trio_batch.stores._postgres import _sql
from trio_batch.stores._postgres._schema import Conn
from trio_batch.stores._protocol import Limits, Outcome

from ..support import NOW, new_job

LIMITS = Limits(ttl=3600.0, targets_per_job=10, jobs_per_caller=4, jobs_total=100)
DONE = Outcome(TargetState.DONE, result_json=Result("fine").to_json())


def counted(conn: Conn) -> dict[str, int]:
    """The live jobs per caller as the counts have them (callers at zero left out)."""
    rows = conn.execute(
        "SELECT caller, sum(n) FROM live_jobs GROUP BY caller HAVING sum(n) <> 0"
    ).fetchall()
    return {str(caller): int(n) for caller, n in rows}


def live(conn: Conn) -> dict[str, int]:
    """The live jobs per caller, counted from the jobs."""
    rows = conn.execute(
        "SELECT caller, count(*) FROM jobs WHERE status IN ('queued', 'running') GROUP BY caller"
    ).fetchall()
    return {str(caller): int(n) for caller, n in rows}


async def both(store: PostgresStore) -> tuple[dict[str, int], dict[str, int]]:
    return await store._run(counted), await store._run(live)


async def test_the_counts_follow_each_way_a_job_comes_and_goes(pg_dsn: str, pg_schema: str) -> None:
    """Admitted, claimed, ended by its last outcome, cancelled, failed ``interrupted``,
    evicted once finished: after each, the counts are the live jobs; the caps still refuse
    at the limit."""
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
        for i in range(3):
            await store.admit(new_job(f"a{i}", n=1, caller="alice"), LIMITS)
        await store.admit(new_job("b0", n=2, caller="bob"), LIMITS)
        await store.admit(new_job("b1", n=1, caller="bob"), LIMITS)
        admitted = await both(store)

        for claim in await store.claim_turns(8, NOW):
            if claim.job_id in ("a0", "b0"):
                await store.finish_targets([(claim.job_id, claim.idx, DONE)], NOW, 2**30)
        claimed = await both(store)
        await store.cancel("a1", NOW)
        await store.interrupt(["b1"], NOW)
        ended = await both(store)
        await store._write(lambda conn: conn.execute("DELETE FROM jobs WHERE id IN ('a1', 'b1')"))
        await store._run(_sql.fold_shards)
        folded = await both(store)

        for i in range(3, 6):
            await store.admit(new_job(f"a{i}", n=1, caller="alice"), LIMITS)
        with pytest.raises(CallerBusy, match="already has 4 live jobs"):
            await store.admit(new_job("a6", n=1, caller="alice"), LIMITS)

    assert ({"alice": 3, "bob": 2},) * 2 == admitted
    assert ({"alice": 2, "bob": 2},) * 2 == claimed  # a0 ended; b0 still has a target
    assert ({"alice": 1, "bob": 1},) * 2 == ended
    assert ({"alice": 1, "bob": 1},) * 2 == folded


async def test_counts_of_closed_connections_fold_and_still_count(
    pg_dsn: str, pg_schema: str
) -> None:
    """A store's connections count in shards of their own, and another instance still counts
    them once that store closed; the shards of connections gone fold into shard ''.

    (The connections are made gone by renaming their shards to names no backend has: a
    closed connection's backend leaves the server's list a moment after the close, which a
    test should not race.)
    """
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as first:
        for i in range(3):
            await first.admit(new_job(f"a{i}", n=1, caller="alice"), LIMITS)
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as second:
        await second.admit(new_job("a3", n=1, caller="alice"), LIMITS)
        with pytest.raises(CallerBusy):
            await second.admit(new_job("a4", n=1, caller="alice"), LIMITS)
        await second._write(
            lambda conn: conn.execute(
                "UPDATE live_jobs SET shard = 'gone-' || shard WHERE shard <> ''"
            )
        )
        await second._run(_sql.fold_shards)
        shards = await second._run(
            lambda conn: conn.execute("SELECT shard, n FROM live_jobs").fetchall()
        )

    assert [("", 4)] == shards


async def test_a_schema_with_live_jobs_starts_its_counts_from_them(
    pg_dsn: str, pg_schema: str
) -> None:
    """Live jobs admitted before the counts existed (a schema at version 13) are counted
    when it migrates."""
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
        for i in range(3):
            await store.admit(new_job(f"a{i}", n=1, caller="alice"), LIMITS)

        def back_to_13(conn: Conn) -> None:
            conn.execute("DROP TABLE live_jobs")
            conn.execute("DROP FUNCTION live_jobs_moved() CASCADE")
            conn.execute("UPDATE schema_version SET version = 13")

        await store._write(back_to_13)
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
        counts = await both(store)
        triggers = await store._run(
            lambda conn: conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM pg_trigger WHERE tgrelid = {}::regclass "
                    "AND tgname LIKE 'jobs_live_%%'"
                ).format(sql.Literal(f"{pg_schema}.jobs"))
            ).fetchone()
        )

    assert ({"alice": 3},) * 2 == counts
    assert (3,) == triggers
