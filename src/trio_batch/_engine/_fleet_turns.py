"""The turns of an engine over a fleet store: claimed from the fleet's rotation (``FleetTurns``).

On a fleet (several ``serve`` processes on one PostgreSQL) the round robin lives in the
database: any instance's claimer takes the next turns of every live job, whoever admitted it,
one *target* a claim, a job holding up to its ``concurrency`` claims across the fleet, each
claim within its host's fleet-wide budget. What an instance claimed goes through its own
:class:`~trio_batch._engine._rotation.Rotation` to its workers, so turns still reach them in
order and its host budget still holds. Around that: the claimer (claiming for the idle workers
and a few turns ahead, :class:`~trio_batch._engine._ahead.ClaimAhead`), a busy target's claim
given back after its wait, a cancelled job's unstarted claims given back at once, the fleet's
budgets (:class:`~trio_batch._engine._fleet_budget.FleetBudget`), and at close every claim
given back. Live jobs belong to the fleet: nothing is failed or adopted here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import final

import trio

from .._budget import HostBudget
from .._crawl import CrawlSpec
from .._model import Caller, CallerClass, Target
from .._util import backoff
from ..stores._protocol import Claim, ClaimAsk, FleetStore, NewJob
from ._crawling import CrawlRun
from ._fleet_budget import FleetBudget
from ._live import HostFunc, LiveJob
from ._local_turns import CLEANUP_SECONDS
from ._rotation import Rotation, Turn
from ._turns import EngineParts

# A claimer claims again at least this often, in case a notification was lost.
_FLEET_POLL = 1.0
# Turns claimed by one statement at most.
_MAX_CLAIMS = 64
# Seconds the claimer leaves its claim to the outcome on its way to the store (a ride) at most.
_RIDE_WAIT = 0.05


@final
class FleetTurns:
    """:class:`~trio_batch._engine._turns.Turns` claimed from a fleet store."""

    def __init__(
        self,
        parts: EngineParts,
        store: FleetStore,
        budget: HostBudget | None,
        scope: HostFunc | None,
    ) -> None:
        self._parts = parts
        self._store = store
        self._budget: FleetBudget | None = None  # the fleet's budgets, with a host budget
        if budget is not None and scope is not None:
            self._budget = FleetBudget(
                store, budget, scope, lambda op, exc: parts.store_error(op, "", exc)
            )
        self.rotation = Rotation(
            budget if scope is not None else None,
            self._dropped,
            parts.config.retry_for,
            waited=parts.waited,
            parking=self._worker_waits,
        )
        self._wants_work = trio.Event()  # set when a worker takes or waits for a turn
        self._dry = False  # the last claim found fewer turns than it asked for
        self._claiming = 0  # turns the claimer's claim in flight asked for
        self._riding = 0  # turns the claim riding with a group of outcomes asked for
        self._ridden = trio.Event()  # set as each ride is answered
        self._closed = False  # close began: a ride answered now is given back with the rest
        self._tasks: trio.Nursery | None = None
        self.retrying = 0
        """Targets whose claim is held through a busy answer's wait."""

    def scopes(self, targets: Sequence[Target]) -> tuple[str | None, ...]:
        """Each target's scope, stored with its job so that the claims keep its budget."""
        return () if self._budget is None else self._budget.scopes(targets)

    async def open(self) -> None:
        """Nothing to do: live jobs belong to the fleet, and the claims run them."""
        await trio.lowlevel.checkpoint()

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
        """The job is the fleet's now: any instance's claimer takes its turns. (Not a
        checkpoint: the job is stored, and the submit must return its id.)"""

    def take(self) -> Awaitable[Turn]:
        """A claimed turn; the claimer tops the claimed turns up while a worker waits."""
        self._wants_work.set()
        return self.rotation.take()

    def _worker_waits(self) -> None:
        """A worker waits for a turn (the rotation tells, each time it parks one): the claimer
        counts the turns wanted again. A worker woken for a job it then could not take parks
        again without a new :meth:`take`, and the claimer had counted that job as ready."""
        self._wants_work.set()

    async def started(self, live: LiveJob, idx: int) -> bool:
        """The claim marked the target running: True."""
        await trio.lowlevel.checkpoint()
        return True

    async def busy(self, live: LiveJob, idx: int, wait: float) -> None:
        """Hold the claim through the wait (renewed), then give it back: the target pending,
        its job at the end of the fleet's rotation, its first busy time kept for
        ``Config.retry_for``; with budgets the fleet's backoff holds it meanwhile, so the probe
        after the backoff is one request fleet-wide."""
        if (hook := self._parts.hooks.retry) is not None:
            hook(wait)
        assert self._tasks is not None
        self._tasks.start_soon(self._give_back_after, live, idx, wait)

    async def refill(self, live: LiveJob) -> None:
        """Nothing: a fleet claims a crawl's targets one by one, as any job's."""
        await trio.lowlevel.checkpoint()

    def emptied(self, live: LiveJob) -> bool:
        """The job holds no claim here any more: it leaves this engine (False)."""
        self._parts.live.pop(live.id)
        return False

    def work_ahead(self, caller: str | None, fetch_seconds: float) -> float | None:
        """None: other instances' jobs are not known here."""
        return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The rotation's timers, the claimer and the fleet's budgets; started once the budget's
        gate is in place, so no request the engine lets through goes around it."""
        async with trio.open_nursery() as nursery:
            self._tasks = nursery
            nursery.start_soon(self.rotation.run_timers)
            nursery.start_soon(self._claimer)
            if self._budget is not None:
                await nursery.start(self._budget.run)
            self._store.ride_claims(self)
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._closed = True  # a ride answered from now on must not use this nursery
                self._store.ride_claims(None)

    async def close(self) -> None:
        """Give the fleet back the turns this engine holds; bounded and shielded.

        Their targets go back to pending and the jobs keep their places: another instance
        claims them at once (a rolling deploy costs no claim timeout).
        """
        self._closed = True
        self._store.ride_claims(None)
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            if self._riding:  # its claims are given back with the others
                await self._ridden.wait()
            try:
                await self._store.release_claims(self._parts.wall())
            except Exception as exc:
                self._parts.store_error("release_claims", "", exc)
        if held := len(self._parts.live):
            self._parts.log.info("gave back the claims of %d jobs", held, extra={"jobs": held})

    async def _claimer(self) -> None:
        """Claim as many turns as workers wait for (and a few ahead); hand them over in order.

        When the fleet has fewer turns ready than workers wait, it sleeps until the store
        hears of a change (a notification) or for ``_FLEET_POLL`` at most; with enough turns
        held, until a worker asks for one, or for ``_FLEET_POLL`` at most too. While an outcome
        of this engine is on its way to the store, it first leaves the claim to that outcome's
        group (:meth:`ask`), for ``_RIDE_WAIT`` at most. A store error is logged and tried
        again after a backoff; the workers just wait meanwhile.
        """
        rules = None if self._budget is None else self._budget.rules
        failures = 0
        deferred = False
        while True:
            want = min(self._turns_wanted(), _MAX_CLAIMS)
            if self._riding:  # one claim in flight at a time (see ask)
                with trio.move_on_after(_FLEET_POLL):  # the writer answers every ride
                    await self._ridden.wait()
                continue
            if want > 0 and not deferred and self._unserved() and self._parts.storing():
                deferred = True  # once: a ride answered before this wait began wakes nobody
                with trio.move_on_after(_RIDE_WAIT):
                    await self._ridden.wait()
                continue
            deferred = False
            if not self._claims_now(want):
                # Bounded as the dry wait is, a second guard: a worker that parks again after a
                # wake-up for a job it could not take tells it (_worker_waits); before it did,
                # an idle worker and a job pending in the fleet waited for a claimer asleep for
                # ever (seen on PostgreSQL under load).
                with trio.move_on_after(_FLEET_POLL):
                    await self._wants_work.wait()
                self._wants_work = trio.Event()
                continue
            t0 = trio.current_time()
            self._claiming = want
            try:
                claims = await self._store.claim_turns(
                    want, self._parts.wall(), rules, spaced=self._unserved()
                )
            except Exception as exc:
                failures += 1
                self._parts.store_error("claim_turns", "", exc)
                await trio.sleep(backoff(failures, 0.1, 5.0, jitter=0.5))
                continue
            finally:
                self._claiming = 0
            failures = 0
            self._parts.pace.claimed(trio.current_time() - t0)
            self._dry = len(claims) < want
            self._hold(claims)
            # With budgets a claim may stop short at a scope's last slot: the next one, which
            # sees that scope full, passes over its jobs to the others.
            if len(claims) < want and not (claims and rules is not None):
                with trio.move_on_after(_FLEET_POLL):
                    await self._store.wait_for_turns()

    def ask(self) -> ClaimAsk | None:
        """The turns to claim with a group of this engine's outcomes (``ClaimRider``): as the
        claimer would claim now, if a worker waits with no turn; none while the claimer's own
        claim is in flight.

        One claim in flight at a time: two at once (the claimer's on a pooled connection, a
        ride on the writer's) skip each other's locked jobs, so each may take a job whose turn
        comes after one the other took, and the one answered first would hand its turn to the
        workers first (``a1 b1 a2 b2 b3 a3`` in ``tests/stores/test_fairness.py``, 26 runs of
        1,000 before this rule).
        """
        want = min(self._turns_wanted(), _MAX_CLAIMS)
        unserved = self._unserved()
        if want <= 0 or self._claiming or not unserved:
            return None
        self._riding = want
        rules = None if self._budget is None else self._budget.rules
        return ClaimAsk(want, self._parts.wall(), rules, unserved)

    def _unserved(self) -> int:
        """Workers waiting with no turn for them: the turns a claim takes first (``spaced``),
        and only while there are any does a claim ride with the outcomes. The writer is one
        connection, the instance's slowest part when fetches are instant; a claim on a pooled
        connection runs beside it, in another backend (W1 on PostgreSQL: 1,500-1,700
        targets/s with every claim riding, 1,800-2,000 without)."""
        return max(0, self.rotation.idle_workers - self.rotation.ready)

    def answered(self, claims: list[Claim] | None) -> None:
        """The ride's claims (None: it did not run): held as the claimer's are; the claimer
        looks again. Once :meth:`close` began they are not held: it gives them back with the
        others (the store holds their tokens)."""
        asked, self._riding = self._riding, 0
        if claims is not None and not self._closed:
            self._dry = len(claims) < asked
            self._hold(claims)
        self._ridden.set()
        self._ridden = trio.Event()
        self._wants_work.set()

    def _hold(self, claims: Sequence[Claim]) -> None:
        """Take the claimed targets in: each under its job, the job in the rotation."""
        now, wall = trio.current_time(), self._parts.wall()
        stale: list[Claim] = []
        for claim in claims:
            live = self._parts.live.get(claim.job_id)
            if live is None:
                started = now - max(0.0, wall - claim.created_at)
                caller = Caller(claim.caller, claim.workspace)
                live = LiveJob(claim.job_id, caller, started, claim.caller_class, claim.concurrency)
                live.has_webhook = claim.has_webhook
                if claim.crawl:
                    live.crawl = CrawlRun(CrawlSpec.from_json(claim.crawl))
                self._parts.live.add(live)
            if claim.idx in live.targets:  # held here still, under a claim that lapsed (a late
                stale.append(claim)  # renewal): the old fetch goes on, the new claim goes back
                continue
            live.claims[claim.idx] = claim
            live.add(claim.idx, claim.target, claim.scope if self._budget is not None else None)
            if live.crawl is not None:
                live.crawl.hold(claim.idx, claim.depth, claim.parent)
            if claim.busy_since is not None:
                live.busy_since[claim.idx] = now - max(0.0, wall - claim.busy_since)
            if self._budget is not None:
                self._budget.hold(claim)
            self._parts.requeue(live)
        if claims and (hook := self._parts.hooks.claimed) is not None:
            hook(len(claims), sum(c.taken_over for c in claims))
        if stale and self._tasks is not None:
            self._tasks.start_soon(self._release, stale)

    async def _release(self, claims: list[Claim]) -> None:
        """Give claims back to the fleet, touching nothing this engine holds (bounded)."""
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            for claim in claims:
                try:
                    await self._store.release_claim(claim, self._parts.wall(), None)
                except Exception as exc:  # it expires: no longer renewed
                    self._parts.store_error("release_claim", claim.job_id, exc)

    def _claims_now(self, want: int) -> bool:
        """Whether the claimer claims ``want`` turns now: at once for a worker waiting with no
        turn, else only once half the turns it holds for (:meth:`_holds_for`) are used.

        A claim statement costs about as much for two turns as for thirty (on PostgreSQL ~0.9 ms
        of execution, and a round trip), and one claim is in flight at a time: with instant
        fetches an instance that claimed again after every turn or two ran at the pace of its
        claims, ~8 turns each (W1 on PostgreSQL 2,100-2,300 targets/s; with this rule and
        ``MAX_AHEAD`` 64, ~30 turns a claim and 3,700-3,800 targets/s).
        """
        return want > 0 and (2 * want >= self._holds_for() or self._unserved() > 0)

    def _holds_for(self) -> int:
        """Turns the claimer keeps claimed: one for each idle worker and a few more
        (``ClaimAhead``).

        A worker that ends its fetch takes a turn claimed while it fetched, so the claim's round
        trip is not in every turn; the turns held ahead are the fleet's oldest, taken in order.
        """
        # A fleet with fewer ready turns than it can take claims none ahead: a turn held here
        # behind a busy worker would wait while another instance's idle worker could run it.
        ahead = 0 if self._dry else self._parts.pace.turns(self._parts.workers)
        return self.rotation.idle_workers + ahead

    def _turns_wanted(self) -> int:
        """Turns to claim now: those :meth:`_holds_for` but the ones held or on their way."""
        held = self.rotation.ready + self._claiming + self._riding
        return self._holds_for() - held

    async def _give_back_after(self, live: LiveJob, idx: int, wait: float) -> None:
        """After a busy target's wait, its claim goes back to the fleet."""
        self.retrying += 1
        try:
            await trio.sleep(wait)
        finally:
            self.retrying -= 1
        claim = live.claims[idx]
        since = live.busy_since.get(idx)
        busy_since = None if since is None else self._parts.wall() - (trio.current_time() - since)
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            try:
                if self._budget is not None:  # the fleet learns of the backoff first
                    await self._budget.send_reports()
                await self._store.release_claim(claim, self._parts.wall(), busy_since)
            except Exception as exc:  # the claim expires and another instance takes it
                self._parts.store_error("release_claim", live.id, exc)
        live.drop(idx)
        if live.targets:  # it had no room while this target waited: it may start another now
            self._parts.requeue(live)
        else:
            self._parts.live.pop(live.id)

    def _dropped(self, live: LiveJob) -> None:
        """A cancelled job left the rotation: the claims it had not started go back at once."""
        claims = [live.claims[idx] for idx in live.drop_pending() if idx in live.claims]
        if claims and self._tasks is not None:
            self._tasks.start_soon(self._give_back, live, claims)

    async def _give_back(self, live: LiveJob, claims: list[Claim]) -> None:
        await self._release(claims)
        for claim in claims:
            live.claims.pop(claim.idx, None)
        if not live.targets and live.in_flight == 0:
            self._parts.live.pop(live.id)
