"""What the tests of the stores room share: one job builder, limits, and the agreement machine.

No test module imports another; what two of them need lives here.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import trio
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from tests.stores.postgres.support import PG_DSN
from trio_batch import BatchEngine, Options, Result, SubmitError, Target, TargetState
from trio_batch.stores import (
    CacheEntry,
    Limits,
    MemoryStore,
    NewJob,
    Outcome,
    ServiceStore,
    SQLiteStore,
)

from ..support import TrioGuestDriver

NOW = 1000.0
"""The unix time jobs are admitted at, unless a test says otherwise."""

LIMITS = Limits(ttl=100.0, targets_per_job=8, jobs_per_caller=100, jobs_total=100)
"""Caps no test reaches by accident; a test of the caps sets its own."""


def new_job(
    job_id: str,
    *,
    n: int = 2,
    caller: str = "alice",
    now: float = NOW,
    webhook: str = "",
    key: str = "",
    caller_class: str = "fleet",
    workspace: str = "",
    url: str = "https://x.test/{job}/{i}",
    grep: bool = False,
) -> NewJob:
    """A job of ``n`` targets to admit, ``url`` formatted with the job id and the target's index.

    The key is ``key-<job_id>`` unless given, so a job is reused only by its own repeat.
    ``grep`` gives target ``i`` the option ``grep="g<i>"`` (to see options stored).
    """
    targets = [
        Target(url.format(job=job_id, i=i), Options(grep=f"g{i}") if grep else Options())
        for i in range(n)
    ]
    return NewJob(
        job_id,
        caller,
        caller_class,
        key or f"key-{job_id}",
        targets,
        now,
        workspace=workspace,
        webhook=webhook,
    )


async def hold_writer(store: SQLiteStore, nursery: trio.Nursery) -> threading.Event:
    """Block the writer thread in a write until the returned event is set, so that what is
    queued meanwhile commits in one transaction."""
    started, gate = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        started.set()
        gate.wait(30)

    nursery.start_soon(store._write, hold)
    await trio.to_thread.run_sync(started.wait)
    return gate


AGREEMENT_LIMITS = Limits(ttl=100.0, targets_per_job=2, jobs_per_caller=2, jobs_total=3)
CAP = 400  # result bytes kept before eviction; two finished results fit
CACHE_CAP = 100  # cache bytes kept: two small entries fit, a large one alone does not


class StoreAgreement(RuleBasedStateMachine):
    """Every rule runs on MemoryStore (the reference) and on ``backend``; both must answer alike.

    ``tests/stores/test_store_machine.py`` runs it (SQLite, PostgreSQL), and
    ``test_sqlite_groups.py`` adds a rule of groups of outcomes.
    """

    jobs = Bundle("jobs")
    backend = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.trio = TrioGuestDriver()
        self.reference = MemoryStore()
        self.tmp = tempfile.TemporaryDirectory()
        opened: AbstractAsyncContextManager[Any]
        if self.backend == "sqlite":
            opened = SQLiteStore.open(os.path.join(self.tmp.name, "s.sqlite"))
        else:
            from tests.stores.postgres.support import open_test_store

            opened = open_test_store(PG_DSN)
        self.store = cast("ServiceStore", self.trio.enter(opened))
        self.now = 1000.0
        self.admits = 0
        self.lengths: dict[str, int] = {}
        self.cache_puts = 0

    def both(self, op: Callable[[ServiceStore], Awaitable[Any]]) -> Any:
        """Run ``op`` on the reference and on the store under test; they must agree."""

        async def run(store: ServiceStore) -> Any:
            try:
                return await op(store)
            except SubmitError as exc:
                return type(exc).__name__

        async def go() -> tuple[Any, Any]:
            return await run(self.reference), await run(self.store)

        expected, actual = self.trio.call(go)
        assert expected == actual
        return expected

    @rule(target=jobs, request=st.integers(0, 4), caller=st.sampled_from("ab"), n=st.integers(1, 3))
    def admit(self, request: int, caller: str, n: int) -> str:
        job_id = f"j{self.admits}"
        self.admits += 1
        targets = [Target(f"https://x.test/{request}/{i}") for i in range(n)]
        new = NewJob(job_id, caller, "fleet", f"k{request}", targets, self.now)
        self.both(lambda store: store.admit(new, AGREEMENT_LIMITS))
        self.lengths[job_id] = n
        return job_id

    @rule(job=jobs, idx=st.integers(0, 2))
    def start(self, job: str, idx: int) -> None:
        if idx < self.lengths[job]:
            self.both(lambda store: store.start_target(job, idx, self.now))

    @rule(job=jobs, idx=st.integers(0, 2), ok=st.booleans())
    def finish(self, job: str, idx: int, ok: bool) -> None:
        outcome = (
            Outcome(TargetState.DONE, result_json=Result("x" * 150).to_json())
            if ok
            else Outcome(TargetState.FAILED, error="e", hint="h")
        )
        if idx < self.lengths[job]:
            self.both(lambda store: store.finish_target(job, idx, outcome, self.now, CAP))

    @rule(job=jobs, idx=st.integers(0, 2))
    def release(self, job: str, idx: int) -> None:
        if idx < self.lengths[job]:
            self.both(lambda store: store.release_target(job, idx, self.now))

    @rule(job=jobs)
    def cancel(self, job: str) -> None:
        self.both(lambda store: store.cancel(job, self.now))

    @rule(job=jobs)
    def interrupt(self, job: str) -> None:
        self.both(lambda store: store.interrupt([job], self.now))

    @rule()
    def recover(self) -> None:
        async def recover(store: ServiceStore) -> list[str]:
            return sorted(await store.recover(self.now))  # the protocol promises no order

        self.both(recover)

    @rule(job=jobs)
    def touch(self, job: str) -> None:
        self.both(lambda store: store.touch(job, self.now))

    @rule(key=st.integers(0, 3), size=st.sampled_from([10, 40, 120]))
    def cache_put(self, key: int, size: int) -> None:
        self.cache_puts += 1
        body = bytes([ord("a") + self.cache_puts % 26]) * size
        entry = CacheEntry(body, f'{{"put": {self.cache_puts}}}', self.now, self.now + 60.0)
        self.both(lambda store: store.cache_put(f"c{key}", entry, CACHE_CAP))

    @rule(key=st.integers(0, 3))
    def cache_get(self, key: int) -> None:
        self.both(lambda store: store.cache_get(f"c{key}"))

    @rule(seconds=st.sampled_from([1.0, 30.0, 120.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def same_jobs(self) -> None:
        async def snapshots(store: ServiceStore) -> list[object]:
            return [await store.snapshot(job_id) for job_id in self.lengths]

        self.both(snapshots)

    def teardown(self) -> None:
        self.trio.close()
        self.tmp.cleanup()


async def wait_target(engine: BatchEngine, job_id: str, idx: int, state: TargetState) -> None:
    """Read the job's target ``idx`` until it is in ``state`` (30 s at most).

    For a fleet, where another instance's outcomes reach no watch of this engine: a bounded
    poll of the shared database on the real clock (``wait_ended_polling`` waits for a job's
    end the same way).
    """
    with trio.fail_after(30):
        while True:
            (target,) = await engine.targets(job_id, after=idx - 1, limit=1)
            if target.status is state:
                return
            await trio.sleep(0.02)
