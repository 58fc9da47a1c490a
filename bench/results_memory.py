"""Reading a big job's results costs the service one page, not the job (a measurement, not a test).

    python -m bench.results_memory [--targets 600] [--kib 64] [--readers 5]

Writes one finished job of ``--targets`` targets with ``--kib`` KiB results (600 x 64 KiB is the
38 MiB job of the second reliability campaign) straight into a SQLite file, starts
``trio-batch serve`` on it as its own process, then reads the job back over HTTP: once, and
``--readers`` times at once, in each form (``?results=1`` unpaged, the NDJSON stream). The
clients read and drop the body as it comes. It reports the service's resident memory before the
reads and its peak (``VmHWM``, reset between rounds through ``/proc/PID/clear_refs``): the
promise is that the peak stays within 60 MiB of the size before the reads.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

from trio_batch import Result
from trio_batch.http import KeyRecord, KeyRing, hash_key

KEY = "tb_alice-bench-key"


def fill(path: Path, targets: int, kib: int) -> int:
    """Create the store at ``path`` and write one finished job; return its result bytes."""
    subprocess.run([sys.executable, "-c", _CREATE, str(path)], check=True, env={**os.environ})
    result = Result("x" * (kib * 1024), {"status": 200}).to_json()
    with sqlite3.connect(path) as conn:
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
    return targets * len(result)


_CREATE = """
import sys, trio
from trio_batch.stores import SQLiteStore
async def create():
    async with SQLiteStore.open(sys.argv[1]):
        pass
trio.run(create)
"""


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status)[1])  # type: ignore[index]
    hwm = int(re.search(r"VmHWM:\s+(\d+)", status)[1])  # type: ignore[index]
    return rss / 1024, hwm / 1024


async def read_all(client: httpx.AsyncClient, path: str) -> int:
    size = 0
    async with client.stream("GET", path, headers={"Authorization": f"Bearer {KEY}"}) as r:
        r.raise_for_status()
        async for chunk in r.aiter_raw():
            size += len(chunk)
    return size


async def measure(proc: subprocess.Popen[bytes], port: int, stored: int, readers: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
        for _ in range(100):
            try:
                if (await c.get("/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                await trio.sleep(0.1)
        print(f"job: {stored / 2**20:.1f} MiB of results stored")
        for form, path in [
            ("?results=1", "/v1/batch/big?results=1"),
            ("NDJSON", "/v1/batch/big/results"),
        ]:
            for n in (1, readers):
                await trio.Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # resets VmHWM
                before, _ = memory(proc.pid)
                t0 = time.perf_counter()
                sizes: list[int] = []

                async def one(sizes: list[int] = sizes, path: str = path) -> None:
                    sizes.append(await read_all(c, path))

                async with trio.open_nursery() as nursery:
                    for _ in range(n):
                        nursery.start_soon(one)
                seconds = time.perf_counter() - t0
                _, peak = memory(proc.pid)
                print(
                    f"{form:11} x{n}: {sum(sizes) / 2**20:6.1f} MiB in {seconds:4.2f} s; "
                    f"RSS before {before:5.1f} MiB, peak {peak:5.1f} MiB (+{peak - before:4.1f})"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=600)
    parser.add_argument("--kib", type=int, default=64)
    parser.add_argument("--readers", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, keys = Path(tmp) / "big.sqlite", Path(tmp) / "keys.toml"
        stored = fill(db, args.targets, args.kib)
        keys.write_text(KeyRing([KeyRecord("alice", "lab", "fleet", hash_key(KEY))]).to_toml())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = ["trio-batch", "serve", "--db", str(db), "--keys", str(keys), "--port", str(port)]
        cmd += ["--ttl", "1e13", "--no-access-log", "--log-level", "warning"]
        proc = subprocess.Popen(cmd)
        try:
            trio.run(measure, proc, port, stored, args.readers)
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
