"""Resume (SPEC §7): live jobs a process left behind go back to work instead of failing.

The state a killed process leaves is written straight through the store (a job half done, a
target left running, a job never reached), then an engine opens on it with ``resume``. The kill
-9 runs of a real server are in ``tests/http/test_resume_kill.py``.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import trio
import trio.testing

from tests.stores.postgres.support import PG_DSN, SKIP_REASON
from trio_batch import (
    Caller,
    CallerBusy,
    Config,
    Hooks,
    JobStatus,
    Target,
    TargetState,
    Webhook,
    open_engine,
)
from trio_batch.stores import Store
from trio_batch.stores._protocol import Limits, NewJob, Outcome
from trio_batch.testing import ScriptedFetch

from ..support import wait_ended
from . import support

LIMITS = Limits(ttl=3600, targets_per_job=10, jobs_per_caller=2, jobs_total=8)


def new_job(job_id: str, n: int, now: float) -> NewJob:
    """A restricted caller's job in workspace ``lab``: what resume must run again as it was."""
    return support.new_job(
        job_id,
        n=n,
        now=now,
        key=job_id,
        caller_class="restricted",
        workspace="lab",
        url="https://{job}.example.test/{i}",
    )


async def left_by_a_dead_process(store: Store) -> None:
    """Job a: target 0 done, target 1 running. Job b: never reached. No engine owns them."""
    now = time.time()
    await store.admit(new_job("a", 3, now), LIMITS)
    await store.admit(new_job("b", 2, now + 1), LIMITS)
    assert await store.start_target("a", 0, now)
    await store.finish_target("a", 0, Outcome(TargetState.DONE, '{"content":"a0"}'), now, 2**30)
    assert await store.start_target("a", 1, now)


async def test_resume_finishes_what_was_live_in_turn(local_store: Store) -> None:
    """The running target is fetched again, the jobs alternate from where they were, once each."""
    await left_by_a_dead_process(local_store)
    fetch = ScriptedFetch()
    events: list[str] = []
    config = Config(workers=1, jobs_per_caller=2, resume=True, hooks=Hooks(job=events.append))
    async with open_engine(local_store, fetch, config) as engine:
        with trio.fail_after(20):
            await wait_ended(engine, "a", "b")
        a = await engine.status("a")
        b = await engine.status("b")

    assert fetch.calls == [
        "https://a.example.test/1",
        "https://b.example.test/0",
        "https://a.example.test/2",
        "https://b.example.test/1",
    ]
    assert {(c.name, c.workspace) for c in fetch.callers} == {("alice", "lab")}
    assert events.count("resumed") == 2
    assert a is not None and b is not None
    assert (a.job.status, a.job.targets_done) == (JobStatus.DONE, 3)
    assert a.targets[0].result is not None and a.targets[0].result.content == "a0"
    assert (b.job.status, b.job.targets_done) == (JobStatus.DONE, 2)


async def test_caps_are_free_once_resumed_jobs_end(store: Store) -> None:
    """Resumed jobs hold their caller's places while they run, and free them when they end."""
    await left_by_a_dead_process(store)
    fetch = ScriptedFetch()
    gate = fetch.hold("https://a.example.test/1")
    config = Config(workers=2, jobs_per_caller=2, resume=True)
    async with open_engine(store, fetch, config) as engine:
        with pytest.raises(CallerBusy):  # both resumed jobs hold alice's two places
            await engine.submit(Caller("alice"), "fleet", [Target("https://c.example.test/")])
        gate.set()
        with trio.fail_after(20):
            await wait_ended(engine, "a", "b")
        first = await engine.submit(Caller("alice"), "fleet", [Target("https://c.example.test/")])
        second = await engine.submit(Caller("alice"), "fleet", [Target("https://d.example.test/")])
    assert not first.reused and not second.reused


async def test_without_resume_the_jobs_are_interrupted(local_store: Store) -> None:
    """An engine that does not resume fails the left jobs as interrupted and fetches nothing."""
    await left_by_a_dead_process(local_store)
    fetch = ScriptedFetch()
    async with open_engine(local_store, fetch, Config(jobs_per_caller=2)) as engine:
        a = await engine.status("a")
    assert fetch.calls == []
    assert a is not None and (a.job.status, a.job.error) == (JobStatus.FAILED, "interrupted")
    assert [t.status for t in a.targets] == [
        TargetState.DONE,
        TargetState.PENDING,
        TargetState.PENDING,
    ]


async def test_a_second_resume_takes_nothing_more(store: Store) -> None:
    """Resume hands each left job over once, with its caller, workspace and class as admitted."""
    await left_by_a_dead_process(store)
    first = await store.resume(time.time())
    assert [(j.id, sorted(j.targets)) for j in first] == [("a", [1, 2]), ("b", [0, 1])]
    assert (first[0].caller, first[0].workspace, first[0].caller_class) == (
        "alice",
        "lab",
        "restricted",
    )
    assert [j.webhook for j in first] == ["", ""]
    assert await store.resume(time.time(), opening=False) == []


async def test_closing_with_resume_leaves_live_jobs_to_the_next_engine(store: Store) -> None:
    """A restart (SIGTERM) with resume hands the live jobs over instead of failing them."""
    first = ScriptedFetch()
    gate = first.hold("https://a.example.test/1")
    config = Config(workers=1, resume=True)
    async with open_engine(store, first, config) as engine:
        sub = await engine.submit(Caller("alice", "lab"), "fleet", new_job("a", 3, 0).targets)
        while len(first.calls) < 2:
            await trio.testing.wait_all_tasks_blocked()
    del gate  # never set: the fetch is cancelled by the close
    mid = await store.read_job(sub.id)

    second = ScriptedFetch()
    again = Config(workers=1, resume=True)
    async with open_engine(store, second, again) as engine:
        with trio.fail_after(20):
            await wait_ended(engine, sub.id)
        snap = await engine.status(sub.id)

    assert mid is not None and mid.status is JobStatus.RUNNING and mid.targets_done == 1
    assert second.calls == ["https://a.example.test/1", "https://a.example.test/2"]
    assert snap is not None and (snap.job.status, snap.job.targets_done) == (JobStatus.DONE, 3)


async def test_a_resumed_job_keeps_its_webhook(store: Store) -> None:
    """What the engine needs to wake the webhook deliveries for a resumed job."""
    hook = Webhook("https://hooks.example.test/", ("target", "end"))
    job = dataclasses.replace(new_job("h", 2, time.time()), webhook=hook.to_json())
    await store.admit(job, LIMITS)
    (resumed,) = await store.resume(time.time())
    assert Webhook.from_json(resumed.webhook) == hook


@pytest.mark.slow
async def test_a_live_postgres_instance_adopts_a_gone_one(tmp_path: object) -> None:
    """An instance that stops with live jobs: another, already running, finishes them (on a
    fleet the jobs are everyone's; ``resume`` changes nothing there)."""
    if not PG_DSN:
        pytest.skip(SKIP_REASON)
    from tests.stores.postgres.support import open_test_schema
    from trio_batch.stores import PostgresStore

    fetch = ScriptedFetch()
    config = Config(workers=1, jobs_per_caller=2, resume=True)
    async with open_test_schema(PG_DSN) as schema:
        async with PostgresStore.open(PG_DSN, schema=schema) as gone:
            await left_by_a_dead_process(gone)
        # its jobs are the fleet's: the next instance runs them, from where they were
        async with (
            PostgresStore.open(PG_DSN, schema=schema) as survivor,
            open_engine(survivor, fetch, config) as engine,
        ):
            with trio.fail_after(30):
                await wait_ended(engine, "a", "b")
            a = await engine.status("a")
    assert a is not None and (a.job.status, a.job.targets_done) == (JobStatus.DONE, 3)
    assert fetch.calls[0] == "https://a.example.test/1"
    assert sorted(fetch.calls) == sorted(
        ["https://a.example.test/1", "https://a.example.test/2"]
        + [f"https://b.example.test/{i}" for i in range(2)]
    )
