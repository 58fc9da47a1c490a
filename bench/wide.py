"""WIDE: one job of many targets over a few hosts, at a concurrency, on one instance and a fleet.

    python -m bench.wide [--pg DSN] [--instances 3] [--pages 40] [--hosts 4] [--seconds 0.5]
                         [--concurrency 8] [--workers 4] [--json FILE]

Issue 35's first goal: on a fleet of three ``trio-batch serve --workers 4`` processes, one job
of 40 targets of 0.5 s over 4 hosts with ``concurrency`` 8 ends in 4 s or less (serial: 20 s),
each host's budget never exceeded (``--host-concurrency``, 2 by default: 4 hosts x 2 = 8 at
once, so the ideal is 40 x 0.5 / 8 = 2.5 s), and the results in index order in ``?results=1``,
the NDJSON stream and the events. The same job on one ``serve`` over SQLite is run beside it.

Each host is a small HTTP site of its own on a loopback address (127.0.0.2 ...) that counts the
requests it has in flight at once; traffic goes nowhere else. Prints one line per run and,
with ``--json``, writes the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from .fleet import free_port, log_file, stop_process, wait_ready

HOSTS = [f"127.0.0.{2 + i}" for i in range(8)]


@dataclass
class Site:
    """One host: answers every page after ``seconds``, counting its requests in flight."""

    host: str
    seconds: float
    in_flight: int = 0
    most: int = 0
    hits: dict[str, int] = field(default_factory=dict)

    async def answer(self, stream: trio.SocketStream) -> None:
        head = b""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while b"\r\n\r\n" not in head and len(head) < 16384:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode("ascii", "replace")
            self.hits[path] = self.hits.get(path, 0) + 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            try:
                await trio.sleep(self.seconds)
            finally:
                self.in_flight -= 1
            body = f"page {path}\n".encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\n"
                b"Connection: close\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
        await stream.aclose()


@asynccontextmanager
async def open_sites(hosts: int, seconds: float) -> AsyncIterator[list[tuple[Site, int]]]:
    """``hosts`` sites, each on its own loopback address; yields each with its port."""
    sites = [Site(HOSTS[i], seconds) for i in range(hosts)]
    async with trio.open_nursery() as nursery:
        ports = []
        for site in sites:
            listeners = await trio.open_tcp_listeners(0, host=site.host)
            ports.append(listeners[0].socket.getsockname()[1])
            nursery.start_soon(trio.serve_listeners, site.answer, listeners)
        yield list(zip(sites, ports, strict=True))
        nursery.cancel_scope.cancel()


def serve_command(db: str, schema: str | None, keys: Path, port: int, workers: int) -> list[str]:
    """A ``trio-batch serve`` command line with the shipped host budget."""
    cmd = [
        sys.executable,
        "-c",
        "from trio_batch._cli import entry; entry()",
        "serve",
        "--db",
        db,
        "--keys",
        str(keys),
        "--port",
        str(port),
        "--allow-net",
        "127.0.0.0/8",
        "--workers",
        str(workers),
        "--targets-per-job",
        "1000",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    return cmd + (["--pg-schema", schema] if schema else [])


@asynccontextmanager
async def open_instances(
    n: int, db: str, schema: str | None, keys: Path, workers: int, workdir: str, client: Any
) -> AsyncIterator[list[str]]:
    """``n`` serve processes on one store; yields their base URLs; stops them all."""
    procs: list[trio.Process] = []
    bases: list[str] = []
    try:
        for i in range(n):
            port = free_port()
            with log_file(os.path.join(workdir, f"serve-{i}.log")) as out:
                procs.append(
                    await trio.lowlevel.open_process(
                        serve_command(db, schema, keys, port, workers), stdout=out, stderr=out
                    )
                )
            bases.append(f"http://127.0.0.1:{port}")
            if i == 0:
                await wait_ready(client, bases[0], procs[0])
        for base, proc in zip(bases, procs, strict=True):
            await wait_ready(client, base, proc)
        yield bases
    finally:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for proc in procs:
                    nursery.start_soon(stop_process, proc)


@dataclass
class WideRun:
    """One run: where, how long, each host's most in flight, and whether every door kept order."""

    where: str
    seconds: float
    most_per_host: list[int]
    in_order: dict[str, bool]
    fetched_twice: int


async def read_orders(client: Any, base: str, job_id: str) -> dict[str, list[int]]:
    """The targets' indices as ``?results=1``, the NDJSON stream and the events give them."""
    summary = (await client.get(f"{base}/v1/batch/{job_id}", params={"results": 1})).json()
    ndjson = [json.loads(line)["idx"] async for line in _lines(client, base, job_id, "results")]
    events = [
        json.loads(line[5:])["idx"]
        async for line in _lines(client, base, job_id, "events")
        if line.startswith("data:") and '"idx"' in line
    ]
    return {"results=1": [t["idx"] for t in summary["targets"]], "ndjson": ndjson, "sse": events}


async def _lines(client: Any, base: str, job_id: str, route: str) -> AsyncIterator[str]:
    async with client.stream("GET", f"{base}/v1/batch/{job_id}/{route}") as answer:
        async for line in answer.aiter_lines():
            if line.startswith("event: end"):
                return
            if line.strip():
                yield line


async def wide_run(where: str, db: str, schema: str | None, args: Any, workdir: str) -> WideRun:
    """Submit the wide job to the first instance, wait for its end, read it back three ways."""
    import httpx

    from trio_batch.http import add_key

    keys = Path(workdir) / f"keys-{secrets.token_hex(3)}.toml"
    _, key = add_key(keys, "alice")
    headers = {"Authorization": f"Bearer {key}"}
    n = args.instances if schema else 1
    async with (
        open_sites(args.hosts, args.seconds) as sites,
        httpx.AsyncClient(timeout=60, headers=headers) as client,
        open_instances(n, db, schema, keys, args.workers, workdir, client) as bases,
    ):
        targets = [
            {"url": f"http://{sites[i % args.hosts][0].host}:{sites[i % args.hosts][1]}/p/{i}"}
            for i in range(args.pages)
        ]
        started = time.perf_counter()
        answer = await client.post(
            bases[0] + "/v1/batch", json={"targets": targets, "concurrency": args.concurrency}
        )
        answer.raise_for_status()
        job_id = answer.json()["id"]
        async for _ in _lines(client, bases[-1], job_id, "events"):
            pass
        seconds = time.perf_counter() - started
        orders = await read_orders(client, bases[-1], job_id)
    wanted = list(range(args.pages))
    return WideRun(
        where,
        seconds,
        [site.most for site, _ in sites],
        {door: order == wanted for door, order in orders.items()},
        sum(n - 1 for site, _ in sites for n in site.hits.values()),
    )


async def main_async(args: Any) -> list[WideRun]:
    from ._harness import drop_pg_schema

    runs = []
    with tempfile.TemporaryDirectory(prefix="trio-batch-wide-") as workdir:
        runs.append(
            await wide_run("sqlite, 1 instance", f"{workdir}/w.sqlite", None, args, workdir)
        )
        if args.pg:
            schema = f"bench_wide_{secrets.token_hex(4)}"
            try:
                where = f"postgres, {args.instances} instances"
                runs.append(await wide_run(where, args.pg, schema, args, workdir))
            finally:
                await trio.to_thread.run_sync(drop_pg_schema, args.pg, schema)
    for r in runs:
        print(
            f"WIDE {r.where}: {args.pages} pages of {args.seconds} s over {args.hosts} hosts, "
            f"concurrency {args.concurrency}: {r.seconds:.2f} s (serial "
            f"{args.pages * args.seconds:.0f} s); most at once per host {r.most_per_host}; "
            f"index order {r.in_order}; fetched twice {r.fetched_twice}"
        )
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wide", description=__doc__)
    parser.add_argument("--pg", default=os.environ.get("TRIO_BATCH_TEST_PG", ""))
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    runs = trio.run(main_async, args)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
