"""The reads of SPEC §7 on every store: job_summary, list_jobs, read_targets."""

from __future__ import annotations

import functools

import pytest

from trio_batch import JobStatus, Options, Result, TargetState
from trio_batch.stores import Limits, Outcome, Store

from . import support

LIMITS = Limits(ttl=10_000.0, targets_per_job=8, jobs_per_caller=50, jobs_total=50)
DONE = Outcome(TargetState.DONE, result_json=Result("ok", {"n": 1}).to_json())
FAILED = Outcome(TargetState.FAILED, error="boom", hint="try later")

new_job = functools.partial(support.new_job, n=3, grep=True)


class TestJobSummary:
    async def test_counts_each_state(self, store: Store) -> None:
        """The job and its targets counted by state; None for an unknown job."""
        await store.admit(new_job("j1", n=4), LIMITS)
        await store.start_target("j1", 0, 1001.0)
        await store.finish_targets([("j1", 0, DONE)], 1002.0, 10**9)
        await store.start_target("j1", 1, 1003.0)
        await store.finish_targets([("j1", 1, FAILED)], 1004.0, 10**9)
        await store.start_target("j1", 2, 1005.0)

        summary = await store.job_summary("j1")
        unknown = await store.job_summary("nope")

        assert summary is not None
        assert (1, 1, 1, 1) == (summary.pending, summary.running, summary.done, summary.failed)
        assert ("j1", JobStatus.RUNNING, 4) == (
            summary.job.id,
            summary.job.status,
            summary.job.targets_total,
        )
        assert unknown is None


class TestListJobs:
    async def test_newest_first_pages_by_cursor_and_filters(self, store: Store) -> None:
        """Newest first by (created_at, id); before pages; statuses filter; callers apart."""
        for i, (job_id, now) in enumerate([("a", 1.0), ("c", 2.0), ("b", 2.0), ("d", 3.0)]):
            await store.admit(new_job(job_id, n=1, now=now), LIMITS)
            if i % 2 == 0:
                await store.finish_targets([(job_id, 0, DONE)], now, 10**9)
        await store.admit(new_job("other", caller="bob", n=1, now=5.0), LIMITS)

        everything = await store.list_jobs("alice", None, 10, None)
        first = await store.list_jobs("alice", None, 2, None)
        last = first[-1].job
        rest = await store.list_jobs("alice", None, 10, (last.created_at, last.id))
        live = await store.list_jobs("alice", [JobStatus.QUEUED, JobStatus.RUNNING], 10, None)
        done = await store.list_jobs("alice", [JobStatus.DONE], 10, None)
        none = await store.list_jobs("carol", None, 10, None)

        assert ["d", "c", "b", "a"] == [s.job.id for s in everything]
        assert ["d", "c"] == [s.job.id for s in first]
        assert ["b", "a"] == [s.job.id for s in rest]
        assert ["d", "c"] == [s.job.id for s in live]
        assert ["b", "a"] == [s.job.id for s in done]
        assert [] == none
        assert (0, 0, 1, 0) == (
            done[0].pending,
            done[0].running,
            done[0].done,
            done[0].failed,
        )

    @pytest.mark.parametrize(
        "statuses",
        [
            [JobStatus.QUEUED],
            [JobStatus.RUNNING],
            [JobStatus.QUEUED, JobStatus.RUNNING],
            [JobStatus.DONE],
            [JobStatus.PARTIAL],
            [JobStatus.FAILED],
            [JobStatus.CANCELLED],
            [JobStatus.RUNNING, JobStatus.DONE],
            [],
        ],
        ids=lambda statuses: "+".join(s.value for s in statuses) or "none",
    )
    async def test_every_status_filter_reads(self, store: Store, statuses: list[JobStatus]) -> None:
        """Each status (and each set of them) lists exactly the jobs in it, on every store
        (SQLite answered queued or running alone with "no query solution": issue 36)."""
        await store.admit(new_job("queued", n=1, now=1.0), LIMITS)
        await store.admit(new_job("running", n=2, now=2.0), LIMITS)
        await store.start_target("running", 0, 2.5)
        await store.admit(new_job("done", n=1, now=3.0), LIMITS)
        await store.finish_targets([("done", 0, DONE)], 3.5, 10**9)

        found = await store.list_jobs("alice", statuses, 10, None)

        everyone = {
            "queued": JobStatus.QUEUED,
            "running": JobStatus.RUNNING,
            "done": JobStatus.DONE,
        }
        expected = [job for job in ("done", "running", "queued") if everyone[job] in statuses]
        assert expected == [s.job.id for s in found]

    @pytest.mark.slow
    async def test_a_page_of_many_jobs(self, store: Store) -> None:
        """2,000 jobs: pages of 500 walk all of them once, newest first."""
        for i in range(2000):
            await store.admit(new_job(f"j{i:05d}", n=1, now=float(i // 3)), LIMITS)
            await store.finish_targets([(f"j{i:05d}", 0, DONE)], float(i), 10**9)
        seen: list[str] = []
        before = None
        while True:
            page = await store.list_jobs("alice", None, 500, before)
            seen += [s.job.id for s in page]
            if len(page) < 500:
                break
            before = (page[-1].job.created_at, page[-1].job.id)

        expected = sorted((f"j{i:05d}" for i in range(2000)), key=lambda j: (int(j[1:]) // 3, j))
        assert expected[::-1] == seen


class TestReadTargets:
    async def test_chunks_after_an_index_filtered_with_or_without_results(
        self, store: Store
    ) -> None:
        """Targets after ``after`` in order, at most ``limit``, by state, results optional."""
        await store.admit(new_job("j", n=5), LIMITS)
        for idx, outcome in enumerate([DONE, FAILED, DONE]):
            await store.start_target("j", idx, 1001.0)
            await store.finish_targets([("j", idx, outcome)], 1002.0, 10**9)

        first = await store.read_targets("j", -1, 2, None)
        after = await store.read_targets("j", 1, 10, None)
        done = await store.read_targets("j", -1, 10, [TargetState.DONE], results=False)
        finished = await store.read_targets("j", 0, 1, [TargetState.DONE, TargetState.FAILED])
        unknown = await store.read_targets("nope", -1, 10, None)

        assert [0, 1] == [t.idx for t in first]
        assert first[0].result == Result("ok", {"n": 1})
        assert ("failed", "boom", "try later") == (
            first[1].status.value,
            first[1].error,
            first[1].hint,
        )
        assert Options(grep="g1") == first[1].options
        assert [2, 3, 4] == [t.idx for t in after]
        assert ["done", "pending", "pending"] == [t.status.value for t in after]
        assert [0, 2] == [t.idx for t in done]
        assert all(t.result is None for t in done)
        assert [1] == [t.idx for t in finished]
        assert [] == unknown
