"""A Hypothesis state machine over the stores: SQLite (and PostgreSQL when TRIO_BATCH_TEST_PG is
set) must answer every operation exactly as MemoryStore, the reference, and hold the same jobs.

It is the one agreement test: every method of the ``Store`` protocol is a rule (admission with
its caps, reuse and TTL sweep; start, release, finish with byte-cap eviction; cancel, interrupt,
recover, touch; the web cache's put with its cap, and get), and ``snapshot`` is the invariant.
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
from trio_batch.stores import (
    CacheEntry,
    Limits,
    MemoryStore,
    NewJob,
    Outcome,
    ServiceStore,
    SQLiteStore,
)

from ..pg_support import PG_DSN, SKIP_REASON
from ..trio_guest import TrioGuestDriver

pytestmark = pytest.mark.slow

LIMITS = Limits(ttl=100.0, targets_per_job=2, jobs_per_caller=2, jobs_total=3)
CAP = 400  # result bytes kept before eviction; two finished results fit
CACHE_CAP = 100  # cache bytes kept: two small entries fit, a large one alone does not


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


class PostgresAgreement(StoreAgreement):
    backend = "postgres"


StoreAgreement.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestSQLiteAgreesWithMemory = StoreAgreement.TestCase

PostgresAgreement.TestCase.settings = settings(
    max_examples=min(settings().max_examples, 40), stateful_step_count=30, deadline=None
)
TestPostgresAgreesWithMemory = pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)(
    PostgresAgreement.TestCase
)
