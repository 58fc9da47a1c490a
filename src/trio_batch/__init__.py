"""trio-batch: fair, durable batch jobs on Trio.

A caller submits a job (a list of targets); a few worker tasks drain the live jobs in rotation,
one target of a job at a time, and every outcome lands in a store. See SPEC §2 for the API.
"""

from __future__ import annotations

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
from ._util import fixup_module_metadata as _fixup_module_metadata

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

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
