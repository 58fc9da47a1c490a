"""Properties over random plans: whatever the mix of jobs, outcomes, workers and cancels,
the engine's invariants hold.

Store agreement (every backend answers as MemoryStore does) is the state machine in
``tests/stores/test_store_machine.py``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import trio
import trio.testing
from hypothesis import given, strategies as st

from trio_batch import (
    Caller,
    Config,
    Hooks,
    JobStatus,
    Result,
    RetryLater,
    SubmitError,
    Target,
    TargetError,
    TargetState,
    open_engine,
)
from trio_batch.stores import MemoryStore

OUTCOMES = st.sampled_from(["done", "fail", "crash", "busy", "busy-forever"])


@dataclass(frozen=True)
class PlannedJob:
    caller: str
    outcomes: tuple[str, ...]
    submit_at: float
    cancel_at: float | None


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
            ),
            min_size=1,
            max_size=8,
        )
    )
    return workers, jobs


async def run_plan(workers: int, plan: list[PlannedJob]) -> None:
    starts: dict[str, list[tuple[int, float, float]]] = {}
    running: dict[str, int] = {}
    inflight_seen: list[int] = []
    events: list[str] = []
    job_of_url: dict[str, str] = {}
    cancelled_at: dict[str, float] = {}

    async def fetch(caller: Caller, target: Target) -> Result:
        job_key, idx_text, kind = target.url.split("|")
        idx = int(idx_text)
        running[job_key] = running.get(job_key, 0) + 1
        assert running[job_key] == 1, "two targets of one job in flight"
        start = trio.current_time()
        try:
            await trio.sleep(1.0)
        finally:
            running[job_key] -= 1
        starts.setdefault(job_key, []).append((idx, start, trio.current_time()))
        if kind == "fail":
            raise TargetError("failed", hint="h")
        if kind == "crash":
            raise ValueError("boom")
        if kind == "busy" and len([s for s in starts[job_key] if s[0] == idx]) == 1:
            raise RetryLater()
        if kind == "busy-forever":
            raise RetryLater()
        return Result(kind)

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
    store = MemoryStore()
    admitted: dict[str, str] = {}
    async with open_engine(store, fetch, config) as engine:
        t0 = trio.current_time()
        async with trio.open_nursery() as nursery:
            for n, job in enumerate(plan):

                async def submit_and_cancel(n: int = n, job: PlannedJob = job) -> None:
                    await trio.sleep(job.submit_at)
                    key = f"j{n}"
                    batch = [Target(f"{key}|{i}|{kind}") for i, kind in enumerate(job.outcomes)]
                    try:
                        sub = await engine.submit(Caller(job.caller), "fleet", batch)
                    except SubmitError:
                        return
                    if sub.reused:
                        return
                    admitted[key] = sub.id
                    job_of_url[key] = sub.id
                    if job.cancel_at is not None:
                        await trio.sleep(job.cancel_at)
                        if await engine.cancel(sub.id):
                            cancelled_at[key] = trio.current_time()

                nursery.start_soon(submit_and_cancel)
        await trio.sleep(200)
        assert engine.statistics().live_jobs == 0
        assert trio.current_time() - t0 >= 200

        for key, job_id in admitted.items():
            snap = await engine.status(job_id)
            assert snap is not None
            summary, targets = snap
            assert not summary.status.live
            states = [t.status for t in targets]
            assert TargetState.RUNNING not in states
            finished = [s for s in states if s in (TargetState.DONE, TargetState.FAILED)]
            assert len(finished) == summary.targets_done
            # targets are fetched in order, one at a time
            order = [idx for idx, _, _ in starts.get(key, [])]
            assert order == sorted(order)
            spans = starts.get(key, [])
            assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans))
            if key in cancelled_at:
                assert JobStatus.CANCELLED == summary.status
                assert all(start <= cancelled_at[key] for _, start, _ in spans)
            else:
                assert TargetState.PENDING not in states
                expected = (
                    JobStatus.DONE
                    if set(finished) == {TargetState.DONE}
                    else JobStatus.FAILED
                    if set(finished) == {TargetState.FAILED}
                    else JobStatus.PARTIAL
                )
                assert expected == summary.status
            for target, kind in zip(targets, plan[int(key[1:])].outcomes, strict=True):
                if target.status is TargetState.FAILED:
                    assert (
                        target.error
                        == {
                            "fail": "failed",
                            "crash": "internal error",
                            "busy-forever": "busy",
                        }[kind]
                    )
    terminal = [e for e in events if e not in ("created", "reused")]
    assert len(admitted) == len(terminal)
    assert max(inflight_seen, default=0) <= workers


@given(plans())
def test_random_plans_keep_the_invariants(plan: tuple[int, list[PlannedJob]]) -> None:
    """Any plan ends with every job terminal, serial, correctly summarised, hooks once."""
    workers, jobs = plan
    trio.run(run_plan, workers, jobs, clock=trio.testing.MockClock(autojump_threshold=0))
