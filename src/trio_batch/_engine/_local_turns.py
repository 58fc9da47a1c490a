"""The turns of an engine over a single-process store: its own rotation (``LocalTurns``).

The engine holds every target of the jobs it admitted and runs them through its
:class:`~trio_batch._engine._rotation.Rotation`. Around that: marking a target running in the
store, the timer that brings a busy target back after its wait, and what becomes of the live
jobs when the engine opens and closes: left by a process that is gone, they are failed
(``interrupted``) or, with ``Config.resume``, run again; at close they are failed or left for
the next engine. On a store other engines share without being a fleet (none ships today), it
also adopts the jobs of engines that are gone, every second.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import final

import trio

from .._budget import HostBudget
from .._crawl import CRAWL_WINDOW, CrawlSpec
from .._model import Caller, CallerClass, Target
from ..stores._protocol import NewJob, ResumedJob
from ._crawling import CrawlRun
from ._live import HostFunc, LiveJob, resumed_live_jobs
from ._rotation import Rotation, Turn
from ._turns import EngineParts
from ._watch import is_shared

# Bookkeeping that must land even while the engine is being cancelled, but never forever.
CLEANUP_SECONDS = 5.0
# Seconds between two looks for the jobs of engines that are gone (Config.resume).
_ADOPT_EVERY = 1.0


@final
class LocalTurns:
    """:class:`~trio_batch._engine._turns.Turns` from the engine's own rotation."""

    def __init__(
        self,
        parts: EngineParts,
        budget: HostBudget | None,
        scope: HostFunc | None,
    ) -> None:
        self._parts = parts
        self._scope = scope if budget is not None else None
        self.rotation = Rotation(
            budget if scope is not None else None,
            lambda live: None,
            parts.config.retry_for,
            waited=parts.waited,
        )
        self._resumed: list[ResumedJob] = []
        self._timers: trio.Nursery | None = None
        self.retrying = 0
        """Targets waiting out ``Config.retry_wait`` after a busy answer."""

    def scopes(self, targets: Sequence[Target]) -> tuple[str | None, ...]:
        """None: a single-process store keeps no budgets."""
        return ()

    async def open(self) -> None:
        """Before the engine runs: fail the live jobs a process that is gone left, or with
        ``Config.resume`` take them over (they enter the rotation as :meth:`run` starts)."""
        store, wall = self._parts.store, self._parts.wall
        if self._parts.config.resume:
            self._resumed = await store.resume(wall())
        elif recovered := await store.recover(wall()):
            self._parts.log.warning(
                "failed %d live jobs left by a process that is gone",
                len(recovered),
                extra={"jobs": len(recovered)},
            )

    async def admitted(
        self,
        job: NewJob,
        caller: Caller,
        caller_class: CallerClass,
        *,
        has_webhook: bool,
        concurrency: int,
        closing: bool,
    ) -> None:
        """Run the stored job here: every target pending, the job at the end of the rotation.

        Raises:
            trio.ClosedResourceError: the engine began closing while the job was stored; the
                job is failed ``interrupted`` so that no cap stays taken.
        """
        if closing:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await self._parts.store.interrupt([job.id], self._parts.wall())
            raise trio.ClosedResourceError(
                "this BatchEngine is closed; open a new one with open_engine()"
            )
        live = LiveJob(job.id, caller, trio.current_time(), caller_class, concurrency)
        held = job.targets
        if job.crawl:  # a crawl holds a window of its frontier: the rest is read on later
            live.crawl = CrawlRun(CrawlSpec.from_json(job.crawl))
            held = job.targets[:CRAWL_WINDOW]
            live.crawl.more = len(job.targets) > len(held)
        for idx, target in enumerate(held):
            live.add(idx, target, None if self._scope is None else self._scope(target))
            if live.crawl is not None:
                seed = job.seeds[idx]
                live.crawl.hold(idx, seed.depth, seed.parent)
        live.has_webhook = has_webhook
        self._parts.live.add(live)
        self.rotation.put(live)

    def take(self) -> Awaitable[Turn]:
        """The next job's turn from the rotation."""
        return self.rotation.take()

    async def started(self, live: LiveJob, idx: int) -> bool:
        """Mark the target running in the store; False if its job is no longer live."""
        try:
            return await self._parts.store.start_target(live.id, idx, self._parts.wall())
        except Exception as exc:
            self._parts.store_error("start_target", live.id, exc)
            return True

    async def busy(self, live: LiveJob, idx: int, wait: float) -> None:
        """The target goes back to pending in the store; a timer brings it back after
        ``wait``, meanwhile it counts as in flight (a serial job starts nothing else)."""
        try:
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await self._parts.store.release_target(live.id, idx, self._parts.wall())
        except Exception as exc:
            self._parts.store_error("release_target", live.id, exc)
        if (hook := self._parts.hooks.retry) is not None:
            hook(wait)
        assert self._timers is not None
        self._timers.start_soon(self._again_after, live, idx, wait)

    async def refill(self, live: LiveJob) -> None:
        """Read the crawl's frontier on from the store while it holds fewer than half a window
        of pending targets (bounded, shielded: the finisher calls it, also while closing)."""
        run = live.crawl
        if run is None or not run.more or live.pending >= CRAWL_WINDOW // 2:
            return
        want = CRAWL_WINDOW - live.pending
        rows: list[tuple[int, Target, int, int]] = []
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            try:
                rows = await self._parts.store.crawl_frontier(live.id, run.loaded, want)
            except Exception as exc:
                self._parts.store_error("crawl_frontier", live.id, exc)
                return
        run.more = len(rows) == want
        for idx, target, depth, parent in rows:
            live.add(idx, target, None if self._scope is None else self._scope(target))
            run.hold(idx, depth, parent)
        if not rows and not live.targets and not live.cancelled:
            # nothing left to read nor held: the store ends the job with its last outcome
            if live.in_flight == 0 and not live.queued:
                await self._parts.unfinished(live)
            return
        self._parts.requeue(live)

    def emptied(self, live: LiveJob) -> bool:
        """Every target of a local job was stored, so it should have ended: True."""
        return True

    def work_ahead(self, caller: str | None, fetch_seconds: float) -> float | None:
        """Each job's targets left, over its share of the workers, at ``fetch_seconds`` each."""
        live = self._parts.live
        jobs = [j for j in live.values() if caller is None or j.caller.name == caller]
        if not jobs:
            return None
        share = max(1.0, len(live) / self._parts.workers)
        return min(len(j.targets) * fetch_seconds * share / j.concurrency for j in jobs)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The rotation's timers and busy targets' timers; the resumed jobs enter the
        rotation before this reports started."""
        async with trio.open_nursery() as nursery:
            self._timers = nursery
            nursery.start_soon(self.rotation.run_timers)
            if self._parts.config.resume and is_shared(self._parts.store):
                nursery.start_soon(self._adopt_loop)
            resumed, self._resumed = self._resumed, []
            self._resume(resumed)
            task_status.started()

    async def close(self) -> None:
        """Fail the live jobs (``interrupted``), or with ``Config.resume`` leave them live for
        the next engine; bounded and shielded."""
        live = self._parts.live
        if self._parts.config.resume:
            if len(live):
                self._parts.log.info("left %d live jobs to resume", len(live))
            return
        failed: list[str] = []
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            try:
                failed = await self._parts.store.interrupt(
                    [j.id for j in live.values()], self._parts.wall()
                )
            except Exception as exc:
                self._parts.store_error("interrupt", "", exc)
            hooks = self._parts.hooks
            for job_id in failed:
                job = live.get(job_id)
                if (hook := hooks.job) is not None:
                    hook("failed")
                if job is not None and (seconds := hooks.job_seconds) is not None:
                    seconds(trio.current_time() - job.started)
        if failed:
            self._parts.log.info(
                "interrupted %d live jobs", len(failed), extra={"jobs": len(failed)}
            )

    async def _again_after(self, live: LiveJob, idx: int, wait: float) -> None:
        self.retrying += 1
        try:
            await trio.sleep(wait)
        finally:
            self.retrying -= 1
        live.give_back(idx)
        self._parts.requeue(live)

    def _resume(self, resumed: Sequence[ResumedJob]) -> None:
        """Put jobs taken over from an engine that is gone in the rotation, oldest first."""
        jobs = resumed_live_jobs(resumed, trio.current_time(), self._parts.wall(), self._scope)
        for live in jobs:
            if live.id in self._parts.live:
                continue
            self._parts.live.add(live)
            if live.pending:
                if (hook := self._parts.hooks.job) is not None:
                    hook("resumed")
                self.rotation.put(live)
            else:  # live, yet nothing left to run: end it as after a store error
                assert self._timers is not None
                self._timers.start_soon(self._parts.unfinished, live)
        if resumed:
            self._parts.log.info("resumed %d live jobs", len(resumed), extra={"jobs": len(resumed)})

    async def _adopt_loop(self) -> None:
        """Every second, take over the jobs of a shared store's instances that are gone."""
        while True:
            await trio.sleep(_ADOPT_EVERY)
            try:
                self._resume(await self._parts.store.resume(self._parts.wall(), opening=False))
            except Exception as exc:
                self._parts.store_error("resume", "", exc)
