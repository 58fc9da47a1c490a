"""The budgets per host of an engine over a fleet store (``FleetBudget``).

On a fleet the host budget is the database's: each claim of a turn keeps the scopes' rules
(``HostRules``), a request outside the rotation takes a lease through :class:`FleetGate`, and
what one instance's budget learns of a scope (a 429's backoff, a recovery, a ``Crawl-delay``)
is stored, so every instance holds the scope back alike. This is that plumbing, in one place:
the engine asks it for the rules its claims keep and for each target's scope at admission,
hands it each claim's view of its scope, and runs it as a task of its nursery.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import trio

from .._budget import HostBudget, HostNews
from .._model import Target
from ..stores._protocol import Claim, FleetStore, HostReport, HostRules
from ._gate import FleetGate
from ._live import HostFunc


@final
class FleetBudget:
    """A host budget made the fleet's: rules for the claims, a gate, the news reported."""

    def __init__(
        self,
        store: FleetStore,
        budget: HostBudget,
        scope_of: HostFunc,
        failed: Callable[[str, Exception], None],
    ) -> None:
        self._store = store
        self._budget = budget
        self._scope_of = scope_of
        self._failed = failed  # a store error: logged; the budget holds the scope meanwhile
        self.rules = HostRules(budget.concurrency, budget.interval, budget.block_limit)
        """What every claim of this engine keeps (the budget's own settings)."""
        self._gate = FleetGate(store, self.rules, lambda exc: failed("lease_scope", exc))
        self._reports: list[HostReport] = []
        self._reported = trio.Event()
        self._reports_lock = trio.Lock()
        budget.add_observer(self._heard)

    def scopes(self, targets: Sequence[Target]) -> tuple[str | None, ...]:
        """Each target's scope, stored with the job so that claims can keep its budget."""
        return tuple(self._scope_of(t) for t in targets)

    def hold(self, claim: Claim) -> None:
        """Take in what the claim of a turn says of its target's scope."""
        if claim.scope is not None:
            self._budget.hold(claim.scope, claim.scope_wait, claim.scope_blocked_for)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Gate the budget's requests outside the rotation and report its news, until cancelled.

        A task of the engine's nursery: started (``nursery.start``) once the gate is in place,
        so no request the engine lets through afterwards goes around it; leaving gives every
        lease back.
        """
        self._budget.set_gate(self._gate)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._gate.run)
                nursery.start_soon(self._reporter)
                task_status.started()
        finally:
            self._budget.set_gate(None)

    async def send_reports(self) -> None:
        """Store the news not yet stored; one sender at a time, so that news stored before a
        turn is given back is in the database before the turn is."""
        async with self._reports_lock:
            reports, self._reports = self._reports, []
            if reports:
                await self._store.report_scopes(reports)

    def _heard(self, news: HostNews) -> None:
        """The budget learned something of a scope; the reporter tells the fleet."""
        ago = trio.current_time() - news.started_at
        self._reports.append(HostReport(news.scope, news.kind, news.seconds, ago))
        self._reported.set()

    async def _reporter(self) -> None:
        """Store the budget's news of its scopes, batched, as they come.

        A report that fails is logged and dropped: this instance's budget still holds the
        scope back, and the next event is reported again.
        """
        while True:
            await self._reported.wait()
            self._reported = trio.Event()
            try:
                await self.send_reports()
            except Exception as exc:
                self._failed("report_scopes", exc)
