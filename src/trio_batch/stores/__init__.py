"""Where jobs and their outcomes are kept.

``MemoryStore`` (tests, one process), ``SQLiteStore`` (the default: one file, one process) and
``PostgresStore`` (several processes over one database; needs ``trio-batch[postgres]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._memory import MemoryStore as MemoryStore
from ._protocol import (
    CacheEntry as CacheEntry,
    Limits as Limits,
    NewJob as NewJob,
    Outcome as Outcome,
    Store as Store,
    Stored as Stored,
)
from ._sqlite import SQLiteStore as SQLiteStore

if TYPE_CHECKING:
    from ._postgres import PostgresStore as PostgresStore

__all__ = [
    "CacheEntry",
    "Limits",
    "MemoryStore",
    "NewJob",
    "Outcome",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "Stored",
]


def __getattr__(name: str) -> object:
    if name == "PostgresStore":
        from ._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
