"""The engine's round robin of live jobs, with budgets per scope (``Rotation``).

Each time a job enters the rotation it takes the next turn number; a worker takes the job of
lowest turn. With a :class:`~trio_batch.HostBudget`, the worker first asks the budget whether
the job's next target may start: if its scope (its host) is at its budget, the job is *passed
over*: parked under its scope with its turn number kept, while the worker takes the next job.
When the scope frees a slot (a response came in) or its wait ends (spacing, backoff), its parked
jobs come back with their old turns, ahead of every job that entered after them: a passed-over
job keeps its place. So no worker waits on a busy host while other work is ready, and the host
sees no more than its budget whatever the number of workers and callers.
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
from .._model import Target
from ._live import LiveJob

HostFunc = Callable[[Target], "str | None"]
"""The scope of a target (the web fetcher's: host and port), or None for no budget."""


class Turn(NamedTuple):
    """A job's turn, as a worker takes it: the slot its target holds, or why it is blocked.

    ``blocked`` is set when the target's scope stayed pushed back past the budget's
    ``block_limit``, or when a busy target would wait for its host past ``retry_for``: the
    worker fails the target (with a hint) without fetching it.
    """

    live: LiveJob
    slot: HostSlot | None
    blocked: Waiting | None = None


@final
class Rotation:
    """Jobs in turn order; those whose host is at its budget wait aside, keeping their turn."""

    def __init__(
        self,
        budget: HostBudget | None,
        scope: HostFunc | None,
        dropped: Callable[[LiveJob], None],
        retry_for: float = math.inf,
        waited: Callable[[LiveJob, str, bool], None] = lambda live, reason, new: None,
    ) -> None:
        self._budget = budget if scope is not None else None
        self._dropped = dropped  # a cancelled job leaves the rotation: a fleet's claim goes back
        self._retry_for = retry_for
        self._waited = waited  # each pass-over: the job, the reason, whether it is a new wait
        self._scope = scope
        self._turns = itertools.count()
        self._ready: list[tuple[int, LiveJob]] = []  # a heap by turn
        self._fifo: deque[LiveJob] = deque()  # the same without a budget: arrival order
        self._parked: dict[str, list[tuple[int, LiveJob]]] = {}
        self._timers: list[tuple[float, str]] = []  # a heap: when each parked scope may start
        self._timers_changed = trio.Event()
        self._takers = trio.lowlevel.ParkingLot()
        self.waits: dict[str, Waiting] = {}
        """Why each job waiting aside waits (job id -> :class:`Waiting`): for its status."""
        if self._budget is not None:
            self._budget.add_listener(self._scope_freed)

    @property
    def queued(self) -> int:
        """Jobs waiting for a worker, ready or passed over."""
        parked = sum(len(jobs) for jobs in self._parked.values())
        return len(self._fifo) + len(self._ready) + parked

    @property
    def ready(self) -> int:
        """Jobs ready for a worker (not waiting for their host)."""
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
        """The ready job of lowest turn, its target's slot held; waits while there is none.

        A job ready at once is returned without a trip through the scheduler (what the worker
        does next checkpoints): the rotation's cost per target stays a heap operation.
        """
        while True:
            if self._budget is None:  # nothing waits aside: turn order is arrival order
                while self._fifo:
                    live = self._fifo.popleft()
                    live.queued = False
                    if not live.cancelled:
                        return Turn(live, None)
                    self._dropped(live)
            while self._ready:
                turn, live = heapq.heappop(self._ready)
                live.queued = False
                taken = self._try(turn, live)
                if taken is not None:
                    return taken
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

    def _try(self, turn: int, live: LiveJob) -> Turn | None:
        """Take ``live``'s turn now, or park it under its busy scope and return None."""
        if live.cancelled:
            self.waits.pop(live.id, None)
            self._dropped(live)
            return None
        if self._budget is None or self._scope is None:
            return Turn(live, None)
        scope = self._scope(live.next_target())
        if scope is None:
            return Turn(live, None)
        got = self._budget.try_start(scope)
        if isinstance(got, HostSlot):
            self.waits.pop(live.id, None)
            return Turn(live, got)
        if got.blocked or self._busy_too_long(live, got):
            self.waits.pop(live.id, None)
            return Turn(live, None, got)
        before = self.waits.get(live.id)
        self.waits[live.id] = got
        self._waited(live, got.reason, before is None or before.reason != got.reason)
        live.queued = True
        parked = self._parked.setdefault(scope, [])
        parked.append((turn, live))
        if got.deadline is not None and len(parked) == 1:
            heapq.heappush(self._timers, (got.deadline, scope))
            self._timers_changed.set()
        return None

    def _busy_too_long(self, live: LiveJob, waiting: Waiting) -> bool:
        """A busy target whose host's backoff ends only past ``retry_for``: it fails now.

        Only a target tried again (first in ``again``) is busy; a new one waits its turn.
        """
        if not live.again or live.busy_since is None:
            return False
        if waiting.reason != "backoff" or waiting.deadline is None:
            return False
        return waiting.deadline - live.busy_since > self._retry_for

    def _push(self, turn: int, live: LiveJob) -> None:
        if self._budget is None:
            self._fifo.append(live)
        else:
            heapq.heappush(self._ready, (turn, live))
        if self._takers:
            self._takers.unpark()

    def _scope_freed(self, scope: str) -> None:
        self._unpark(scope)

    def _unpark(self, scope: str) -> None:
        for turn, live in self._parked.pop(scope, []):
            self._push(turn, live)
