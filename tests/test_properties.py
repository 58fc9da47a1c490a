"""Properties over random plans: whatever the mix of jobs, outcomes, workers and cancels,
the engine's invariants hold. And every store agrees with MemoryStore on random operations."""

from __future__ import annotations

import itertools
import os
import tempfile
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
from trio_batch.stores import Limits, MemoryStore, NewJob, Outcome, SQLiteStore, Store

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


# -- store agreement ----------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("admit"), st.integers(0, 5), st.sampled_from(["a", "b"]), st.integers(1, 3)
        ),
        st.tuples(st.just("start"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("finish"), st.integers(0, 5), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("cancel"), st.integers(0, 5)),
        st.tuples(st.just("interrupt"), st.integers(0, 5)),
        st.tuples(st.just("touch"), st.integers(0, 5)),
        st.tuples(st.just("tick"), st.sampled_from([1.0, 30.0, 120.0])),
    ),
    max_size=40,
)
LIMITS = Limits(ttl=100.0, targets_per_job=2, jobs_per_caller=2, jobs_total=3)


async def apply_ops(store: Store, ops: list[tuple[object, ...]]) -> list[object]:
    now = 1000.0
    seen: list[object] = []
    lengths: dict[int, int] = {}
    admits = 0
    for op in ops:
        name = op[0]
        result: object
        if name == "tick":
            now += float(op[1])  # type: ignore[arg-type]
            continue
        job = f"j{op[1]}"
        if name == "admit":
            # ids are unique, keys repeat: op[1] picks the request, so repeats may reuse
            job, admits = f"j{admits}", admits + 1
            n = int(op[3])  # type: ignore[call-overload]
            targets = [Target(f"https://x.test/{op[1]}/{i}") for i in range(n)]
            request = NewJob(job, str(op[2]), "fleet", f"k{op[1]}", targets, now)
            try:
                result = tuple(await store.admit(request, LIMITS))
                lengths[admits - 1] = n
            except SubmitError as exc:
                result = type(exc).__name__
        elif name in ("start", "finish", "release"):
            idx = int(op[2])  # type: ignore[call-overload]
            if idx >= lengths.get(int(op[1]), 0):  # type: ignore[call-overload]
                continue
            if name == "start":
                result = await store.start_target(job, idx, now)
            elif name == "release":
                await store.release_target(job, idx, now)
                result = None
            else:
                outcome = (
                    Outcome(TargetState.DONE, result_json=Result("x" * 50).to_json())
                    if op[3]
                    else Outcome(TargetState.FAILED, error="e")
                )
                result = await store.finish_target(job, idx, outcome, now, 300)
        elif name == "cancel":
            result = await store.cancel(job, now)
        elif name == "interrupt":
            result = await store.interrupt([job], now)
        else:
            result = await store.touch(job, now)
        seen.append((op, result))
        seen.append([await store.snapshot(f"j{i}") for i in range(6)])
    return seen


@given(OPS)
def test_sqlite_agrees_with_memory(ops: list[tuple[object, ...]]) -> None:
    """Any sequence of store operations gives the same answers and states on both stores."""

    async def main() -> None:
        expected = await apply_ops(MemoryStore(), ops)
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteStore.open(os.path.join(tmp, "s.sqlite")) as sqlite:
                assert expected == await apply_ops(sqlite, ops)

    trio.run(main)
