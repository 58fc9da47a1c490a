"""W1 and W2 on the job queues people would otherwise use, beside trio-batch in the same run.

``python -m bench.peers`` (``nox -s bench_peers``): SAQ on Redis (127.0.0.1:6379) and
procrastinate on PostgreSQL (127.0.0.1:5432, database ``test``), each with concurrency 2, and
trio-batch on SQLite and in memory with 2 workers. Every figure is reported as trio-batch's
median divided by the peer's, and written to ``bench/results/peers.json``.

Same work as trio-batch's W1/W2: 2,000 (W2: 400) units, enqueued in batches of 20 (one
trio-batch job each), a function returning a 200-byte result (W2: after sleeping 20 ms); the
clock runs from the first enqueue until the last result is committed and readable. SAQ keeps a
job's result in Redis with the job. procrastinate keeps no results, so its task writes the
200-byte result to a table through the app's own connection pool (what a user wanting results
has to do); its jobs and that table live in their own schema ``bench_procrastinate``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import secrets
import shlex
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._harness import FULL, QUICK, RESULTS, Figure, find, log
from .report import markdown_table, run_line, text_table
from .run import machine_info, run_w1_w2, versions

REDIS_URL = "redis://127.0.0.1:6379"
PG_DSN = "host=127.0.0.1 port=5432 dbname=test"
PG_SCHEMA = "bench_procrastinate"
BODY = "x" * 200
BATCH = 20


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port`` (loopback only)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def services_missing() -> list[str]:
    """The services this benchmark needs that are not listening, each with how to start it."""
    missing = []
    if not port_open(6379):
        missing.append("Redis is not listening on 127.0.0.1:6379 (start redis-server)")
    if not port_open(5432):
        missing.append(
            "PostgreSQL is not listening on 127.0.0.1:5432 (start it; the database 'test' "
            "must exist and accept the current user)"
        )
    return missing


# -- SAQ ------------------------------------------------------------------------------------------


async def saq_drain(n: int, sleep: float, concurrency: int) -> float:
    """Seconds for ``n`` SAQ jobs from the first enqueue until the last result is readable."""
    # The peers' packages are in the optional ``peers`` group, which mypy usually runs without.
    from saq import Queue, Worker  # type: ignore[import-not-found, unused-ignore]
    from saq.job import Status  # type: ignore[import-not-found, unused-ignore]

    queue = Queue.from_url(REDIS_URL, name=f"trio-batch-bench-{secrets.token_hex(4)}")
    await queue.connect()
    finished = 0
    all_done = asyncio.Event()

    async def unit(ctx: Any, *, i: int) -> str:
        if sleep:
            await asyncio.sleep(sleep)
        return BODY

    async def after_process(ctx: Any) -> None:
        nonlocal finished
        finished += 1
        if finished >= n:
            all_done.set()

    worker = Worker(
        queue,
        functions=[("unit", unit)],
        concurrency=concurrency,
        after_process=after_process,
    )
    worker.SIGNALS = []  # the benchmark owns the process's signals
    runner = asyncio.create_task(worker.start())
    try:
        t0 = time.perf_counter()
        last = None
        for start in range(0, n, BATCH):
            jobs = await asyncio.gather(
                *(queue.enqueue("unit", i=i) for i in range(start, min(n, start + BATCH)))
            )
            last = jobs[-1]
        await all_done.wait()
        assert last is not None
        job = await queue.job(last.key)
        if job is None or job.status != Status.COMPLETE or job.result != BODY:
            raise RuntimeError("SAQ: the last job's result could not be read back")
        seconds = time.perf_counter() - t0
    finally:
        await worker.stop()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await queue.disconnect()
    return seconds


# -- procrastinate --------------------------------------------------------------------------------


async def procrastinate_drain(n: int, sleep: float, concurrency: int, dsn: str) -> float:
    """Seconds for ``n`` procrastinate jobs from the first defer until the last is readable."""
    import procrastinate  # type: ignore[import-not-found, unused-ignore]
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
        exists = await (
            await conn.execute(f"SELECT to_regclass('{PG_SCHEMA}.procrastinate_jobs')")
        ).fetchone()
    connector = procrastinate.PsycopgConnector(
        conninfo=dsn, kwargs={"options": f"-c search_path={PG_SCHEMA}"}, min_size=2, max_size=4
    )
    app = procrastinate.App(connector=connector)
    queue_name = f"bench_{secrets.token_hex(4)}"
    finished = 0
    all_done = asyncio.Event()

    @app.task(name="unit", queue=queue_name)  # type: ignore[untyped-decorator, unused-ignore]
    async def unit(i: int) -> None:
        nonlocal finished
        if sleep:
            await asyncio.sleep(sleep)
        await connector.execute_query_async(
            "INSERT INTO bench_results (id, body) VALUES (%(id)s, %(body)s) "
            "ON CONFLICT (id) DO UPDATE SET body = excluded.body",
            id=i,
            body=BODY,
        )
        finished += 1
        if finished >= n:
            all_done.set()

    async with app.open_async():
        if exists is None or exists[0] is None:
            await app.schema_manager.apply_schema_async()
        await connector.execute_query_async(
            "CREATE TABLE IF NOT EXISTS bench_results (id bigint PRIMARY KEY, body text NOT NULL)"
        )
        await connector.execute_query_async("TRUNCATE bench_results")
        worker = asyncio.create_task(
            app.run_worker_async(
                queues=[queue_name],
                concurrency=concurrency,
                wait=True,
                install_signal_handlers=False,
                fetch_job_polling_interval=0.5,
            )
        )
        try:
            t0 = time.perf_counter()
            for start in range(0, n, BATCH):
                batch: list[dict[str, Any]] = [
                    {"i": i} for i in range(start, min(n, start + BATCH))
                ]
                await unit.batch_defer_async(*batch)
            await all_done.wait()
            while True:  # the job's own status is committed after the task returns
                row = await connector.execute_query_one_async(
                    "SELECT count(*) AS n FROM procrastinate_jobs "
                    "WHERE queue_name = %(q)s AND status = 'succeeded'",
                    q=queue_name,
                )
                if row["n"] >= n:
                    break
                await asyncio.sleep(0.001)
            last = await connector.execute_query_one_async(
                "SELECT body FROM bench_results WHERE id = %(id)s", id=n - 1
            )
            if last["body"] != BODY:
                raise RuntimeError("procrastinate: the last result could not be read back")
            seconds = time.perf_counter() - t0
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        await connector.execute_query_async(
            "DELETE FROM procrastinate_jobs WHERE queue_name = %(q)s", q=queue_name
        )
    return seconds


# -- the run --------------------------------------------------------------------------------------


def peer_figures(
    repeats_w1: int, repeats_w2: int, n1: int, n2: int, sleep: float, dsn: str, concurrency: int
) -> list[Figure]:
    """W1 and W2 on SAQ and procrastinate."""
    figures: list[Figure] = []
    runners: list[tuple[str, str, Any]] = [
        ("saq", "redis", saq_drain),
        ("procrastinate", "postgres", functools.partial(_pg, dsn=dsn)),
    ]
    for system, store, drain in runners:
        w1 = [n1 / asyncio.run(drain(n1, 0.0, concurrency)) for _ in range(repeats_w1)]
        figures.append(Figure("W1", store, system, "throughput", "targets/s", w1))
        log(f"W1 {store:8} {system:13} {statistics.median(w1):10.0f} targets/s")
        ideal = n2 * sleep / concurrency
        w2 = [ideal / asyncio.run(drain(n2, sleep, concurrency)) for _ in range(repeats_w2)]
        figures.append(Figure("W2", store, system, "efficiency", "ideal/wall", w2))
        log(f"W2 {store:8} {system:13} {statistics.median(w2):10.3f} efficiency")
    return figures


async def _pg(n: int, sleep: float, concurrency: int, *, dsn: str) -> float:
    return await procrastinate_drain(n, sleep, concurrency, dsn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--pg", default=PG_DSN, help=f"procrastinate's DSN (default {PG_DSN!r})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where peers.json goes")
    args = parser.parse_args(argv)
    missing = services_missing()
    if missing:
        for line in missing:
            print(f"bench_peers: {line}", file=sys.stderr)
        print("bench_peers: stopped; nothing was measured", file=sys.stderr)
        return 2
    logging.getLogger("saq").setLevel(logging.ERROR)
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    s = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="trio-batch-bench-") as workdir:
        ours = run_w1_w2(["memory", "sqlite"], workdir, "", s, only=frozenset({"W1", "W2"}))
    theirs = peer_figures(
        s.w1_repeats, s.w2_repeats, s.w1_targets, s.w2_targets, s.w2_sleep, args.pg, s.workers
    )
    figures = ours + theirs
    rows = []
    for fig in figures:
        ours_sqlite = find(figures, fig.workload, "sqlite", "trio-batch", fig.name).median
        rows.append(
            [
                fig.workload,
                fig.system,
                fig.store,
                f"{fig.median:,.3f}" if fig.workload == "W2" else f"{fig.median:,.0f}",
                f"{min(fig.values):,.3f}" if fig.workload == "W2" else f"{min(fig.values):,.0f}",
                f"{max(fig.values):,.3f}" if fig.workload == "W2" else f"{max(fig.values):,.0f}",
                fig.unit,
                f"{ours_sqlite / fig.median:.2f}",
            ]
        )
    header = ["workload", "system", "store", "median", "min", "max", "unit", "trio-batch/this"]
    print(text_table(header, rows))
    best_peer = max(f.median for f in theirs if f.workload == "W1")
    w1 = find(figures, "W1", "sqlite", "trio-batch", "throughput").median
    verdict = "met" if w1 >= 6 * best_peer else "MISS"
    print(f"{verdict}  W1 on SQLite >= 6x the best peer: {w1 / best_peer:.1f}x")
    doc = {
        "schema": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "quick" if args.quick else "full",
        "command": shlex.join(["python", "-m", "bench.peers", *sys.argv[1:]]),
        "machine": machine_info(),
        "versions": {**versions(), **_peer_versions()},
        "figures": [f.to_json() for f in figures],
        "goals": [
            {
                "goal": "W1 on SQLite >= 6x the best peer",
                "value": w1 / best_peer,
                "met": w1 >= 6 * best_peer,
                "detail": f"{w1 / best_peer:.1f}x",
            }
        ],
        "table": {"header": header, "rows": rows},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peers.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    md = [
        run_line(doc),
        "",
        markdown_table(header, rows),
        "",
        f"W1 on SQLite against the best peer: {w1 / best_peer:.1f}x (goal: at least 6x).",
    ]
    (args.out / "peers.md").write_text("\n".join(md) + "\n")
    return 0


def _peer_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("saq", "procrastinate", "redis", "psycopg"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
