"""What every benchmark shares: sizes, figures, stores, fakes and the read-back check.

The workloads (``bench/workloads.py``), the report (``bench/report.py``), the command
(``bench/run.py``) and the peer comparison (``bench/peers.py``) all build on these pieces, and
none of them depends on another's, so they live apart from all four:

- :class:`Settings` and its three sizes (``FULL`` as the issue states, ``QUICK``, ``TINY``);
- :class:`Figure`, one measured quantity with every repeat, and :func:`find`/:func:`percentile`;
- :func:`open_bench_store`, a fresh store of a kind, removed afterwards (named apart from the
  CLI's ``open_store``, which opens a user's database);
- :class:`TerminalCounter`, :func:`targets_for`, :func:`chunked` and :func:`caps`, the pieces a
  workload is built from;
- the fetch fakes (:func:`noop_fetch`, :func:`sleep_fetch`) and :func:`check_readable`, which
  stops a clock only once the last result can be read back.
"""

from __future__ import annotations

import math
import os
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import trio

from trio_batch import Caller, Config, Hooks, Result, Snapshot, Target, TargetState
from trio_batch.stores import MemoryStore, SQLiteStore, Store

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOCS_PLOT = HERE.parent / "docs" / "benchmarks.png"
TERMINAL = frozenset({"done", "partial", "failed", "cancelled"})
RESULT = Result("x" * 200)  # the 200-byte result of W1, W4 and W5
PG_ENV = "TRIO_BATCH_TEST_PG"


def log(msg: str) -> None:
    """A progress line on stderr, so that stdout holds only the table."""
    print(msg, file=sys.stderr, flush=True)


# -- a child command's whole cost ----------------------------------------------------------------


def adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux's child subreaper).

    A ``trio-batch`` command's shaping workers are forked by multiprocessing's fork server, a
    child of the command that outlives it by a moment: ``wait4`` of the command alone misses
    their CPU and memory. Adopted here, they are waited by :func:`reap_orphans` and counted.
    Elsewhere than Linux nothing is adopted (and nothing more is counted).
    """
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap_orphans(keep: set[int], seconds: float = 10.0) -> tuple[float, int]:
    """Wait (``seconds`` at most) for every child of this process but ``keep`` (what it
    started itself and still needs) to end: (their CPU seconds, the largest peak RSS in
    bytes), their own descendants' included."""
    cpu, peak = 0.0, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        orphans = children_of(os.getpid()) - keep
        if not orphans:
            break
        for pid in orphans:
            try:
                _, _, usage = os.wait4(pid, 0)
            except ChildProcessError:
                continue
            cpu += usage.ru_utime + usage.ru_stime
            peak = max(peak, usage.ru_maxrss * 1024)  # KiB on Linux
    return cpu, peak


def children_of(parent: int) -> set[int]:
    """The processes whose parent is ``parent`` (Linux; elsewhere none)."""
    found = set()
    for entry in os.listdir("/proc") if sys.platform == "linux" else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.add(int(entry))
            except OSError:
                continue
    return found


# -- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The sizes of every workload; ``FULL`` is what the issue states."""

    workers: int = 2
    w1_targets: int = 2000
    w1_job_size: int = 20
    w1_repeats: int = 5
    w2_targets: int = 400
    w2_sleep: float = 0.020
    w2_job_size: int = 20
    w2_repeats: int = 3
    w3_big_jobs: int = 8
    w3_big_targets: int = 32
    w3_duration: float = 0.010
    w3_samples: int = 200
    w3_repeats: int = 3
    w4_sizes: tuple[int, ...] = (10, 100, 1000, 10000)
    w4_job_size: int = 4
    w4_min_targets: int = 4000
    w4_repeats: int = 3
    w5_job_size: int = 32
    w5_targets: int = 2000
    w5_readers: int = 2
    w5_repeats: int = 3
    w6_followers: int = 200
    w6_targets: int = 100
    w6_wave: int = 50
    w6_repeats: int = 3


FULL = Settings()
QUICK = Settings(
    w1_repeats=2,
    w2_targets=100,
    w2_repeats=1,
    w3_samples=40,
    w3_repeats=1,
    w4_sizes=(10, 100, 1000),
    w4_min_targets=1000,
    w4_repeats=1,
    w5_targets=500,
    w5_repeats=1,
    w6_repeats=1,
)
TINY = Settings(
    w1_targets=200,
    w1_repeats=1,
    w2_targets=20,
    w2_sleep=0.005,
    w2_job_size=5,
    w2_repeats=1,
    w3_big_jobs=2,
    w3_big_targets=8,
    w3_duration=0.005,
    w3_samples=5,
    w3_repeats=1,
    w4_sizes=(10, 40),
    w4_min_targets=80,
    w4_repeats=1,
    w5_targets=200,
    w5_repeats=1,
    w6_followers=20,
    w6_targets=10,
    w6_wave=10,
    w6_repeats=1,
)


# -- figures --------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured quantity: its value in every repeat and what it means."""

    workload: str
    store: str
    system: str
    name: str
    unit: str
    values: list[float]
    higher_is_better: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "store": self.store,
            "system": self.system,
            "name": self.name,
            "unit": self.unit,
            "values": self.values,
            "min": min(self.values),
            "median": self.median,
            "max": max(self.values),
            "higher_is_better": self.higher_is_better,
            **({"extra": self.extra} if self.extra else {}),
        }


def find(figures: Sequence[Figure], workload: str, store: str, system: str, name: str) -> Figure:
    """The figure with these keys (``KeyError`` if the run did not make it)."""
    for fig in figures:
        if (fig.workload, fig.store, fig.system, fig.name) == (workload, store, system, name):
            return fig
    raise KeyError((workload, store, system, name))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


# -- stores ---------------------------------------------------------------------------------------


def postgres_skip_reason(dsn: str) -> str | None:
    """Why the PostgreSQL rows cannot run, or None when they can."""
    if not dsn:
        return f"PostgresStore rows skipped: no DSN (set {PG_ENV} or pass --pg DSN)"
    try:
        from trio_batch.stores import PostgresStore  # noqa: F401
    except (ImportError, AttributeError) as exc:
        return f"PostgresStore rows skipped: trio_batch.stores.PostgresStore is not there ({exc})"
    return None


@asynccontextmanager
async def open_bench_store(kind: str, workdir: str, pg_dsn: str = "") -> AsyncIterator[Store]:
    """A fresh store of ``kind`` (``memory``, ``sqlite`` or ``postgres``), removed on exit."""
    if kind == "memory":
        yield MemoryStore()
    elif kind == "sqlite":
        path = os.path.join(workdir, f"bench-{secrets.token_hex(6)}.sqlite")
        try:
            async with SQLiteStore.open(path) as sqlite_store:
                yield sqlite_store
        finally:
            remove_sqlite_files(path)
    elif kind == "postgres":
        from trio_batch.stores import PostgresStore

        schema = f"tb_bench_{secrets.token_hex(6)}"  # a fresh schema per run, dropped after
        try:
            async with PostgresStore.open(pg_dsn, schema=schema) as pg_store:
                yield pg_store
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(drop_pg_schema, pg_dsn, schema)
    else:
        raise ValueError(f"unknown store kind {kind!r}: use memory, sqlite or postgres")


def drop_pg_schema(dsn: str, schema: str) -> None:
    """Drop a benchmark's PostgreSQL schema and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def remove_sqlite_files(path: str) -> None:
    """Delete a SQLite database and its companions (WAL, shared memory, the store's lock)."""
    for suffix in ("", "-wal", "-shm", "-lock"):
        Path(path + suffix).unlink(missing_ok=True)


def commit_statistics(store: Store) -> tuple[int, int] | None:
    """``(commits, writes)`` of a store that counts them."""
    stats = getattr(store, "commit_statistics", None)
    return None if stats is None else cast("tuple[int, int]", stats())


# -- workload pieces ------------------------------------------------------------------------------


class TerminalCounter:
    """A ``Hooks.job`` observer that sets an event once ``expected`` jobs are terminal."""

    def __init__(self) -> None:
        self.count = 0
        self.expected = math.inf
        self.event = trio.Event()

    def expect(self, n: int) -> trio.Event:
        """Reset and wait for ``n`` more terminal jobs."""
        self.count = 0
        self.expected = n
        self.event = trio.Event()
        return self.event

    def __call__(self, event: str) -> None:
        if event in TERMINAL:
            self.count += 1
            if self.count >= self.expected:
                self.event.set()


def targets_for(tag: str, n: int) -> list[Target]:
    """``n`` targets with distinct URLs (so no submit is taken for an idempotent repeat)."""
    return [Target(f"https://bench.invalid/{tag}/{i}") for i in range(n)]


def chunked(targets: list[Target], size: int) -> list[list[Target]]:
    """``targets`` cut into jobs of ``size`` (the last one may be shorter)."""
    return [targets[i : i + size] for i in range(0, len(targets), size)]


def caps(live: int, targets_per_job: int, hooks: Hooks, workers: int) -> Config:
    """A config whose caps admit ``live`` jobs from one caller."""
    return Config(
        workers=workers,
        max_workers=workers,
        jobs_total=live,
        jobs_per_caller=live,
        targets_per_job=targets_per_job,
        hooks=hooks,
    )


async def noop_fetch(caller: Caller, target: Target) -> Result:
    """Return the 200-byte result at once."""
    return RESULT


def sleep_fetch(seconds: float) -> Callable[[Caller, Target], Awaitable[Result]]:
    """A fetch that sleeps ``seconds`` (an I/O-bound target) and returns the 200-byte result."""

    async def fetch(caller: Caller, target: Target) -> Result:
        await trio.sleep(seconds)
        return RESULT

    return fetch


async def check_readable(read: Callable[[], Awaitable[Snapshot | None]], expected: int) -> None:
    """Read the last job back and check that every one of its results is there."""
    snap = await read()
    if snap is None or len(snap.targets) != expected:
        raise RuntimeError("the last job could not be read back")
    if any(t.status is not TargetState.DONE or t.result is None for t in snap.targets):
        raise RuntimeError("the last job was read back without all its results")
