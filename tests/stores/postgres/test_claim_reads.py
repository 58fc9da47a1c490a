"""What a claim reads and writes of the jobs: the jobs it takes, not every live job.

A claim runs for every few turns an instance's workers take, so its cost is the fleet's pace.
These tests count, inside the claim's own transaction, the rows of ``jobs`` it fetched, and
read the job rows a claim leaves behind.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from trio_batch import Result, TargetState
from trio_batch.stores import PostgresStore
from trio_batch.stores._postgres import _claims
from trio_batch.stores._postgres._schema import Conn
from trio_batch.stores._protocol import Limits, Outcome

from ..support import new_job

LIMITS = Limits(ttl=3600.0, targets_per_job=10, jobs_per_caller=1000, jobs_total=1000)
DONE = Outcome(TargetState.DONE, result_json=Result("fine").to_json())


def jobs_fetched_by_a_claim(instance: str, n: int) -> Callable[[Conn], tuple[int, int]]:
    """Claim ``n`` targets in one transaction; return the rows of ``jobs`` it fetched (by
    any scan) and how many targets it claimed."""

    def claim(conn: Conn) -> tuple[int, int]:
        stats = (
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relid = 'jobs'::regclass"
        )
        with conn.transaction():
            (before,) = conn.execute(stats).fetchone() or (0,)
            rows = conn.execute(
                _claims.CLAIM_SQL,
                _claims.claim_params(instance, n, time.time(), 60.0, 0, None, None),
            ).fetchall()
            (after,) = conn.execute(stats).fetchone() or (0,)
        return int(after) - int(before), len(rows)

    return claim


async def test_a_claim_reads_the_jobs_it_takes_not_every_live_job(
    pg_dsn: str, pg_schema: str
) -> None:
    """With 400 live jobs, a claim of 4 turns fetches a few dozen job rows at most.

    It walks the live jobs in turn order and stops once it has its turns. Before, it read
    every live job with two subqueries each and sorted them: 158 ms a claim at 10,000 live
    jobs (W4 on PostgreSQL: 2.3 ms a target at 10,000 live jobs against 0.33 at 100).
    """
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
        for i in range(400):
            await store.admit(new_job(f"job-{i}", n=2), LIMITS)
        fetched, claimed = await store._run(jobs_fetched_by_a_claim(store.instance_id, 4))

    assert 4 == claimed
    assert fetched <= 40, f"a claim of 4 turns fetched {fetched} rows of jobs"


def job_row(job_id: str) -> Callable[[Conn], tuple[str, int, str]]:
    """The job's row version (``xmin``), its turn and status."""

    def read(conn: Conn) -> tuple[str, int, str]:
        row = conn.execute(
            "SELECT xmin::text, turn, status FROM jobs WHERE id = %s", (job_id,)
        ).fetchone()
        assert row is not None
        return str(row[0]), int(row[1]), str(row[2])

    return read


async def test_a_claim_that_fills_its_job_leaves_the_job_row_as_it_was(
    pg_dsn: str, pg_schema: str
) -> None:
    """A running job of concurrency 1 whose next target is claimed keeps its row version and
    turn (its outcome gives it the next turn); a job with room left after its claim goes to
    the end of the rotation at once, and a queued job becomes running.

    A claim that updated every claimed job's row wrote a new version of a row with six
    indexes for each target: W1 on PostgreSQL runs its jobs at concurrency 1.
    """
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
        await store.admit(new_job("serial", n=3), LIMITS)
        (first,) = await store.claim_turns(1, time.time())
        await store.finish_targets([("serial", first.idx, DONE)], time.time(), 2**30)
        before = await store._run(job_row("serial"))
        (second,) = await store.claim_turns(1, time.time())
        after = await store._run(job_row("serial"))

        wide = dataclasses.replace(new_job("wide", n=3), concurrency=2)
        await store.admit(wide, LIMITS)
        queued = await store._run(job_row("wide"))
        (third,) = await store.claim_turns(1, time.time())
        claimed = await store._run(job_row("wide"))

    assert ("serial", 1) == (second.job_id, second.idx)
    assert "running" == before[2]
    assert before == after
    assert ("wide", 0) == (third.job_id, third.idx)
    assert "queued" == queued[2]
    assert "running" == claimed[2]
    assert claimed[1] > max(queued[1], after[1])
