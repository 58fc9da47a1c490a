"""Properties over random plans: whatever the mix of jobs, outcomes, workers and cancels,
the engine's invariants hold.

Store agreement (every backend answers as MemoryStore does) is the state machine in
``tests/stores/test_store_machine.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio
import trio.testing
from hypothesis import given, strategies as st

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    Hooks,
    HostBudget,
    JobStatus,
    Result,
    RetryLater,
    Snapshot,
    SubmitError,
    Target,
    TargetError,
    TargetState,
    open_engine,
)
from trio_batch.stores import MemoryStore

HOST_BUDGET = 2  # requests of one host in flight at once
OUTCOMES = st.sampled_from(["done", "fail", "crash", "busy", "busy-forever"])


@dataclass(frozen=True)
class PlannedJob:
    caller: str
    outcomes: tuple[str, ...]
    submit_at: float
    cancel_at: float | None
    concurrency: int = 1
    host: str = "h0"


@st.composite
def plans(draw: st.DrawFn) -> tuple[int, list[PlannedJob]]:
    workers = draw(st.integers(1, 3))
    jobs = draw(
        st.lists(
            st.builds(
                PlannedJob,
                caller=st.sampled_from(["a", "b", "c"]),
                outcomes=st.lists(OUTCOMES, min_size=1, max_size=5).map(tuple),
                submit_at=st.sampled_from([0.0, 0.5, 1.0, 3.0, 7.5]),
                cancel_at=st.none() | st.sampled_from([0.2, 1.0, 2.5, 6.0]),
                concurrency=st.sampled_from([1, 1, 2, 3]),
                host=st.sampled_from(["h0", "h1"]),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return workers, jobs


@dataclass
class Seen:
    """What the fake fetch and the submitters saw while a plan ran."""

    starts: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    on_host: dict[str, int] = field(default_factory=dict)
    order: dict[str, list[int]] = field(default_factory=dict)  # indices as fetches began
    cancelled_at: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, str] = field(default_factory=dict)

    async def fetch(self, caller: Caller, target: Target) -> Result:
        """A second of work, then the outcome the plan names; more of a job in flight than its
        concurrency, or more on a host than its budget, is a bug."""
        host, job_key, concurrency, idx_text, kind = target.url.split("|")
        idx = int(idx_text)
        self.order.setdefault(job_key, []).append(idx)
        self.running[job_key] = self.running.get(job_key, 0) + 1
        assert self.running[job_key] <= int(concurrency), "too many targets of one job at once"
        self.on_host[host] = self.on_host.get(host, 0) + 1
        assert self.on_host[host] <= HOST_BUDGET, "the host's budget was overrun"
        start = trio.current_time()
        try:
            await trio.sleep(1.0)
        finally:
            self.running[job_key] -= 1
            self.on_host[host] -= 1
        self.starts.setdefault(job_key, []).append((idx, start, trio.current_time()))

        if kind == "fail":
            raise TargetError("failed", hint="h")
        if kind == "crash":
            raise ValueError("boom")
        if kind == "busy" and len([s for s in self.starts[job_key] if s[0] == idx]) == 1:
            raise RetryLater()
        if kind == "busy-forever":
            raise RetryLater()
        return Result(kind)

    async def submit_and_cancel(self, engine: BatchEngine, key: str, job: PlannedJob) -> None:
        """Submit ``job`` at its time, then cancel it at its time, as the plan says."""
        await trio.sleep(job.submit_at)
        batch = [
            Target(f"{job.host}|{key}|{job.concurrency}|{i}|{kind}")
            for i, kind in enumerate(job.outcomes)
        ]
        try:
            sub = await engine.submit(
                Caller(job.caller), "fleet", batch, concurrency=job.concurrency
            )
        except SubmitError:
            return
        if sub.reused:
            return
        self.admitted[key] = sub.id

        if job.cancel_at is not None:
            await trio.sleep(job.cancel_at)
            if await engine.cancel(sub.id):
                self.cancelled_at[key] = trio.current_time()


def expected_status(finished: Sequence[TargetState]) -> JobStatus:
    """The status SPEC §3 gives a job that ran to its end with these finished targets."""
    if set(finished) == {TargetState.DONE}:
        return JobStatus.DONE
    if set(finished) == {TargetState.FAILED}:
        return JobStatus.FAILED
    return JobStatus.PARTIAL


# A target busy once may fail too: its host's backoff (one budget for all jobs on the host)
# may outlast retry_for when the host kept answering busy.
FAILURE_TEXT = {"fail": "failed", "crash": "internal error", "busy-forever": "busy", "busy": "busy"}
BLOCKED = "the host kept answering 429/503"  # a host blocked past its limit fails any target


def check_job(snap: Snapshot | None, seen: Seen, key: str, planned: PlannedJob) -> None:
    """One admitted job ended terminal, ran serially and in order, and is summed up right."""
    assert snap is not None
    summary, targets = snap
    assert not summary.status.live
    states = [t.status for t in targets]
    assert TargetState.RUNNING not in states
    finished = [s for s in states if s in (TargetState.DONE, TargetState.FAILED)]
    assert len(finished) == summary.targets_done

    # targets start in index order (a busy one again before any new one); one at a time at
    # concurrency 1
    spans = sorted(seen.starts.get(key, []), key=lambda span: span[1])
    began = seen.order.get(key, [])
    firsts = [idx for n, idx in enumerate(began) if idx not in began[:n]]
    assert firsts == sorted(firsts)
    if planned.concurrency == 1:
        assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans))

    if key in seen.cancelled_at:
        assert JobStatus.CANCELLED == summary.status
        assert all(start <= seen.cancelled_at[key] for _, start, _ in spans)
    else:
        assert TargetState.PENDING not in states
        assert expected_status(finished) == summary.status
    for target, kind in zip(targets, planned.outcomes, strict=True):
        if target.status is TargetState.FAILED and not (target.error or "").startswith(BLOCKED):
            assert FAILURE_TEXT[kind] == target.error


async def run_plan(workers: int, plan: list[PlannedJob]) -> None:
    seen = Seen()
    events: list[str] = []
    inflight_seen: list[int] = []
    hooks = Hooks(job=events.append, inflight=inflight_seen.append)
    config = Config(
        workers=workers,
        max_workers=3,
        jobs_per_caller=3,
        jobs_total=5,
        retry_wait=2.0,
        retry_for=5.0,
        hooks=hooks,
    )

    async with open_engine(
        MemoryStore(),
        seen.fetch,
        config,
        # Backoffs of 4 s at most, blocked after 30 s: every plan ends within its 200 s.
        budget=HostBudget(concurrency=HOST_BUDGET, max_backoff=4.0, block_limit=30.0),
        scope=lambda target: target.url.split("|")[0],
    ) as engine:
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for n, job in enumerate(plan):
                nursery.start_soon(seen.submit_and_cancel, engine, f"j{n}", job)
        await trio.sleep(200)
        assert engine.statistics().live_jobs == 0
        assert trio.current_time() - t0 >= 200

        for key, job_id in seen.admitted.items():
            check_job(await engine.status(job_id), seen, key, plan[int(key[1:])])

    terminal = [e for e in events if e not in ("created", "reused")]
    assert len(seen.admitted) == len(terminal)
    assert max(inflight_seen, default=0) <= workers


@given(plans())
def test_random_plans_keep_the_invariants(plan: tuple[int, list[PlannedJob]]) -> None:
    """Any plan ends with every job terminal, serial, correctly summarised, hooks once."""
    workers, jobs = plan
    trio.run(run_plan, workers, jobs, clock=trio.testing.MockClock(autojump_threshold=0))
