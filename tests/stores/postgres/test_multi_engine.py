"""Several engines over one PostgreSQL database: one set of jobs, the same guarantees.

These run on the real clock: the engines wait on worker threads, which Trio's autojump clock
would count as idle while a thread works (python-trio/trio#456), so every wait here is on a
hook or an Event.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import (
    BatchEngine,
    Caller,
    CallerBusy,
    Config,
    JobStatus,
    StoreError,
    Submitted,
    TargetState,
    open_engine,
)
from trio_batch.stores import PostgresStore
from trio_batch.stores._postgres._schema import SCHEMA_VERSION
from trio_batch.stores._protocol import Limits
from trio_batch.testing import ScriptedFetch

from ...support import Recorder, slack, targets, url, wait_ended_polling
from ..support import new_job, wait_target

ALICE = Caller("alice")


@asynccontextmanager
async def two_engines(
    dsn: str,
    schema: str,
    fetch_a: ScriptedFetch,
    fetch_b: ScriptedFetch,
    rec_a: Recorder,
    rec_b: Recorder,
    **config: Any,
) -> AsyncIterator[tuple[BatchEngine, BatchEngine]]:
    """Engines A and B, each on its own store instance, both on ``schema``."""
    async with AsyncExitStack() as stack:
        engines = []
        for fetch, rec in ((fetch_a, rec_a), (fetch_b, rec_b)):
            store = await stack.enter_async_context(PostgresStore.open(dsn, schema=schema))
            engine = await stack.enter_async_context(
                open_engine(store, fetch, Config(hooks=rec.hooks(), **config))
            )
            engines.append(engine)
        yield engines[0], engines[1]


def count_live(dsn: str, schema: str, caller: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.jobs WHERE caller = %s "
            "AND status IN ('queued', 'running')",
            (caller,),
        ).fetchone()
        assert row is not None
        return int(row[0])


def count_active(dsn: str, marker: str) -> int:
    """How many queries whose text holds ``marker`` the server is running now (not this one)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE state = 'active' AND pid <> pg_backend_pid() AND strpos(query, %s) > 0",
            (marker,),
        ).fetchone()
        assert row is not None
        return int(row[0])


class TestAdmissionAcrossEngines:
    async def test_concurrent_submits_admit_exactly_jobs_per_caller(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """Twenty concurrent submits of one caller over two engines admit exactly the cap."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        for i in range(20):
            fetch_a.hold(url(f"j{i}", 0))
            fetch_b.hold(url(f"j{i}", 0))
        admitted: list[Submitted] = []
        refused: list[CallerBusy] = []
        async with two_engines(
            pg_dsn,
            pg_schema,
            fetch_a,
            fetch_b,
            Recorder(),
            Recorder(),
            jobs_per_caller=3,
            jobs_total=100,
        ) as (a, b):

            async def submit(engine: BatchEngine, i: int) -> None:
                try:
                    admitted.append(await engine.submit(ALICE, "fleet", targets(f"j{i}", 2)))
                except CallerBusy as exc:
                    refused.append(exc)

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(submit, a if i % 2 else b, i)
            live = await trio.to_thread.run_sync(count_live, pg_dsn, pg_schema, "alice")

            assert (3, 17, 3) == (len(admitted), len(refused), live)
            assert not any(sub.reused for sub in admitted)

    async def test_identical_submits_on_both_engines_make_one_job(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """The same job submitted concurrently on both engines is admitted once."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        fetch_a.hold(url("same", 0))
        fetch_b.hold(url("same", 0))
        rec_a, rec_b = Recorder(), Recorder()
        results: list[Submitted] = []
        async with two_engines(pg_dsn, pg_schema, fetch_a, fetch_b, rec_a, rec_b) as (a, b):

            async def submit(engine: BatchEngine) -> None:
                results.append(await engine.submit(ALICE, "fleet", targets("same", 2)))

            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(submit, a if i % 2 else b)

            assert 1 == len({sub.id for sub in results})
            assert 1 == sum(not sub.reused for sub in results)
            assert (1, 9) == (
                (rec_a.jobs + rec_b.jobs).count("created"),
                (rec_a.jobs + rec_b.jobs).count("reused"),
            )


class TestCancelAndStatusAcrossEngines:
    async def test_status_on_b_matches_status_on_a(self, pg_dsn: str, pg_schema: str) -> None:
        """Status read through B is what A reads, mid-run and at the end."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        gates = [fetch_a.hold(url("s", 1)), fetch_b.hold(url("s", 1))]
        rec_a, rec_b = Recorder(), Recorder()
        async with two_engines(pg_dsn, pg_schema, fetch_a, fetch_b, rec_a, rec_b) as (a, b):
            sub = await a.submit(ALICE, "fleet", targets("s", 3))
            await wait_target(a, sub.id, 1, TargetState.RUNNING)
            mid_a, mid_b = await a.status(sub.id), await b.status(sub.id)
            for gate in gates:
                gate.set()
            assert [JobStatus.DONE] == await wait_ended_polling(a, sub.id)
            end_a, end_b = await a.status(sub.id), await b.status(sub.id)

            assert mid_a is not None and end_a is not None
            assert mid_a == mid_b
            assert JobStatus.RUNNING == mid_a.job.status
            assert end_a == end_b
            assert JobStatus.DONE == end_a.job.status

    async def test_touch_from_b_moves_the_lease(self, pg_dsn: str, pg_schema: str) -> None:
        """An owner's read served by B keeps the job the fleet ran."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        rec_a, rec_b = Recorder(), Recorder()
        async with two_engines(pg_dsn, pg_schema, fetch_a, fetch_b, rec_a, rec_b) as (a, b):
            sub = await a.submit(ALICE, "fleet", targets("t", 1))
            assert [JobStatus.DONE] == await wait_ended_polling(a, sub.id)
            before = await a.status(sub.id)

            assert await b.touch(sub.id)
            after = await a.status(sub.id)
            assert before is not None and after is not None
            assert after.job.lease >= before.job.lease


class TestInstances:
    async def test_an_engine_leaves_the_turns_of_live_instances_alone(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """Opening an engine takes no turn another live instance holds: A's fetch is A's."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        gates = [fetch_a.hold(url("l", 0)), fetch_b.hold(url("l", 0))]
        rec_a = Recorder()
        async with two_engines(pg_dsn, pg_schema, fetch_a, fetch_b, rec_a, Recorder()) as (a, _):
            sub = await a.submit(ALICE, "fleet", targets("l", 1))
            await wait_target(a, sub.id, 0, TargetState.RUNNING)
            async with (
                PostgresStore.open(pg_dsn, schema=pg_schema) as store,
                open_engine(store, ScriptedFetch()) as c,
            ):
                snap = await c.status(sub.id)
            for gate in gates:
                gate.set()
            assert [JobStatus.DONE] == await wait_ended_polling(a, sub.id)

            assert snap is not None
            assert JobStatus.RUNNING == snap.job.status
            assert [url("l", 0)] == fetch_a.calls + fetch_b.calls


class TestSchema:
    async def test_concurrent_first_opens_migrate_once(self, pg_dsn: str, pg_schema: str) -> None:
        """Several instances opening a new schema at once all succeed on one schema version."""
        opened: list[str] = []

        async def open_one() -> None:
            async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
                opened.append(store.instance_id)

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(open_one)
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(f"SELECT version FROM {pg_schema}.schema_version").fetchall()

        assert 4 == len(set(opened))
        assert [(SCHEMA_VERSION,)] == rows

    async def test_a_newer_schema_is_refused(self, pg_dsn: str, pg_schema: str) -> None:
        """A schema written by a newer trio-batch is refused with a fix."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema):
            pass
        with psycopg.connect(pg_dsn) as conn:
            conn.execute(f"UPDATE {pg_schema}.schema_version SET version = 99")

        with pytest.raises(StoreError, match=r"has version 99, newer .*: upgrade trio-batch$"):
            async with PostgresStore.open(pg_dsn, schema=pg_schema):
                pass

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"schema": "Bad-Name"}, r"^schema must be a lower-case SQL identifier"),
            ({"instance_timeout": 0}, r"^instance_timeout must be > 0 \(got 0\)$"),
            ({"instance_timeout": 1, "heartbeat": 2}, r"^heartbeat must be > 0 and < "),
            ({"pool_size": 1}, r"^pool_size must be an int >= 2 \(got 1\)$"),
        ],
    )
    async def test_bad_settings_are_refused(
        self, pg_dsn: str, kwargs: dict[str, Any], message: str
    ) -> None:
        """A setting out of range is a ValueError naming it, before any connection."""
        with pytest.raises(ValueError, match=message):
            async with PostgresStore.open(pg_dsn, **kwargs):
                pass

    async def test_an_unreachable_server_is_a_store_error(self) -> None:
        """No server at the DSN is a StoreError that says what to check, without the host."""
        dsn = "postgresql://postgres@127.0.0.1:1/test"

        with pytest.raises(StoreError, match=r"^could not connect to PostgreSQL within 0.5 s") as e:
            async with PostgresStore.open(dsn, connect_timeout=0.5):
                pass
        assert "127.0.0.1" not in str(e.value)


class TestDriver:
    async def test_cancelling_a_call_stops_its_query(self, pg_dsn: str, pg_schema: str) -> None:
        """Trio cancellation cancels the running query on the server, and the pool stays usable."""
        marker = f"pg_sleep(10) /* {pg_schema} */"
        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            t0 = time.monotonic()  # a call's round trip, as loaded as the cancel's will be
            await store.snapshot("nope")
            trip = time.monotonic() - t0
            t0 = time.monotonic()
            with trio.move_on_after(0.3):
                await store._run(lambda conn: conn.execute(f"SELECT {marker}"))
            elapsed = time.monotonic() - t0
            running = await trio.to_thread.run_sync(count_active, pg_dsn, marker)

            assert elapsed < 0.3 + slack(2.7, trip, times=20)  # the query sleeps 10 s
            assert 0 == running
            assert await store.snapshot("nope") is None

    async def test_concurrent_writes_share_commits(self, pg_dsn: str, pg_schema: str) -> None:
        """Writes queued together are committed together (group commit)."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(store.touch, f"job{i}", 1.0)
            commits, writes = store.commit_statistics()

        assert 50 == writes
        assert commits < writes

    async def test_a_failing_write_does_not_undo_its_batch(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A write that fails in the database fails alone; the writes batched with it land."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            limits = Limits(ttl=100, targets_per_job=4, jobs_per_caller=10, jobs_total=10)
            errors: list[Exception] = []
            admitted: list[Submitted] = []

            async def bad() -> None:
                try:
                    await store._write(lambda conn: conn.execute("SELECT 1 / 0"))
                except psycopg.errors.DivisionByZero as exc:
                    errors.append(exc)

            async def good(i: int) -> None:
                job = new_job(f"job{i}", n=1, caller=f"caller{i}", now=1.0)
                admitted.append(await store.admit(job, limits))

            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(good, i)
                nursery.start_soon(bad)
                for i in range(5, 10):
                    nursery.start_soon(good, i)
            snaps = [await store.snapshot(f"job{i}") for i in range(10)]

        assert 1 == len(errors)
        assert 10 == len(admitted)
        assert all(snap is not None for snap in snaps)
