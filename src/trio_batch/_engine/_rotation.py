"""The engine's round robin of live jobs, with budgets per host (``Rotation``).

Each time a job enters the rotation it takes the next turn number; a worker takes the job of
lowest turn. With a :class:`~trio_batch.HostBudget`, the worker then asks the budget, for each
of the job's candidates in index order (the first pending target of each of its hosts), whether
that target may start now: the first that may is the turn's target. If none may, the job is
*passed over*: parked under each host it waits for, with its turn number kept, while the worker
takes the next job. When one of those hosts frees a slot (a response came in) or its wait ends
(spacing, backoff), the job comes back with its old turn, ahead of every job that entered after
it: a passed-over job keeps its place. So no worker waits on a busy host while other work is
ready, inside a job as across jobs, and a host sees no more than its budget whatever the number
of workers and callers.

Without a budget the rotation is a deque (arrival order is turn order) and a turn's target is
the job's first pending one. With one it is a heap by turn: O(log n) a turn in the number of
queued jobs, plus one budget check per host a job waits for.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, final

import trio

from .._budget import HostBudget, HostSlot, Waiting
from ._live import LiveJob


class Turn(NamedTuple):
    """A job's turn, as a worker takes it: the target to start, its slot, or why it is blocked.

    ``blocked`` is set when the target's host stayed pushed back past the budget's
    ``block_limit``, or when a busy target would wait for its host past ``retry_for``: the
    worker fails the target (with a hint) without fetching it.
    """

    live: LiveJob
    idx: int
    slot: HostSlot | None
    blocked: Waiting | None = None


@final
class Rotation:
    """Jobs in turn order; those whose hosts are all at their budget wait aside, keeping their
    turn."""

    def __init__(
        self,
        budget: HostBudget | None,
        dropped: Callable[[LiveJob], None],
        retry_for: float = math.inf,
        waited: Callable[[LiveJob, str, bool], None] = lambda live, reason, new: None,
        parking: Callable[[], None] = lambda: None,
    ) -> None:
        self._budget = budget
        self._dropped = dropped  # a cancelled job leaves the rotation: a fleet's claims go back
        self._retry_for = retry_for
        self._waited = waited  # each pass-over: the job, the reason, whether it is a new wait
        self._parking = parking  # a worker is about to wait: a fleet's claimer claims for it
        self._turns = itertools.count()
        self._ready: list[tuple[int, LiveJob]] = []  # a heap by turn
        self._fifo: deque[LiveJob] = deque()  # the same without a budget: arrival order
        self._parked: dict[str, list[tuple[int, int, LiveJob]]] = {}  # scope -> (turn, mark, job)
        self._parked_jobs = 0
        self._timers: list[tuple[float, str]] = []  # a heap: when each parked scope may start
        self._timers_changed = trio.Event()
        self._takers = trio.lowlevel.ParkingLot()
        self._marks = itertools.count(1)
        self.waits: dict[str, Waiting] = {}
        """Why each job waiting aside waits (job id -> :class:`Waiting` of its first pending
        target's host): for its status."""
        if self._budget is not None:
            self._budget.add_listener(self._unpark)

    @property
    def queued(self) -> int:
        """Jobs waiting for a worker, ready or passed over."""
        return len(self._fifo) + len(self._ready) + self._parked_jobs

    @property
    def ready(self) -> int:
        """Jobs ready for a worker (not waiting for their hosts)."""
        return len(self._fifo) + len(self._ready)

    @property
    def idle_workers(self) -> int:
        """Workers waiting for a job to take."""
        return len(self._takers)

    def put(self, live: LiveJob) -> None:
        """Enter ``live`` at the end of the round robin (a job is in it at most once)."""
        live.queued = True
        live.queued_at = trio.current_time()
        self._push(next(self._turns), live)

    async def take(self) -> Turn:
        """The ready job of lowest turn with its target's slot held; waits while there is none.

        A job ready at once is returned without a trip through the scheduler (what the worker
        does next checkpoints): the rotation's cost per target stays a heap operation. Each
        time the worker is about to wait, ``parking`` is told, again when a job it was woken
        for could not be taken (cancelled, or set aside for its hosts meanwhile): a fleet's
        claimer counts the turns its workers want from that.
        """
        while True:
            if self._budget is None:  # nothing waits aside: turn order is arrival order
                while self._fifo:
                    live = self._fifo.popleft()
                    live.queued = False
                    if not live.cancelled and live.pending:
                        return Turn(live, live.first(), None)
                    self._drop(live)
            while self._ready:
                turn, live = heapq.heappop(self._ready)
                live.queued = False
                taken = self._try(turn, live)
                if taken is not None:
                    return taken
            self._parking()
            await self._takers.park()

    async def run_timers(self) -> None:
        """Bring parked scopes back when their wait ends (a task of the engine's nursery)."""
        while True:
            changed = self._timers_changed
            deadline = self._timers[0][0] if self._timers else math.inf
            with trio.move_on_at(deadline):
                await changed.wait()
            if changed.is_set():
                self._timers_changed = trio.Event()
            now = trio.current_time()
            while self._timers and self._timers[0][0] <= now:
                _, scope = heapq.heappop(self._timers)
                self._unpark(scope)

    def _drop(self, live: LiveJob) -> None:
        self.waits.pop(live.id, None)
        if live.cancelled:
            self._dropped(live)

    def _try(self, turn: int, live: LiveJob) -> Turn | None:
        """Take a turn of ``live`` now, or park it under its busy hosts and return None."""
        if live.cancelled or not live.pending:
            self._drop(live)
            return None
        assert self._budget is not None
        waits: list[tuple[str, Waiting]] = []
        for idx, scope in live.heads():
            if scope is None:
                self.waits.pop(live.id, None)
                return Turn(live, idx, None)
            got = self._budget.try_start(scope)
            if isinstance(got, HostSlot):
                self.waits.pop(live.id, None)
                return Turn(live, idx, got)
            if got.blocked or self._busy_too_long(live, idx, got):
                self.waits.pop(live.id, None)
                return Turn(live, idx, None, got)
            waits.append((scope, got))
        self._park(turn, live, waits)
        return None

    def _park(self, turn: int, live: LiveJob, waits: list[tuple[str, Waiting]]) -> None:
        """Set ``live`` aside under each host it waits for; the first to free it brings it back."""
        first = waits[0][1]
        before = self.waits.get(live.id)
        self.waits[live.id] = first
        self._waited(live, first.reason, before is None or before.reason != first.reason)
        live.queued = True
        live.park = next(self._marks)
        self._parked_jobs += 1
        for scope, got in waits:
            parked = self._parked.setdefault(scope, [])
            parked.append((turn, live.park, live))
            if got.deadline is not None and len(parked) == 1:
                heapq.heappush(self._timers, (got.deadline, scope))
                self._timers_changed.set()

    def _busy_too_long(self, live: LiveJob, idx: int, waiting: Waiting) -> bool:
        """A busy target whose host's backoff ends only past ``retry_for``: it fails now.

        Only a target tried again is busy; a new one waits its turn.
        """
        busy_since = live.busy_since.get(idx)
        if busy_since is None or waiting.reason != "backoff" or waiting.deadline is None:
            return False
        return waiting.deadline - busy_since > self._retry_for

    def _push(self, turn: int, live: LiveJob) -> None:
        if self._budget is None:
            self._fifo.append(live)
        else:
            heapq.heappush(self._ready, (turn, live))
        if self._takers:
            self._takers.unpark()

    def _unpark(self, scope: str) -> None:
        """``scope`` may start again: its parked jobs come back with their turns (a job parked
        under several hosts comes back once, at the first of them)."""
        for turn, mark, live in self._parked.pop(scope, []):
            if live.park == mark:
                live.park = 0
                self._parked_jobs -= 1
                self._push(turn, live)
