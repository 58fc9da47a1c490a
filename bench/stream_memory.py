"""Streaming a big job's results keeps memory flat (a measurement, not a test).

    python -m bench.stream_memory [--targets 10000] [--kib 64]

Writes one finished job of ``--targets`` targets with ``--kib`` KiB results into a SQLite file
(straight into the tables: the engine would take as long as the fetches), then streams
``GET /v1/batch/{id}/results`` through the app (the ASGI driver, reading and dropping each
chunk) and reports the peak of Python's traced memory during the stream, next to the size of
the body: the peak stays at a few chunks (64 targets each), whatever the job's size.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
import tracemalloc
from pathlib import Path

import trio
from tests.http.support import open_stream

from trio_batch import Config, Result, open_engine
from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key
from trio_batch.stores import SQLiteStore
from trio_batch.testing import ScriptedFetch, asgi_lifespan

ALICE = "tb_alice-bench-key"
KEYS = KeyRing([KeyRecord("alice", "lab", "fleet", hash_key(ALICE))])


async def measure(targets: int, kib: int) -> None:
    result = Result("x" * (kib * 1024), {"status": 200}).to_json()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.sqlite"
        async with SQLiteStore.open(path) as store:

            def fill(conn: sqlite3.Connection) -> None:
                conn.execute(
                    "INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, "
                    "targets_done, created_at, updated_at, lease, bytes) "
                    "VALUES ('big', 'alice', 'fleet', 'k', 'done', ?, ?, 1, 1, 1e12, 0)",
                    (targets, targets),
                )
                conn.executemany(
                    "INSERT INTO targets (job_id, idx, url, options, status, result) "
                    "VALUES ('big', ?, ?, '{}', 'done', ?)",
                    ((i, f"https://t{i}.example.test/", result) for i in range(targets)),
                )

            t0 = time.perf_counter()
            await store._write(fill)
            filled = time.perf_counter() - t0
            config = Config(ttl=1e13, max_bytes=2**62)
            async with open_engine(store, ScriptedFetch(), config) as engine:
                app = create_app(engine, KEYS, access_log_enabled=False)
                async with asgi_lifespan(app):
                    tracemalloc.start()
                    t0 = time.perf_counter()
                    size = lines = 0
                    async with open_stream(app, "/v1/batch/big/results", key=ALICE) as s:
                        while not s.complete and not s.closed:
                            await s._next()
                            size += len(s.body)
                            lines += s.body.count(b"\n")
                            s.body = b""  # the client drops what it has read
                    seconds = time.perf_counter() - t0
                    _, peak = tracemalloc.get_traced_memory()
                    tracemalloc.stop()
    print(
        f"{targets:,} targets x {kib} KiB (filled in {filled:.1f} s): streamed {lines:,} lines, "
        f"{size / 2**20:,.0f} MiB in {seconds:.1f} s ({size / 2**20 / seconds:,.0f} MiB/s); "
        f"peak traced memory {peak / 2**20:.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=10_000)
    parser.add_argument("--kib", type=int, default=64)
    args = parser.parse_args()
    trio.run(measure, args.targets, args.kib)


if __name__ == "__main__":
    main()
