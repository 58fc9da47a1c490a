"""The timed workloads: each is one ``trio.run`` on a fresh store, returning raw timings.

Nothing here repeats, aggregates or prints; ``bench/run.py`` does that. Each workload runs on
``MemoryStore``, ``SQLiteStore`` (a file in a temporary directory, default durability) and
``PostgresStore`` when it is importable and a DSN is given:

- :func:`engine_drain` is W1 noop durable (2,000 targets in jobs of 20, 2 workers, a fetch that
  returns a 200-byte result at once; wall time from the first submit until the last result is
  committed and readable: ``Hooks.job`` counts the terminal jobs, then the last job is read
  back), W2 I/O-bound (400 targets each sleeping 20 ms; efficiency = ideal / wall time) and,
  with readers, W5 status reads (``status`` of a finished 32-target job, reads/s, while W1 runs).
- :func:`baseline_drain` runs W1 and W2 with a Trio memory channel, 2 worker tasks and exactly
  the store's write path (admit, ``start_target`` awaited, ``finish_target`` in the background
  and the job re-queued once it is committed: the engine's own schedule), so engine/baseline is
  the engine's overhead and nothing else. Both time their drain with :func:`measure_drain`.
- :func:`bare_drain` is W1's bare baseline as the issues state it, on SQLite and on PostgreSQL
  (``synchronous_commit`` on): no store and no engine, one ``trio.to_thread`` hop and one commit
  for every job and every result.
- :func:`floor_drain` is W2 with no store at all: what the machine's timers allow.
- :func:`fairness_run` is W3: one caller keeps 8 jobs of 32 slow targets live; another submits
  1-target jobs now and then; the small job's submit-to-done times, to be read in target
  durations against the round-robin bound (live jobs / workers + 1).
- :func:`scale_run` is W4: 10 ... 10,000 live jobs of 4 noop targets; the time per target and
  the Python heap per live job at one size.
"""

from __future__ import annotations

import gc
import math
import os
import random
import secrets
import sqlite3
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import trio

from trio_batch import Caller, Hooks, Result, Snapshot, Target, TargetState, open_engine
from trio_batch.stores import Store
from trio_batch.stores._protocol import FinishItem, Limits, NewJob, Outcome, Stored

from ._harness import (
    RESULT,
    Settings,
    TerminalCounter,
    caps,
    check_readable,
    chunked,
    commit_statistics,
    drop_pg_schema,
    open_bench_store,
    remove_sqlite_files,
    sleep_fetch,
    targets_for,
)

# -- W1 / W2 / W5: the drains ---------------------------------------------------------------------


@dataclass
class DrainRun:
    """One timed drain: wall time and what went with it."""

    seconds: float
    targets: int
    submit_seconds: float = 0.0
    """Of ``seconds``, those until the last job was submitted (its admission answered)."""
    commits: int = 0
    writes: int = 0
    reads: int = 0


async def measure_drain(
    store: Store,
    jobs: list[list[Target]],
    submit: Callable[[list[Target]], Awaitable[str]],
    finished: trio.Event,
    read: Callable[[str], Awaitable[Snapshot | None]],
) -> DrainRun:
    """Time one drain of ``jobs`` through ``store``, from the first submit to the last read.

    ``submit`` hands one job to the system under test and returns its id; ``finished`` is set
    once every job is terminal; ``read`` reads a job back by id. The clock stops once the last
    job reads back with all its results, and the store's commits and writes over that span (for
    a store that counts them) go with the time.
    """
    before = commit_statistics(store) or (0, 0)
    t0 = trio.current_time()
    last = ""
    for targets in jobs:
        last = await submit(targets)
    submitted = trio.current_time() - t0
    await finished.wait()
    await check_readable(lambda: read(last), len(jobs[-1]))
    seconds = trio.current_time() - t0
    after = commit_statistics(store) or (0, 0)
    n_targets = sum(len(targets) for targets in jobs)
    return DrainRun(seconds, n_targets, submitted, after[0] - before[0], after[1] - before[1])


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
        open_bench_store(kind, workdir, pg_dsn) as store,
        open_engine(store, fetch, config) as engine,
    ):
        read_id = ""
        if readers:
            done = counter.expect(1)
            read_id = (
                await engine.submit(Caller("reader"), "fleet", targets_for("w5", read_job_size))
            ).id
            await done.wait()
        reads = 0
        stop = False

        async def reader() -> None:
            nonlocal reads
            while not stop:
                snap = await engine.status(read_id)
                assert snap is not None
                reads += 1

        async def submit(targets: list[Target]) -> str:
            return (await engine.submit(caller, "fleet", targets)).id

        async with trio.open_nursery() as nursery:
            for _ in range(readers):
                nursery.start_soon(reader)
            finished = counter.expect(len(jobs))
            run = await measure_drain(store, jobs, submit, finished, engine.status)
            stop = True
    run.reads = reads
    return run


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
    async with open_bench_store(kind, workdir, pg_dsn) as store:
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

        async def submit(targets: list[Target]) -> str:
            new = NewJob(
                id=secrets.token_hex(16),
                caller=caller.name,
                caller_class="fleet",
                key=secrets.token_hex(32),
                targets=targets,
                now=time.time(),
            )
            await store.admit(new, limits)
            send.send_nowait(_BareJob(new.id, targets))
            return new.id

        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(worker, nursery)
            run = await measure_drain(store, jobs, submit, all_done, store.snapshot)
            nursery.cancel_scope.cancel()
    return run


_BARE_JOBS = "CREATE TABLE jobs (id TEXT PRIMARY KEY, targets INTEGER NOT NULL)"
_BARE_RESULTS = (
    "CREATE TABLE results (job_id TEXT NOT NULL, idx INTEGER NOT NULL, result TEXT NOT NULL, "
    "PRIMARY KEY (job_id, idx))"
)


@dataclass(frozen=True)
class _BareDb:
    """One connection of the bare baseline: each ``write`` is one statement committed on its
    own (called in a worker thread), ``count`` reads a job's results back, ``close`` removes
    everything."""

    write: Callable[[str, Sequence[object]], None]
    count: Callable[[str], int]
    close: Callable[[], None]
    mark: str  # the driver's parameter placeholder


def _bare_sqlite(workdir: str) -> _BareDb:
    """A SQLite file in WAL mode with SQLiteStore's durability; each write its own
    ``BEGIN IMMEDIATE`` ... ``COMMIT``."""
    path = os.path.join(workdir, f"bare-{secrets.token_hex(6)}.sqlite")
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")  # SQLiteStore's durability
    conn.execute(_BARE_JOBS)
    conn.execute(_BARE_RESULTS + " WITHOUT ROWID")

    def write(sql: str, params: Sequence[object]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, params)
        conn.execute("COMMIT")

    def count(job_id: str) -> int:
        row = conn.execute("SELECT count(*) FROM results WHERE job_id = ?", (job_id,)).fetchone()
        return int(row[0])

    def close() -> None:
        conn.close()
        remove_sqlite_files(path)

    return _BareDb(write, count, close, "?")


def _bare_postgres(dsn: str) -> _BareDb:
    """A schema of its own on PostgreSQL; each write one statement in autocommit mode (its own
    transaction, one round trip), with ``synchronous_commit`` on: the issue's "PostgreSQL's own
    per-write baseline"."""
    import psycopg
    from psycopg import sql as pgsql

    schema = f"bench_bare_{secrets.token_hex(4)}"
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET synchronous_commit = on")
    conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(pgsql.Identifier(schema)))
    conn.execute(pgsql.SQL("SET search_path = {}").format(pgsql.Identifier(schema)))
    conn.execute(_BARE_JOBS.encode())
    conn.execute(_BARE_RESULTS.encode())

    def write(sql: str, params: Sequence[object]) -> None:
        conn.execute(sql.encode(), params)

    def count(job_id: str) -> int:
        row = conn.execute(b"SELECT count(*) FROM results WHERE job_id = %s", (job_id,)).fetchone()
        return int(row[0]) if row else 0

    def close() -> None:
        conn.close()
        drop_pg_schema(dsn, schema)

    return _BareDb(write, count, close, "%s")


async def bare_drain(
    kind: str,
    workdir: str,
    pg_dsn: str,
    *,
    n_targets: int,
    job_size: int,
    fetch: Callable[[Caller, Target], Awaitable[Result]],
    workers: int,
) -> DrainRun:
    """W1's bare baseline as the issues state it: no store, no engine; every write (a job, a
    result) is one ``trio.to_thread`` hop and one commit of its own, on one connection (SQLite,
    or PostgreSQL with ``synchronous_commit`` on).

    ``workers`` tasks take jobs from a Trio memory channel; a job goes back to the channel once
    its result is committed (one target at a time, as the engine runs a job).
    """
    if kind == "sqlite":
        db = await trio.to_thread.run_sync(_bare_sqlite, workdir)
    elif kind == "postgres":
        db = await trio.to_thread.run_sync(_bare_postgres, pg_dsn)
    else:
        raise ValueError("the bare baseline is SQLite's or PostgreSQL's")
    one_thread = trio.CapacityLimiter(1)  # one connection: one write at a time
    insert_result = f"INSERT INTO results VALUES ({db.mark}, {db.mark}, {db.mark})"
    insert_job = f"INSERT INTO jobs VALUES ({db.mark}, {db.mark})"

    jobs = chunked(targets_for("w1", n_targets), job_size)
    caller = Caller("bench")
    send, recv = trio.open_memory_channel[_BareJob](math.inf)
    remaining = len(jobs)
    all_done = trio.Event()

    async def worker() -> None:
        nonlocal remaining
        async for job in recv:
            idx = job.next_idx
            result = (await fetch(caller, job.targets[idx])).to_json()
            await trio.to_thread.run_sync(
                db.write, insert_result, (job.id, idx, result), limiter=one_thread
            )
            job.next_idx = idx + 1
            if job.next_idx < len(job.targets):
                send.send_nowait(job)
            else:
                remaining -= 1
                if remaining == 0:
                    all_done.set()

    t0 = trio.current_time()
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(worker)
            last = ""
            for targets in jobs:
                last = secrets.token_hex(16)
                await trio.to_thread.run_sync(
                    db.write, insert_job, (last, len(targets)), limiter=one_thread
                )
                send.send_nowait(_BareJob(last, targets))
            submitted = trio.current_time() - t0
            await all_done.wait()
            counted = await trio.to_thread.run_sync(db.count, last, limiter=one_thread)
            assert len(jobs[-1]) == counted
            seconds = trio.current_time() - t0
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(db.close)
    return DrainRun(seconds, n_targets, submitted)


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

    async def finish_targets(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        results = await self._inner.finish_targets(items, now, max_bytes)
        for (job_id, _, _), stored in zip(items, results, strict=True):
            if isinstance(stored, Stored) and stored.terminal is not None:
                self._on_terminal(job_id)
        return results


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
    async with open_bench_store(kind, workdir, pg_dsn) as inner:
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
    """One W4 measurement: the timed drain, and the heap per live job if it was measured."""

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
        open_bench_store(kind, workdir, pg_dsn) as store,
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
