"""The engine's record of a live job, and the small types around it."""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import final

from .._crawl import CrawlSpec
from .._model import Caller, Result, Target
from ..stores._protocol import Claim, Outcome, ResumedJob
from ._crawling import CrawlRun

HostFunc = Callable[[Target], "str | None"]
"""The scope of a target (the web fetcher's: host and port), or None for no budget."""

FetchFunc = Callable[[Caller, Target], Awaitable[Result]]
"""The per-target work: given the job's caller and one target, return its ``Result``."""


@final
@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """A snapshot of the engine's counters, for debugging and metrics."""

    live_jobs: int
    """Jobs of this engine that are queued or running."""
    inflight_targets: int
    """Targets whose fetch is running now."""
    workers: int
    """Worker tasks (``Config.workers`` clamped to ``Config.max_workers``)."""
    queued_jobs: int
    """Jobs waiting in the rotation for a worker."""
    retrying_jobs: int
    """Jobs waiting out ``Config.retry_wait`` after a busy target."""
    store_error: str | None = None
    """The error type of the engine's last failed store write, until an outcome is stored
    again (None while writes work): what ``/healthz`` reads to see the engine's own writes."""
    store_error_at: float | None = None
    """When (``trio.current_time()``) that write failed; None with ``store_error``."""


@final
@dataclass(frozen=True, slots=True)
class WaitingTarget:
    """A job's next target waiting for its host (:meth:`BatchEngine.waiting`).

    ``reason`` is ``host_busy`` (its host has no free slot, or its spacing), ``backoff`` (the
    host answered 429/503) or ``crawl_delay``; ``until`` is Unix seconds (the wall clock, as
    the HTTP API answers it), or None while the target waits for a slot to free. ``deadline``
    is the same on Trio's clock, as the budget's :class:`Waiting` says it: it stays the same
    for one wait however often it is read, so a new value is a new wait (the events stream
    sends a ``waiting`` event for each).
    """

    idx: int
    reason: str
    until: float | None
    deadline: float | None = None


class LiveJob:
    """What an engine knows of a live job it runs: the targets it may start, and their state.

    One shape for both sources of turns: a local engine holds every target of its jobs that is
    not stored yet; an engine over a fleet holds the targets it claimed (``claims``). A target
    is *pending* here until a worker starts it, *in flight* until its outcome is acknowledged
    (a busy one waiting to be tried again counts as in flight), and then forgotten.

    A job runs up to ``concurrency`` of its targets at once (1: SPEC's serial order). Its next
    target is the first pending one whose host has room (``Rotation``): pending targets are
    kept in one heap per scope, so the candidates of a turn are each scope's first target, in
    index order, and a host that waits does not hold the job's other hosts back.
    """

    __slots__ = (
        "_heaps",
        "_pending",
        "_scopes",
        "busy_since",
        "busy_tries",
        "caller",
        "caller_class",
        "cancelled",
        "claims",
        "concurrency",
        "crawl",
        "has_webhook",
        "id",
        "in_flight",
        "park",
        "queued",
        "queued_at",
        "started",
        "targets",
    )

    def __init__(
        self,
        job_id: str,
        caller: Caller,
        started: float,
        caller_class: str = "fleet",
        concurrency: int = 1,
    ) -> None:
        self.id = job_id
        self.caller = caller
        self.caller_class = caller_class
        self.started = started
        self.concurrency = concurrency
        self.targets: dict[int, Target] = {}
        """The targets held here: pending, in flight, or busy and waiting to be tried again."""
        self.claims: dict[int, Claim] = {}
        """A fleet's claim of each target held (none on a local engine)."""
        self.busy_since: dict[int, float] = {}
        """When each target tried again first came back busy (Trio's clock)."""
        self.busy_tries: dict[int, int] = {}
        """How many times each target came back busy here (a fleet's target claimed again
        after a busy answer counts afresh; its ``busy_since`` comes back with the claim)."""
        self.cancelled = False
        self.has_webhook = False  # its changes wake the webhook deliveries
        self.in_flight = 0  # its targets started and not yet acknowledged
        self.queued = False  # in the rotation (ready or waiting for a host)
        self.queued_at = started  # when it last entered the rotation (Trio's clock)
        self.park = 0  # the rotation's mark of its latest pass-over (stale marks are skipped)
        self.crawl: CrawlRun | None = None
        """A crawl's own state (its rules, pages done, frontier read); None for a batch."""
        self._scopes: dict[int, str] = {}  # a target without a scope (no budget) is not in it
        self._heaps: dict[str | None, list[int]] = {}
        self._pending = 0

    def add(self, idx: int, target: Target, scope: str | None = None) -> None:
        """Hold target ``idx``, pending, under its host's ``scope`` (None: no budget)."""
        self.targets[idx] = target
        if scope is not None:
            self._scopes[idx] = scope
        self._push(idx)

    def heads(self) -> list[tuple[int, str | None]]:
        """The first pending target of each scope, in index order: a turn's candidates."""
        return sorted((heap[0], scope) for scope, heap in self._heaps.items())

    @property
    def pending(self) -> int:
        """Targets held here that no worker has started."""
        return self._pending

    @property
    def upcoming(self) -> int | None:
        """The lowest pending index (what a status shows as the job's next target), or None."""
        return self.first() if self._heaps else None

    def first(self) -> int:
        """The lowest pending index, of a job with a target pending: its next target when no
        host of its waits (a job without host budgets has one scope, so one heap to look at)."""
        heaps = self._heaps
        if len(heaps) == 1:
            for heap in heaps.values():
                return heap[0]
        return min(heap[0] for heap in heaps.values())

    def take(self, idx: int) -> None:
        """Start pending target ``idx`` (the first of its scope): one more in flight."""
        scope = self._scopes.get(idx)
        heap = self._heaps[scope]
        assert heap[0] == idx, "a turn starts the first pending target of its scope"
        heapq.heappop(heap)
        if not heap:
            del self._heaps[scope]
        self._pending -= 1
        self.in_flight += 1

    def give_back(self, idx: int) -> None:
        """Target ``idx`` came back busy and its wait is over: pending again, before any later
        target of its scope (until now it counted as in flight)."""
        self.in_flight -= 1
        self._push(idx)

    def drop(self, idx: int) -> None:
        """Forget target ``idx``, in flight until now (stored, or its claim given back)."""
        self.in_flight -= 1
        self.targets.pop(idx, None)
        if self._scopes:
            self._scopes.pop(idx, None)
        if self.busy_since:  # rarely anything to forget in these: one test each, per target
            self.busy_since.pop(idx, None)
            self.busy_tries.pop(idx, None)
        if self.claims:
            self.claims.pop(idx, None)

    def busy_waited(self, idx: int, now: float) -> tuple[int, float] | None:
        """Target ``idx``'s busy answers (at least 1) and the seconds from its first try to
        ``now``; None if it never came back busy."""
        since = self.busy_since.get(idx)
        if since is None:
            return None
        return max(1, self.busy_tries.get(idx, 0)), now - since

    def drop_pending(self) -> list[int]:
        """Forget every pending target; return their indices (a fleet gives their claims back)."""
        gone = sorted(i for heap in self._heaps.values() for i in heap)
        for idx in gone:
            self.targets.pop(idx, None)
            self._scopes.pop(idx, None)
        self._heaps.clear()
        self._pending = 0
        return gone

    def wants_turn(self) -> bool:
        """Whether the job has a target to start and room to start it (a crawl's limit too)."""
        if self._pending <= 0 or self.in_flight >= self.concurrency or self.queued:
            return False
        return self.crawl is None or self.crawl.room(self.in_flight)

    def holds_nothing(self) -> bool:
        """No target of the job left here: none pending, in flight or to try again."""
        return not self.targets and self.in_flight == 0 and not self.queued

    def token(self, idx: int) -> str:
        """The claim token of target ``idx`` for ``Outcome.claim``: empty without a claim."""
        claim = self.claims.get(idx)
        return "" if claim is None else claim.token

    def _push(self, idx: int) -> None:
        heapq.heappush(self._heaps.setdefault(self._scopes.get(idx), []), idx)
        self._pending += 1


def with_busy_waits(result: Result, waited: tuple[int, float] | None) -> Result:
    """``result`` with ``meta.waited``: ``tries``, the times its target came back busy (429,
    503, a full pool) before this answer, and ``seconds``, from its first try to the start of
    this one plus what the fetch itself waited for its host (the fetcher's own ``seconds``)."""
    if waited is None:
        return result
    tries, seconds = waited
    meta = dict(result.meta)
    own = meta.get("waited")
    fetch_waited = own.get("seconds", 0.0) if isinstance(own, dict) else 0.0
    meta["waited"] = {"tries": tries, "seconds": round(seconds + fetch_waited, 3)}
    return Result(result.content, meta)


# A fetched target waiting to be stored: job, index, outcome, the fetch's error, fetch seconds.
Fetched = tuple[LiveJob, int, Outcome, "BaseException | None", float]


@final
class LiveJobs:
    """The live jobs an engine runs, by id, reporting their number to the ``depth`` hook."""

    __slots__ = ("_depth", "_jobs")

    def __init__(self, depth: Callable[[int], None]) -> None:
        self._jobs: dict[str, LiveJob] = {}
        self._depth = depth

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def get(self, job_id: str) -> LiveJob | None:
        """The live job ``job_id`` if this engine runs it."""
        return self._jobs.get(job_id)

    def values(self) -> list[LiveJob]:
        """The live jobs, in the order they came."""
        return list(self._jobs.values())

    def add(self, live: LiveJob) -> None:
        """Run ``live`` here from now on."""
        self._jobs[live.id] = live
        self._depth(len(self._jobs))

    def pop(self, job_id: str) -> LiveJob | None:
        """Stop running ``job_id`` here; the job, or None if it was not run here."""
        live = self._jobs.pop(job_id, None)
        if live is not None:
            self._depth(len(self._jobs))
        return live

    def clear(self) -> None:
        """Forget every job (the engine closed)."""
        self._jobs.clear()
        self._depth(0)


def resumed_live_jobs(
    resumed: Sequence[ResumedJob], now: float, wall: float, scope: HostFunc | None
) -> list[LiveJob]:
    """:class:`LiveJob` records for jobs taken over from an engine that is gone.

    ``now`` is Trio's clock and ``wall`` the wall clock: a job's seconds count from its
    creation, as if it had never stopped. Each holds its pending targets.
    """
    jobs = []
    for job in resumed:
        started = now - max(0.0, wall - job.created_at)
        caller = Caller(job.caller, job.workspace)
        live = LiveJob(job.id, caller, started, job.caller_class, job.concurrency)
        if job.crawl:
            live.crawl = CrawlRun(CrawlSpec.from_json(job.crawl), job.done)
            live.crawl.more = True  # what lies past the window is read on as it runs
        for idx, target in job.targets.items():
            live.add(idx, target, None if scope is None else scope(target))
            if live.crawl is not None:
                live.crawl.hold(idx, *job.depths.get(idx, (0, -1)))
        live.has_webhook = bool(job.webhook)
        jobs.append(live)
    return jobs
