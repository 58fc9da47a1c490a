"""The checkpointer thread: it copies the WAL back into the database beside the writer.

SQLite checkpoints on the committing connection by default (every 1,000 WAL pages): that
commit then copies every page and waits for two fsyncs, a few milliseconds in which the writer
thread commits nothing and every waiting write (an admission, a group of outcomes) waits too.
So the writer connection checkpoints only as a backstop (``_schema.BACKSTOP_PAGES``) and this
thread runs a PASSIVE checkpoint on a connection of its own every ``COMMITS_PER_CHECKPOINT``
commits; PASSIVE never blocks the writer, it copies what no reader still needs. Durability is the
same: the checkpoint syncs the database before the WAL is reused, as it did on the writer.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading

from ._schema import connect

_log = logging.getLogger("trio_batch")

# How often the writer asks for a checkpoint: a commit writes a few to a few dozen pages.
COMMITS_PER_CHECKPOINT = 64


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` in a thread of its own when asked."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._wanted = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(
            target=self._loop, name="trio-batch-sqlite-checkpoint", daemon=True
        )
        self._commits = 0

    def start(self) -> None:
        self._thread.start()

    def committed(self) -> None:
        """Called by the writer thread after each commit."""
        self._commits += 1
        if self._commits % COMMITS_PER_CHECKPOINT == 0:
            self._wanted.set()

    def stop(self) -> None:
        """End the thread (blocking; call from a thread)."""
        self._stopping = True
        self._wanted.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            conn = connect(self._path, readonly=False)
        except (sqlite3.Error, OSError) as exc:  # the writer's backstop checkpoints instead
            error = type(exc).__name__
            _log.warning("checkpoint failed with %s", error, extra={"error_type": error})
            return
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopping:
                    return
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # the writer's backstop checkpoints instead
                    error = type(exc).__name__
                    _log.warning("checkpoint failed with %s", error, extra={"error_type": error})
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
