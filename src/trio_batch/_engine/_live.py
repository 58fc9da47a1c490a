"""The engine's record of a live job, and the small types around it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import final

from .._model import Caller, Result, Target
from ..stores._protocol import Claim, Outcome, ResumedJob

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
    the HTTP API answers it), or None while the target waits for a slot to free. The budget's
    :class:`Waiting` says the same on Trio's clock, as ``deadline``.
    """

    idx: int
    reason: str
    until: float | None


class LiveJob:
    """What the engine knows of a live job: its targets, the next index, busy since when.

    A job runs up to ``concurrency`` targets at once (1: SPEC's serial order), started in index
    order; a target that came back busy is started again before the next new one.
    """

    __slots__ = (
        "again",
        "busy_since",
        "caller",
        "caller_class",
        "cancelled",
        "claim",
        "concurrency",
        "has_webhook",
        "id",
        "in_flight",
        "next_idx",
        "queued",
        "queued_at",
        "started",
        "targets",
    )

    def __init__(
        self,
        job_id: str,
        caller: Caller,
        targets: list[Target] | Mapping[int, Target],
        started: float,
        caller_class: str = "fleet",
    ) -> None:
        self.id = job_id
        self.caller = caller
        self.caller_class = caller_class
        self.targets = targets
        self.next_idx = 0
        self.started = started
        self.busy_since: float | None = None
        self.cancelled = False
        self.has_webhook = False  # its changes wake the webhook deliveries
        self.claim: Claim | None = None  # a fleet's turn: the one target this engine runs
        self.concurrency = 1
        self.in_flight = 0  # its targets being fetched (or waiting out a busy answer)
        self.queued = False  # in the rotation (ready or waiting for its host)
        self.queued_at = started  # when it last entered the rotation (Trio's clock)
        self.again: list[int] = []  # busy targets to start again, before next_idx

    @property
    def upcoming(self) -> int:
        """The index of the target the job's next turn starts."""
        return self.again[0] if self.again else self.next_idx

    def next_target(self) -> Target:
        """The target the job's next turn starts."""
        return self.targets[self.upcoming]

    def take_index(self) -> int:
        """Start the next target: its index (one more in flight)."""
        self.in_flight += 1
        if self.again:
            return self.again.pop(0)
        idx = self.next_idx
        self.next_idx += 1
        return idx

    def give_back(self, idx: int) -> None:
        """Target ``idx`` came back busy and its wait is over: it starts again before any new
        one (until now it counted as in flight)."""
        self.in_flight -= 1
        self.again.append(idx)
        self.again.sort()

    def wants_turn(self) -> bool:
        """Whether the job has a target to start and room to start it."""
        has_next = bool(self.again) or self.next_idx < len(self.targets)
        return has_next and self.in_flight < self.concurrency and not self.queued

    @property
    def token(self) -> str:
        """The claim's token for ``Outcome.claim``: empty without a claim."""
        return "" if self.claim is None else self.claim.token


# A fetched target waiting to be stored: job, index, outcome, the fetch's error, fetch seconds.
Fetched = tuple[LiveJob, int, Outcome, "BaseException | None", float]


def resumed_live_jobs(resumed: Sequence[ResumedJob], now: float, wall: float) -> list[LiveJob]:
    """:class:`LiveJob` records for jobs taken over from an engine that is gone.

    ``now`` is Trio's clock and ``wall`` the wall clock: a job's seconds count from its
    creation, as if it had never stopped.
    """
    jobs = []
    for job in resumed:
        started = now - max(0.0, wall - job.created_at)
        caller = Caller(job.caller, job.workspace)
        live = LiveJob(job.id, caller, list(job.targets), started, job.caller_class)
        live.next_idx = job.next_idx
        live.has_webhook = bool(job.webhook)
        jobs.append(live)
    return jobs


def live_job_of(claim: Claim, now: float, wall: float) -> LiveJob:
    """A :class:`LiveJob` for one claimed turn of a fleet: its one target, and its times.

    ``now`` is Trio's clock and ``wall`` the wall clock: the job's seconds count from its
    creation, and a busy target's from its first busy answer, wherever that was.
    """
    started = now - max(0.0, wall - claim.created_at)
    caller = Caller(claim.caller, claim.workspace)
    live = LiveJob(claim.job_id, caller, {claim.idx: claim.target}, started, claim.caller_class)
    live.next_idx = claim.idx
    live.has_webhook = claim.has_webhook
    live.claim = claim
    if claim.busy_since is not None:
        live.busy_since = now - max(0.0, wall - claim.busy_since)
    return live
