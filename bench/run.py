"""Benchmarks W1-W5 of trio-batch, each beside a bare baseline, in one reproducible run.

Run ``python -m bench.run`` (the full set, a few minutes) or ``python -m bench.run --quick``
(under a minute); ``nox -s bench`` does the same in a fresh environment. The run prints a table
and writes ``bench/results/latest.json`` (machine, versions, every figure with min/median/max over
its repeats), ``bench/results/latest.md`` (the table in Markdown) and ``bench/results/latest.png``
(the plot). Everything is timed in real time (``trio.run`` without a mock clock).

Workloads (issue 6), each on ``MemoryStore``, ``SQLiteStore`` (a file in a temporary directory,
default durability) and ``PostgresStore`` when it is importable and a DSN is given
(``--pg DSN`` or ``TRIO_BATCH_TEST_PG``):

- W1 noop durable: 2,000 targets in jobs of 20, 2 workers, a fetch that returns a 200-byte
  result at once; wall time from the first submit until the last result is committed and
  readable (``Hooks.job`` counts the terminal jobs, then the last job is read back); targets/s.
- W2 I/O-bound: 400 targets each sleeping 20 ms, 2 workers; efficiency = ideal / wall time.
- W3 fairness: one caller keeps 8 jobs of 32 slow targets live; another submits 1-target jobs
  now and then; p50/p99 of the small job's submit-to-done time in target durations, against
  the round-robin bound (live jobs / workers + 1).
- W4 scale: 10 ... 10,000 live jobs of 4 noop targets: time per target and Python heap per
  live job at each size, and the ratio of the largest size to the smallest.
- W5 status reads: ``status`` of a finished 32-target job, reads/s, while W1 runs.

The baseline runs W1 and W2 with a Trio memory channel, 2 worker tasks and exactly the store's
write path (admit, ``start_target`` awaited, ``finish_target`` in the background and the job
re-queued once it is committed: the engine's own schedule), so engine/baseline is the engine's
overhead and nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import math
import os
import platform
import random
import secrets
import shlex
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import trio

import trio_batch
from trio_batch import Caller, Config, Hooks, Result, Target, TargetState, open_engine
from trio_batch.stores import MemoryStore, SQLiteStore, Store
from trio_batch.stores._protocol import Limits, NewJob, Outcome, Stored

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOCS_PLOT = HERE.parent / "docs" / "benchmarks.png"
TERMINAL = frozenset({"done", "partial", "failed", "cancelled"})
RESULT = Result("x" * 200)  # the 200-byte result of W1, W4 and W5
PG_ENV = "TRIO_BATCH_TEST_PG"


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
async def open_store(kind: str, workdir: str, pg_dsn: str = "") -> AsyncIterator[Store]:
    """A fresh store of ``kind`` (``memory``, ``sqlite`` or ``postgres``)."""
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


async def check_readable(read: Callable[[], Awaitable[Any]], expected: int) -> None:
    """Read the last job back and check that every one of its results is there."""
    snap = await read()
    if snap is None or len(snap.targets) != expected:
        raise RuntimeError("the last job could not be read back")
    if any(t.status is not TargetState.DONE or t.result is None for t in snap.targets):
        raise RuntimeError("the last job was read back without all its results")


# -- W1 / W2 / W5 on the engine -----------------------------------------------------------------


@dataclass
class DrainRun:
    """One timed drain: wall time and what went with it."""

    seconds: float
    targets: int
    commits: int = 0
    writes: int = 0
    reads: int = 0


async def engine_drain(
    kind: str,
    workdir: str,
    pg_dsn: str,
    *,
    n_targets: int,
    job_size: int,
    fetch: Callable[[Caller, Target], Awaitable[Result]],
    workers: int,
    readers: int = 0,
    read_job_size: int = 32,
) -> DrainRun:
    """Submit ``n_targets`` in jobs of ``job_size`` and time until the last result is readable.

    With ``readers`` > 0, a finished ``read_job_size``-target job is made first and that many
    tasks read its status in a loop while the drain runs (W5).
    """
    jobs = chunked(targets_for("w1", n_targets), job_size)
    counter = TerminalCounter()
    config = caps(len(jobs) + 1, max(job_size, read_job_size), Hooks(job=counter), workers)
    caller = Caller("bench")
    async with (
        open_store(kind, workdir, pg_dsn) as store,
        open_engine(store, fetch, config) as engine,
    ):
        read_id = ""
        if readers:
            done = counter.expect(1)
            read_id = (
                await engine.submit(Caller("reader"), "fleet", targets_for("w5", read_job_size))
            ).id
            await done.wait()
        before = commit_statistics(store) or (0, 0)
        reads = 0
        stop = False

        async def reader() -> None:
            nonlocal reads
            while not stop:
                snap = await engine.status(read_id)
                assert snap is not None
                reads += 1

        async with trio.open_nursery() as nursery:
            for _ in range(readers):
                nursery.start_soon(reader)
            finished = counter.expect(len(jobs))
            t0 = trio.current_time()
            last = ""
            for targets in jobs:
                last = (await engine.submit(caller, "fleet", targets)).id
            await finished.wait()
            await check_readable(lambda: engine.status(last), len(jobs[-1]))
            seconds = trio.current_time() - t0
            stop = True
        after = commit_statistics(store) or (0, 0)
    return DrainRun(seconds, n_targets, after[0] - before[0], after[1] - before[1], reads=reads)


# -- the bare baseline ----------------------------------------------------------------------------


class _BareJob:
    __slots__ = ("id", "next_idx", "targets")

    def __init__(self, job_id: str, targets: list[Target]) -> None:
        self.id = job_id
        self.targets = targets
        self.next_idx = 0


async def baseline_drain(
    kind: str,
    workdir: str,
    pg_dsn: str,
    *,
    n_targets: int,
    job_size: int,
    fetch: Callable[[Caller, Target], Awaitable[Result]],
    workers: int,
) -> DrainRun:
    """The bare minimum doing the same durable work as the engine, through the same store.

    A Trio memory channel of jobs and ``workers`` tasks. A worker awaits ``start_target``
    (``running``), fetches, and hands ``finish_target`` (``done`` with the result) to a
    background task that re-queues the job once the write is committed: the engine's schedule
    without its bookkeeping (no hooks, caps checks in Python, idempotency keys or statistics).
    """
    jobs = chunked(targets_for("w1", n_targets), job_size)
    limits = Limits(
        ttl=24 * 3600, targets_per_job=job_size, jobs_per_caller=len(jobs), jobs_total=len(jobs)
    )
    caller = Caller("bench")
    max_bytes = 64 * 2**20
    async with open_store(kind, workdir, pg_dsn) as store:
        before = commit_statistics(store) or (0, 0)
        send, recv = trio.open_memory_channel[_BareJob](math.inf)
        remaining = len(jobs)
        all_done = trio.Event()

        async def finish(job: _BareJob, idx: int, outcome: Outcome) -> None:
            nonlocal remaining
            stored = await store.finish_target(job.id, idx, outcome, time.time(), max_bytes)
            job.next_idx = idx + 1
            if stored.terminal is not None:
                remaining -= 1
                if remaining == 0:
                    all_done.set()
            else:
                send.send_nowait(job)

        async def worker(nursery: trio.Nursery) -> None:
            async for job in recv:
                idx = job.next_idx
                await store.start_target(job.id, idx, time.time())
                result = await fetch(caller, job.targets[idx])
                outcome = Outcome(TargetState.DONE, result_json=result.to_json())
                nursery.start_soon(finish, job, idx, outcome)

        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(worker, nursery)
            t0 = trio.current_time()
            last = ""
            for targets in jobs:
                new = NewJob(
                    id=secrets.token_hex(16),
                    caller=caller.name,
                    caller_class="fleet",
                    key=secrets.token_hex(32),
                    targets=targets,
                    now=time.time(),
                )
                await store.admit(new, limits)
                last = new.id
                send.send_nowait(_BareJob(new.id, targets))
            await all_done.wait()
            await check_readable(lambda: store.snapshot(last), len(jobs[-1]))
            seconds = trio.current_time() - t0
            nursery.cancel_scope.cancel()
        after = commit_statistics(store) or (0, 0)
    return DrainRun(seconds, n_targets, after[0] - before[0], after[1] - before[1])


async def floor_drain(
    n_targets: int, fetch: Callable[[Caller, Target], Awaitable[Result]], workers: int
) -> float:
    """W2's floor: a memory channel of targets and ``workers`` tasks, no store; wall seconds.

    What the machine's timers allow: ``trio.sleep`` overshoots by the epoll timeout's
    millisecond rounding and the wake-up latency, which no engine can win back.
    """
    send, recv = trio.open_memory_channel[Target](math.inf)
    for target in targets_for("floor", n_targets):
        send.send_nowait(target)
    send.close()
    caller = Caller("bench")

    async def worker() -> None:
        async for target in recv:
            await fetch(caller, target)

    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker)
    return trio.current_time() - t0


# -- W3 fairness ----------------------------------------------------------------------------------


class _WatchedStore:
    """A store proxy that reports the moment each job's last outcome is committed."""

    def __init__(self, inner: Store, on_terminal: Callable[[str], None]) -> None:
        self._inner = inner
        self._on_terminal = on_terminal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        stored = await self._inner.finish_target(job_id, idx, outcome, now, max_bytes)
        if stored.terminal is not None:
            self._on_terminal(job_id)
        return stored


async def fairness_run(
    kind: str, workdir: str, pg_dsn: str, s: Settings, seed: int
) -> tuple[list[float], float]:
    """W3: the small caller's submit-to-done times in seconds, and one target's duration.

    A target's duration is the median of what ``Hooks.target`` reports (the fetch's own time:
    the nominal sleep plus the timer's overshoot), so the bound measures the rotation only.
    """
    d = s.w3_duration
    durations: list[float] = []
    rng = random.Random(seed)
    done_at: dict[str, float] = {}
    waiting: dict[str, trio.Event] = {}
    big_ids: set[str] = set()
    big_send, big_recv = trio.open_memory_channel[str](math.inf)

    def on_terminal(job_id: str) -> None:
        done_at[job_id] = trio.current_time()
        if (event := waiting.pop(job_id, None)) is not None:
            event.set()
        if job_id in big_ids:
            big_send.send_nowait(job_id)

    def on_target(error: BaseException | None, seconds: float, size: int) -> None:
        durations.append(seconds)

    config = caps(s.w3_big_jobs + 1, s.w3_big_targets, Hooks(target=on_target), s.workers)
    big, small = Caller("big"), Caller("small")
    samples: list[float] = []
    async with open_store(kind, workdir, pg_dsn) as inner:
        store = cast("Store", _WatchedStore(inner, on_terminal))
        async with open_engine(store, sleep_fetch(d), config) as engine:
            serial = 0

            async def submit_big() -> None:
                nonlocal serial
                serial += 1
                sub = await engine.submit(
                    big, "fleet", targets_for(f"big{serial}", s.w3_big_targets)
                )
                big_ids.add(sub.id)

            async def keep_big_live() -> None:
                async for job_id in big_recv:
                    big_ids.discard(job_id)
                    await submit_big()

            async with trio.open_nursery() as nursery:
                for _ in range(s.w3_big_jobs):
                    await submit_big()
                nursery.start_soon(keep_big_live)
                await trio.sleep(2 * d)  # let the rotation reach its steady state
                for i in range(s.w3_samples):
                    await trio.sleep(rng.uniform(0, 3 * d))
                    t0 = trio.current_time()
                    sub = await engine.submit(small, "fleet", targets_for(f"small{i}", 1))
                    if sub.id not in done_at:
                        event = waiting[sub.id] = trio.Event()
                        await event.wait()
                    samples.append(done_at[sub.id] - t0)
                nursery.cancel_scope.cancel()
    return samples, statistics.median(durations)


# -- W4 scale -------------------------------------------------------------------------------------


@dataclass
class ScaleRun:
    seconds: float
    targets: int
    heap_bytes_per_job: float | None = None


async def scale_run(
    kind: str, workdir: str, pg_dsn: str, s: Settings, live: int, *, measure_memory: bool
) -> ScaleRun:
    """W4: hold ``live`` jobs of ``w4_job_size`` noop targets live, then time their drain.

    The fetch waits on a gate until every job of the round is submitted, so exactly ``live``
    jobs are live when the clock starts; rounds repeat until ``w4_min_targets`` were timed.
    With ``measure_memory`` the first round's submits run under tracemalloc (stopped before the
    clock starts) to report the Python heap that the engine and the store hold per live job
    (SQLite's own page cache is not Python heap).
    """
    rounds = max(1, math.ceil(s.w4_min_targets / (live * s.w4_job_size)))
    counter = TerminalCounter()
    gate = [trio.Event()]

    async def gated_fetch(caller: Caller, target: Target) -> Result:
        if not gate[0].is_set():
            await gate[0].wait()
        return RESULT

    config = caps(live, s.w4_job_size, Hooks(job=counter), s.workers)
    caller = Caller("bench")
    seconds = 0.0
    per_job: float | None = None
    async with (
        open_store(kind, workdir, pg_dsn) as store,
        open_engine(store, gated_fetch, config) as engine,
    ):
        for r in range(rounds):
            jobs = chunked(targets_for(f"w4r{r}", live * s.w4_job_size), s.w4_job_size)
            gate[0] = trio.Event()
            finished = counter.expect(live)
            if measure_memory and r == 0:
                gc.collect()
                tracemalloc.start()
                heap_before = tracemalloc.get_traced_memory()[0]
            pending = iter(jobs)

            async def submitter() -> None:
                for targets in pending:  # noqa: B023 - shared iterator, on purpose
                    await engine.submit(caller, "fleet", targets)

            async with trio.open_nursery() as nursery:  # 32 concurrent submitters
                for _ in range(min(32, live)):
                    nursery.start_soon(submitter)
            if measure_memory and r == 0:
                gc.collect()
                heap_after = tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
                per_job = (heap_after - heap_before) / live
            t0 = trio.current_time()
            gate[0].set()
            await finished.wait()
            seconds += trio.current_time() - t0
    return ScaleRun(seconds, rounds * live * s.w4_job_size, per_job)


# -- machine and versions -------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory": mem,
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def versions() -> dict[str, str]:
    out = {
        "trio_batch": trio_batch.__version__,
        "trio": trio.__version__,
        "sqlite": sqlite3.sqlite_version,
    }
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        out["git"] = commit + ("+dirty src" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port`` (loopback only)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


# -- the run --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


ALL_WORKLOADS = frozenset({"W1", "W2", "W3", "W4", "W5"})


def run_w1_w2(
    kinds: Sequence[str],
    workdir: str,
    pg_dsn: str,
    s: Settings,
    *,
    baseline: bool = True,
    only: frozenset[str] = ALL_WORKLOADS,
) -> list[Figure]:
    """W1 and W2 on the engine and (with ``baseline``) the bare baseline, per store.

    The engine's and the baseline's repeats alternate, so a neighbour's load on the machine
    falls on both alike and their ratio stays meaningful.
    """
    figures: list[Figure] = []
    systems: list[tuple[str, Callable[..., Awaitable[DrainRun]]]] = [("trio-batch", engine_drain)]
    if baseline:
        systems.append(("baseline", baseline_drain))
    ideal = s.w2_targets * s.w2_sleep / s.workers
    if "W2" in only and baseline:
        floor = [
            ideal / trio.run(floor_drain, s.w2_targets, sleep_fetch(s.w2_sleep), s.workers)
            for _ in range(s.w2_repeats)
        ]
        figures.append(Figure("W2", "none", "floor", "efficiency", "ideal/wall", floor))
        log(f"W2 {'none':8} {'floor':10} {figures[-1].median:10.3f} efficiency")
    for kind in kinds:
        if "W1" in only:
            w1: dict[str, list[DrainRun]] = {name: [] for name, _ in systems}
            for _ in range(s.w1_repeats):
                for name, drain in systems:
                    w1[name].append(
                        trio.run(
                            functools.partial(
                                drain,
                                kind,
                                workdir,
                                pg_dsn,
                                n_targets=s.w1_targets,
                                job_size=s.w1_job_size,
                                fetch=noop_fetch,
                                workers=s.workers,
                            )
                        )
                    )
            for name, runs in w1.items():
                extra: dict[str, Any] = {}
                if runs[0].commits:
                    extra["writes_per_commit"] = [r.writes / r.commits for r in runs]
                values = [r.targets / r.seconds for r in runs]
                figures.append(
                    Figure("W1", kind, name, "throughput", "targets/s", values, extra=extra)
                )
                log(f"W1 {kind:8} {name:10} {figures[-1].median:10.0f} targets/s")
        if "W2" in only:
            w2: dict[str, list[float]] = {name: [] for name, _ in systems}
            for _ in range(s.w2_repeats):
                for name, drain in systems:
                    run = trio.run(
                        functools.partial(
                            drain,
                            kind,
                            workdir,
                            pg_dsn,
                            n_targets=s.w2_targets,
                            job_size=s.w2_job_size,
                            fetch=sleep_fetch(s.w2_sleep),
                            workers=s.workers,
                        )
                    )
                    w2[name].append(ideal / run.seconds)
            for name, values in w2.items():
                figures.append(Figure("W2", kind, name, "efficiency", "ideal/wall", values))
                log(f"W2 {kind:8} {name:10} {figures[-1].median:10.3f} efficiency")
    return figures


def run_all(
    s: Settings,
    kinds: Sequence[str],
    workdir: str,
    pg_dsn: str,
    only: frozenset[str] = ALL_WORKLOADS,
) -> list[Figure]:
    """Every selected workload on every store kind, in the order W1/W2, then W3-W5 per store."""
    figures = run_w1_w2(kinds, workdir, pg_dsn, s, only=only)
    for kind in kinds:
        if "W3" in only:
            figures += run_w3(kind, workdir, pg_dsn, s)
        if "W4" in only:
            figures += run_w4(kind, workdir, pg_dsn, s)
        if "W5" in only:
            figures += run_w5(kind, workdir, pg_dsn, s)
    return figures


def run_w3(kind: str, workdir: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W3 on one store: p50 and p99 of the small job, in target durations."""
    figures: list[Figure] = []
    p50: list[float] = []
    p99: list[float] = []
    units: list[float] = []
    for rep in range(s.w3_repeats):
        samples, unit = trio.run(fairness_run, kind, workdir, pg_dsn, s, rep)
        units.append(unit)
        p50.append(percentile(samples, 50) / unit)
        p99.append(percentile(samples, 99) / unit)
    bound = (s.w3_big_jobs + 1) / s.workers + 1
    extra = {
        "bound": bound,
        "samples_per_repeat": s.w3_samples,
        "nominal_target_seconds": s.w3_duration,
        "measured_target_seconds": units,
    }
    figures.append(
        Figure("W3", kind, "trio-batch", "small job p50", "target durations", p50, False, extra)
    )
    figures.append(
        Figure("W3", kind, "trio-batch", "small job p99", "target durations", p99, False, extra)
    )
    log(
        f"W3 {kind:8} p50 {statistics.median(p50):.2f} p99 {statistics.median(p99):.2f} "
        f"(bound {bound:.2f}) target durations"
    )
    return figures


def run_w4(kind: str, workdir: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W4 on one store: time per target and heap per live job at each size, and the ratio."""
    figures: list[Figure] = []
    for live in s.w4_sizes:
        per_target: list[float] = []
        heap: list[float] = []
        for rep in range(s.w4_repeats):
            run = trio.run(
                functools.partial(
                    scale_run, kind, workdir, pg_dsn, s, live, measure_memory=rep == 0
                )
            )
            per_target.append(run.seconds / run.targets * 1e6)
            if run.heap_bytes_per_job is not None:
                heap.append(run.heap_bytes_per_job)
        figures.append(
            Figure(
                "W4",
                kind,
                "trio-batch",
                f"time per target at {live} live",
                "µs",
                per_target,
                False,
                {"live_jobs": live},
            )
        )
        figures.append(
            Figure(
                "W4",
                kind,
                "trio-batch",
                f"heap per live job at {live} live",
                "bytes",
                heap,
                False,
                {"live_jobs": live},
            )
        )
        log(
            f"W4 {kind:8} {live:6} live: {statistics.median(per_target):8.1f} µs/target, "
            f"{heap[0]:8.0f} B/live job"
        )
    small = find(figures, "W4", kind, "trio-batch", f"time per target at {s.w4_sizes[0]} live")
    large = find(figures, "W4", kind, "trio-batch", f"time per target at {s.w4_sizes[-1]} live")
    figures.append(
        Figure(
            "W4",
            kind,
            "trio-batch",
            f"ratio {s.w4_sizes[-1]} / {s.w4_sizes[0]} live",
            "x",
            [large.median / small.median],
            False,
        )
    )
    return figures


def run_w5(kind: str, workdir: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W5 on one store: status reads/s of a finished job while W1 runs."""
    figures: list[Figure] = []
    reads: list[float] = []
    drain: list[float] = []
    for _ in range(s.w5_repeats):
        run = trio.run(
            functools.partial(
                engine_drain,
                kind,
                workdir,
                pg_dsn,
                n_targets=s.w5_targets,
                job_size=s.w1_job_size,
                fetch=noop_fetch,
                workers=s.workers,
                readers=s.w5_readers,
                read_job_size=s.w5_job_size,
            )
        )
        reads.append(run.reads / run.seconds)
        drain.append(run.targets / run.seconds)
    extra5 = {
        "readers": s.w5_readers,
        "job_targets": s.w5_job_size,
        "drain_targets": s.w5_targets,
    }
    figures.append(Figure("W5", kind, "trio-batch", "status reads", "reads/s", reads, True, extra5))
    figures.append(
        Figure("W5", kind, "trio-batch", "W1 throughput under reads", "targets/s", drain)
    )
    log(
        f"W5 {kind:8} {statistics.median(reads):8.0f} reads/s, W1 at "
        f"{statistics.median(drain):8.0f} targets/s"
    )
    return figures


# -- goals ----------------------------------------------------------------------------------------


def goals(
    figures: Sequence[Figure], s: Settings, peer_best: float | None = None
) -> list[dict[str, Any]]:
    """The issue's goals, each with the measured value and whether it was met (reported only)."""
    out: list[dict[str, Any]] = []

    def add(goal: str, value: float, met: bool, detail: str) -> None:
        out.append({"goal": goal, "value": value, "met": met, "detail": detail})

    try:
        w1 = find(figures, "W1", "sqlite", "trio-batch", "throughput").median
        add("W1 on SQLite >= 10,000 targets/s", w1, w1 >= 10_000, f"{w1:,.0f} targets/s")
        if peer_best is not None:
            add(
                "W1 on SQLite >= 6x the best peer",
                w1 / peer_best,
                w1 / peer_best >= 6,
                f"{w1 / peer_best:.1f}x",
            )
    except KeyError:
        pass
    for fig in figures:
        if fig.workload == "W2" and fig.system == "trio-batch":
            add(
                f"W2 efficiency >= 0.97 ({fig.store})",
                fig.median,
                fig.median >= 0.97,
                f"{fig.median:.3f}",
            )
        if fig.workload == "W3" and fig.name == "small job p99":
            bound = fig.extra["bound"]
            add(
                f"W3 p99 within the round-robin bound ({fig.store})",
                fig.median,
                fig.median <= bound,
                f"{fig.median:.2f} <= {bound:.2f} target durations",
            )
        if fig.workload == "W4" and fig.name.startswith("ratio"):
            add(
                f"W4 time per target {fig.name} <= 1.3 ({fig.store})",
                fig.median,
                fig.median <= 1.3,
                f"{fig.median:.2f}x",
            )
    return out


# -- output ---------------------------------------------------------------------------------------


def fmt(value: float, unit: str) -> str:
    if unit in ("targets/s", "reads/s", "bytes"):
        return f"{value:,.0f}"
    if unit == "µs":
        return f"{value:,.1f}"
    if unit in ("ideal/wall", "x", "target durations"):
        return f"{value:.3f}" if unit == "ideal/wall" else f"{value:.2f}"
    return f"{value:.4g}"


def table_rows(figures: Sequence[Figure]) -> list[list[str]]:
    rows = []
    for fig in figures:
        ratio = ""
        if fig.system == "trio-batch" and fig.workload in ("W1", "W2"):
            try:
                base = find(figures, fig.workload, fig.store, "baseline", fig.name).median
                ratio = f"{fig.median / base:.2f}"
            except KeyError:
                pass
        rows.append(
            [
                fig.workload,
                fig.store,
                fig.system,
                fig.name,
                fmt(fig.median, fig.unit),
                fmt(min(fig.values), fig.unit),
                fmt(max(fig.values), fig.unit),
                fig.unit,
                ratio,
            ]
        )
    return rows


HEADER = ["workload", "store", "system", "figure", "median", "min", "max", "unit", "vs baseline"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def goals_markdown(items: Sequence[dict[str, Any]]) -> str:
    lines = ["| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {g['detail']} | {'yes' if g['met'] else 'NO'} |" for g in items]
    return "\n".join(lines)


def plot(figures: Sequence[Figure], path: Path, title: str) -> None:
    """Four panels: W1 throughput, W2 efficiency, W3 latency against the bound, W4 scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    stores = sorted({f.store for f in figures if f.system == "trio-batch"})

    def bars(ax: Any, workload: str, name: str, ylabel: str) -> None:
        labels: list[str] = []
        meds: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for f in figures:
            if f.workload == workload and f.name == name:
                labels.append(f"{f.system}\n{f.store}")
                meds.append(f.median)
                lo.append(f.median - min(f.values))
                hi.append(max(f.values) - f.median)
        ax.bar(
            range(len(meds)),
            meds,
            yerr=[lo, hi],
            capsize=4,
            color=["tab:blue" if "trio-batch" in lb else "tab:gray" for lb in labels],
        )
        ax.set_xticks(range(len(meds)), labels, fontsize=8)
        ax.set_ylabel(ylabel)

    bars(axes[0][0], "W1", "throughput", "targets/s (log)")
    axes[0][0].set_yscale("log")
    axes[0][0].set_title("W1 noop durable: 2,000 targets, 2 workers")
    bars(axes[0][1], "W2", "efficiency", "ideal / wall")
    axes[0][1].set_title("W2 I/O-bound: 20 ms targets (1.0 = ideal)")
    axes[0][1].axhline(0.97, color="tab:red", linestyle="--", linewidth=1)
    w2_low = min((min(f.values) for f in figures if f.workload == "W2"), default=0.8)
    axes[0][1].set_ylim(min(0.8, w2_low - 0.02), 1.02)

    ax = axes[1][0]
    w3_stores = [k for k in stores if any(f.workload == "W3" and f.store == k for f in figures)]
    xs = range(len(w3_stores))
    p50 = [find(figures, "W3", k, "trio-batch", "small job p50") for k in w3_stores]
    p99 = [find(figures, "W3", k, "trio-batch", "small job p99") for k in w3_stores]
    ax.bar([x - 0.2 for x in xs], [f.median for f in p50], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [f.median for f in p99], width=0.4, label="p99")
    if p99:
        ax.axhline(
            p99[0].extra["bound"],
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label="round-robin bound",
        )
    ax.set_xticks(list(xs), w3_stores)
    ax.set_ylabel("target durations")
    ax.set_title("W3 fairness: small job submit-to-done")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    for k in stores:
        pts = sorted(
            (f.extra["live_jobs"], f.median)
            for f in figures
            if f.workload == "W4" and f.store == k and f.name.startswith("time per target")
        )
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=k)
    ax.set_xscale("log")
    ax.set_xlabel("live jobs")
    ax.set_ylabel("µs per target")
    ax.set_ylim(bottom=0)
    ax.set_title("W4 scale: 4 noop targets per job")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(
    figures: list[Figure],
    s: Settings,
    mode: str,
    notes: list[str],
    out_dir: Path,
    *,
    make_plot: bool = True,
    started: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Print the table and write ``latest.json``, ``latest.md`` and ``latest.png``.

    ``started`` holds the machine and versions as they were when the run began.
    """
    started = started or {"machine": machine_info(), "versions": versions()}
    rows = table_rows(figures)
    gl = goals(figures, s)
    doc: dict[str, Any] = {
        "schema": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": mode,
        "command": shlex.join(["python", "-m", "bench.run", *sys.argv[1:]]),
        "machine": started["machine"],
        "versions": started["versions"],
        "settings": dataclasses.asdict(s),
        "figures": [f.to_json() for f in figures],
        "goals": gl,
        "notes": notes,
    }
    print(text_table(HEADER, rows))
    print()
    for g in gl:
        print(f"{'met ' if g['met'] else 'MISS'}  {g['goal']}: {g['detail']}")
    for note in notes:
        print(f"note: {note}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    render(doc, figures, out_dir, make_plot=make_plot)
    return doc


def render(doc: dict[str, Any], figures: list[Figure], out_dir: Path, *, make_plot: bool) -> None:
    """Write ``latest.md`` (and ``latest.png``, copied to the docs) from a run's report."""
    rows = table_rows(figures)
    gl = doc["goals"]
    notes = doc["notes"]
    mode = doc["mode"]
    md = [
        run_line(doc),
        "",
        markdown_table(HEADER, rows),
        "",
        goals_markdown(gl),
        "",
        *[f"- {n}" for n in notes],
    ]
    (out_dir / "latest.md").write_text("\n".join(md) + "\n")
    if make_plot:
        title = f"trio-batch {mode} run {doc['created']} ({doc['versions'].get('git', '')})"
        plot(figures, out_dir / "latest.png", title)
        if out_dir.resolve() == RESULTS.resolve():
            # The docs page shows this plot beside the table of the same run (latest.md).
            DOCS_PLOT.write_bytes((out_dir / "latest.png").read_bytes())


def figure_from_json(data: dict[str, Any]) -> Figure:
    """A figure as ``Figure.to_json`` wrote it."""
    return Figure(
        data["workload"],
        data["store"],
        data["system"],
        data["name"],
        data["unit"],
        list(data["values"]),
        data["higher_is_better"],
        dict(data.get("extra", {})),
    )


def run_line(doc: dict[str, Any]) -> str:
    """One line saying when, how and where a run was made."""
    v, m = doc["versions"], doc["machine"]
    load = ", ".join(f"{x:.1f}" for x in m["load_average_at_start"])
    return (
        f"Run {doc['created']} ({doc['mode']}): `{doc['command']}`; trio-batch "
        f"{v['trio_batch']} (git {v.get('git', '?')}), trio {v['trio']}, SQLite {v['sqlite']}, "
        f"Python {m['python']}, {m['cpus']} CPUs ({m['cpu']}), load average at start {load}."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: under a minute")
    parser.add_argument("--tiny", action="store_true", help="a few seconds (the harness test)")
    parser.add_argument("--pg", default=os.environ.get(PG_ENV, ""), help="PostgreSQL DSN")
    parser.add_argument("--stores", default="memory,sqlite,postgres", help="comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--only", default="W1,W2,W3,W4,W5", help="workloads, comma-separated")
    parser.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: rewrite latest.md and the plots from the latest.json in --out",
    )
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads((args.out / "latest.json").read_text())
        figures = [figure_from_json(f) for f in doc["figures"]]
        render(doc, figures, args.out, make_plot=not args.no_plot)
        return 0
    s, mode = (TINY, "tiny") if args.tiny else (QUICK, "quick") if args.quick else (FULL, "full")
    notes: list[str] = []
    kinds = [k for k in args.stores.split(",") if k]
    if "postgres" in kinds and (reason := postgres_skip_reason(args.pg)) is not None:
        kinds.remove("postgres")
        notes.append(reason)
    at_start = {"machine": machine_info(), "versions": versions()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trio-batch-bench-") as workdir:
        only = frozenset(w.strip().upper() for w in args.only.split(",") if w.strip())
        if not only <= ALL_WORKLOADS:
            parser.error(f"--only takes W1 ... W5 (got {args.only!r})")
        figures = run_all(s, kinds, workdir, args.pg, only)
    notes.append(f"wall time of the whole run: {time.perf_counter() - started:.0f} s")
    report(figures, s, mode, notes, args.out, make_plot=not args.no_plot, started=at_start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
