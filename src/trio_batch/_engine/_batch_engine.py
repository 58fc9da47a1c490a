"""The engine: live jobs' turns, drained fairly by a few worker tasks, every outcome stored.

The turns come from one source, chosen once in :func:`open_engine`: the engine's own rotation
(``LocalTurns``) or a fleet's claims (``FleetTurns``); the engine never asks which it has. A live
job sits in the rotation while it has a target to start and room to start it (fewer than its
``concurrency`` in flight). A worker takes the next job's turn, fetches that target, puts the
outcome on the outcomes channel and goes straight back to the rotation. One finisher drains the
outcomes into groups, stores each group with one ``Store.finish_targets`` call (a few groups in
flight, so a store with latency keeps pipelining) and acknowledges them strictly in the order
the outcomes were produced: hooks, settling and putting each job back at the end of the rotation
happen in that order. So a serial job runs one target at a time, jobs alternate (a1 b1 a2 b2
...) however the store groups its commits, workers never wait on the disk, and taking the next
job costs a deque or heap operation whatever the number of live jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import final

import trio

from .._budget import CURRENT_SLOT, HostBudget, HostSlot
from .._config import Config
from .._crawl import REDIRECT_SCOPE, CrawlInfo, CrawlSpec, crawl_key
from .._errors import NoTargets, RetryLater, TargetError, classify_failure
from .._hooks import SafeHooks
from .._model import (
    Caller,
    CallerClass,
    Job,
    JobStatus,
    Result,
    Snapshot,
    Submitted,
    Target,
    TargetState,
    TargetStatus,
    Webhook,
    checked_submission,
    idempotency_key,
)
from .._util import NoPublicConstructor, raise_single_exception_from_group
from ..stores._protocol import (
    MAX_READ,
    JobCursor,
    JobSummary,
    Limits,
    NewJob,
    Outcome,
    Store,
    Stored,
    is_fleet,
)
from ._ahead import ClaimAhead
from ._crawling import SiteGuide, check_crawl, crawl_seeds, crawled, page_options
from ._fleet_turns import FleetTurns
from ._groups import drain_in_groups
from ._live import (
    EngineStatistics,
    Fetched,
    FetchFunc,
    HostFunc,
    LiveJob,
    LiveJobs,
    WaitingTarget,
    with_busy_waits,
)
from ._local_turns import CLEANUP_SECONDS, LocalTurns
from ._outcomes import blocked, busy_too_long, failed
from ._retry import failed_targets
from ._rotation import Turn
from ._storing import store_outcomes
from ._turns import EngineParts, Turns
from ._watch import JobWatch, watchers_for

# Outcomes stored by one Store.finish_targets call at most.
_MAX_GROUP = 512
# Groups whose store call may be in flight at once: group k+1 is sent while k commits.
_GROUPS_IN_FLIGHT = 2


@final
class BatchEngine(metaclass=NoPublicConstructor):
    """Runs batch jobs fairly over a store. Obtain one from :func:`open_engine`.

    Besides submitting, cancelling and retrying, the engine reads for listings and streams:
    :meth:`job`, :meth:`summary`, :meth:`jobs`, :meth:`targets` and :meth:`watch`. Each read
    writes nothing and does not move the lease; it is safe to cancel at any point, and raises
    :class:`trio.ClosedResourceError` once the engine is closed.
    """

    def __init__(
        self,
        store: Store,
        fetch: FetchFunc,
        config: Config,
        log: logging.Logger,
        wall_clock: Callable[[], float],
        turns: Callable[[EngineParts], Turns],
        site_guide: SiteGuide | None = None,
    ) -> None:
        self._store = store
        self._guide = site_guide  # robots.txt and sitemaps for crawls, if given
        self._fetch = fetch
        self._config = config
        self._log = log
        self._wall = wall_clock
        self._hooks = SafeHooks(config.hooks, log)
        self._limits = Limits(
            ttl=config.ttl,
            targets_per_job=config.targets_per_job,
            jobs_per_caller=config.jobs_per_caller,
            jobs_total=config.jobs_total,
        )
        self._workers = config.effective_workers
        self._live = LiveJobs(self._report_depth)
        # Outcomes in the order their fetches ended; bounded by the targets in flight.
        self._fetched_send, self._fetched_recv = trio.open_memory_channel[Fetched](math.inf)
        self._inflight = 0
        self._unstored = 0  # outcomes fetched and not acknowledged yet (sent to the finisher)
        self._tasks: trio.Nursery | None = None  # workers and the turns' tasks; closing cancels
        self._runner_done = trio.Event()
        self._closing = False
        self._stopping = trio.Event()  # set as closing begins: outcomes stop waiting for the store
        self._closed = trio.Event()
        # The last failed store write (error type, trio time) until an outcome is stored again.
        self._store_failure: tuple[str, float] | None = None
        # Who waits on which job: polling once a second on a store other engines share.
        self._watchers = watchers_for(store)
        self._pace = ClaimAhead()  # the fetches' pace (and how far a fleet claims ahead)
        parts = EngineParts(
            store, config, log, wall_clock, self._hooks, self._live, self._store_error,
            self._watchers.changed, self._requeue, self._interrupt_unfinished, self._pace,
            self._workers, lambda: self._unstored > 0,
        )  # fmt: skip
        self._turns = turns(parts)  # its own rotation, or a fleet's claims: open_engine chose

    # -- public API ---------------------------------------------------------------------------

    async def submit(
        self,
        caller: Caller,
        caller_class: CallerClass,
        targets: Sequence[Target],
        *,
        webhook: Webhook | None = None,
        concurrency: int = 1,
    ) -> Submitted:
        """Admit a job, or reuse the caller's identical one (SPEC §3.1).

        The job and its targets (and ``webhook``, which the service delivers: SPEC §7) are
        stored before this returns. ``concurrency`` targets of the job may be fetched at once
        (at most ``Config.max_concurrency``), still started in index order and each within its
        host's budget; 1 keeps SPEC's serial order. It is part of the idempotency key. A
        fleet (``PostgresStore``) runs every job serially for now.

        Cancellation: if this raises :class:`trio.Cancelled`, no job was stored and no cap is
        held. A cancel that arrives once the store has begun writing the job waits for the
        write and this returns normally (the caller gets the id of the job it now holds), so a
        caller always knows whether a job exists.

        Raises:
            NoTargets, TooManyTargets, CallerBusy, Busy: refused; nothing was stored.
            TypeError, ValueError: ``caller``, ``caller_class``, ``targets`` or ``concurrency``
                are malformed.
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        checked = checked_submission(caller, caller_class, targets, webhook)
        most = self._config.max_concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise TypeError(f"concurrency must be a whole number (got {concurrency!r})")
        if not 1 <= concurrency <= most:
            raise ValueError(
                f"concurrency must be from 1 to {most} (Config.max_concurrency; got {concurrency})"
            )
        if not checked:
            raise NoTargets("the job has no targets: send at least one")
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._admit(
            caller, caller_class, checked, webhook=webhook, concurrency=concurrency
        )

    async def crawl(
        self,
        caller: Caller,
        caller_class: CallerClass,
        spec: CrawlSpec,
        *,
        webhook: Webhook | None = None,
    ) -> Submitted:
        """Admit a crawl: a job of its seeds that grows by the links its pages find (issue 38).

        The seeds are the start page (depth 0) and, as ``spec.sitemaps`` asks, the pages the
        site's sitemaps list (read through the engine's ``site_guide``), each judged by the
        crawl's rules; what is skipped of them is counted as a link's would be. Every page is
        fetched with ``spec.options`` plus what a crawl reads (links, metadata), robots.txt
        obeyed unless the options say otherwise. The job ends when it has stored
        ``spec.limit`` pages done, or when nothing it found is left to fetch. The rules, caps
        and idempotency of :meth:`submit` hold (its key is the caller, the spec and the
        seeds); ``targets_per_job`` does not, the crawl's frontier is bounded instead
        (``CrawlSpec.frontier_cap``).

        Cancellation: as :meth:`submit` (reading the sitemaps is abandoned).

        Raises:
            NoTargets: nothing to crawl (``sitemaps="only"`` and no sitemap page in scope).
            TooManyTargets, CallerBusy, Busy: refused; nothing was stored.
            ValueError: the start URL cannot be crawled, ``spec.limit`` is over
                ``Config.max_crawl_pages``, ``spec.concurrency`` over
                ``Config.max_concurrency``, or sitemaps are asked for with no ``site_guide``.
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        checked_submission(caller, caller_class, [], webhook)
        check_crawl(spec, self._config)
        await trio.lowlevel.checkpoint_if_cancelled()
        seeds, skipped = await crawl_seeds(spec, caller, self._guide)
        if not seeds:
            raise NoTargets(
                "the crawl has nothing to fetch: its sitemaps list no page in its scope "
                "(sitemaps='only'); use sitemaps='include' to start from its URL too"
            )
        options = page_options(spec)
        targets = [Target(seed.url, options) for seed in seeds]
        job = NewJob(
            id=secrets.token_hex(16),
            caller=caller.name,
            caller_class=caller_class,
            key=crawl_key(caller.name, spec, seeds),
            targets=targets,
            now=self._wall(),
            workspace=caller.workspace,
            webhook="" if webhook is None else webhook.to_json(),
            scopes=self._turns.scopes(targets),
            concurrency=spec.concurrency,
            crawl=spec.to_json(),
            seeds=seeds,
            skipped=skipped,
        )
        limits = dataclasses.replace(self._limits, targets_per_job=spec.frontier_cap)
        return await self._admitted(job, caller, caller_class, webhook, limits)

    async def retry(
        self,
        caller: Caller,
        caller_class: CallerClass,
        job_id: str,
        *,
        webhook: Webhook | None = None,
    ) -> Submitted | None:
        """A new job of ``caller`` with exactly the targets of ``job_id`` that failed (SPEC §7).

        The targets keep their URLs, options and order; the new job's ``retry_of`` is
        ``job_id``. A repeat returns the same new job (``reused``) while it may be reused.
        Returns None for an unknown job or another caller's. The new job has ``webhook`` (as
        :meth:`submit`'s), not the old job's: a retry says where its own events go.

        Cancellation: as :meth:`submit`.

        Raises:
            NotRetryable: the job is still live, or none of its targets failed.
            TooManyTargets, CallerBusy, Busy: refused; nothing was stored.
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        checked_submission(caller, caller_class, [], webhook)
        await trio.lowlevel.checkpoint_if_cancelled()
        targets = await failed_targets(self._store, caller.name, job_id)
        if targets is None:
            return None
        return await self._admit(caller, caller_class, targets, retry_of=job_id, webhook=webhook)

    async def _admit(
        self,
        caller: Caller,
        caller_class: CallerClass,
        targets: list[Target],
        *,
        retry_of: str = "",
        webhook: Webhook | None = None,
        concurrency: int = 1,
    ) -> Submitted:
        job = NewJob(
            id=secrets.token_hex(16),
            caller=caller.name,
            caller_class=caller_class,
            key=idempotency_key(caller, targets, retry_of, concurrency),
            targets=targets,
            now=self._wall(),
            workspace=caller.workspace,
            retry_of=retry_of,
            webhook="" if webhook is None else webhook.to_json(),
            scopes=self._turns.scopes(targets),
            concurrency=concurrency,
        )
        return await self._admitted(job, caller, caller_class, webhook, self._limits)

    async def _admitted(
        self,
        job: NewJob,
        caller: Caller,
        caller_class: CallerClass,
        webhook: Webhook | None,
        limits: Limits,
    ) -> Submitted:
        """Store ``job`` (or reuse the caller's identical one) and run it."""
        submitted = await self._store.admit(job, limits)
        if submitted.reused:
            self._call_job_hook("reused")
            return submitted
        await self._turns.admitted(
            job,
            caller,
            caller_class,
            has_webhook=webhook is not None,
            concurrency=job.concurrency,
            closing=self._closing,
        )
        if job.retry_of:
            self._call_job_hook("retried")
        self._call_job_hook("created")
        return submitted

    async def cancel(self, job_id: str) -> bool:
        """Cancel a live job (SPEC §3.5).

        The target in flight, if any, finishes and is stored; no further target starts.

        Cancellation: if this raises :class:`trio.Cancelled`, the job was not cancelled. Once
        the store has begun the write, it completes and this returns.

        Returns:
            False for an unknown id or a job that is already terminal.

        Raises:
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        before = await self._store.cancel(job_id, self._wall())
        if before is None:
            return False
        live = self._live.pop(job_id)
        self._watchers.changed(job_id, has_webhook=live is not None and live.has_webhook)
        if live is not None:
            live.cancelled = True
            seconds = trio.current_time() - live.started
        else:  # admitted by another engine on a shared store
            seconds = max(0.0, self._wall() - before.created_at)
        self._call_job_hook("cancelled")
        if (hook := self._hooks.job_seconds) is not None:
            hook(seconds)
        return True

    async def status(self, job_id: str) -> Snapshot | None:
        """The job and its targets, or None for an unknown id. Writes nothing.

        Cancellation: safe to cancel at any point; a read has no effect to undo.

        Raises:
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.snapshot(job_id)

    async def touch(self, job_id: str) -> bool:
        """Move the job's lease to now, so a finished job is kept ``ttl`` longer.

        Cancellation: if this raises :class:`trio.Cancelled`, the lease did not move. Once the
        store has begun the write, it completes and this returns.

        Returns:
            False for an unknown id.

        Raises:
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.touch(job_id, self._wall())

    # -- reads for listings and streams -------------------------------------------------------

    async def job(self, job_id: str) -> Job | None:
        """The job alone (status, counts done), or None; one row whatever the job's size."""
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.read_job(job_id)

    async def summary(self, job_id: str) -> JobSummary | None:
        """The job and its targets counted by state, or None; cheap whatever the job's size."""
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.job_summary(job_id)

    async def crawl_info(self, job_id: str) -> CrawlInfo | None:
        """A crawl's bounds, pages done and skipped counts (its answer's ``crawl``); None for a
        batch or an unknown job. One read whatever the crawl's size (``Store.crawl_info``)."""
        self._check_open()
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.crawl_info(job_id)

    async def jobs(
        self,
        caller: str,
        *,
        statuses: Sequence[JobStatus] | None = None,
        limit: int = 50,
        before: JobCursor | None = None,
    ) -> list[JobSummary]:
        """A page of ``caller``'s jobs, newest first (see ``Store.list_jobs``).

        Raises:
            ValueError: ``limit`` is not from 1 to 1000.
        """
        self._check_read(limit)
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.list_jobs(caller, statuses, limit, before)

    async def targets(
        self,
        job_id: str,
        *,
        after: int = -1,
        limit: int = 100,
        states: Sequence[TargetState] | None = None,
        results: bool = True,
    ) -> list[TargetStatus]:
        """Up to ``limit`` targets after index ``after``, in input order (``Store.read_targets``).

        Raises:
            ValueError: ``limit`` is not from 1 to 1000.
        """
        self._check_read(limit)
        await trio.lowlevel.checkpoint_if_cancelled()
        return await self._store.read_targets(job_id, after, limit, states, results=results)

    def watch(self, job_id: str) -> AbstractContextManager[JobWatch]:
        """``with engine.watch(job_id) as w:`` then ``await w.wait()`` wakes on the job's changes.

        Open the watch *before* reading the job: a change between the read and the wait is then
        not missed (the wait returns at once). The engine reports a change when it has stored an
        outcome of the job, and when the job ends (settled, cancelled or interrupted). Leaving
        the block frees the watcher.

        Raises:
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        return self._watchers.watch(job_id)

    def next_webhook_change(self) -> trio.Event:
        """A :class:`trio.Event` set at the engine's next change of a job that has a webhook
        (a target stored, the job ended), or when the engine closes.

        Take the event *before* reading the store, then wait on it: a change in between is not
        missed. What the HTTP service's webhook deliveries wake on, so a busy engine whose jobs
        have no webhook never wakes them. Changes made by another engine on a shared store are
        not seen: poll the store too.

        Raises:
            trio.ClosedResourceError: the engine is closed.
        """
        self._check_open()
        return self._watchers.next_change()

    @property
    def watchers(self) -> int:
        """Watchers open now (NDJSON followers and event streams of the HTTP API, say)."""
        return self._watchers.count

    @property
    def config(self) -> Config:
        """The engine's settings, as given to :func:`open_engine` (read-only)."""
        return self._config

    def work_ahead(self, caller: str | None = None) -> float | None:
        """Seconds until a live job (of ``caller``, or any) may end, from the fetches' pace.

        What a refused submit's ``Retry-After`` is computed from: each job's targets left,
        over its share of the workers (live jobs per worker, its ``concurrency``), at the
        running mean of a fetch. None when there is no estimate (no fetch has ended yet, no
        such job here, or a fleet, whose other instances' jobs this one does not know).
        """
        seconds = self._pace.fetch_seconds
        if seconds is None:
            return None
        return self._turns.work_ahead(caller, seconds)

    def waiting(self, job_id: str) -> WaitingTarget | None:
        """The job's next target if it waits for its host's budget now, else None.

        That target is ``pending``; ``until`` is when its host may take it (Unix seconds; None
        when it waits for a slot to free). Never blocks; reads nothing from the store.
        """
        waits = self._turns.rotation.waits.get(job_id)
        live = self._live.get(job_id)
        if waits is None or live is None or not live.queued or live.upcoming is None:
            return None
        until = None
        if waits.deadline is not None:
            until = self._wall() + max(0.0, waits.deadline - trio.current_time())
        return WaitingTarget(live.upcoming, waits.reason, until, waits.deadline)

    def statistics(self) -> EngineStatistics:
        """Counters for debugging and metrics; never blocks."""
        return EngineStatistics(
            live_jobs=len(self._live),
            inflight_targets=self._inflight,
            workers=self._workers,
            queued_jobs=self._turns.rotation.queued,
            retrying_jobs=self._turns.retrying,
            store_error=None if self._store_failure is None else self._store_failure[0],
            store_error_at=None if self._store_failure is None else self._store_failure[1],
        )

    async def aclose(self) -> None:
        """Stop: cancel every fetch in flight, stop the workers, fail the live jobs.

        Live jobs end ``failed`` with the error ``interrupted`` so no cap stays taken; their
        unstarted targets stay ``pending``. With ``Config.resume`` they stay live instead, for
        the next engine to resume (on a shared store, another instance adopts them). Closing
        again waits for the first close and then does nothing. Leaving the ``open_engine``
        block calls this.

        Cancellation: closing is shielded, so it completes even in a cancelled scope, but its
        store writes are bounded (5 seconds): a store that hangs cannot hang the close. After
        a cancelled close the engine is closed all the same.
        """
        if self._closing:
            with trio.CancelScope(shield=True):
                await self._closed.wait()
            return
        self._closing = True
        self._stopping.set()
        self._watchers.close()  # followers end now, not after the interrupt writes
        try:
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel("BatchEngine.aclose()")
            with trio.CancelScope(shield=True):
                await self._runner_done.wait()
            await self._turns.close()
            self._live.clear()
        finally:
            self._closed.set()

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closing:
            raise trio.ClosedResourceError(
                "this BatchEngine is closed; open a new one with open_engine()"
            )

    def _check_read(self, limit: int) -> None:
        """A read of a page: the engine is open and the page is one the store may read."""
        self._check_open()
        if not 1 <= limit <= MAX_READ:
            raise ValueError(f"limit must be from 1 to {MAX_READ} (got {limit})")

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            # Outcomes already fetched are stored even while closing: the finisher lives in an
            # outer nursery that aclose() does not cancel; it drains the channel, then ends.
            async with trio.open_nursery() as finishers:
                finishers.start_soon(self._finisher)
                try:
                    async with trio.open_nursery() as tasks:
                        self._tasks = tasks
                        for _ in range(self._workers):
                            await tasks.start(self._worker)
                        await tasks.start(self._turns.run)
                        task_status.started()
                        await trio.sleep_forever()
                finally:
                    self._fetched_send.close()
        finally:
            self._runner_done.set()

    async def _worker(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # A fetch sees its slot and its crawl's scope through these; each target sets them only
        # when it has one (its own cost), so they start out unset in every worker.
        CURRENT_SLOT.set(None)
        REDIRECT_SCOPE.set(None)
        task_status.started()
        while True:
            await self._run_target(await self._turns.take())

    async def _run_target(self, turn: Turn) -> None:
        live, idx, slot = turn.live, turn.idx, turn.slot
        if (hook := self._hooks.turn) is not None:
            hook(live.caller_class, trio.current_time() - live.queued_at)
        live.take(idx)
        if not await self._turns.started(live, idx):  # cancelled from elsewhere, or gone
            if slot is not None:
                slot.release()
            self._live.pop(live.id)
            return
        self._requeue(live)  # its next target may start meanwhile (concurrency)
        self._count_inflight(+1)
        t0 = trio.current_time()
        try:
            if turn.blocked is not None:
                since = live.busy_since.get(idx, trio.current_time())
                failure = blocked(turn.blocked, trio.current_time() - since, live.token(idx))
                fetched: tuple[Outcome | None, BaseException | None] = (failure, None)
            else:
                fetched = await self._fetch_target(live, idx, slot, t0)
        finally:
            self._count_inflight(-1)
        outcome, error = fetched
        if outcome is None:  # busy: tried again later
            return
        if live.crawl is not None and not outcome.crawl:  # a crawl's failed page
            outcome = dataclasses.replace(outcome, crawl=True)
        seconds = trio.current_time() - t0
        self._pace.fetched(seconds)
        self._unstored += 1
        self._fetched_send.send_nowait((live, idx, outcome, error, seconds))

    async def _fetch_target(
        self, live: LiveJob, idx: int, slot: HostSlot | None, t0: float
    ) -> tuple[Outcome | None, BaseException | None]:
        """Fetch one target in its slot: its outcome and error, or no outcome if it was busy."""
        held = None if slot is None else CURRENT_SLOT.set(slot)
        scope = None if live.crawl is None else REDIRECT_SCOPE.set(live.crawl.rules.in_scope)
        try:
            result = await self._fetch(live.caller, live.targets[idx])
            if not isinstance(result, Result):
                raise TypeError(f"fetch returned {type(result).__name__}, not Result")
        except Exception as exc:
            kind = classify_failure(exc)
            if slot is not None:
                after = kind.after if isinstance(kind, RetryLater) else None
                slot.release(rate_limited=isinstance(kind, RetryLater), retry_after=after)
            return await self._failure(live, idx, exc, kind, t0, budgeted=slot is not None)
        finally:
            if held is not None:
                CURRENT_SLOT.reset(held)
            if scope is not None:
                REDIRECT_SCOPE.reset(scope)
        if slot is not None:
            slot.release()
        result = with_busy_waits(result, live.busy_waited(idx, t0))  # meta.waited
        if live.crawl is not None:  # what the page found goes to the store with it
            page = await crawled(live.crawl, live.caller, idx, result, self._guide)
            return dataclasses.replace(page, claim=live.token(idx)), None
        return Outcome(TargetState.DONE, result_json=result.to_json(), claim=live.token(idx)), None

    async def _failure(
        self,
        live: LiveJob,
        idx: int,
        exc: Exception,
        kind: TargetError | RetryLater | None,
        t0: float,
        *,
        budgeted: bool,
    ) -> tuple[Outcome | None, BaseException | None]:
        """The failed outcome of a fetch that raised, or None once a busy target is requeued."""
        if isinstance(kind, RetryLater):
            busy_for = trio.current_time() - live.busy_since.setdefault(idx, t0)
            live.busy_tries[idx] = live.busy_tries.get(idx, 0) + 1
            if busy_for <= self._config.retry_for:
                # With a budget the host's backoff holds the job back; without, a timer does.
                wait = 0.0 if budgeted else max(self._config.retry_wait, kind.after or 0.0)
                await self._turns.busy(live, idx, wait)
                return None, exc
            return busy_too_long(kind, busy_for, live.token(idx)), exc
        if not isinstance(kind, TargetError):
            self._log.error(
                "fetch raised %s",
                type(exc).__name__,
                extra={"job_id": live.id, "idx": idx, "error_type": type(exc).__name__},
            )
        return failed(kind, live.token(idx)), kind if isinstance(kind, TargetError) else exc

    def _requeue(self, live: LiveJob) -> None:
        """Back in the rotation if it has a target to start and room to start it.

        A cancelled job goes back too: the rotation drops it at its turn and tells its source,
        so a fleet gives back the claims of the targets it will not start.
        """
        if not self._closing and live.wants_turn():
            self._turns.rotation.put(live)

    async def _finisher(self) -> None:
        await drain_in_groups(
            self._fetched_recv,
            self._store_group,
            self._acknowledge_group,
            max_group=_MAX_GROUP,
            in_flight=_GROUPS_IN_FLIGHT,
        )

    async def _store_group(self, group: list[Fetched]) -> Sequence[Stored | Exception]:
        items = [(live.id, idx, outcome) for live, idx, outcome, _, _ in group]
        results = await store_outcomes(
            self._store,
            items,
            self._wall,
            self._config.max_bytes,
            self._stopping,
            self._log,
            failed=self._store_failed,
        )
        if any(not isinstance(stored, Exception) for stored in results):
            self._store_failure = None
        return results

    async def _acknowledge_group(
        self, group: list[Fetched], results: Sequence[Stored | Exception]
    ) -> None:
        self._unstored -= len(group)
        unfinished = [
            live
            for fetched, stored in zip(group, results, strict=True)
            if (live := self._acknowledge(fetched, stored)) is not None
        ]
        for live in unfinished:
            await self._interrupt_unfinished(live)
        crawls = {f[0].id: f[0] for f in group if f[0].crawl is not None}
        for live in crawls.values():
            if live.id in self._live and not live.cancelled:
                await self._turns.refill(live)

    def _acknowledge(self, fetched: Fetched, stored: Stored | Exception) -> LiveJob | None:
        """Hooks, then settle or requeue the job; return it if its last outcome was not stored."""
        live, idx, outcome, error, seconds = fetched
        if isinstance(stored, Exception):
            self._store_error("finish_targets", live.id, stored)
            stored = Stored(None)
        if (hook := self._hooks.target) is not None:
            hook(error, seconds, outcome.size)
        if stored.evicted and (evicted := self._hooks.evicted) is not None:
            evicted(stored.evicted)
        live.drop(idx)
        if live.crawl is not None:
            live.crawl.acknowledged(idx, outcome, stored.removed, stored.found)
        self._watchers.changed(live.id, has_webhook=live.has_webhook)
        if stored.terminal is not None:
            self._settle(live, stored.terminal)
        elif live.wants_turn():
            self._requeue(live)
        elif live.crawl is not None and live.crawl.more:
            pass  # its frontier is read on after the group (_acknowledge_group)
        elif live.holds_nothing() and self._turns.emptied(live) and not live.cancelled:
            # every target started and ended, yet the job did not end (an outcome was lost)
            return live if live.id in self._live else None
        return None

    async def _interrupt_unfinished(self, live: LiveJob) -> None:
        # The last outcome did not finish the job (a store error): free its cap.
        failed: list[str] = []
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            try:
                failed = await self._store.interrupt([live.id], self._wall())
            except Exception as exc:
                self._store_error("interrupt", live.id, exc)
        if failed:
            self._settle(live, JobStatus.FAILED)
        else:
            self._live.pop(live.id)

    def _settle(self, live: LiveJob, status: JobStatus) -> None:
        self._live.pop(live.id)
        self._watchers.changed(live.id, has_webhook=live.has_webhook)
        self._call_job_hook(status.value)
        if (hook := self._hooks.job_seconds) is not None:
            hook(trio.current_time() - live.started)
        self._log.debug("job finished", extra={"job_id": live.id, "status": status.value})

    def _call_job_hook(self, event: str) -> None:
        if (hook := self._hooks.job) is not None:
            hook(event)

    def _report_depth(self, live_jobs: int) -> None:
        if (hook := self._hooks.depth) is not None:
            hook(live_jobs)

    def _count_inflight(self, change: int) -> None:
        self._inflight += change
        if (hook := self._hooks.inflight) is not None:
            hook(self._inflight)

    def _store_failed(self, exc: Exception) -> None:
        self._store_failure = (type(exc).__name__, trio.current_time())

    def _store_error(self, op: str, job_id: str, exc: Exception) -> None:
        self._store_failed(exc)
        self._log.warning(
            "store %s failed with %s",
            op,
            type(exc).__name__,
            extra={"job_id": job_id, "op": op, "error_type": type(exc).__name__},
        )


@asynccontextmanager
async def open_engine(
    store: Store,
    fetch: FetchFunc,
    config: Config = Config(),  # noqa: B008 - Config is frozen
    *,
    logger: logging.Logger | None = None,
    wall_clock: Callable[[], float] = time.time,
    budget: HostBudget | None = None,
    scope: HostFunc | None = None,
    site_guide: SiteGuide | None = None,
) -> AsyncIterator[BatchEngine]:
    """Open a :class:`BatchEngine` whose workers live until the block exits.

    On entry, live jobs left in the store by a process that is gone are failed
    (``interrupted``), or with ``Config.resume`` put back in the rotation (SPEC §7). On a
    fleet store (``PostgresStore``) live jobs belong to the fleet instead: nothing is failed or
    resumed, the engine claims turns of every live job, and closing gives its claims back. On
    exit the engine is closed (see :meth:`BatchEngine.aclose`). An exception from the block comes
    out as itself, with its ``__cause__`` and ``__context__``, not wrapped in an exception
    group; two errors at once (the block's and a crashed worker's) come out as a group.

    Cancellation: cancelling the block cancels every fetch in flight; outcomes already fetched
    are still stored, and the live jobs end ``failed``/``interrupted`` (bounded by 5 seconds
    of store writes), or with ``Config.resume`` stay live for the next engine. A cancel during
    entry leaves nothing running.

    With ``budget`` (a :class:`HostBudget`) and ``scope`` (a target's scope, such as
    ``WebFetcher.scope``: its host and port), a job whose next target's scope is at its budget
    is passed over and keeps its place in the round robin (docs/politeness.md). With
    ``site_guide`` (``trio_batch.web.WebSiteGuide``), a crawl's links are checked against
    robots.txt before they are admitted (those refused are counted skipped, ``robots``) and
    its ``sitemaps`` are read.
    """
    if not callable(fetch):
        raise TypeError("fetch must be an async function (caller, target) -> Result")
    if not isinstance(config, Config):
        raise TypeError(f"config must be a trio_batch.Config (got {type(config).__name__})")
    log = logger if logger is not None else logging.getLogger("trio_batch")
    if (budget is None) != (scope is None):
        raise TypeError(
            "budget and scope go together: pass both (a HostBudget and a function giving each "
            "target's scope, such as WebFetcher.scope) or neither"
        )

    # The one decision about the store, made once: the engine's own rotation, or a fleet's claims.
    def turns(parts: EngineParts) -> Turns:
        if is_fleet(store):
            return FleetTurns(parts, store, budget, scope)
        return LocalTurns(parts, budget, scope)

    engine = BatchEngine._create(store, fetch, config, log, wall_clock, turns, site_guide)
    await engine._turns.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine._run)
            try:
                yield engine
            finally:
                await engine.aclose()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise
