"""trio-batch: fair, durable batch jobs on Trio.

A caller submits a job (a list of targets); a few worker tasks drain the live jobs in rotation,
one target of a job at a time, and every outcome lands in a store. See SPEC §2 for the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._util import import_public as _import_public

if TYPE_CHECKING:
    from ._budget import (
        HostBlocked as HostBlocked,
        HostBudget as HostBudget,
        HostSlot as HostSlot,
        Waiting as Waiting,
    )
    from ._config import Config as Config, Hooks as Hooks
    from ._crawl import CrawlInfo as CrawlInfo, CrawlSpec as CrawlSpec
    from ._engine import (
        BatchEngine as BatchEngine,
        EngineStatistics as EngineStatistics,
        FetchFunc as FetchFunc,
        JobWatch as JobWatch,
        SiteGuide as SiteGuide,
        WaitingTarget as WaitingTarget,
        open_engine as open_engine,
    )
    from ._errors import (
        Busy as Busy,
        CallerBusy as CallerBusy,
        Error as Error,
        NoTargets as NoTargets,
        NotRetryable as NotRetryable,
        RetryLater as RetryLater,
        StoreError as StoreError,
        SubmitError as SubmitError,
        TargetError as TargetError,
        TooManyTargets as TooManyTargets,
    )
    from ._model import (
        Caller as Caller,
        Job as Job,
        JobStatus as JobStatus,
        Options as Options,
        Result as Result,
        Snapshot as Snapshot,
        Submitted as Submitted,
        Target as Target,
        TargetState as TargetState,
        TargetStatus as TargetStatus,
        Webhook as Webhook,
    )

_WHERE: dict[str, str] = {
    "HostBlocked": "._budget",
    "HostBudget": "._budget",
    "HostSlot": "._budget",
    "Waiting": "._budget",
    "Config": "._config",
    "Hooks": "._config",
    "CrawlInfo": "._crawl",
    "CrawlSpec": "._crawl",
    "BatchEngine": "._engine",
    "EngineStatistics": "._engine",
    "FetchFunc": "._engine",
    "JobWatch": "._engine",
    "SiteGuide": "._engine",
    "WaitingTarget": "._engine",
    "open_engine": "._engine",
    "Busy": "._errors",
    "CallerBusy": "._errors",
    "Error": "._errors",
    "NoTargets": "._errors",
    "NotRetryable": "._errors",
    "RetryLater": "._errors",
    "StoreError": "._errors",
    "SubmitError": "._errors",
    "TargetError": "._errors",
    "TooManyTargets": "._errors",
    "Caller": "._model",
    "Job": "._model",
    "JobStatus": "._model",
    "Options": "._model",
    "Result": "._model",
    "Snapshot": "._model",
    "Submitted": "._model",
    "Target": "._model",
    "TargetState": "._model",
    "TargetStatus": "._model",
    "Webhook": "._model",
}
"""Where each public name lives. A name is imported on first use (PEP 562), with the other
names of its module: a shaping worker process unpickles ``trio_batch.Options`` and imports the
extraction code, and importing the engine, the stores and Trio there too took 0.16 of the
0.22 s its fork server spent starting, which the first page of every run waited for."""

__version__ = "0.1.0.dev0"

__all__ = [
    "BatchEngine",
    "Busy",
    "Caller",
    "CallerBusy",
    "Config",
    "CrawlInfo",
    "CrawlSpec",
    "EngineStatistics",
    "Error",
    "FetchFunc",
    "Hooks",
    "HostBlocked",
    "HostBudget",
    "HostSlot",
    "Job",
    "JobStatus",
    "JobWatch",
    "NoTargets",
    "NotRetryable",
    "Options",
    "Result",
    "RetryLater",
    "SiteGuide",
    "Snapshot",
    "StoreError",
    "SubmitError",
    "Submitted",
    "Target",
    "TargetError",
    "TargetState",
    "TargetStatus",
    "TooManyTargets",
    "Waiting",
    "WaitingTarget",
    "Webhook",
    "open_engine",
]


def __getattr__(name: str) -> object:
    """A public name on first use, with the other names of its module."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _import_public(__name__, globals(), _WHERE, [n for n, w in _WHERE.items() if w == where])
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
