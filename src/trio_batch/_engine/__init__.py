"""The engine's room: live jobs' turns, the workers that run them, and what they store.

``BatchEngine`` and ``open_engine`` (``_batch_engine``) admit, read, run the workers and store
outcomes the same way over every store. Where the turns come from is chosen once, in
``open_engine`` (``_turns``, the interface): the engine's own round robin (``_local_turns``,
over ``_rotation``: jobs in turn order, passed over while their hosts are at their budget) or a
fleet's claims (``_fleet_turns``: the claimer, ``_ahead`` how far it claims ahead, the fleet's
budgets ``_fleet_budget`` with the gate ``_gate`` for requests outside the rotation). Around
them: the engine's record of a live job (``_live``), what a crawl adds (``_crawling``: its
pages' options, the links a page found, its limit), what a failure becomes (``_outcomes``),
the finisher's in-order group pipeline
(``_groups``), storing a group through a store outage (``_storing``), what a retry runs again
(``_retry``) and the per-job watchers that followers wake on (``_watch``). Other rooms import
these names from here (or from ``trio_batch``), never from the modules behind them.
"""

from __future__ import annotations

from ._batch_engine import BatchEngine as BatchEngine, open_engine as open_engine
from ._crawling import SiteGuide as SiteGuide
from ._live import (
    EngineStatistics as EngineStatistics,
    FetchFunc as FetchFunc,
    WaitingTarget as WaitingTarget,
)
from ._watch import JobWatch as JobWatch

__all__ = [
    "BatchEngine",
    "EngineStatistics",
    "FetchFunc",
    "JobWatch",
    "SiteGuide",
    "WaitingTarget",
    "open_engine",
]
