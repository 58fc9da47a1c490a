"""PostgresStore when the database misbehaves: lost connections, refused items, a held lock.

These run on the real clock against a real server (the waits are on worker threads, which
Trio's autojump clock would count as idle); every wait is on an Event, a hook, or a database
condition polled with a deadline.
"""

from __future__ import annotations

import logging
import secrets
import select
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
import pytest
import trio
from psycopg import sql

from trio_batch import (
    Caller,
    Config,
    JobStatus,
    Result,
    StoreError,
    Target,
    TargetState,
    open_engine,
)
from trio_batch.stores import PostgresStore
from trio_batch.stores._postgres import _sql
from trio_batch.stores._postgres._threads import check_idle_connection
from trio_batch.stores._protocol import Limits, Outcome, Stored

from ...support import Recorder, wait_ended
from ..support import new_job
from .support import table_locked

LIMITS = Limits(ttl=3600.0, targets_per_job=50, jobs_per_caller=100, jobs_total=100)
NOW = 1_800_000_000.0
DEADLINE = 60.0
"""Seconds any one wait of these tests may take before the test fails (a safety net only)."""


def tagged(dsn: str, name: str) -> str:
    """``dsn`` with an ``application_name``, so the test can find this store's sessions."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"


def sessions(dsn: str, name: str, *, waiting_on_lock: bool = False) -> int:
    """How many sessions called ``name`` the server has (only those waiting on a lock)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND (NOT %s OR wait_event_type = 'Lock')",
            (name, waiting_on_lock),
        ).fetchone()
        assert row is not None
        return int(row[0])


def terminate(dsn: str, name: str) -> int:
    """``pg_terminate_backend`` every session called ``name``, as a restart would; how many."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (name,),
        ).fetchall()
        return len(rows)


async def poll(condition: Callable[[], object]) -> None:
    """Wait until the blocking ``condition()`` is true (polled on the real clock)."""
    with trio.fail_after(DEADLINE):
        while True:
            if await trio.to_thread.run_sync(condition):
                return
            await trio.sleep(0.01)  # a condition in another process: poll the real clock


class HeldFetch:
    """A fetch that answers at once, except for one URL: it says so, then waits for a gate."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.held = ""
        self.reached = trio.Event()
        self.gate = trio.Event()

    def hold(self, url: str) -> None:
        self.held, self.reached, self.gate = url, trio.Event(), trio.Event()

    async def __call__(self, caller: Caller, target: Target) -> Result:
        self.calls.append(target.url)
        if target.url == self.held:
            self.reached.set()
            await self.gate.wait()
        return Result(f"content of {target.url}")


@pytest.mark.slow
class TestLostConnection:
    async def test_terminated_sessions_lose_no_result_and_count_none_twice(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """Sessions killed mid-batch or between batches: every job ends done, each target once.

        Ten rounds on one engine, the kill at a different target each time: in even rounds
        while the writer waits inside a batch (on a lock this test holds), in odd rounds while
        the store is idle between batches. A second job of instant targets keeps the writer
        busy meanwhile.
        """
        name = f"tb_kill_{secrets.token_hex(4)}"
        fetch = HeldFetch()
        rec = Recorder()
        size = 6
        rounds = 10
        job_ids: list[str] = []
        async with (
            PostgresStore.open(tagged(pg_dsn, name), schema=pg_schema) as store,
            open_engine(
                store, fetch, Config(hooks=rec.hooks(), workers=2, jobs_per_caller=4)
            ) as engine,
        ):
            for round_ in range(rounds):
                held = f"https://r{round_}.test/{round_ % size}"
                fetch.hold(held)
                for prefix in (f"r{round_}", f"busy{round_}"):
                    urls = [Target(f"https://{prefix}.test/{i}") for i in range(size)]
                    job_ids.append((await engine.submit(Caller("c"), "fleet", urls)).id)
                with trio.fail_after(DEADLINE):
                    await fetch.reached.wait()
                if round_ % 2 == 0:  # mid-batch: the writer waits on a lock, holding a batch
                    async with table_locked(pg_dsn, pg_schema, "targets"):
                        fetch.gate.set()
                        await poll(partial(sessions, pg_dsn, name, waiting_on_lock=True))
                        assert await trio.to_thread.run_sync(terminate, pg_dsn, name) >= 1
                else:  # between batches
                    assert await trio.to_thread.run_sync(terminate, pg_dsn, name) >= 1
                    fetch.gate.set()
                with trio.fail_after(DEADLINE):
                    await wait_ended(engine, *job_ids[-2:])
            reconnects = store.reconnects

        assert 2 * rounds == len(job_ids)
        assert ["done"] * (2 * rounds) == [event for event in rec.jobs if event != "created"]
        assert rounds <= reconnects
        assert sorted(fetch.calls) == sorted(set(fetch.calls))  # no target fetched twice
        with psycopg.connect(pg_dsn) as conn:
            jobs = conn.execute(
                f"SELECT status, error, targets_done, targets_total, bytes FROM {pg_schema}.jobs"
            ).fetchall()
            targets = conn.execute(
                f"SELECT status, result FROM {pg_schema}.targets ORDER BY job_id, idx"
            ).fetchall()
            counted = conn.execute(
                f"SELECT sum(bytes) FROM {pg_schema}.counters WHERE kind = 'results'"
            ).fetchone()
        stored_bytes = sum(len(result.encode()) for _, result in targets)
        assert [("done", "", size, size)] * (2 * rounds) == [row[:4] for row in jobs]
        assert [stored_bytes] == [sum(row[4] for row in jobs)]
        assert counted is not None
        assert stored_bytes == counted[0]
        assert {"done"} == {status for status, _ in targets}


@pytest.mark.slow
class TestOneBadItem:
    async def test_an_item_the_server_refuses_fails_alone(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A group where one outcome cannot be stored: it gets its error, the others land."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            await store.admit(new_job("j", n=3, now=NOW), LIMITS)
            ok = Outcome(TargetState.DONE, result_json=Result("fine").to_json())
            bad = Outcome(TargetState.FAILED, error="a NUL \x00 PostgreSQL text cannot hold")
            results = await store.finish_targets(
                [("j", 0, ok), ("j", 1, bad), ("j", 2, ok)], NOW + 1, 10**9
            )
            snap = await store.snapshot("j")

        assert [Stored(None), Stored(None)] == [results[0], results[2]]
        assert isinstance(results[1], psycopg.DataError)
        assert snap is not None
        assert [TargetState.DONE, TargetState.PENDING, TargetState.DONE] == [
            t.status for t in snap.targets
        ]
        assert (JobStatus.QUEUED, 2) == (snap.job.status, snap.job.targets_done)


@pytest.mark.slow
class TestCallTimeout:
    async def test_a_call_under_a_held_lock_raises_store_error_then_recovers(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """While another session locks the jobs table, reads and writes raise StoreError after
        ``call_timeout`` and write nothing; once the lock goes, the same calls work."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema, call_timeout=1.0) as store:
            await store.admit(new_job("j", n=1, now=NOW), LIMITS)
            errors: list[str] = []
            async with table_locked(pg_dsn, pg_schema, "jobs"):
                with trio.fail_after(DEADLINE):
                    for call in (
                        lambda: store.snapshot("j"),
                        lambda: store.touch("j", NOW + 5),
                        lambda: store.admit(new_job("j2", n=1, now=NOW), LIMITS),
                    ):
                        with pytest.raises(StoreError) as caught:
                            await call()
                        errors.append(str(caught.value))
            snap = await store.snapshot("j")
            refused = await store.snapshot("j2")
            touched = await store.touch("j", NOW + 5)

        assert 3 == len(errors)
        assert all("did not answer within 1 s" in error for error in errors)
        assert snap is not None
        assert NOW == snap.job.lease  # the timed-out touch wrote nothing
        assert refused is None  # nor the timed-out admission
        assert touched


@pytest.mark.slow
class TestEngineWaitsForTheStore:
    async def test_an_outcome_refused_under_a_lock_lands_once_the_lock_goes(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """``statement_timeout`` cancels the write of a fetched outcome while a lock is held:
        the engine keeps the outcome and its job (cap held) and stores it once the lock goes."""
        fetch = HeldFetch()
        rec = Recorder()
        tried = trio.Event()

        class Tried(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if getattr(record, "op", "") == "finish_targets":
                    tried.set()

        handler = Tried()
        logging.getLogger("trio_batch").addHandler(handler)
        dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}options=-c%20statement_timeout%3D1000"
        try:
            async with (
                PostgresStore.open(dsn, schema=pg_schema) as store,
                open_engine(store, fetch, Config(hooks=rec.hooks(), jobs_per_caller=1)) as engine,
            ):
                urls = [Target(f"https://x.test/{i}") for i in range(3)]
                fetch.hold(urls[1].url)
                sub = await engine.submit(Caller("c"), "fleet", urls)
                with trio.fail_after(DEADLINE):
                    await fetch.reached.wait()
                    async with table_locked(pg_dsn, pg_schema, "targets"):
                        fetch.gate.set()
                        await tried.wait()  # a write was cancelled by the server
                        live = engine.statistics().live_jobs
                    await wait_ended(engine, sub.id)
                snap = await engine.status(sub.id)
        finally:
            logging.getLogger("trio_batch").removeHandler(handler)

        assert 1 == live
        assert ["created", "done"] == rec.jobs
        assert snap is not None
        assert [f"content of {t.url}" for t in urls] == [
            t.result.content if t.result else "" for t in snap.targets
        ]


@pytest.mark.slow
class TestCommittedWritesKeepTheirAnswer:
    async def test_an_admission_committed_before_a_stalled_write_is_not_reported_failed(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """One batch: an admission (committed in the pipeline), then ``recover`` (a write of
        several statements) waiting on a lock until ``call_timeout``. The admission answers as
        committed; only ``recover`` fails. Before, both raised StoreError, and a caller told
        "failed" held a job that ran nowhere."""
        answers: dict[str, object] = {}
        async with PostgresStore.open(pg_dsn, schema=pg_schema, call_timeout=1.0) as store:
            job = new_job("j", n=1, now=NOW)

            async def recover() -> None:
                try:
                    await store.recover(NOW)
                except StoreError as exc:
                    answers["recover"] = exc

            async def admit() -> None:
                try:
                    answers["admit"] = await store.admit(job, LIMITS)
                except StoreError as exc:
                    answers["admit"] = exc

            with trio.fail_after(DEADLINE):
                async with (
                    table_locked(pg_dsn, pg_schema, "instances"),
                    trio.open_nursery() as nursery,  # both in one batch
                ):
                    nursery.start_soon(recover)
                    nursery.start_soon(admit)
            snap = await store.snapshot("j")

        assert isinstance(answers["recover"], StoreError)
        assert not isinstance(answers["admit"], Exception)
        assert snap is not None


class TestPooledConnectionCheck:
    """A pooled connection is checked at checkout without a round trip, unless the server
    has spoken: then it is asked, and a dropped one is replaced."""

    def test_a_healthy_idle_connection_is_not_asked(
        self, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A connection with nothing to read costs no round trip at checkout."""
        asked: list[object] = []
        monkeypatch.setattr(
            "trio_batch.stores._postgres._threads.ConnectionPool.check_connection", asked.append
        )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SELECT 1")
            check_idle_connection(conn)

        assert asked == []

    def test_a_dropped_connection_is_refused(self, pg_dsn: str) -> None:
        """A connection the server ended fails the check, so the pool replaces it."""
        name = f"tb_check_{secrets.token_hex(4)}"
        with psycopg.connect(tagged(pg_dsn, name), autocommit=True) as conn:
            conn.execute("SELECT 1")
            assert terminate(pg_dsn, name) == 1
            # The server's goodbye arrives on the socket, which the check looks at.
            readable, _, _ = select.select([conn.fileno()], [], [], DEADLINE)
            assert readable

            with pytest.raises(psycopg.OperationalError):
                check_idle_connection(conn)

    async def test_reads_after_the_sessions_were_dropped_answer(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """Reads right after every session of the store was ended answer: a connection handed
        out before its goodbye arrived is replaced and the read runs again."""
        name = f"tb_reads_{secrets.token_hex(4)}"
        async with PostgresStore.open(tagged(pg_dsn, name), schema=pg_schema) as store:
            await store.admit(new_job("j"), LIMITS)
            assert await store.snapshot("j") is not None
            await poll(lambda: sessions(pg_dsn, name) >= 2)  # the writer and a reader

            assert await trio.to_thread.run_sync(terminate, pg_dsn, name) >= 2
            snaps = [await store.snapshot("j") for _ in range(3)]

        assert all(snap is not None for snap in snaps)


async def test_the_writer_never_compiles_a_plan(pg_dsn: str, pg_schema: str) -> None:
    """The writer turns seq scans off, which prices a scan over ``jit_above_cost``: with JIT
    on, each statement that must scan (``recover`` on a fresh store) spent 0.2-0.4 s compiling,
    and a 0.5 s ``statement_timeout`` cancelled ``serve``'s start now and then."""
    async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
        plan = await store._write(
            lambda conn: [
                str(row[0])
                for row in conn.execute(
                    "EXPLAIN (ANALYZE) DELETE FROM instances WHERE heartbeat_at < clock_timestamp()"
                    " - timeout * interval '1 second'"
                ).fetchall()
            ]
        )

    assert "Seq Scan" in "\n".join(plan)
    assert not any(line.startswith("JIT:") for line in plan)


class TestRenewalWaitsForNoLock:
    async def test_a_claim_whose_row_is_locked_is_kept_without_a_wait(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A renewal passes over a claimed target's row that another transaction holds (as
        the writer holds the rows of the outcomes it stores), keeps that claim and moves the
        others on. It locked them all before: it waited here until ``call_timeout`` (and under
        a drain it sometimes lost a deadlock to the writer, and failed whole)."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema, call_timeout=5.0) as store:
            for job_id in ("a", "b"):
                await store.admit(new_job(job_id, n=1), LIMITS)
            claims = {claim.job_id: claim for claim in await store.claim_turns(2, NOW)}
            targets = sql.Identifier(pg_schema, "targets")
            deadline = sql.SQL("SELECT claim_until FROM {} WHERE job_id = %s").format(targets)

            def lock_a() -> psycopg.Connection[tuple[Any, ...]]:
                conn = psycopg.connect(pg_dsn)  # the lock lasts until its rollback
                conn.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE job_id = 'a' FOR UPDATE").format(targets)
                )
                return conn

            def deadlines() -> list[Any]:
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    return [conn.execute(deadline, (j,)).fetchone() for j in ("a", "b")]

            before = await trio.to_thread.run_sync(deadlines)
            locker = await trio.to_thread.run_sync(lock_a)
            try:
                # The renewal before this one waited for the lock: StoreError at call_timeout.
                held = await store._renew([claims["a"].token, claims["b"].token])
            finally:
                await trio.to_thread.run_sync(locker.close)
            after = await trio.to_thread.run_sync(deadlines)

        assert {claims["a"].token, claims["b"].token} == held
        assert before[0] == after[0]  # passed over this time
        assert before[1] < after[1]  # moved on


@pytest.mark.slow
class TestReplay:
    async def test_a_replayed_group_answers_as_the_first_run_and_counts_nothing_twice(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """The writer's replay after a lost reply: the group's statement, sent again with
        ``replay``, stores nothing twice and reports the job it ended once more."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            await store.admit(new_job("j", now=NOW), LIMITS)
            instance = store.instance_id
        done = Result("fine").to_json()
        items = [("j", idx, Outcome(TargetState.DONE, result_json=done)) for idx in (0, 1)]
        started = {("j", 0): NOW, ("j", 1): NOW}  # both running marks were dropped into it

        def params(*, replay: bool) -> dict[str, object]:
            return _sql.finish_params(items, NOW + 1, started, instance, replay)

        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {pg_schema}")
            first = conn.execute(_sql.FINISH_MANY.sql, params(replay=False)).fetchall()
            again = conn.execute(_sql.FINISH_MANY.sql, params(replay=True)).fetchall()
            job = conn.execute("SELECT status, targets_done, bytes FROM jobs").fetchone()
            counted = conn.execute(
                "SELECT sum(bytes) FROM counters WHERE kind = 'results'"
            ).fetchone()

        def terminal(rows: list[tuple[Any, ...]]) -> list[tuple[int, str | None]]:
            return sorted((row[0], row[2]) for row in rows if row[0] > 0)

        assert [(1, None), (2, "done")] == terminal(first)
        assert [(2, "done")] == terminal(again)
        assert ("done", 2, 2 * len(done)) == job
        assert (2 * len(done),) == counted
