"""A database that is down or stalled: 503 with Retry-After in time, never 500 or a hung request.

Unit level: a store wrapper that stalls (reads wait until cancelled; writes, like a real
store's queued write, wait until released whatever cancels them) or fails, on Trio's mock
clock, so a deadline passes without a real wait.
"""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from typing import Any, cast

import pytest
import trio
import trio.testing

from trio_batch import StoreError
from trio_batch.http._deadline import StoreCalls, StoreTimeout
from trio_batch.stores import MemoryStore, Store

from .support import Api, auth, open_api

A = "https://a.example.test/"
B = "https://b.example.test/"
TIMEOUT = 2.0
READS = frozenset({"snapshot", "read_job", "job_summary", "read_targets", "list_jobs", "cache_get"})
"""The store methods that read; the others write (and a stalled write cannot be cancelled)."""


class FaultyStore:
    """A :class:`MemoryStore` whose async methods can be stalled or made to fail."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self._gate: trio.Event | None = None
        self._stall_reads = True
        self.failure: Exception | None = None
        self.waiting = 0

    def stall(self, *, reads: bool = True) -> None:
        """From now on, calls wait (reads too, unless ``reads=False``) until :meth:`resume`."""
        self._gate = trio.Event()
        self._stall_reads = reads

    def resume(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(method):
            return method

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.failure is not None:
                await trio.lowlevel.checkpoint()
                raise self.failure
            gate = self._gate
            if gate is None or (name in READS and not self._stall_reads):
                return await method(*args, **kwargs)
            self.waiting += 1
            try:
                if name in READS:
                    await gate.wait()
                    return await method(*args, **kwargs)
                await trio.lowlevel.checkpoint_if_cancelled()
                with trio.CancelScope(shield=True):  # a queued write is not cancellable
                    await gate.wait()
                    return await method(*args, **kwargs)
            finally:
                self.waiting -= 1

        return call


@pytest.fixture
async def faulty() -> AsyncIterator[FaultyStore]:
    store = FaultyStore()
    try:
        yield store
    finally:
        store.failure = None
        store.resume()


@pytest.fixture
async def api(faulty: FaultyStore) -> AsyncIterator[Api]:
    async with open_api(store=cast("Store", faulty), store_timeout=TIMEOUT) as a:
        yield a


async def timed(request: Awaitable[Any]) -> tuple[Any, float]:
    t0 = trio.current_time()
    answer = await request
    return answer, trio.current_time() - t0


def assert_unavailable(r: Any, error: str) -> None:
    assert (r.status_code, r.headers.get("retry-after")) == (503, "5")
    assert error == r.json()["error"]
    assert r.json()["hint"]


class TestStalledStore:
    async def test_a_read_answers_503_at_the_deadline_then_200_after(
        self, api: Api, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """GET of a job while the database hangs: 503 + Retry-After after store_timeout."""
        job_id = (await api.submit(A)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        faulty.stall()
        stalled, seconds = await timed(api.get(f"/v1/batch/{job_id}"))
        target, _ = await timed(api.get(f"/v1/batch/{job_id}/0"))
        faulty.resume()
        after = await api.get(f"/v1/batch/{job_id}")

        assert_unavailable(stalled, "the database did not answer within 2 s")
        assert "slow or unreachable" in stalled.json()["hint"]
        assert seconds == pytest.approx(TIMEOUT)
        assert_unavailable(target, "the database did not answer within 2 s")
        assert (after.status_code, after.json()["status"]) == (200, "done")

    async def test_a_submit_answers_503_and_a_repeat_gets_the_same_job(
        self, api: Api, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """POST while the writer hangs: 503 in time; the write lands later; a repeat reuses it."""
        faulty.stall()
        stalled, seconds = await timed(api.submit(A, B))
        faulty.resume()
        await trio.testing.wait_all_tasks_blocked()
        again = await api.submit(A, B)

        assert_unavailable(stalled, "the database did not answer within 2 s")
        assert "repeating the same request is safe" in stalled.json()["hint"]
        assert seconds == pytest.approx(TIMEOUT)
        assert (again.status_code, again.json()["reused"]) == (200, True)

    async def test_a_cancel_answers_503_and_lands_later(
        self, api: Api, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """DELETE while only the writer hangs: 503 in time, then the cancel lands (409 after)."""
        fetch_gate = api.fetch.hold(A)
        job_id = (await api.submit(A, B)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        faulty.stall(reads=False)
        stalled, seconds = await timed(api.client.delete(f"/v1/batch/{job_id}", headers=auth()))
        faulty.resume()
        fetch_gate.set()
        await trio.testing.wait_all_tasks_blocked()
        again = await api.client.delete(f"/v1/batch/{job_id}", headers=auth())

        assert_unavailable(stalled, "the database did not answer within 2 s")
        assert seconds == pytest.approx(TIMEOUT)
        assert (again.status_code, again.json()["status"]) == (409, "cancelled")

    async def test_a_read_answers_while_only_the_writer_hangs(
        self, api: Api, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """GET does not wait for its touch: 200 at once; the lease moves when the writer can."""
        job_id = (await api.submit(A)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        before = await api.engine.status(job_id)
        faulty.stall(reads=False)
        api.wall.advance(100)
        answers = [await timed(api.get(f"/v1/batch/{job_id}")) for _ in range(3)]
        touches_waiting = faulty.waiting
        faulty.resume()
        await trio.testing.wait_all_tasks_blocked()
        after = await api.engine.status(job_id)

        assert [(r.status_code, s) for r, s in answers] == [(200, 0.0)] * 3
        assert answers[0][0].json()["expires_at"] == pytest.approx(api.wall.now + 3600)
        assert touches_waiting == 1  # one touch per job at a time, not one per read
        assert before is not None and after is not None
        assert before.job.lease + 100 == pytest.approx(after.job.lease)


class TestHealth:
    async def test_healthz_is_503_while_the_database_hangs_and_200_after(
        self, api: Api, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """/healthz reads within store_timeout: unhealthy with Retry-After, then ok again."""
        faulty.stall()
        sick, seconds = await timed(api.client.get("/healthz"))
        faulty.resume()
        well = await api.client.get("/healthz")

        assert (sick.status_code, sick.headers.get("retry-after")) == (503, "5")
        assert sick.json() == {
            "status": "unhealthy",
            "error": "the database did not answer within 2 s",
            "hint": "the database is slow or unreachable; requests get 503 meanwhile",
            "live_jobs": 0,
            "inflight_targets": 0,
        }
        assert seconds == pytest.approx(TIMEOUT)
        assert (well.status_code, well.json()["status"]) == (200, "ok")

    async def test_healthz_sees_writes_that_do_not_finish(
        self, api: Api, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Reads answer but a write has waited over store_timeout: unhealthy until it lands."""
        faulty.stall(reads=False)
        fresh = await api.client.get("/healthz")
        stalled = await api.submit(A)
        sick = await api.client.get("/healthz")
        faulty.resume()
        well = await api.client.get("/healthz")

        assert fresh.status_code == 200  # no write is stuck yet
        assert stalled.status_code == 503
        assert (sick.status_code, sick.json()["error"]) == (
            503,
            "writes to the database have not finished for over 2 s",
        )
        assert well.status_code == 200

    async def test_healthz_is_503_when_the_store_fails(self, api: Api, faulty: FaultyStore) -> None:
        """A store that raises StoreError makes /healthz unhealthy, naming the error type."""
        faulty.failure = StoreError("no connection")
        r = await api.client.get("/healthz")

        assert (r.status_code, r.json()["status"]) == (503, "unhealthy")
        assert "StoreError" in r.json()["hint"]
        assert "no connection" not in r.text


def _driver_errors() -> list[Exception]:
    psycopg = pytest.importorskip("psycopg")
    from psycopg import errors
    from psycopg_pool import PoolTimeout

    return [
        psycopg.OperationalError("connection lost"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.QueryCanceled("canceling statement due to statement timeout"),
        PoolTimeout("couldn't get a connection"),
    ]


class TestFailingStore:
    @pytest.mark.parametrize("kind", ["store", "driver", "sqlite"])
    async def test_database_errors_answer_503_with_retry_after(
        self, api: Api, faulty: FaultyStore, kind: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """StoreError and the drivers' operational errors are 503 + Retry-After, never 500."""
        if kind == "store":
            failures: list[Exception] = [StoreError("the database at db.internal is down")]
        elif kind == "driver":
            failures = _driver_errors()
        else:
            failures = [
                sqlite3.OperationalError("database is locked"),
                sqlite3.OperationalError("disk I/O error"),
            ]
        job_id = (await api.submit(A)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        answers = []
        for failure in failures:
            faulty.failure = failure
            answers.append(await api.get(f"/v1/batch/{job_id}"))
            answers.append(await api.submit(B))
            answers.append(await api.client.delete(f"/v1/batch/{job_id}", headers=auth()))
        faulty.failure = None

        for r in answers:
            assert_unavailable(r, "the database is unavailable")
        assert "db.internal" not in caplog.text
        assert {r.levelname for r in caplog.records if r.name == "trio_batch.http"} == {"WARNING"}

    async def test_a_bug_is_still_500(self, api: Api, faulty: FaultyStore) -> None:
        """Only database failures are 503: any other exception from the store is a bug."""
        faulty.failure = RuntimeError("a bug")
        r = await api.submit(A)

        assert (r.status_code, r.json()["error"]) == (500, "internal error")


class TestWithoutLifespan:
    async def test_reads_still_answer_503_at_the_deadline(
        self, faulty: FaultyStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """An app driven without lifespan events runs store calls inline: reads still time out."""
        async with open_api(
            store=cast("Store", faulty), store_timeout=TIMEOUT, with_lifespan=False
        ) as api:
            job_id = (await api.submit(A)).json()["id"]
            faulty.stall()
            r, seconds = await timed(api.get(f"/v1/batch/{job_id}"))
            health = await api.client.get("/healthz")
            faulty.resume()

        assert_unavailable(r, "the database did not answer within 2 s")
        assert seconds == pytest.approx(TIMEOUT)
        assert health.status_code == 503


class TestStoreCalls:
    async def test_too_many_waiting_writes_answer_at_once(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Past the bound of writes nobody waits for, a write is refused without starting."""
        calls = StoreCalls(1.0, max_pending_writes=2)
        gate = trio.Event()
        started = 0

        async def stuck() -> None:
            nonlocal started
            started += 1
            with trio.CancelScope(shield=True):
                await gate.wait()

        async with calls.running():
            for _ in range(2):
                with pytest.raises(StoreTimeout):
                    await calls.request().write(stuck)
            t0 = trio.current_time()
            with pytest.raises(StoreTimeout) as refused:
                await calls.request().write(stuck)
            waited = trio.current_time() - t0
            gate.set()

        assert (refused.value.backlog, waited, started) == (True, 0.0, 2)

    async def test_a_cancelled_request_cancels_its_read(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A read whose request is cancelled stops; nothing is left running."""
        calls = StoreCalls(10.0)
        ended = trio.Event()

        async def read() -> None:
            try:
                await trio.sleep_forever()
            finally:
                ended.set()

        async with calls.running():
            with trio.move_on_after(0.01):
                await calls.request().read(read)
            await ended.wait()

        assert calls.pending_writes == 0

    def test_the_timeout_must_be_positive(self) -> None:
        """A store_timeout of 0 is refused at once, naming the value."""
        with pytest.raises(ValueError, match=r"^store_timeout must be > 0 \(got 0\)$"):
            StoreCalls(0)
