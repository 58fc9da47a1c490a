"""The engine's room: the rotation of live jobs, its workers, and what they store.

``BatchEngine`` and ``open_engine`` (``_batch_engine``) with the engine's record of a live job
(``_live``), the finisher's in-order group pipeline (``_groups``), storing a group through a
store outage (``_storing``), what a retry runs again (``_retry``) and the per-job watchers that
followers wake on (``_watch``). Other rooms import these names from here (or from
``trio_batch``), never from the modules behind them.
"""

from __future__ import annotations

from ._batch_engine import BatchEngine as BatchEngine, open_engine as open_engine
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
    "WaitingTarget",
    "open_engine",
]
