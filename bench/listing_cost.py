"""How fast ``GET /v1/batch`` is with 100,000 finished jobs, per store (a measurement).

    python -m bench.listing_cost [--jobs 100000] [--store memory sqlite postgres]

Fills a store with ``--jobs`` finished jobs of one caller (one target each; plus as many of
another caller), written straight into the tables for the SQL stores (admitting them one by
one would take minutes and measure admission, not listing), then times the store's
``list_jobs`` (median of 20) for: the first page of 50; a page of 500; a page deep in the
listing (by cursor, 90% down); ``status=live`` (none live); ``status=failed`` (1% of the jobs).
PostgreSQL needs ``TRIO_BATCH_TEST_PG``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from trio_batch import JobStatus, Result, Target, TargetState
from trio_batch.stores import Limits, MemoryStore, NewJob, Outcome, Store

if TYPE_CHECKING:
    from trio_batch.stores._postgres._schema import Conn

DONE = Outcome(TargetState.DONE, result_json=Result("ok").to_json())
FAILED = Outcome(TargetState.FAILED, error="gone")


def _rows(n: int, caller: str) -> tuple[list[tuple[str, str, str, float]], list[tuple[str, str]]]:
    jobs: list[tuple[str, str, str, float]] = []
    targets: list[tuple[str, str]] = []
    for i in range(n):
        job_id = f"{caller[0]}{i:09d}"
        status = "failed" if i % 100 == 0 else "done"
        created = 1_700_000_000.0 + i
        jobs.append((job_id, caller, status, created))
        targets.append((job_id, status))
    return jobs, targets


async def _fill_memory(store: MemoryStore, n: int) -> None:
    limits = Limits(ttl=1e12, targets_per_job=1, jobs_per_caller=1, jobs_total=1)
    for caller in ("alice", "bob"):
        for i in range(n):
            job_id = f"{caller[0]}{i:09d}"
            target = Target(f"https://x.test/{i}")
            await store.admit(NewJob(job_id, caller, "fleet", job_id, [target], 1.7e9 + i), limits)
            outcome = FAILED if i % 100 == 0 else DONE
            await store.finish_targets([(job_id, 0, outcome)], 1.7e9 + i, 10**12)


@asynccontextmanager
async def filled(kind: str, n: int) -> AsyncIterator[Store]:
    if kind == "memory":
        store = MemoryStore()
        await _fill_memory(store, n)
        yield store
        return
    if kind == "sqlite":
        from trio_batch.stores import SQLiteStore

        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteStore.open(Path(tmp) / "list.sqlite") as sqlite:

                def fill(conn: sqlite3.Connection) -> None:
                    for caller in ("alice", "bob"):
                        jobs, targets = _rows(n, caller)
                        conn.executemany(
                            "INSERT INTO jobs (id, caller, caller_class, key, status, "
                            "targets_total, targets_done, created_at, updated_at, lease) "
                            "VALUES (?, ?, 'fleet', ?, ?, 1, 1, ?, ?, ?)",
                            [(j, c, j, s, t, t, t) for j, c, s, t in jobs],
                        )
                        conn.executemany(
                            "INSERT INTO targets (job_id, idx, url, options, status) "
                            "VALUES (?, 0, 'https://x.test/', '{}', ?)",
                            targets,
                        )

                await sqlite._write(fill)
                yield sqlite
        return
    from tests.stores.postgres.support import open_test_store

    dsn = os.environ["TRIO_BATCH_TEST_PG"]
    async with open_test_store(dsn) as pg:

        def fill_pg(conn: Conn) -> None:
            with conn.cursor() as cur:
                for caller in ("alice", "bob"):
                    jobs, targets = _rows(n, caller)
                    with cur.copy(
                        "COPY jobs (id, caller, caller_class, key, status, targets_total, "
                        "targets_done, created_at, updated_at, lease, instance) FROM STDIN"
                    ) as copy:
                        for j, c, s, t in jobs:
                            copy.write_row((j, c, "fleet", j, s, 1, 1, t, t, t, "fill"))
                    with cur.copy(
                        "COPY targets (job_id, idx, url, options, status) FROM STDIN"
                    ) as copy:
                        for j, s in targets:
                            copy.write_row((j, 0, "https://x.test/", "{}", s))
            conn.commit()
            conn.execute("ANALYZE")

        await pg._run(fill_pg)
        yield pg


async def measure(kind: str, n: int) -> None:
    t0 = time.perf_counter()
    async with filled(kind, n) as store:
        fill = time.perf_counter() - t0
        first = await store.list_jobs("alice", None, 50, None)
        deep_page = await store.list_jobs("alice", None, 1, (1_700_000_000.0 + n // 10, "z"))
        deep = (deep_page[0].job.created_at, deep_page[0].job.id)
        cases = {
            "first page of 50": ("alice", None, 50, None),
            "a page of 500": ("alice", None, 500, None),
            "page of 50, 90% down": ("alice", None, 50, deep),
            "status=live (none)": ("alice", [JobStatus.QUEUED, JobStatus.RUNNING], 50, None),
            "status=failed (1%)": ("alice", [JobStatus.FAILED], 50, None),
        }
        print(f"{kind}: {n:,} finished jobs of alice (+{n:,} of bob), filled in {fill:.1f} s")
        assert [s.job.id for s in first] == [f"a{i:09d}" for i in range(n - 1, n - 51, -1)]
        for name, (caller, statuses, limit, before) in cases.items():
            times = []
            for _ in range(20):
                s0 = time.perf_counter()
                page = await store.list_jobs(caller, statuses, limit, before)
                times.append(time.perf_counter() - s0)
            print(
                f"  {name:<24} {len(page):>4} jobs  median {statistics.median(times) * 1e3:7.2f} ms"
                f"  max {max(times) * 1e3:7.2f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--store", nargs="+", default=["memory", "sqlite", "postgres"])
    args = parser.parse_args()
    for kind in args.store:
        if kind == "postgres" and not os.environ.get("TRIO_BATCH_TEST_PG"):
            print("postgres: skipped (set TRIO_BATCH_TEST_PG)")
            continue
        trio.run(measure, kind, args.jobs)


if __name__ == "__main__":
    main()
