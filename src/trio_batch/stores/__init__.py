"""Where jobs and their outcomes are kept.

``MemoryStore`` (tests, one process), ``SQLiteStore`` (the default: one file, one process) and
``PostgresStore`` (several processes over one database; needs ``trio-batch[postgres]``).

The SQL stores load on first use, so ``import trio_batch`` needs neither ``sqlite3`` nor the
POSIX-only ``fcntl`` (SQLiteStore locks its file with it) nor psycopg.

The protocols say who needs what: ``Store`` the engine and its reads, ``ResponseCache`` the web
fetcher's cache, ``WebhookOutbox`` the webhook dispatcher, ``ServiceStore`` all three (the
service). Every backend here implements all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._util import fixup_module_metadata as _fixup_module_metadata, import_public as _import_public
from ._memory import MemoryStore as MemoryStore
from ._protocol import (
    CacheEntry as CacheEntry,
    Claim as Claim,
    ClaimAsk as ClaimAsk,
    ClaimRider as ClaimRider,
    FinishItem as FinishItem,
    FleetStore as FleetStore,
    HookDue as HookDue,
    HostReport as HostReport,
    HostRules as HostRules,
    JobCursor as JobCursor,
    JobSummary as JobSummary,
    Limits as Limits,
    NewJob as NewJob,
    Outcome as Outcome,
    ResponseCache as ResponseCache,
    ResumedJob as ResumedJob,
    ServiceStore as ServiceStore,
    Store as Store,
    Stored as Stored,
    WebhookOutbox as WebhookOutbox,
)

if TYPE_CHECKING:
    from ._postgres import PostgresStore as PostgresStore
    from ._sqlite import SQLiteStore as SQLiteStore

# PostgresStore is left out of __all__ so that `from trio_batch.stores import *` works without
# psycopg; `from trio_batch.stores import PostgresStore` names the extra to install.
__all__ = [
    "CacheEntry",
    "Claim",
    "ClaimAsk",
    "ClaimRider",
    "FinishItem",
    "FleetStore",
    "HookDue",
    "HostReport",
    "HostRules",
    "JobCursor",
    "JobSummary",
    "Limits",
    "MemoryStore",
    "NewJob",
    "Outcome",
    "ResponseCache",
    "ResumedJob",
    "SQLiteStore",
    "ServiceStore",
    "Store",
    "Stored",
    "WebhookOutbox",
]

_LAZY = {"SQLiteStore": "._sqlite", "PostgresStore": "._postgres"}

_fixup_module_metadata(__name__, {**globals(), "__all__": [n for n in __all__ if n not in _LAZY]})


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _import_public(__name__, globals(), _LAZY, [name])
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
