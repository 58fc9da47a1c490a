"""What a follower costs: memory and CPU per follower of one job (not a test; a measurement).

    python -m tests.http.follow_cost [--followers 200] [--targets 200]
        [--store memory|sqlite|postgres]
        [--route events|results]

Runs the app in-process (the ASGI driver of ``tests/http/streaming.py``: the server's own cost
of a stream, without hypercorn's connection or the client), opens N followers of one job, and
measures:

- memory: ``tracemalloc`` while the N followers wait on a held target, minus the same with
  none, divided by N;
- CPU: process CPU seconds to run the job's targets to the end with N followers, minus the same
  job with none, divided by N and by the number of targets (the cost of one follower for one
  stored target: a wake-up, a counts read, a targets read, one event written).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
import trio.testing

from trio_batch import Caller, Config, Target, open_engine
from trio_batch.http import create_app
from trio_batch.stores import MemoryStore, SQLiteStore, Store
from trio_batch.testing import ScriptedFetch

from .conftest import ALICE, lifespan, make_keys
from .streaming import open_stream


@asynccontextmanager
async def open_store(kind: str) -> AsyncIterator[Store]:
    if kind == "memory":
        yield MemoryStore()
        return
    if kind == "postgres":
        from tests.pg_support import open_test_store

        async with open_test_store(os.environ["TRIO_BATCH_TEST_PG"]) as pg:
            yield pg
        return
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteStore.open(Path(tmp) / "cost.sqlite") as store:
            yield store


async def run(followers: int, targets: int, kind: str, route: str) -> tuple[int, float, int]:
    """``(traced bytes while waiting, CPU seconds of the run, watchers seen)``."""
    fetch = ScriptedFetch()
    urls = [f"https://t{i}.example.test/" for i in range(targets)]
    gate = fetch.hold(urls[0])
    config = Config(targets_per_job=targets, ttl=3600)
    async with open_store(kind) as store, open_engine(store, fetch, config) as engine:
        app = create_app(engine, make_keys(), precheck=lambda url: None, access_log_enabled=False)
        async with lifespan(app):
            sub = await engine.submit(Caller("alice"), "fleet", [Target(u) for u in urls])
            follow = "1" if route == "results" else "0"  # events has no follow: ignored
            ended = 0

            async def follower() -> None:
                nonlocal ended
                path = f"/v1/batch/{sub.id}/{route}"
                async with open_stream(app, path, key=ALICE, follow=follow) as s:
                    await s.read_all()
                ended += 1

            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            async with trio.open_nursery() as nursery:
                for _ in range(followers):
                    nursery.start_soon(follower)
                while engine.watchers < followers:
                    await trio.testing.wait_all_tasks_blocked()
                    if followers == 0:
                        break
                gc.collect()
                waiting = tracemalloc.get_traced_memory()[0] - base
                watchers = engine.watchers
                tracemalloc.stop()
                cpu0 = time.process_time()
                gate.set()
                summary = None
                while summary is None or summary.job.status.live:
                    with engine.watch(sub.id) as w:
                        summary = await engine.summary(sub.id)
                        if summary is not None and summary.job.status.live:
                            await w.wait()
            cpu = time.process_time() - cpu0
            assert ended == followers
    return waiting, cpu, watchers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--followers", type=int, default=200)
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--route", choices=["events", "results"], default="events")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for _ in range(args.repeat):
        mem0, cpu0, _ = trio.run(run, 0, args.targets, args.store, args.route)
        mem, cpu, watchers = trio.run(run, args.followers, args.targets, args.store, args.route)
        rows.append((mem - mem0, cpu - cpu0, cpu0, cpu, watchers))
    rows.sort(key=lambda r: r[1])
    mem, extra, cpu0, cpu, watchers = rows[len(rows) // 2]
    n, t = args.followers, args.targets
    print(
        f"{args.store} {args.route}: {n} followers x {t} targets (median of {args.repeat}); "
        f"watchers open while waiting: {watchers}\n"
        f"  memory while waiting: {mem / 1024:.0f} KiB in all, "
        f"{mem / n / 1024:.1f} KiB a follower\n"
        f"  CPU: {cpu0:.3f} s without followers, {cpu:.3f} s with; "
        f"{extra / n / t * 1e6:.0f} us a follower a stored target, "
        f"{extra / t * 1e3:.2f} ms a stored target for all {n}"
    )


if __name__ == "__main__":
    main()
