"""Latency and throughput of PostgresStore next to SQLiteStore (not a test; a script).

Run from the repository root::

    TRIO_BATCH_TEST_PG=postgresql://postgres@127.0.0.1:5432/test \\
        python -m bench.postgres_store [--sync-off]

Prints one line per figure: admission latency (sequential submits), admission throughput
(32 concurrent submitters), finish latency (sequential start+finish of one target, store
level), and engine throughput (100 jobs of 20 targets, instant fetch, 2 workers).
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from trio_batch import Caller, Config, Hooks, Result, Target, TargetState, open_engine
from trio_batch.stores import PostgresStore, SQLiteStore, Store
from trio_batch.stores._protocol import Limits, NewJob, Outcome

from ._harness import PG_ENV, drop_pg_schema

PG_DSN = os.environ.get(PG_ENV, "")

LIMITS = Limits(ttl=3600, targets_per_job=64, jobs_per_caller=10**6, jobs_total=10**6)


@asynccontextmanager
async def open_store(kind: str, sync_off: bool) -> AsyncIterator[Store]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteStore.open(os.path.join(tmp, "m.sqlite")) as sqlite:
                yield sqlite
    else:
        schema = f"tb_bench_{secrets.token_hex(6)}"  # a fresh schema per run, dropped after
        try:
            async with PostgresStore.open(
                PG_DSN, schema=schema, synchronous_commit=not sync_off
            ) as pg:
                yield pg
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(drop_pg_schema, PG_DSN, schema)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def job(i: int, n: int = 1) -> NewJob:
    targets = [Target(f"https://m.example.test/{i}/{k}") for k in range(n)]
    return NewJob(f"job{i:08d}", f"c{i}", "fleet", f"k{i}", targets, time.time())


async def admission_latency(store: Store) -> str:
    laps = []
    for i in range(300):
        t0 = time.perf_counter()
        await store.admit(job(i), LIMITS)
        laps.append(time.perf_counter() - t0)
    return f"admit latency p50 {pct(laps, 0.5) * 1e3:.2f} ms, p90 {pct(laps, 0.9) * 1e3:.2f} ms"


async def admission_throughput(store: Store) -> str:
    async def submitter(base: int) -> None:
        for i in range(20):
            await store.admit(job(10_000 + base * 100 + i), LIMITS)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for base in range(32):
            nursery.start_soon(submitter, base)
    return f"admit throughput {640 / (time.perf_counter() - t0):.0f}/s (32 concurrent)"


async def finish_latency(store: Store) -> str:
    await store.admit(job(50_000, 64), LIMITS)
    laps = []
    body = Outcome(TargetState.DONE, result_json=Result("x" * 200).to_json())
    for idx in range(64):
        t0 = time.perf_counter()
        await store.start_target("job00050000", idx, time.time())
        await store.finish_target("job00050000", idx, body, time.time(), 2**30)
        laps.append(time.perf_counter() - t0)
    return (
        f"start+finish latency p50 {pct(laps, 0.5) * 1e3:.2f} ms, p90 {pct(laps, 0.9) * 1e3:.2f} ms"
    )


async def engine_throughput(store: Store) -> str:
    done = trio.Event()
    finished = 0

    def on_job(event: str) -> None:
        nonlocal finished
        if event == "done":
            finished += 1
            if finished == 100:
                done.set()

    async def fetch(caller: Caller, target: Target) -> Result:
        await trio.lowlevel.checkpoint()
        return Result("y" * 200)

    config = Config(
        jobs_per_caller=100, jobs_total=100, targets_per_job=20, workers=2, hooks=Hooks(job=on_job)
    )
    async with open_engine(store, fetch, config) as engine:
        t0 = time.perf_counter()
        for i in range(100):
            await engine.submit(
                Caller("bench"),
                "fleet",
                [Target(f"https://e.example.test/{i}/{k}") for k in range(20)],
            )
        await done.wait()
        elapsed = time.perf_counter() - t0
    stats: Callable[[], tuple[int, int]] = store.commit_statistics  # type: ignore[attr-defined]
    commits, writes = stats()
    return (
        f"engine 2,000 targets: {2000 / elapsed:.0f} targets/s "
        f"({writes / max(commits, 1):.1f} writes per commit over the whole run)"
    )


async def main(sync_off: bool) -> None:
    for kind in ("sqlite", "postgres"):
        for figure in (admission_latency, admission_throughput, finish_latency, engine_throughput):
            async with open_store(kind, sync_off) as store:
                print(f"{kind:9} {await figure(store)}", flush=True)


if __name__ == "__main__":
    if not PG_DSN:
        sys.exit("set TRIO_BATCH_TEST_PG to a PostgreSQL DSN")
    trio.run(main, "--sync-off" in sys.argv)
