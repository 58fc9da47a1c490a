"""The engine: a rotation of live jobs, drained fairly by a few worker tasks.

A live job sits in the rotation channel only while it has a pending target and none in flight.
A worker takes the next job, fetches one target, puts the outcome on the outcomes channel and
goes straight back to the rotation. One finisher drains the outcomes into groups, stores each
group with one ``Store.finish_targets`` call (a few groups in flight, so a store with latency
keeps pipelining) and acknowledges them strictly in the order the outcomes were produced:
hooks, settling and putting each job back at the end of the rotation happen in that order. So a
job is serial (target i+1 never starts before i is stored), jobs alternate (a1 b1 a2 b2 ...)
however the store groups its commits, workers never wait on the disk, and taking the next job is
O(1) in the number of live jobs.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import cast, final

import trio

from .._budget import CURRENT_SLOT, HostBudget, HostSlot, Waiting
from .._config import Config
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
from .._util import NoPublicConstructor, backoff, raise_single_exception_from_group
from ..stores._protocol import (
    MAX_READ,
    FleetStore,
    JobCursor,
    JobSummary,
    Limits,
    NewJob,
    Outcome,
    ResumedJob,
    Store,
    Stored,
    is_fleet,
)
from ._ahead import ClaimAhead
from ._fleet_budget import FleetBudget
from ._groups import drain_in_groups
from ._live import (
    EngineStatistics,
    Fetched,
    FetchFunc,
    LiveJob,
    WaitingTarget,
    live_job_of,
    resumed_live_jobs,
)
from ._retry import failed_targets
from ._rotation import HostFunc, Rotation, Turn
from ._storing import store_outcomes
from ._watch import JobWatch, is_shared, watchers_for

# Bookkeeping that must land even while the engine is being cancelled, but never forever.
_CLEANUP_SECONDS = 5.0
# Outcomes stored by one Store.finish_targets call at most.
_MAX_GROUP = 512
# Seconds between two looks for the jobs of engines that are gone (Config.resume).
_ADOPT_EVERY = 1.0
# Groups whose store call may be in flight at once: group k+1 is sent while k commits.
_GROUPS_IN_FLIGHT = 2
# A fleet's claimer claims again at least this often, in case a notification was lost.
_FLEET_POLL = 1.0
# Turns claimed by one statement at most.
_MAX_CLAIMS = 64


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
        budget: HostBudget | None = None,
        scope: HostFunc | None = None,
    ) -> None:
        self._store = store
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
        self._live: dict[str, LiveJob] = {}
        # A job is in the rotation at most once, so it holds at most jobs_total jobs.
        self._rotation = Rotation(
            budget, scope, self._dropped, config.retry_for, waited=self._waited
        )
        # Outcomes in the order their fetches ended; bounded like the rotation (one a job).
        self._fetched_send, self._fetched_recv = trio.open_memory_channel[Fetched](math.inf)
        self._inflight = 0
        self._retrying = 0
        self._tasks: trio.Nursery | None = None  # workers and retry timers; closing cancels it
        self._runner_done = trio.Event()
        self._closing = False
        self._stopping = trio.Event()  # set as closing begins: outcomes stop waiting for the store
        self._closed = trio.Event()
        # The last failed store write (error type, trio time) until an outcome is stored again.
        self._store_failure: tuple[str, float] | None = None
        # Who waits on which job: polling once a second on a store other engines share.
        self._watchers = watchers_for(store)
        # On a fleet store the rotation is the store's: workers take claimed turns instead.
        self._fleet = is_fleet(store)
        self._wants_work = trio.Event()  # fleet: set when a worker takes or waits for a turn
        self._ahead = ClaimAhead()  # fleet: how many turns to claim beyond the idle workers
        self._dry = False  # fleet: the last claim found fewer turns than it asked for
        # Fleet with a budget: the budget is the fleet's (the claims keep its rules).
        self._fleet_budget: FleetBudget | None = None
        if self._fleet and budget is not None and scope is not None:
            self._fleet_budget = FleetBudget(
                cast("FleetStore", store),
                budget,
                scope,
                lambda op, exc: self._store_error(op, "", exc),
            )

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
            scopes=self._scopes(targets),
        )
        submitted = await self._store.admit(job, self._limits)
        if submitted.reused:
            self._call_job_hook("reused")
            return submitted
        if self._fleet:  # the fleet's job now: any instance's claimer takes its turns
            self._call_job_hook("retried" if retry_of else "created")
            return submitted
        if self._closing:
            with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
                await self._store.interrupt([job.id], self._wall())
            self._check_open()
        if retry_of:
            self._call_job_hook("retried")
        live = LiveJob(job.id, caller, targets, trio.current_time(), caller_class)
        live.has_webhook = webhook is not None
        live.concurrency = concurrency
        self._enter(live, "created")
        return submitted

    def _scopes(self, targets: list[Target]) -> tuple[str | None, ...]:
        """Each target's scope, for a fleet's budgets (the store keeps them); else none."""
        return () if self._fleet_budget is None else self._fleet_budget.scopes(targets)

    def _enter(self, live: LiveJob, event: str) -> None:
        self._live[live.id] = live
        self._call_job_hook(event)
        self._report_depth()
        self._rotation.put(live)

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
        live = self._live.pop(job_id, None)
        self._watchers.changed(job_id, has_webhook=live is not None and live.has_webhook)
        if live is not None:
            live.cancelled = True
            seconds = trio.current_time() - live.started
        else:  # admitted by another engine on a shared store
            seconds = max(0.0, self._wall() - before.created_at)
        self._call_job_hook("cancelled")
        if (hook := self._hooks.job_seconds) is not None:
            hook(seconds)
        self._report_depth()
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
        seconds = self._ahead.fetch_seconds
        if self._fleet or seconds is None:
            return None
        jobs = [j for j in self._live.values() if caller is None or j.caller.name == caller]
        if not jobs:
            return None
        share = max(1.0, len(self._live) / self._workers)
        return min(
            (len(j.targets) - j.next_idx + len(j.again) + j.in_flight)
            * seconds
            * share
            / j.concurrency
            for j in jobs
        )

    def waiting(self, job_id: str) -> WaitingTarget | None:
        """The job's next target if it waits for its host's budget now, else None.

        That target is ``pending``; ``until`` is when its host may take it (Unix seconds; None
        when it waits for a slot to free). Never blocks; reads nothing from the store.
        """
        waits = self._rotation.waits.get(job_id)
        live = self._live.get(job_id)
        if waits is None or live is None or not live.queued:
            return None
        until = None
        if waits.deadline is not None:
            until = self._wall() + max(0.0, waits.deadline - trio.current_time())
        return WaitingTarget(live.upcoming, waits.reason, until)

    def statistics(self) -> EngineStatistics:
        """Counters for debugging and metrics; never blocks."""
        return EngineStatistics(
            live_jobs=len(self._live),
            inflight_targets=self._inflight,
            workers=self._workers,
            queued_jobs=self._rotation.queued,
            retrying_jobs=self._retrying,
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
            if self._fleet:
                await self._release_claims()
            elif not self._config.resume:
                await self._interrupt_live()
            elif self._live:  # the next engine resumes them
                self._log.info("left %d live jobs to resume", len(self._live))
            self._live.clear()
            self._report_depth()
        finally:
            self._closed.set()

    async def _release_claims(self) -> None:
        """Give the fleet back the turns this engine holds; bounded and shielded.

        Their targets go back to pending and the jobs keep their places: another instance
        claims them at once (a rolling deploy costs no claim timeout).
        """
        store = cast("FleetStore", self._store)
        with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
            try:
                await store.release_claims(self._wall())
            except Exception as exc:
                self._store_error("release_claims", "", exc)
        if self._live:
            self._log.info("gave back %d turns", len(self._live), extra={"jobs": len(self._live)})

    async def _interrupt_live(self) -> None:
        """Fail the live jobs (``interrupted``), once each in the hooks; bounded and shielded."""
        failed: list[str] = []
        with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
            try:
                failed = await self._store.interrupt(list(self._live), self._wall())
            except Exception as exc:
                self._store_error("interrupt", "", exc)
            for job_id in failed:
                live = self._live.get(job_id)
                self._call_job_hook("failed")
                if live is not None and (hook := self._hooks.job_seconds) is not None:
                    hook(trio.current_time() - live.started)
        if failed:
            self._log.info("interrupted %d live jobs", len(failed), extra={"jobs": len(failed)})

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
                        tasks.start_soon(self._rotation.run_timers)
                        if self._fleet:
                            tasks.start_soon(self._claimer)
                        if self._fleet_budget is not None:
                            await tasks.start(self._fleet_budget.run)
                        elif self._config.resume and is_shared(self._store):
                            tasks.start_soon(self._adopt_loop)
                        task_status.started()
                        await trio.sleep_forever()
                finally:
                    self._fetched_send.close()
        finally:
            self._runner_done.set()

    def _resume(self, resumed: Sequence[ResumedJob]) -> None:
        """Put jobs taken over from an engine that is gone back in the rotation, oldest first."""
        for live in resumed_live_jobs(resumed, trio.current_time(), self._wall()):
            if live.id in self._live or self._closing:
                continue
            if live.next_idx < len(live.targets):
                self._enter(live, "resumed")
            else:  # live, yet nothing left to run: end it as after a store error
                self._live[live.id] = live
                assert self._tasks is not None
                self._tasks.start_soon(self._interrupt_unfinished, live)
        if resumed:
            self._log.info("resumed %d live jobs", len(resumed), extra={"jobs": len(resumed)})

    async def _adopt_loop(self) -> None:
        """Every second, take over the jobs of a shared store's instances that are gone."""
        while True:
            await trio.sleep(_ADOPT_EVERY)
            try:
                self._resume(await self._store.resume(self._wall(), opening=False))
            except Exception as exc:
                self._store_error("resume", "", exc)

    async def _worker(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        while True:
            if self._fleet:  # the claimer tops the claimed turns up again
                self._wants_work.set()
            await self._run_target(await self._rotation.take())

    async def _claimer(self) -> None:
        """Fleet: claim as many turns as workers wait for, and hand them over in turn order.

        When the fleet has fewer turns ready than workers wait, it sleeps until the store
        hears of a change (a notification) or for ``_FLEET_POLL`` at most. A store error is
        logged and tried again after a backoff; the workers just wait meanwhile.
        """
        store = cast("FleetStore", self._store)
        rules = None if self._fleet_budget is None else self._fleet_budget.rules
        failures = 0
        while True:
            want = min(self._turns_wanted(), _MAX_CLAIMS)
            if want <= 0:
                await self._wants_work.wait()
                self._wants_work = trio.Event()
                continue
            t0 = trio.current_time()
            spaced = max(0, self._rotation.idle_workers - self._rotation.ready)
            try:
                claims = await store.claim_turns(want, self._wall(), rules, spaced=spaced)
            except Exception as exc:
                failures += 1
                self._store_error("claim_turns", "", exc)
                await trio.sleep(backoff(failures, 0.1, 5.0, jitter=0.5))
                continue
            failures = 0
            self._ahead.claimed(trio.current_time() - t0)
            self._dry = len(claims) < want
            for claim in claims:
                live = live_job_of(claim, trio.current_time(), self._wall())
                self._live[live.id] = live
                if self._fleet_budget is not None:
                    self._fleet_budget.hold(claim)
                self._rotation.put(live)
            if claims:
                self._report_depth()
                if (hook := self._hooks.claimed) is not None:
                    hook(len(claims), sum(c.taken_over for c in claims))
            # With budgets a claim may stop short at a scope's last slot: the next one, which
            # sees that scope full, passes over its jobs to the others.
            if len(claims) < want and not (claims and rules is not None):
                with trio.move_on_after(_FLEET_POLL):
                    await store.wait_for_turns()

    def _turns_wanted(self) -> int:
        """Fleet: turns to claim now, for the idle workers and a few more (``ClaimAhead``).

        A worker that ends its fetch takes a turn claimed while it fetched, so the claim's round
        trip is not in every turn; the turns held ahead are the fleet's oldest, taken in order.
        """
        # A fleet with fewer ready turns than it can take claims none ahead: a turn held here
        # behind a busy worker would wait while another instance's idle worker could run it.
        ahead = 0 if self._dry else self._ahead.turns(self._workers)
        return self._rotation.idle_workers + ahead - self._rotation.ready

    async def _run_target(self, turn: Turn) -> None:
        live, slot = turn.live, turn.slot
        if (hook := self._hooks.turn) is not None:
            hook(live.caller_class, trio.current_time() - live.queued_at)
        idx = live.take_index()
        if not await self._start(live, idx):  # cancelled from elsewhere, or gone
            if slot is not None:
                slot.release()
            if self._live.pop(live.id, None) is not None:
                self._report_depth()
            return
        if live.claim is None:  # its next target may start meanwhile (concurrency)
            self._requeue(live)
        self._inflight += 1
        self._report_inflight()
        t0 = trio.current_time()
        try:
            if turn.blocked is not None:
                fetched: tuple[Outcome | None, BaseException | None] = (
                    self._blocked_outcome(live, turn.blocked),
                    None,
                )
            else:
                fetched = await self._fetch_target(live, idx, slot, t0)
        finally:
            self._inflight -= 1
            self._report_inflight()
        outcome, error = fetched
        if outcome is None:  # busy: tried again later
            return
        seconds = trio.current_time() - t0
        self._ahead.fetched(seconds)
        self._fetched_send.send_nowait((live, idx, outcome, error, seconds))

    async def _start(self, live: LiveJob, idx: int) -> bool:
        """Mark the target running; False if its job is no longer live."""
        if live.claim is not None:  # the claim marked it running
            return True
        try:
            return await self._store.start_target(live.id, idx, self._wall())
        except Exception as exc:
            self._store_error("start_target", live.id, exc)
            return True

    async def _fetch_target(
        self, live: LiveJob, idx: int, slot: HostSlot | None, t0: float
    ) -> tuple[Outcome | None, BaseException | None]:
        """Fetch one target in its slot: its outcome and error, or no outcome if it was busy."""
        held = CURRENT_SLOT.set(slot)
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
            CURRENT_SLOT.reset(held)
        if slot is not None:
            slot.release()
        return Outcome(TargetState.DONE, result_json=result.to_json(), claim=live.token), None

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
            if live.busy_since is None:
                live.busy_since = t0
            busy_for = trio.current_time() - live.busy_since
            if busy_for <= self._config.retry_for:
                # With a budget the host's backoff holds the job back; without, a timer does.
                wait = 0.0 if budgeted else max(self._config.retry_wait, kind.after or 0.0)
                await self._retry(live, idx, wait)
                return None, exc
            hint = f"the target stayed busy for {busy_for:.0f} s; try it again later"
            return (
                Outcome(TargetState.FAILED, error=str(kind) or "busy", hint=hint, claim=live.token),
                exc,
            )
        if isinstance(kind, TargetError):  # hooks read its status, also when it came in a group
            return Outcome(
                TargetState.FAILED, error=kind.msg, hint=kind.hint, claim=live.token
            ), kind
        self._log.error(
            "fetch raised %s",
            type(exc).__name__,
            extra={"job_id": live.id, "idx": idx, "error_type": type(exc).__name__},
        )
        return Outcome(TargetState.FAILED, error="internal error", claim=live.token), exc

    def _blocked_outcome(self, live: LiveJob, blocked: Waiting) -> Outcome:
        """A target whose host stayed pushed back past the block limit fails, unfetched; so
        does a busy one whose host would hold it back past ``Config.retry_for``."""
        if not blocked.blocked:
            busy_since = trio.current_time() if live.busy_since is None else live.busy_since
            busy_for = trio.current_time() - busy_since
            return Outcome(
                TargetState.FAILED,
                error="busy",
                hint=f"the target stayed busy for {busy_for:.0f} s and its site asked for a "
                "longer wait; try it again later",
                claim=live.token,
            )
        return Outcome(
            TargetState.FAILED,
            error=f"the host kept answering 429/503 for {blocked.blocked_for:.0f} s "
            "(host_block_limit)",
            hint="the site asked us to slow down; retry the job's failed targets later",
            claim=live.token,
        )

    async def _retry(self, live: LiveJob, idx: int, wait: float) -> None:
        """A busy target is tried again after ``wait``; until then it counts as in flight.

        So a serial job starts nothing else meanwhile, and a job of more ``concurrency`` runs
        its other targets.
        """
        if live.claim is not None and self._fleet_budget is not None:
            # fleet budgets: the turn goes back at once, and the fleet's backoff holds it (one
            # probe fleet-wide when it ends, not one from each instance holding a turn)
            if (hook := self._hooks.retry) is not None:
                hook(wait)
            assert self._tasks is not None
            self._tasks.start_soon(self._give_back_after, live, wait)
            return
        if live.claim is not None and wait <= 0.0:  # fleet: its host's backoff holds it here
            if (hook := self._hooks.retry) is not None:
                hook(wait)
            live.give_back(idx)
            self._requeue(live)
            return
        if live.claim is not None:  # fleet: hold the turn through the wait, then give it back
            if (hook := self._hooks.retry) is not None:
                hook(wait)
            assert self._tasks is not None
            self._tasks.start_soon(self._give_back_after, live, wait)
            return
        try:
            with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
                await self._store.release_target(live.id, idx, self._wall())
        except Exception as exc:
            self._store_error("release_target", live.id, exc)
        if (hook := self._hooks.retry) is not None:
            hook(wait)
        assert self._tasks is not None
        self._tasks.start_soon(self._requeue_after, live, idx, wait)

    async def _requeue_after(self, live: LiveJob, idx: int, wait: float) -> None:
        self._retrying += 1
        try:
            await trio.sleep(wait)
        finally:
            self._retrying -= 1
        live.give_back(idx)
        self._requeue(live)

    async def _give_back_after(self, live: LiveJob, wait: float) -> None:
        """Fleet: after a busy target's wait, the turn goes back to the end of the rotation.

        The claim is held (and renewed) through the wait, as a local job waits out of the
        rotation; when the time comes any instance may take it, with the first busy time
        kept for ``Config.retry_for``.
        """
        self._retrying += 1
        try:
            await trio.sleep(wait)
        finally:
            self._retrying -= 1
        assert live.claim is not None
        busy_since = (
            None
            if live.busy_since is None
            else self._wall() - (trio.current_time() - live.busy_since)
        )
        store = cast("FleetStore", self._store)
        with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
            try:
                if self._fleet_budget is not None:  # the fleet learns of the backoff first
                    await self._fleet_budget.send_reports()
                await store.release_claim(live.claim, self._wall(), busy_since)
            except Exception as exc:  # the claim expires and another instance takes it
                self._store_error("release_claim", live.id, exc)
        if self._live.pop(live.id, None) is not None:
            self._report_depth()

    def _waited(self, live: LiveJob, reason: str, new: bool) -> None:
        """A pass-over: counted; a new wait also wakes the job's followers (SSE ``waiting``)."""
        if (hook := self._hooks.waited) is not None:
            hook(reason)
        if new:
            self._watchers.changed(live.id)

    def _dropped(self, live: LiveJob) -> None:
        """A cancelled job left the rotation; a fleet's claim on it goes back at once."""
        if live.claim is not None and self._tasks is not None:
            self._tasks.start_soon(self._give_back_after, live, 0.0)

    def _requeue(self, live: LiveJob) -> None:
        """Back in the rotation if it has a target to start and room to start it."""
        if not live.cancelled and not self._closing and live.wants_turn():
            self._rotation.put(live)

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
        unfinished = [
            live
            for fetched, stored in zip(group, results, strict=True)
            if (live := self._acknowledge(fetched, stored)) is not None
        ]
        for live in unfinished:
            await self._interrupt_unfinished(live)

    def _acknowledge(self, fetched: Fetched, stored: Stored | Exception) -> LiveJob | None:
        """Hooks, then settle or requeue the job; return it if its last outcome was not stored."""
        live, _, outcome, error, seconds = fetched
        if isinstance(stored, Exception):
            self._store_error("finish_targets", live.id, stored)
            stored = Stored(None)
        if (hook := self._hooks.target) is not None:
            hook(error, seconds, outcome.size)
        if stored.evicted and (evicted := self._hooks.evicted) is not None:
            evicted(stored.evicted)
        live.busy_since = None
        live.in_flight -= 1
        self._watchers.changed(live.id, has_webhook=live.has_webhook)
        if stored.terminal is not None:
            self._settle(live, stored.terminal)
        elif live.claim is not None:  # fleet: storing it gave the turn back to the rotation
            if self._live.pop(live.id, None) is not None:
                self._report_depth()
        elif live.wants_turn():
            self._requeue(live)
        elif self._ended_all(live) and not live.cancelled and live.id in self._live:
            return live  # every target started and ended, yet the job did not end
        return None

    @staticmethod
    def _ended_all(live: LiveJob) -> bool:
        """Every target started, none in flight or to try again."""
        started = live.next_idx >= len(live.targets) and not live.again
        return started and live.in_flight == 0 and not live.queued

    async def _interrupt_unfinished(self, live: LiveJob) -> None:
        # The last outcome did not finish the job (a store error): free its cap.
        failed: list[str] = []
        with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
            try:
                failed = await self._store.interrupt([live.id], self._wall())
            except Exception as exc:
                self._store_error("interrupt", live.id, exc)
        if failed:
            self._settle(live, JobStatus.FAILED)
        elif self._live.pop(live.id, None) is not None:
            self._report_depth()

    def _settle(self, live: LiveJob, status: JobStatus) -> None:
        self._live.pop(live.id, None)
        self._watchers.changed(live.id, has_webhook=live.has_webhook)
        self._call_job_hook(status.value)
        if (hook := self._hooks.job_seconds) is not None:
            hook(trio.current_time() - live.started)
        self._report_depth()
        self._log.debug("job finished", extra={"job_id": live.id, "status": status.value})

    def _call_job_hook(self, event: str) -> None:
        if (hook := self._hooks.job) is not None:
            hook(event)

    def _report_depth(self) -> None:
        if (hook := self._hooks.depth) is not None:
            hook(len(self._live))

    def _report_inflight(self) -> None:
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
    is passed over and keeps its place in the round robin (docs/politeness.md).
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
    engine = BatchEngine._create(store, fetch, config, log, wall_clock, budget, scope)
    resumed: list[ResumedJob] = []
    if is_fleet(store):
        pass  # live jobs belong to the fleet: nothing to fail or resume, the claims run them
    elif config.resume:
        resumed = await store.resume(wall_clock())
    elif recovered := await store.recover(wall_clock()):
        log.warning(
            "failed %d live jobs left by a process that is gone",
            len(recovered),
            extra={"jobs": len(recovered)},
        )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine._run)
            engine._resume(resumed)
            try:
                yield engine
            finally:
                await engine.aclose()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise
