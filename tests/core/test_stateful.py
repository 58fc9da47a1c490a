"""A Hypothesis state machine: the engine on MemoryStore against a plain-Python model.

One worker, fetches of exactly one second, time frozen between rules: the model replays the
rotation (a job re-enters at the end of the queue when its target is stored), the caps, the
idempotent reuse and cancellation, and must agree with what the engine reports after each rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing
from hypothesis import settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from trio_batch import (
    BatchEngine,
    Busy,
    Caller,
    CallerBusy,
    Config,
    Hooks,
    JobStatus,
    Result,
    Target,
    TargetError,
    open_engine,
)
from trio_batch.stores import MemoryStore

from ..support import TrioGuestDriver

pytestmark = pytest.mark.slow

BATCHES = [["u0", "u1"], ["fail0"], ["u2", "fail1", "u3"], ["u4"]]
JOBS_PER_CALLER = 2
JOBS_TOTAL = 3
DURATION = 1.0


async def fetch(caller: Caller, target: Target) -> Result:
    await trio.sleep(DURATION)
    if target.url.startswith("fail"):
        raise TargetError(f"{target.url} failed")
    return Result(target.url)


@dataclass
class ModelJob:
    id: str
    caller: str
    batch: int
    urls: list[str]
    status: JobStatus = JobStatus.QUEUED
    states: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.states = ["pending"] * len(self.urls)

    @property
    def live(self) -> bool:
        return self.status in (JobStatus.QUEUED, JobStatus.RUNNING)

    @property
    def next_idx(self) -> int:
        return self.states.index("pending") if "pending" in self.states else len(self.states)


class EngineMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.clock = trio.testing.MockClock()
        self.trio = TrioGuestDriver(clock=self.clock)
        self.depth = 0
        config = Config(
            jobs_per_caller=JOBS_PER_CALLER,
            jobs_total=JOBS_TOTAL,
            workers=1,
            hooks=Hooks(depth=self._on_depth),
        )
        self.engine: BatchEngine = self.trio.enter(open_engine(MemoryStore(), fetch, config))
        self.model: dict[str, ModelJob] = {}
        self.queue: list[ModelJob] = []
        self.inflight: tuple[ModelJob, float] | None = None
        self.now = self.trio.call(self._now)

    def _on_depth(self, depth: int) -> None:
        self.depth = depth

    @staticmethod
    async def _now() -> float:
        await trio.lowlevel.checkpoint()
        return trio.current_time()

    # -- the model ------------------------------------------------------------------------

    def _start_next(self) -> None:
        while self.inflight is None and self.queue:
            job = self.queue.pop(0)
            if not job.live:
                continue
            job.status = JobStatus.RUNNING
            job.states[job.next_idx] = "running"
            self.inflight = (job, self.now + DURATION)

    def _run_until(self, until: float) -> None:
        self._start_next()
        while self.inflight is not None and self.inflight[1] <= until:
            job, ends = self.inflight
            self.now = ends
            idx = job.states.index("running")
            job.states[idx] = "failed" if job.urls[idx].startswith("fail") else "done"
            self.inflight = None
            if job.live:
                if job.next_idx == len(job.urls):
                    ended = set(job.states)
                    job.status = (
                        JobStatus.DONE
                        if ended == {"done"}
                        else JobStatus.FAILED
                        if ended == {"failed"}
                        else JobStatus.PARTIAL
                    )
                else:
                    self.queue.append(job)
            self._start_next()
        self.now = until

    def _live(self, caller: str | None = None) -> int:
        return sum(j.live and caller in (None, j.caller) for j in self.model.values())

    # -- rules ----------------------------------------------------------------------------

    @rule(target=jobs, caller=st.sampled_from(["alice", "bob"]), batch=st.integers(0, 3))
    def submit(self, caller: str, batch: int) -> str:
        urls = BATCHES[batch]

        async def go() -> str:
            try:
                sub = await self.engine.submit(Caller(caller), "fleet", [Target(u) for u in urls])
            except CallerBusy:
                return "CallerBusy"
            except Busy:
                return "Busy"
            await trio.testing.wait_all_tasks_blocked()
            return sub.id + (":reused" if sub.reused else "")

        got = self.trio.call(go)
        same = [
            j
            for j in self.model.values()
            if j.caller == caller
            and j.batch == batch
            and j.status not in (JobStatus.FAILED, JobStatus.CANCELLED)
        ]
        if same:
            assert f"{same[-1].id}:reused" == got
            return same[-1].id
        if self._live(caller) >= JOBS_PER_CALLER:
            assert "CallerBusy" == got
            return "none"
        if self._live() >= JOBS_TOTAL:
            assert "Busy" == got
            return "none"
        assert ":" not in got and len(got) == 32
        job = ModelJob(got, caller, batch, list(urls))
        self.model[got] = job
        self.queue.append(job)
        self._start_next()
        return got

    @rule(job_id=jobs)
    def cancel(self, job_id: str) -> None:
        async def go() -> bool:
            ok = await self.engine.cancel(job_id)
            await trio.testing.wait_all_tasks_blocked()
            return ok

        got = self.trio.call(go)
        job = self.model.get(job_id)
        expected = job is not None and job.live
        assert expected == got
        if job is not None and expected:
            job.status = JobStatus.CANCELLED
            if job in self.queue:
                self.queue.remove(job)

    @rule(dt=st.sampled_from([0.4, 1.0, 2.5, 7.0]))
    def advance(self, dt: float) -> None:
        async def go() -> float:
            self.clock.autojump_threshold = 0
            await trio.sleep(dt)
            self.clock.autojump_threshold = math.inf
            await trio.testing.wait_all_tasks_blocked()
            return trio.current_time()

        until = self.trio.call(go)
        self._run_until(until)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def engine_agrees_with_model(self) -> None:
        async def read() -> dict[str, tuple[JobStatus, list[str], int]]:
            seen = {}
            for job_id in self.model:
                snap = await self.engine.status(job_id)
                assert snap is not None
                seen[job_id] = (
                    snap.job.status,
                    [t.status.value for t in snap.targets],
                    snap.job.targets_done,
                )
            return seen

        seen = self.trio.call(read)
        for job_id, job in self.model.items():
            done = sum(s in ("done", "failed") for s in job.states)
            assert (job.status, job.states, done) == seen[job_id], job_id
        assert self._live() == self.depth

    def teardown(self) -> None:
        self.trio.close()


# max_examples comes from the loaded profile (tests/conftest.py): more under "ci".
EngineMachine.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestEngineMachine = EngineMachine.TestCase
