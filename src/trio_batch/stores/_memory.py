"""The in-memory store: pure Trio, the reference every other backend is tested against."""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import final

import trio

from .._crawl import CrawlInfo, CrawlSpec
from .._model import (
    REUSABLE_STATUSES,
    Job,
    JobStatus,
    Options,
    Result,
    Snapshot,
    Submitted,
    Target,
    TargetState,
    TargetStatus,
)
from ._outbox import is_due
from ._protocol import (
    CacheEntry,
    FinishItem,
    HookDue,
    JobCursor,
    JobSummary,
    Limits,
    NewJob,
    Outcome,
    ResumedJob,
    Stored,
)
from ._rules import CRAWL_WINDOW, check_caps, target_times, terminal_status


@dataclass(slots=True)
class _TargetRow:
    url: str
    options: Options
    status: TargetState = TargetState.PENDING
    result_json: str | None = None
    error: str = ""
    hint: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    depth: int = 0  # a crawl's: how many links from its seeds
    parent: int = -1  # a crawl's: the target whose page found it (-1: a seed)


def _target_rows(job: NewJob) -> dict[int, _TargetRow]:
    """A new job's targets, pending, by index (a crawl's seeds at their depth)."""
    if not job.seeds:
        return {i: _TargetRow(t.url, t.options) for i, t in enumerate(job.targets)}
    seeds = itertools.zip_longest(job.targets, job.seeds[: len(job.targets)])
    return {
        i: _TargetRow(t.url, t.options, depth=seed.depth if seed else 0)
        for i, (t, seed) in enumerate(seeds)
    }


@dataclass(slots=True)
class _Crawl:
    """A crawl's own state: its spec's bounds, the keys it has seen, what it skipped."""

    spec: CrawlSpec
    keys: dict[str, int] = field(default_factory=dict)  # key -> the index of its target
    skipped: Counter[str] = field(default_factory=Counter)
    admitted: int = 0

    def info(self, done: int) -> CrawlInfo:
        return CrawlInfo(self.spec.limit, self.spec.max_depth, done, dict(self.skipped))


@dataclass(slots=True)
class _JobRow:
    id: str
    caller: str
    caller_class: str
    key: str
    status: JobStatus
    created_at: float
    updated_at: float
    lease: float
    targets: dict[int, _TargetRow] = field(default_factory=dict)
    error: str = ""
    done: int = 0
    bytes: int = 0
    seq: int = 0
    workspace: str = ""
    retry_of: str = ""
    webhook: str = ""
    hook_open: bool = False  # webhook delivery state: see stores/_outbox
    hook_cursor: int = 0
    hook_attempts: int = 0
    hook_since: float = 0.0
    hook_next_at: float = 0.0
    concurrency: int = 1  # targets that may be fetched at once, as admitted
    crawl: _Crawl | None = None
    failed: int = 0  # targets stored failed
    size: int = 0  # the next target's index (a crawl's removed targets leave holes)

    def view(self) -> Job:
        return Job(
            id=self.id,
            caller=self.caller,
            status=self.status,
            error=self.error,
            targets_total=len(self.targets),
            targets_done=self.done,
            created_at=self.created_at,
            updated_at=self.updated_at,
            lease=self.lease,
            retry_of=self.retry_of,
        )


def _by_seq(row: _JobRow) -> int:
    return row.seq


def _target_status(idx: int, t: _TargetRow, *, results: bool) -> TargetStatus:
    started_at, finished_at = target_times(t.status, t.started_at, t.finished_at)
    return TargetStatus(
        idx=idx,
        url=t.url,
        status=t.status,
        result=None if t.result_json is None or not results else Result.from_json(t.result_json),
        error=t.error,
        hint=t.hint,
        options=t.options,
        started_at=started_at,
        finished_at=finished_at,
    )


@final
class MemoryStore:
    """Jobs in a few dicts; gone with the process. One engine at a time.

    Every operation checkpoints once and then runs without awaiting, which is what makes it
    atomic. Sweeping and eviction pop a heap of finished jobs ordered by lease, so their cost
    does not grow with the number of live jobs.

    Cancellation: every method is a checkpoint that comes before any change, so a method that
    raises :class:`trio.Cancelled` had no effect, and one that returns has all of it.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, _JobRow] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        # The listing index: each caller's jobs sorted by (created_at, id), oldest first;
        # and each caller's live jobs, so that status=live does not walk the finished ones.
        self._by_caller: dict[str, list[JobCursor]] = {}
        self._live_of: dict[str, set[str]] = {}
        self._live_by_caller: Counter[str] = Counter()
        self._live = 0
        self._finished: list[tuple[float, int, str]] = []  # (lease, seq, id); stale ones skipped
        self._seq = itertools.count()
        self._bytes = 0
        self._cache: dict[str, CacheEntry] = {}  # insertion order = stored order
        self._cache_bytes = 0
        self._closed = False
        self._outbox: set[str] = set()  # jobs whose webhook delivery is open
        self._held: set[str] = set()  # finished jobs kept from sweep and eviction by their webhook

    async def __aenter__(self) -> MemoryStore:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store: every later call raises :class:`trio.ClosedResourceError`."""
        self._closed = True
        await trio.lowlevel.checkpoint()

    async def _checkpoint(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this MemoryStore is closed")
        await trio.lowlevel.checkpoint()

    @property
    def stored_bytes(self) -> int:
        """Bytes of stored result JSON (what ``Config.max_bytes`` bounds)."""
        return self._bytes

    async def admit(self, job: NewJob, limits: Limits) -> Submitted:
        await self._checkpoint()
        previous = self._jobs.get(self._by_key.get((job.caller, job.key), ""))
        if (
            previous is not None
            and previous.status in REUSABLE_STATUSES
            and previous.lease >= job.now - limits.ttl
        ):
            return Submitted(previous.id, True)
        check_caps(len(job.targets), self._live_by_caller[job.caller], self._live, limits)
        self._jobs[job.id] = _JobRow(
            id=job.id,
            caller=job.caller,
            caller_class=job.caller_class,
            key=job.key,
            status=JobStatus.QUEUED,
            created_at=job.now,
            updated_at=job.now,
            lease=job.now,
            targets=_target_rows(job),
            size=len(job.targets),
            seq=next(self._seq),
            workspace=job.workspace,
            retry_of=job.retry_of,
            webhook=job.webhook,
            hook_open=bool(job.webhook),
            concurrency=job.concurrency,
            crawl=_crawl_of(job),
        )
        if job.webhook:
            self._outbox.add(job.id)
        self._by_key[(job.caller, job.key)] = job.id
        bisect.insort(self._by_caller.setdefault(job.caller, []), (job.now, job.id))
        self._live_of.setdefault(job.caller, set()).add(job.id)
        self._live_by_caller[job.caller] += 1
        self._live += 1
        self._sweep(job.now - limits.ttl)
        return Submitted(job.id, False)

    async def recover(self, now: float) -> list[str]:
        await self._checkpoint()
        return self._interrupt([j.id for j in self._jobs.values() if j.status.live], now)

    async def resume(self, now: float, *, opening: bool = True) -> list[ResumedJob]:
        await self._checkpoint()
        if not opening:  # one engine at a time: every live job is already its own
            return []
        resumed = []
        for row in sorted((j for j in self._jobs.values() if j.status.live), key=_by_seq):
            for target in row.targets.values():
                if target.status is TargetState.RUNNING:
                    target.status = TargetState.PENDING
            row.updated_at = now
            pending = [(i, t) for i, t in row.targets.items() if t.status is TargetState.PENDING][
                : CRAWL_WINDOW if row.crawl is not None else None
            ]
            resumed.append(
                ResumedJob(
                    id=row.id,
                    caller=row.caller,
                    workspace=row.workspace,
                    caller_class=row.caller_class,
                    targets={i: Target(t.url, t.options) for i, t in pending},
                    created_at=row.created_at,
                    webhook=row.webhook,
                    concurrency=row.concurrency,
                    crawl="" if row.crawl is None else row.crawl.spec.to_json(),
                    depths={i: (t.depth, t.parent) for i, t in pending},
                    done=row.done - row.failed,
                )
            )
        return resumed

    async def start_target(self, job_id: str, idx: int, now: float) -> bool:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None or not row.status.live:
            return False
        target = row.targets.get(idx)
        if target is None:  # a crawl's duplicate, removed
            return False
        if target.status in (TargetState.PENDING, TargetState.RUNNING):  # not one with its outcome
            target.status = TargetState.RUNNING
            target.started_at = now
        row.status = JobStatus.RUNNING
        row.updated_at = now
        return True

    async def release_target(self, job_id: str, idx: int, now: float) -> None:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        target = None if row is None else row.targets.get(idx)
        if row is not None and target is not None and target.status is TargetState.RUNNING:
            target.status = TargetState.PENDING
            row.updated_at = now

    async def finish_targets(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        await self._checkpoint()
        return [
            self._finish(job_id, idx, outcome, now, max_bytes) for job_id, idx, outcome in items
        ]

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        await self._checkpoint()
        return self._finish(job_id, idx, outcome, now, max_bytes)

    def _finish(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        row = self._jobs.get(job_id)
        target = None if row is None else row.targets.get(idx)
        if row is None or target is None:
            return Stored(None)
        if target.status in (TargetState.DONE, TargetState.FAILED):
            return Stored(None)
        if row.crawl is not None and self._removed(row, row.crawl, idx, outcome):
            return Stored(self._crawl_ended(row, now), removed=True)
        size = outcome.size
        target.status = outcome.state
        target.result_json = outcome.result_json
        target.error = outcome.error
        target.hint = outcome.hint
        target.finished_at = now
        row.done += 1
        row.failed += outcome.state is TargetState.FAILED
        row.bytes += size
        row.updated_at = now
        self._bytes += size
        if row.crawl is not None:
            found = self._admit_found(row, row.crawl, outcome)
            return Stored(self._crawl_ended(row, now), self._evict(max_bytes), found=found)
        if row.status.live and row.done == len(row.targets):
            terminal = terminal_status([t.status for t in row.targets.values()])
            self._end(row, terminal, now)
        else:
            terminal = None
        return Stored(terminal, self._evict(max_bytes))

    @staticmethod
    def _removed(row: _JobRow, crawl: _Crawl, idx: int, outcome: Outcome) -> bool:
        """Whether the page leaves its job, counted skipped: dropped by the engine, or another
        target's (one of its keys is: a duplicate)."""
        if outcome.dropped or any(crawl.keys.get(key, idx) != idx for key in outcome.keys):
            del row.targets[idx]
            crawl.skipped[outcome.dropped or "duplicate"] += 1
            return True
        for key in outcome.keys:
            crawl.keys[key] = idx
        crawl.skipped.update(outcome.skipped)
        return False

    @staticmethod
    def _admit_found(row: _JobRow, crawl: _Crawl, outcome: Outcome) -> int:
        """Admit the page's links not seen yet, while the frontier has room."""
        admitted = 0
        for found in outcome.found:
            if found.key in crawl.keys:
                crawl.skipped["duplicate"] += 1
            elif crawl.admitted >= crawl.spec.frontier_cap:
                crawl.skipped["limit"] += 1
            else:
                idx = row.size
                row.size += 1
                row.targets[idx] = _TargetRow(
                    found.url, crawl.spec.options, depth=found.depth, parent=found.parent
                )
                crawl.keys[found.key] = idx
                crawl.admitted += 1
                admitted += 1
        return admitted

    def _crawl_ended(self, row: _JobRow, now: float) -> JobStatus | None:
        """End a live crawl that stored its limit of pages (what it had not started is
        skipped, ``limit``) or has nothing left to run; its status, or None."""
        assert row.crawl is not None
        if not row.status.live:
            return None
        if row.done - row.failed >= row.crawl.spec.limit:
            left = [i for i, t in row.targets.items() if t.status is TargetState.PENDING]
            for i in left:
                del row.targets[i]
            row.crawl.skipped["limit"] += len(left)
        if row.done < len(row.targets):
            return None
        stored = [t.status for t in row.targets.values()]
        terminal = terminal_status(stored) if stored else JobStatus.DONE
        self._end(row, terminal, now)
        return terminal

    async def cancel(self, job_id: str, now: float) -> Job | None:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None or not row.status.live:
            return None
        before = row.view()
        self._end(row, JobStatus.CANCELLED, now)
        return before

    async def interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        await self._checkpoint()
        return self._interrupt(job_ids, now)

    def _interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        failed = []
        for job_id in job_ids:
            row = self._jobs.get(job_id)
            if row is None or not row.status.live:
                continue
            for target in row.targets.values():
                if target.status is TargetState.RUNNING:
                    target.status = TargetState.PENDING
            row.error = "interrupted"
            self._end(row, JobStatus.FAILED, now)
            failed.append(job_id)
        return failed

    async def snapshot(self, job_id: str) -> Snapshot | None:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None:
            return None
        targets = [_target_status(i, t, results=True) for i, t in row.targets.items()]
        return Snapshot(row.view(), targets)

    async def read_job(self, job_id: str) -> Job | None:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        return None if row is None else row.view()

    async def job_summary(self, job_id: str) -> JobSummary | None:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        return None if row is None else self._summary(row)

    async def list_jobs(
        self,
        caller: str,
        statuses: Sequence[JobStatus] | None,
        limit: int,
        before: JobCursor | None,
    ) -> list[JobSummary]:
        await self._checkpoint()
        wanted = None if statuses is None else set(statuses)
        index = self._by_caller.get(caller, [])
        if wanted is not None and all(s.live for s in wanted):
            live = (self._jobs[job_id] for job_id in self._live_of.get(caller, ()))
            index = sorted((row.created_at, row.id) for row in live)
        end = len(index) if before is None else bisect.bisect_left(index, before)
        page: list[JobSummary] = []
        for i in range(end - 1, -1, -1):
            if len(page) >= limit:
                break
            row = self._jobs[index[i][1]]
            if wanted is None or row.status in wanted:
                page.append(self._summary(row))
        return page

    async def read_targets(
        self,
        job_id: str,
        after: int,
        limit: int,
        states: Sequence[TargetState] | None,
        *,
        results: bool = True,
    ) -> list[TargetStatus]:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None:
            return []
        wanted = None if states is None else set(states)
        found: list[TargetStatus] = []
        for i in range(max(after + 1, 0), row.size):
            if len(found) >= limit:
                break
            t = row.targets.get(i)
            if t is not None and (wanted is None or t.status in wanted):
                found.append(_target_status(i, t, results=results))
        return found

    async def crawl_frontier(
        self, job_id: str, after: int, limit: int
    ) -> list[tuple[int, Target, int, int]]:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None or row.crawl is None:
            return []
        found: list[tuple[int, Target, int, int]] = []
        for i in range(max(after + 1, 0), row.size):
            t = row.targets.get(i)
            if t is not None and t.status is TargetState.PENDING:
                found.append((i, Target(t.url, t.options), t.depth, t.parent))
                if len(found) >= limit:
                    break
        return found

    async def crawl_info(self, job_id: str) -> CrawlInfo | None:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None or row.crawl is None:
            return None
        return row.crawl.info(row.done - row.failed)

    def _summary(self, row: _JobRow) -> JobSummary:
        counts = Counter(t.status for t in row.targets.values())
        return JobSummary(
            row.view(),
            pending=counts[TargetState.PENDING],
            running=counts[TargetState.RUNNING],
            done=counts[TargetState.DONE],
            failed=counts[TargetState.FAILED],
        )

    async def touch(self, job_id: str, now: float) -> bool:
        await self._checkpoint()
        row = self._jobs.get(job_id)
        if row is None:
            return False
        row.lease = now
        if not row.status.live:
            heapq.heappush(self._finished, (now, row.seq, job_id))
        return True

    async def hooks_due(
        self, now: float, limit: int, *, claim_for: float | None = None
    ) -> list[HookDue]:
        del claim_for  # one process, one dispatcher: nothing to claim against
        await self._checkpoint()
        rows = [
            row
            for row in map(self._jobs.__getitem__, self._outbox)
            if row.hook_next_at <= now
            and is_due(row.status, row.hook_cursor, row.done, row.webhook)
        ]
        rows.sort(key=lambda row: (row.hook_next_at, row.seq))
        return [
            HookDue(
                job_id=row.id,
                caller=row.caller,
                webhook=row.webhook,
                status=row.status,
                targets_done=row.done,
                targets_total=len(row.targets),
                cursor=row.hook_cursor,
                attempts=row.hook_attempts,
                since=row.hook_since,
                next_at=row.hook_next_at,
            )
            for row in rows[:limit]
        ]

    async def hook_advance(
        self,
        due: HookDue,
        *,
        cursor: int,
        attempts: int,
        since: float,
        next_at: float,
        close: bool = False,
    ) -> bool:
        await self._checkpoint()
        row = self._jobs.get(due.job_id)
        if (
            row is None
            or not row.hook_open
            or (row.hook_cursor, row.hook_attempts) != (due.cursor, due.attempts)
        ):
            return False
        row.hook_cursor, row.hook_attempts = cursor, attempts
        row.hook_since, row.hook_next_at = since, next_at
        if close:
            row.hook_open = False
            self._outbox.discard(row.id)
            if row.id in self._held:
                self._held.discard(row.id)
                heapq.heappush(self._finished, (row.lease, row.seq, row.id))
        return True

    async def cache_get(self, key: str) -> CacheEntry | None:
        await self._checkpoint()
        return self._cache.get(key)

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        await self._checkpoint()
        old = self._cache.pop(key, None)
        if old is not None:
            self._cache_bytes -= len(old.body)
        self._cache[key] = entry
        self._cache_bytes += len(entry.body)
        while self._cache_bytes > max_bytes and self._cache:
            oldest = next(iter(self._cache))
            self._cache_bytes -= len(self._cache.pop(oldest).body)

    def _end(self, row: _JobRow, status: JobStatus, now: float) -> None:
        live = self._live_of[row.caller]
        live.discard(row.id)
        if not live:
            del self._live_of[row.caller]
        row.status = status
        row.updated_at = row.lease = now
        self._live_by_caller[row.caller] -= 1
        if not self._live_by_caller[row.caller]:
            del self._live_by_caller[row.caller]
        self._live -= 1
        heapq.heappush(self._finished, (now, row.seq, row.id))

    def _current(self, lease: float, job_id: str) -> _JobRow | None:
        row = self._jobs.get(job_id)
        if row is None or row.status.live or row.lease != lease:
            return None
        return row

    def _delete(self, row: _JobRow) -> None:
        del self._jobs[row.id]
        index = self._by_caller[row.caller]
        del index[bisect.bisect_left(index, (row.created_at, row.id))]
        if not index:
            del self._by_caller[row.caller]
        if self._by_key.get((row.caller, row.key)) == row.id:
            del self._by_key[(row.caller, row.key)]
        self._bytes -= row.bytes

    def _sweep(self, cutoff: float) -> None:
        while self._finished and self._finished[0][0] < cutoff:
            lease, _, job_id = heapq.heappop(self._finished)
            row = self._current(lease, job_id)
            if row is not None and not self._hold(row):
                self._delete(row)

    def _hold(self, row: _JobRow) -> bool:
        """Keep a finished job whose webhook delivery is open; back in the heap when it closes."""
        if row.hook_open:
            self._held.add(row.id)
        return row.hook_open

    def _evict(self, max_bytes: int) -> int:
        evicted = 0
        while self._bytes > max_bytes and self._finished:
            lease, _, job_id = heapq.heappop(self._finished)
            row = self._current(lease, job_id)
            if row is not None and not self._hold(row):
                self._delete(row)
                evicted += 1
        return evicted


def _crawl_of(job: NewJob) -> _Crawl | None:
    """A new crawl's state: its spec, and its seeds' keys seen."""
    if not job.crawl:
        return None
    crawl = _Crawl(CrawlSpec.from_json(job.crawl))
    for idx, seed in enumerate(job.seeds):
        crawl.keys.setdefault(seed.key, idx)
    crawl.admitted = len(job.targets)
    crawl.skipped.update(job.skipped)
    return crawl
