"""The PostgreSQL store: several engines, in one process or many, over one database.

:class:`PostgresStore` keeps jobs in PostgreSQL so that any number of engines share one set of
jobs, with the same caps and idempotency as a single engine: admission runs in the
``admit_job`` SQL function behind an advisory lock, so the caps hold across every instance.

Three ideas carry the design, one module each:

- **Sync psycopg in threads, with cancels that reach the server** (``_threads``). psycopg 3's
  async API runs on asyncio only, so every database call runs the sync driver in a worker
  thread. A Trio cancel becomes a server-side cancel of the query (``cancel_safe``), and the
  task waits for the thread to hand its connection back: a thread holding a connection is
  never abandoned.
- **Group commit** (``_batch``, the queue and the writer task; ``_pipeline``, what runs in the
  writer's thread). Writes are queued to one writer task per store, which holds one
  connection and commits everything queued at once, as one pipeline of prepared statements
  (a group of outcomes is one statement). When the connection breaks it connects
  again and replays the batch; every write is idempotent on a replay. Once queued, a write is
  not cancellable; a cancel already pending means it is never queued; a call that gets no
  answer within ``call_timeout`` raises ``StoreError``.
- **Instances** (``_store``). Each open store is an instance that heartbeats a row in
  ``instances``; the live jobs of instances whose heartbeat stopped are failed
  (``interrupted``) by the others.

The rest: ``_schema`` (tables, migrations, advisory locks) and ``_sql`` (the statements and
queries, all sync). Operating it: ``docs/postgres.md``.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401 - imported to fail early, with the fix in the message
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'trio-batch[postgres]'"
    ) from exc

from ._store import PostgresStore as PostgresStore

__all__ = ["PostgresStore"]
