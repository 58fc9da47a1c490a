"""A Hypothesis state machine over the stores: SQLite (and PostgreSQL when TRIO_BATCH_TEST_PG is
set) must answer every operation exactly as MemoryStore, the reference, and hold the same jobs.

The stores stay open across rules through a Trio guest run; no engine and no virtual time are
involved, so thread timing cannot make the two disagree.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from trio_batch import Result, SubmitError, Target, TargetState
from trio_batch.stores import Limits, MemoryStore, NewJob, Outcome, SQLiteStore, Store

from .conftest import PG_DSN
from .trio_guest import TrioGuestDriver

LIMITS = Limits(ttl=100.0, targets_per_job=2, jobs_per_caller=2, jobs_total=3)
CAP = 400  # result bytes kept before eviction; two finished results fit


class StoreAgreement(RuleBasedStateMachine):
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
            from tests.pg_support import open_test_store

            opened = open_test_store(PG_DSN)
        self.store = cast("Store", self.trio.enter(opened))
        self.now = 1000.0
        self.admits = 0
        self.lengths: dict[str, int] = {}

    def both(self, op: Callable[[Store], Awaitable[Any]]) -> Any:
        """Run ``op`` on the reference and on the store under test; they must agree."""

        async def run(store: Store) -> Any:
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
        self.both(lambda store: store.admit(new, LIMITS))
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

    @rule(job=jobs)
    def touch(self, job: str) -> None:
        self.both(lambda store: store.touch(job, self.now))

    @rule(seconds=st.sampled_from([1.0, 30.0, 120.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def same_jobs(self) -> None:
        async def snapshots(store: Store) -> list[object]:
            return [await store.snapshot(job_id) for job_id in self.lengths]

        self.both(snapshots)

    def teardown(self) -> None:
        self.trio.close()
        self.tmp.cleanup()


class PostgresAgreement(StoreAgreement):
    backend = "postgres"


StoreAgreement.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestSQLiteAgreesWithMemory = StoreAgreement.TestCase

PostgresAgreement.TestCase.settings = settings(
    max_examples=min(settings().max_examples, 40), stateful_step_count=30, deadline=None
)
TestPostgresAgreesWithMemory = pytest.mark.skipif(
    not PG_DSN, reason="set TRIO_BATCH_TEST_PG to a PostgreSQL DSN to run the PostgreSQL tests"
)(PostgresAgreement.TestCase)
