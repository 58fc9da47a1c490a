"""Retry (SPEC §7): a new job of exactly the failed targets, linked to the old one."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batch import (
    Caller,
    CallerBusy,
    Config,
    Hooks,
    JobStatus,
    NotRetryable,
    Options,
    Target,
    TargetError,
    TargetState,
    open_engine,
)
from trio_batch.stores import Store
from trio_batch.testing import ScriptedFetch

from ..support import ALICE, wait_ended

TARGETS = [
    Target("https://ok.example.test/0"),
    Target("https://bad.example.test/1", Options(mode="text")),
    Target("https://ok.example.test/2"),
    Target("https://bad.example.test/3", Options(grep="x")),
]


def failing_fetch() -> ScriptedFetch:
    fetch = ScriptedFetch()
    for t in TARGETS:
        if "bad" in t.url:
            fetch.script(t.url, TargetError("upstream failed", hint="try later"))
    return fetch


async def test_retry_runs_the_failed_targets_in_order(store: Store) -> None:
    """A retry is a new job of exactly the failed targets, in order, linked by ``retry_of``;
    a repeat reuses it."""
    events: list[str] = []
    fetch = failing_fetch()
    async with open_engine(store, fetch, Config(hooks=Hooks(job=events.append))) as engine:
        first = await engine.submit(ALICE, "fleet", TARGETS)
        await wait_ended(engine, first.id)
        retried = await engine.retry(ALICE, "fleet", first.id)
        assert retried is not None and not retried.reused
        await wait_ended(engine, retried.id)
        again = await engine.retry(ALICE, "fleet", first.id)
        snap = await engine.status(retried.id)
        old = await engine.status(first.id)

    assert again is not None and (again.id, again.reused) == (retried.id, True)
    assert old is not None and old.job.status is JobStatus.PARTIAL and old.job.retry_of == ""
    assert snap is not None and snap.job.retry_of == first.id
    assert [(t.url, t.options) for t in snap.targets] == [
        (t.url, t.options) for t in TARGETS if "bad" in t.url
    ]
    assert snap.job.status is JobStatus.DONE  # the second fetch of each succeeds
    assert fetch.calls[-2:] == [TARGETS[1].url, TARGETS[3].url]
    assert events.count("retried") == 1


async def test_retry_refuses_live_jobs_and_jobs_without_failures(store: Store) -> None:
    """A live job, or one with nothing failed, is NotRetryable; another caller's job or an
    unknown one is None."""
    fetch = ScriptedFetch()
    gate = fetch.hold("https://ok.example.test/a")
    config = Config(jobs_per_caller=2)
    async with open_engine(store, fetch, config) as engine:
        live = await engine.submit(ALICE, "fleet", [Target("https://ok.example.test/a")])
        with pytest.raises(NotRetryable, match="still"):
            await engine.retry(ALICE, "fleet", live.id)
        gate.set()
        await wait_ended(engine, live.id)
        with pytest.raises(NotRetryable, match="no failed target"):
            await engine.retry(ALICE, "fleet", live.id)
        assert await engine.retry(Caller("bob"), "fleet", live.id) is None
        assert await engine.retry(ALICE, "fleet", "0" * 32) is None


async def test_retry_is_capped_like_a_submit(store: Store) -> None:
    """A retry counts against the caller's cap of live jobs, as a submit does."""
    fetch = failing_fetch()
    gate = fetch.hold("https://ok.example.test/busy")
    async with open_engine(store, fetch) as engine:
        first = await engine.submit(ALICE, "fleet", TARGETS)
        await wait_ended(engine, first.id)
        await engine.submit(ALICE, "fleet", [Target("https://ok.example.test/busy")])
        with pytest.raises(CallerBusy):
            await engine.retry(ALICE, "fleet", first.id)
        gate.set()


class TestUnfinished:
    """An amendment to SPEC §7 (docs/spec.md): a retry runs an ended job's unfinished targets."""

    async def test_an_interrupted_job_retries_its_unfinished_targets(
        self, local_store: Store
    ) -> None:
        """A job closed mid-way (interrupted) retries its failed, running and pending targets,
        in input order; its done targets stay done. (A local store: on PostgreSQL a closing
        instance leaves its live jobs to the others instead.)"""
        store = local_store
        fetch = failing_fetch()
        gate = fetch.hold(TARGETS[2].url)
        held = [*TARGETS, Target("https://ok.example.test/4")]
        async with open_engine(store, fetch) as engine:
            first = await engine.submit(ALICE, "fleet", held)
            while TARGETS[2].url not in fetch.calls:
                await trio.testing.wait_all_tasks_blocked()
        gate.set()

        async with open_engine(store, fetch) as engine:
            old = await engine.status(first.id)
            retried = await engine.retry(ALICE, "fleet", first.id)
            assert retried is not None
            await wait_ended(engine, retried.id)
            snap = await engine.status(retried.id)

        assert old is not None and (JobStatus.FAILED, "interrupted") == (
            old.job.status,
            old.job.error,
        )
        assert snap is not None and snap.job.retry_of == first.id
        assert [t.url for t in held[1:]] == [t.url for t in snap.targets]

    async def test_a_cancelled_job_retries_its_pending_targets(self, store: Store) -> None:
        """Cancel stops a job after its in-flight target: the pending ones are in the retry."""
        fetch = ScriptedFetch()
        urls = [f"https://ok.example.test/{i}" for i in range(4)]
        gate = fetch.hold(urls[1])
        async with open_engine(store, fetch) as engine:
            first = await engine.submit(ALICE, "fleet", [Target(u) for u in urls])
            while urls[1] not in fetch.calls:
                await trio.testing.wait_all_tasks_blocked()
            assert await engine.cancel(first.id)
            gate.set()
            await wait_ended(engine, first.id)
            with engine.watch(first.id) as watch:  # until the in-flight target is stored
                while (await engine.targets(first.id, after=0, limit=1))[0].status is not (
                    TargetState.DONE
                ):
                    await watch.wait()
            retried = await engine.retry(ALICE, "fleet", first.id)
            assert retried is not None
            await wait_ended(engine, retried.id)
            snap = await engine.status(retried.id)

        assert snap is not None and JobStatus.DONE is snap.job.status
        assert urls[2:] == [t.url for t in snap.targets]
