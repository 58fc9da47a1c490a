"""FLEET: what a fleet of ``trio-batch serve`` processes on one PostgreSQL database carries.

    python -m bench.fleet [--pg DSN] [--quick | --tiny] [--json FILE]

or ``python -m bench.run --only FLEET --pg DSN`` (which adds the figures to the bench report).
Traffic goes only to 127.0.0.0/8; every measurement uses a fresh schema of the database, dropped
afterwards. The figures (issue 22, "Measured and explained"):

- **I/O-bound fleet.** 1, 2 and 3 real ``serve`` processes (``--workers 8`` each) on one schema;
  a local site on 127.0.0.2 answers each page after 100 ms; 30 callers submit one job each, all
  to the first instance, and the fleet's round robin spreads the turns. Reported: targets/s per
  instance count, the ratio of 3 instances to 1, and the per-caller wait p99, where a caller's
  wait is the gap between its consecutive outcomes (the first one counted from its submit), read
  back from the targets' ``finished_at``. With 30 serial jobs and 8 workers an instance, 3
  instances hold 24 turns at once, so the ideal ratio is 3.
- **Claims at saturation.** The same fleet with the page answering at once: every target is one
  claimed turn, so targets/s is claims/s; here the fetch, the claims and the outcome writes of
  every instance share the machine's cores with PostgreSQL and the site.
- **One instance's write path** (in-process engine over ``PostgresStore``, instant fetch):
  admissions/s while the engine drains (500 jobs of 20 targets submitted one after the other,
  the first ones draining as the rest arrive), and W1 with 500 jobs beside W1 with 100 jobs.

Each ``serve`` process is stopped with SIGTERM and, if it has not exited after a grace period,
killed, whatever happens to the benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import trio

from ._harness import (
    PG_ENV,
    Figure,
    caps,
    chunked,
    drop_pg_schema,
    log,
    noop_fetch,
    open_bench_store,
    percentile,
    targets_for,
)
from .workloads import engine_drain

SITE_HOST = "127.0.0.2"  # the site's own loopback address, apart from the instances' 127.0.0.1
STOP_GRACE = 15.0  # seconds a serve process gets after SIGTERM before it is killed
READY_TIMEOUT = 60.0  # seconds a serve process may take to answer /healthz
FINISH_TIMEOUT = 300.0  # seconds a fleet run may take before the benchmark gives up


@dataclass(frozen=True)
class FleetSettings:
    """The sizes of the fleet benchmark; ``FLEET_FULL`` is what issue 22 states."""

    instances: tuple[int, ...] = (1, 2, 3)
    callers: int = 30
    job_size: int = 32
    delay: float = 0.100
    workers: int = 8
    repeats: int = 2
    saturation_instances: tuple[int, ...] = (1, 2, 3)
    saturation_job_size: int = 100
    admissions: int = 500
    admission_job_size: int = 20
    w1_jobs: tuple[int, int] = (100, 500)
    w1_job_size: int = 20
    w1_repeats: int = 3
    engine_workers: int = 2


FLEET_FULL = FleetSettings()
FLEET_QUICK = FleetSettings(
    instances=(1, 3),
    job_size=6,
    repeats=1,
    saturation_instances=(3,),
    saturation_job_size=20,
    admissions=100,
    w1_jobs=(20, 100),
    w1_repeats=1,
)
FLEET_TINY = replace(
    FLEET_QUICK,
    instances=(1, 2),
    callers=4,
    job_size=3,
    saturation_instances=(),
    admissions=20,
    w1_jobs=(5, 20),
)


@dataclass(frozen=True)
class FleetRun:
    """One fleet run: how many targets, how long, and every caller's waits."""

    instances: int
    targets: int
    seconds: float
    waits: list[float]
    failed: int
    serve_cpu: float
    postgres_cpu: float


# -- the site -------------------------------------------------------------------------------------


async def _answer(stream: trio.SocketStream) -> None:
    """Read one request head, wait the delay its path names (``/ms/{n}/...``), answer 200."""
    head = b""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while b"\r\n\r\n" not in head and len(head) < 16384:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            head += chunk
        path = head.split(b" ", 2)[1].decode("ascii", "replace")
        parts = path.split("/")
        delay_ms = int(parts[2]) if len(parts) > 2 and parts[1] == "ms" else 0
        await trio.sleep(delay_ms / 1000)
        body = f"page {path}\n".encode()
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
    await stream.aclose()


async def serve_site(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """A small HTTP/1.1 site on ``SITE_HOST`` whose pages answer after the delay in their path.

    One request per connection (``Connection: close``), like the demo site; it is its own server
    because the demo site listens only on 127.0.0.1 and has no per-page delay.
    """
    listeners = await trio.open_tcp_listeners(0, host=SITE_HOST)
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(_answer, listeners)


# -- the serve processes --------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_keys(path: Path, callers: int) -> list[str]:
    """A keys file with ``callers`` callers; their keys, in order."""
    from trio_batch.http import add_key

    return [add_key(path, f"caller-{i}")[1] for i in range(callers)]


def serve_command(dsn: str, schema: str, keys: Path, port: int, s: FleetSettings) -> list[str]:
    """The ``trio-batch serve`` command line of one instance of the fleet."""
    return [
        sys.executable,
        "-c",
        "from trio_batch._cli import entry; entry()",
        "serve",
        "--db",
        dsn,
        "--pg-schema",
        schema,
        "--keys",
        str(keys),
        "--port",
        str(port),
        "--allow-net",
        "127.0.0.0/8",
        "--workers",
        str(s.workers),
        "--jobs-total",
        "100000",
        "--targets-per-job",
        str(max(s.job_size, s.saturation_job_size)),
        "--shape-workers",
        "1",
        # The site is the benchmark's own: it measures the fleet, not the host budget (which
        # is per instance today, and would cap one site at 2 requests per instance).
        "--host-concurrency",
        "1024",
        "--no-access-log",
        "--log-level",
        "warning",
    ]


async def stop_process(proc: trio.Process) -> None:
    """SIGTERM, then SIGKILL after ``STOP_GRACE``; shielded, so a cancelled run still stops it."""
    with trio.CancelScope(shield=True):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(STOP_GRACE):
                await proc.wait()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def wait_ready(client: Any, base: str, proc: trio.Process) -> None:
    """Wait until the instance at ``base`` answers ``/healthz`` (or fail if it exited)."""
    import httpx

    with trio.fail_after(READY_TIMEOUT):
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"a serve process exited with {proc.returncode} at start")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(base + "/healthz")).status_code == 200:
                    return
            await trio.sleep(0.1)


def log_file(path: str) -> BinaryIO:
    """A serve process's log file (its stdout and stderr), kept for a failed run's post-mortem."""
    return open(path, "wb")


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) of a process and its children alive now, from ``/proc``."""
    pids = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                pids += [int(child) for child in (task / "children").read_text().split()]
    ticks = 0
    for each in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime and stime
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> float:
    """CPU seconds of every ``postgres`` process alive now (an upper bound for this run's share:
    it counts whatever else uses the server, and misses backends that have exited)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            if text.split("(", 1)[1].startswith("postgres)"):
                fields = text.rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@asynccontextmanager
async def open_fleet(
    n: int, dsn: str, schema: str, keys: Path, workdir: str, s: FleetSettings, client: Any
) -> AsyncIterator[list[tuple[str, trio.Process]]]:
    """``n`` serve processes on ``schema``; yields their base URLs and processes; stops them all.

    The first starts alone (it creates the schema), the others once it answers.
    """
    procs: list[trio.Process] = []
    bases: list[str] = []
    try:
        for i in range(n):
            port = free_port()
            with log_file(os.path.join(workdir, f"serve-{schema}-{i}.log")) as out:
                procs.append(
                    await trio.lowlevel.open_process(
                        serve_command(dsn, schema, keys, port, s), stdout=out, stderr=out
                    )
                )
            bases.append(f"http://127.0.0.1:{port}")
            if i == 0:
                await wait_ready(client, bases[0], procs[0])
        for base, proc in zip(bases, procs, strict=True):
            await wait_ready(client, base, proc)
        yield list(zip(bases, procs, strict=True))
    finally:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for proc in procs:
                    nursery.start_soon(stop_process, proc)


# -- one fleet run --------------------------------------------------------------------------------


def read_outcomes(dsn: str, schema: str) -> tuple[int, int, dict[str, list[float]]]:
    """Targets finished, targets failed, and each job's finish times (its submit time first)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT j.id, j.created_at, t.status, t.finished_at FROM {}.targets t "
                "JOIN {}.jobs j ON j.id = t.job_id"
            ).format(sql.Identifier(schema), sql.Identifier(schema))
        ).fetchall()
    finished = failed = 0
    times: dict[str, list[float]] = {}
    for job_id, created, status, finished_at in rows:
        times.setdefault(job_id, [created])
        if finished_at is not None and status in ("done", "failed"):
            finished += 1
            failed += status == "failed"
            times[job_id].append(finished_at)
    return finished, failed, times


def caller_waits(times: dict[str, list[float]]) -> list[float]:
    """Every gap between a caller's consecutive outcomes, the first counted from the submit."""
    waits: list[float] = []
    for created, *finished in times.values():
        previous = created
        for at in sorted(finished):
            waits.append(at - previous)
            previous = at
    return waits


async def fleet_run(
    n: int, dsn: str, keys: list[str], keys_path: Path, workdir: str, s: FleetSettings, **kw: Any
) -> FleetRun:
    """``n`` instances on a fresh schema; every caller submits one job to the first; timed."""
    import httpx

    delay_ms = round(kw.get("delay", s.delay) * 1000)
    job_size: int = kw.get("job_size", s.job_size)
    site_port: int = kw["site_port"]
    schema = f"bench_fleet_{secrets.token_hex(4)}"
    total = len(keys) * job_size
    try:
        async with (
            httpx.AsyncClient(timeout=30) as client,
            open_fleet(n, dsn, schema, keys_path, workdir, s, client) as instances,
        ):
            base = instances[0][0]
            cpu_before = sum(process_cpu(proc.pid) for _, proc in instances)
            pg_before = postgres_cpu()
            started = time.time()

            async def submit(i: int, key: str) -> None:
                urls = [
                    {"url": f"http://{SITE_HOST}:{site_port}/ms/{delay_ms}/{schema}/{i}/{t}"}
                    for t in range(job_size)
                ]
                answer = await client.post(
                    base + "/v1/batch",
                    json={"targets": urls},
                    headers={"Authorization": f"Bearer {key}"},
                )
                answer.raise_for_status()

            async with trio.open_nursery() as nursery:
                for i, key in enumerate(keys):
                    nursery.start_soon(submit, i, key)
            with trio.fail_after(FINISH_TIMEOUT):
                while True:
                    finished, failed, times = await trio.to_thread.run_sync(
                        read_outcomes, dsn, schema
                    )
                    if finished >= total:
                        break
                    await trio.sleep(0.2)
            serve_cpu = sum(process_cpu(proc.pid) for _, proc in instances) - cpu_before
            pg_cpu = postgres_cpu() - pg_before
    finally:
        await trio.to_thread.run_sync(drop_pg_schema, dsn, schema)
    last = max(max(v) for v in times.values())
    return FleetRun(n, total, last - started, caller_waits(times), failed, serve_cpu, pg_cpu)


# -- the figures ----------------------------------------------------------------------------------


async def fleet_figures(dsn: str, s: FleetSettings, workdir: str) -> list[Figure]:
    """The I/O-bound fleet at each instance count, then the same with the page answering at once."""
    figures: list[Figure] = []
    keys_path = Path(workdir) / "fleet-keys.toml"
    keys = make_keys(keys_path, s.callers)
    async with trio.open_nursery() as nursery:
        site_port = await nursery.start(serve_site)
        run = functools.partial(fleet_run, dsn=dsn, keys=keys, keys_path=keys_path, s=s)
        rates: dict[int, list[float]] = {}
        for n in s.instances:
            rates[n] = []
            p99: list[float] = []
            cpu: list[float] = []
            for _ in range(s.repeats):
                r = await run(n, workdir=workdir, site_port=site_port)
                rates[n].append(r.targets / r.seconds)
                p99.append(percentile(r.waits, 99) * 1000)
                cpu.append(r.serve_cpu / r.targets * 1000)
                log(
                    f"FLEET {n} instance(s), {s.delay * 1000:.0f} ms pages: "
                    f"{rates[n][-1]:7.1f} targets/s, caller wait p99 {p99[-1]:6.0f} ms, "
                    f"serve CPU {cpu[-1]:5.1f} ms a target (load {os.getloadavg()[0]:.1f})"
                    + (f", {r.failed} failed" if r.failed else "")
                )
            extra = {
                "instances": n,
                "callers": s.callers,
                "job_targets": s.job_size,
                "workers_per_instance": s.workers,
                "page_seconds": s.delay,
                "load_average_after": os.getloadavg()[0],
            }
            figures.append(
                Figure(
                    "FLEET",
                    "postgres",
                    f"{n} instances",
                    "I/O-bound throughput",
                    "targets/s",
                    rates[n],
                    True,
                    extra,
                )
            )
            figures.append(
                Figure(
                    "FLEET",
                    "postgres",
                    f"{n} instances",
                    "caller wait p99",
                    "ms",
                    p99,
                    False,
                    {
                        **extra,
                        "wait": "gap between a caller's consecutive outcomes, "
                        "the first from its submit",
                    },
                )
            )
            figures.append(
                Figure(
                    "FLEET",
                    "postgres",
                    f"{n} instances",
                    "serve CPU per target, 100 ms pages",
                    "ms",
                    cpu,
                    False,
                    extra,
                )
            )
        low, high = min(s.instances), max(s.instances)
        if low != high:
            ratios = [h / lo for h, lo in zip(rates[high], rates[low], strict=True)]
            figures.append(
                Figure(
                    "FLEET",
                    "postgres",
                    f"{high} vs {low} instances",
                    "throughput ratio",
                    "x",
                    ratios,
                    True,
                    {"goal": 2.5},
                )
            )
            log(f"FLEET {high} vs {low} instances: {statistics.median(ratios):.2f}x")
        for n in s.saturation_instances:
            r = await run(
                n, workdir=workdir, site_port=site_port, delay=0.0, job_size=s.saturation_job_size
            )
            figures += saturation_figures(r, s)
        nursery.cancel_scope.cancel()
    return figures


def saturation_figures(r: FleetRun, s: FleetSettings) -> list[Figure]:
    """Claims/s with the page answering at once, and what each claimed target cost the serves."""
    extra = {
        "instances": r.instances,
        "targets": r.targets,
        "workers_per_instance": s.workers,
        "load_average_after": os.getloadavg()[0],
    }
    cpu = r.serve_cpu / r.targets * 1000
    pg_cpu = r.postgres_cpu / r.targets * 1000
    log(
        f"FLEET {r.instances} instance(s), instant pages: {r.targets / r.seconds:7.0f} claims/s, "
        f"CPU a target: serve {cpu:5.1f} ms, PostgreSQL <= {pg_cpu:5.2f} ms "
        f"(load {os.getloadavg()[0]:.1f})"
    )
    return [
        Figure(
            "FLEET",
            "postgres",
            f"{r.instances} instances",
            "claims/s, instant pages",
            "claims/s",
            [r.targets / r.seconds],
            True,
            extra,
        ),
        Figure(
            "FLEET",
            "postgres",
            f"{r.instances} instances",
            "serve CPU per target, instant pages",
            "ms",
            [cpu],
            False,
            extra,
        ),
        Figure(
            "FLEET",
            "postgres",
            f"{r.instances} instances",
            "PostgreSQL CPU per target (upper bound), instant pages",
            "ms",
            [pg_cpu],
            False,
            extra,
        ),
    ]


async def admissions_while_draining(
    dsn: str, s: FleetSettings, workdir: str, *, drain: bool = True
) -> tuple[float, int]:
    """Admissions/s of ``s.admissions`` jobs submitted one after the other as the engine drains.

    With ``drain`` false the fetch never returns, so the workers hold their first targets and
    nothing is written but the admissions: the same machine's rate without outcomes beside it.

    Returns the rate and how many targets had been fetched when the last submit returned (so a
    reader sees the drain ran alongside). The rest of the drain is not waited for: the engine
    closes and the schema is dropped.
    """
    from trio_batch import Caller, Hooks, Result, Target, open_engine

    fetched = 0

    async def counting_fetch(caller: Caller, target: Target) -> Result:
        nonlocal fetched
        fetched += 1
        if not drain:
            await trio.sleep_forever()
        return await noop_fetch(caller, target)

    jobs = chunked(targets_for("adm", s.admissions * s.admission_job_size), s.admission_job_size)
    config = caps(len(jobs), s.admission_job_size, Hooks(), s.engine_workers)
    async with (
        open_bench_store("postgres", workdir, dsn) as store,
        open_engine(store, counting_fetch, config) as engine,
    ):
        caller = Caller("bench")
        started = time.perf_counter()
        for targets in jobs:
            await engine.submit(caller, "fleet", targets)
        seconds = time.perf_counter() - started
        fetched_by_then = fetched
    return len(jobs) / seconds, fetched_by_then


async def one_instance_figures(dsn: str, s: FleetSettings, workdir: str) -> list[Figure]:
    """Admissions while draining, and W1 at two job counts, on one in-process engine."""
    rates: list[float] = []
    idle: list[float] = []
    for _ in range(s.w1_repeats):
        idle.append((await admissions_while_draining(dsn, s, workdir, drain=False))[0])
        rate, fetched = await admissions_while_draining(dsn, s, workdir)
        rates.append(rate)
        log(
            f"FLEET one instance: {rate:6.0f} admissions/s while draining ({fetched} targets "
            f"fetched by the last submit), {idle[-1]:6.0f}/s with the workers idle"
        )
    figures = [
        Figure(
            "FLEET",
            "postgres",
            "1 instance",
            "admissions/s while draining",
            "jobs/s",
            rates,
            True,
            {"jobs": s.admissions, "job_targets": s.admission_job_size, "goal": 500},
        ),
        Figure(
            "FLEET",
            "postgres",
            "1 instance",
            "admissions/s, workers idle",
            "jobs/s",
            idle,
            True,
            {"jobs": s.admissions, "job_targets": s.admission_job_size},
        ),
    ]
    w1: dict[int, list[float]] = {n: [] for n in s.w1_jobs}
    for _ in range(s.w1_repeats):
        for n in s.w1_jobs:
            run = await engine_drain(
                "postgres",
                workdir,
                dsn,
                n_targets=n * s.w1_job_size,
                job_size=s.w1_job_size,
                fetch=noop_fetch,
                workers=s.engine_workers,
            )
            w1[n].append(run.targets / run.seconds)
            log(f"FLEET W1 with {n} jobs: {w1[n][-1]:7.0f} targets/s")
    for n, values in w1.items():
        figures.append(
            Figure(
                "FLEET",
                "postgres",
                "1 instance",
                f"W1 with {n} jobs",
                "targets/s",
                values,
                True,
                {"jobs": n, "job_targets": s.w1_job_size},
            )
        )
    small, large = s.w1_jobs
    ratios = [b / a for a, b in zip(w1[small], w1[large], strict=True)]
    figures.append(
        Figure(
            "FLEET",
            "postgres",
            "1 instance",
            f"W1 {large} / {small} jobs",
            "x",
            ratios,
            True,
            {"goal": 0.8} if s.w1_jobs == (100, 500) else {},
        )
    )
    return figures


def run_fleet(dsn: str, s: FleetSettings, workdir: str) -> list[Figure]:
    """Every FLEET figure: the fleet runs, then one instance's write path."""
    figures = trio.run(fleet_figures, dsn, s, workdir)
    if s.admissions:
        figures += trio.run(one_instance_figures, dsn, s, workdir)
    return figures


def fleet_goals(figures: Sequence[Figure]) -> list[tuple[str, float, bool, str]]:
    """The issue's FLEET goals met or not: (goal, value, met, detail) for each measured one."""
    out: list[tuple[str, float, bool, str]] = []
    for fig in figures:
        if fig.workload != "FLEET" or "goal" not in fig.extra:
            continue
        goal, value = fig.extra["goal"], fig.median
        if fig.name == "throughput ratio":
            out.append((f"FLEET {fig.system} >= {goal}x", value, value >= goal, f"{value:.2f}x"))
        elif fig.name.startswith("admissions"):
            out.append(
                (f"admissions while draining >= {goal}/s", value, value >= goal, f"{value:,.0f}/s")
            )
        else:
            out.append((f"{fig.name} >= {goal}", value, value >= goal, f"{value:.2f}x"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.fleet``: measure, print every figure, optionally write them as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--pg", default=os.environ.get(PG_ENV, ""), help="PostgreSQL DSN")
    parser.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    parser.add_argument("--tiny", action="store_true", help="a few seconds (the harness test)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--repeats", type=int, help="repeats of each measurement (default 2, W1 3)")
    args = parser.parse_args(argv)
    if not args.pg:
        parser.error(f"needs a PostgreSQL DSN: --pg DSN or {PG_ENV}")
    s = FLEET_TINY if args.tiny else FLEET_QUICK if args.quick else FLEET_FULL
    if args.repeats:
        s = replace(s, repeats=args.repeats, w1_repeats=args.repeats)
    with tempfile.TemporaryDirectory(prefix="trio-batch-fleet-") as workdir:
        figures = run_fleet(args.pg, s, workdir)
    for fig in figures:
        spread = "" if len(fig.values) == 1 else f" ({min(fig.values):.4g}-{max(fig.values):.4g})"
        print(f"{fig.system:22} {fig.name:32} {fig.median:10.4g} {fig.unit}{spread}")
    for goal, _, met, detail in fleet_goals(figures):
        print(f"goal: {goal}: {detail} ({'met' if met else 'NOT met'})")
    if args.json:
        args.json.write_text(json.dumps([f.to_json() for f in figures], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
