"""The SQLite store: one file, one process, group commit through one writer thread.

Write path: every write is a small function queued to a single writer thread, which owns the
write connection (``_writer``). The thread takes everything queued, runs it in one transaction,
commits once, and wakes all the waiting Trio tasks with one ``run_sync_soon``. A write returns
only after its commit. Reads run in worker threads on their own connections; WAL lets them
proceed while the writer commits. ``_schema`` holds the versions and the one-writer lock,
``_sql`` the statements of each operation, ``_store`` the ``SQLiteStore`` that ties them.
"""

from __future__ import annotations

from ._store import SQLiteStore as SQLiteStore

__all__ = ["SQLiteStore"]
