"""W6: what a follower of one job costs, in memory and CPU (issue 14: "many followers (200) of
one job cost little").

:func:`follower_run` is one ``trio.run``: a job of ``targets`` noop targets whose first target
waits on a gate, ``followers`` streams of it (``GET /v1/batch/{id}/results?follow=1``, NDJSON,
or ``GET /v1/batch/{id}/events``, SSE), then the gate opens and the job runs to its end. The app
runs in-process, driven through ASGI by the smallest client there is (it counts the bytes it
gets and keeps none), so the figures are the server's own cost of a stream without hypercorn's
socket handling. It measures:

- while the followers wait: the resident set size (``/proc/self/statm``) and, with
  ``measure_heap``, the Python heap (tracemalloc, in a run of its own: tracing inflates both the
  RSS and the CPU), each minus the same just before the first follower connected;
- CPU (``time.process_time``, every thread of the process: the store's threads too) to connect
  them, and to run the job to its end with them; ``bench/run.py`` subtracts the same job run
  with no follower, and divides by followers and targets;
- the store reads made while the job ran (1 a change when the followers share their reads).

The followers connect in waves of ``wave`` (default 50): each wave's requests are answered and
their watches open before the next wave starts. A burst of 200 requests at once queues 200 reads
of the job (each request checks its owner) behind the store's few reader threads; that measures
a connection burst, not what a follower costs. Any follower answered other than 200 stops the
run at once with an error that says so, and so does a wave that is not watching within
``deadline`` seconds: nothing waits for ever.

:func:`measure` runs each repeat in a fresh process (``python -m bench.followers --json``): in a
process that has already freed a run's followers, the next run's followers reuse that memory
and the RSS shows little. ``python -m bench.followers`` prints one store's figures;
``python -m bench.run --only W6`` puts them in ``bench/results/latest.*``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from trio_batch import BatchEngine, Caller, Hooks, Result, Target, open_engine
from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key
from trio_batch.testing import asgi_lifespan

from ._harness import HERE, PG_ENV, RESULT, TerminalCounter, caps, open_bench_store, targets_for

ROUTES: dict[str, tuple[str, dict[str, str]]] = {
    "results": ("results", {"follow": "1"}),  # NDJSON, one line per target, follow=1
    "events": ("events", {}),  # SSE: a target event per target, then end
}
"""Route name -> (the path's last part, the query)."""

LABELS = {"results": "NDJSON follow", "events": "SSE events"}

_KEY = "tb_bench-follower-key"
_READS = ("read_job", "read_targets", "job_summary")


@dataclass(frozen=True)
class FollowerRun:
    """What one :func:`follower_run` measured."""

    followers: int
    targets: int
    route: str
    rss_bytes: int | None
    """RSS while the followers wait, minus RSS before they connected (None: no /proc)."""
    heap_bytes: int | None
    """Python heap likewise (tracemalloc), with ``measure_heap`` only."""
    connect_cpu: float
    """Process CPU seconds from the first follower's request until all of them watch."""
    run_cpu: float
    """Process CPU seconds from the gate's opening until the job and every follower ended."""
    reads: int
    """Store reads (job, targets, summary) while the job ran."""
    received: int
    """Body bytes the followers got, all together."""


def rss_bytes() -> int | None:
    """This process's resident set size now (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _count_reads(store: object, counts: list[int]) -> None:
    """Count the store's reads in ``counts[0]`` (an instance attribute hides each method)."""

    def counted(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def read(*args: Any, **kwargs: Any) -> Any:
            counts[0] += 1
            return await method(*args, **kwargs)

        return read

    for name in _READS:
        setattr(store, name, counted(getattr(store, name)))


async def _follow(app: Any, path: str, query: str, on_status: Callable[[int], None]) -> int:
    """GET ``path`` on ``app`` until the app returns; the body's length (the bytes are dropped)."""
    asked = False
    received = 0
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"authorization", f"Bearer {_KEY}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("bench.invalid", 80),
        "state": {},
    }

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await trio.sleep_forever()  # the client never hangs up: the stream ends by itself
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal received
        if message["type"] == "http.response.start":
            on_status(message["status"])
        else:
            received += len(message.get("body", b""))

    await app(scope, receive, send)
    return received


async def _wait_watching(
    engine: BatchEngine, n: int, refused: list[int], deadline: float, route: str
) -> str | None:
    """Wait until ``n`` followers watch the job; or why they never will."""
    # A watch opens after its answer has begun, and nothing signals it, so poll. Not with
    # wait_all_tasks_blocked: a task waiting for a store thread counts as blocked, so that
    # returns at once and the loop spins, taking the GIL from the very threads that answer the
    # followers' reads (the cause of the store time-outs of an earlier version of this script).
    while engine.watchers < n:
        if refused:
            return (
                f"a {route} follower was answered {refused[0]}, not 200 ({len(refused)} so far): "
                "the measurement would not mean anything; is the machine overloaded?"
            )
        if trio.current_time() > deadline:
            return (
                f"only {engine.watchers} of {n} {route} followers watch the job after the "
                "deadline: the store answers too slowly here"
            )
        await trio.sleep(0.005)
    return None


@dataclass
class _GatedJob:
    """The job the followers follow: noop targets, the first of which waits on ``gate``.

    The gate holds the job open while the followers connect and wait, so what they cost while
    waiting is measured apart from what they cost while the job runs (the gate's opening).
    """

    targets: list[Target]
    first_url: str = field(init=False)
    gate: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        """Take the first URL once: every fetch compares its target with it."""
        self.first_url = self.targets[0].url

    async def fetch(self, caller: Caller, target: Target) -> Result:
        """The engine's fetch function: the first target waits for the gate, every one is noop."""
        if target.url == self.first_url:
            await self.gate.wait()
        return RESULT


@dataclass
class _Followers:
    """The followers of one job: how each asks, and what they tell between them (the statuses
    other than 200 that stop the run, and the body bytes they got)."""

    app: Any
    path: str
    query: str
    refused: list[int] = field(default_factory=list)
    received: int = 0

    @classmethod
    def of(cls, app: Any, job_id: str, route: str) -> _Followers:
        """The followers of job ``job_id`` on ``route`` (a key of :data:`ROUTES`)."""
        tail, params = ROUTES[route]
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return cls(app, f"/v1/batch/{job_id}/{tail}", query)

    def on_status(self, status: int) -> None:
        """Keep a status other than 200: :func:`_wait_watching` stops the run on it."""
        if status != 200:
            self.refused.append(status)

    async def follow(self) -> None:
        """One follower, from its request until its stream ends."""
        self.received += await _follow(self.app, self.path, self.query, self.on_status)


@dataclass(frozen=True)
class _Before:
    """Memory and CPU just before the first follower connects, which the waiting followers'
    figures are measured from (the job, the app and the store are already in them)."""

    rss: int | None
    heap: int
    """The traced heap (0 without ``measure_heap``)."""
    cpu: float
    measure_heap: bool

    @classmethod
    def now(cls, *, measure_heap: bool) -> _Before:
        """Collect the garbage first, so what an earlier step left is not counted as freed
        later; start tracemalloc here (``measure_heap``) so that it traces the followers only."""
        gc.collect()
        heap = 0
        if measure_heap:
            tracemalloc.start()
            heap = tracemalloc.get_traced_memory()[0]
        return cls(rss_bytes(), heap, time.process_time(), measure_heap)


@dataclass(frozen=True)
class _Waiting:
    """What the followers cost while they wait, over :class:`_Before`."""

    connect_cpu: float
    rss_bytes: int | None
    """None without /proc, and under tracemalloc (tracing inflates the RSS)."""
    heap_bytes: int | None
    """None without ``measure_heap``."""

    @classmethod
    def since(cls, before: _Before) -> _Waiting:
        """Take the CPU first (the garbage collection after it is not the followers' cost),
        then the RSS and the heap; stop tracemalloc, so the job's run is not traced."""
        connect_cpu = time.process_time() - before.cpu
        gc.collect()
        rss_now = rss_bytes()
        heap = None
        if before.measure_heap:
            heap = tracemalloc.get_traced_memory()[0] - before.heap
            tracemalloc.stop()

        traced = before.measure_heap
        rss = None if before.rss is None or rss_now is None or traced else rss_now - before.rss
        return cls(connect_cpu, rss, heap)


async def _connect_in_waves(
    nursery: trio.Nursery,
    engine: BatchEngine,
    crowd: _Followers,
    followers: int,
    *,
    wave: int,
    deadline: float,
    route: str,
) -> str | None:
    """Start ``followers`` followers in ``nursery``, ``wave`` at a time, each wave watching
    before the next one starts (module docstring: a burst measures the store's queue, not a
    follower); or why they did not all watch, with the nursery cancelled."""
    until = trio.current_time() + deadline
    step = wave if wave > 0 else max(1, followers)
    for begun in range(0, followers, step):
        for _ in range(min(step, followers - begun)):
            nursery.start_soon(crowd.follow)

        watching = min(begun + step, followers)
        failure = await _wait_watching(engine, watching, crowd.refused, until, route)
        if failure is not None:
            nursery.cancel_scope.cancel()
            return failure
    return None


@dataclass(frozen=True)
class _Measured:
    """What :func:`_measure` got: the waiting figures, the run's CPU seconds, or why the
    followers did not all watch (then the figures mean nothing)."""

    waiting: _Waiting
    run_cpu: float
    failure: str | None


async def _measure(
    engine: BatchEngine,
    job: _GatedJob,
    crowd: _Followers,
    finished: trio.Event,
    reads: list[int],
    *,
    followers: int,
    wave: int,
    deadline: float,
    route: str,
    measure_heap: bool,
) -> _Measured:
    """Connect the followers, measure them waiting, then open the gate and measure the job's
    run to its end with them.

    The run's CPU is taken after the nursery has closed: every follower's stream has ended
    there, so its last writes are in it. A failure is returned, not raised: the caller raises
    it once the app, the engine and the store are closed, as itself and not in a group.
    """
    before = _Before.now(measure_heap=measure_heap)
    async with trio.open_nursery() as nursery:
        failure = await _connect_in_waves(
            nursery, engine, crowd, followers, wave=wave, deadline=deadline, route=route
        )
        waiting = _Waiting.since(before)

        reads[0] = 0
        cpu_before_run = time.process_time()
        job.gate.set()
        if failure is None:
            await finished.wait()
    run_cpu = time.process_time() - cpu_before_run

    return _Measured(waiting, run_cpu, failure)


async def follower_run(
    kind: str,
    workdir: str,
    pg_dsn: str,
    *,
    followers: int,
    targets: int,
    route: str = "results",
    wave: int = 50,
    workers: int = 2,
    measure_heap: bool = False,
    store_timeout: float = 5.0,
    deadline: float = 60.0,
) -> FollowerRun:
    """W6 once: ``followers`` streams of one job of ``targets`` targets (module docstring).

    This sets the stage (the store with its reads counted, the engine, the app, the gated job)
    and tears it down; :func:`_measure` does the measuring.

    Raises:
        RuntimeError: a follower was answered other than 200, or the followers were not all
            watching within ``deadline`` seconds.
    """
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)} (got {route!r})")
    job = _GatedJob(targets_for("w6", targets))
    counter = TerminalCounter()
    config = caps(1, targets, Hooks(job=counter), workers)
    keys = KeyRing([KeyRecord("bench", "", "fleet", hash_key(_KEY))])
    reads = [0]

    async with (
        open_bench_store(kind, workdir, pg_dsn) as store,
        open_engine(store, job.fetch, config) as engine,
    ):
        _count_reads(store, reads)
        app = create_app(
            engine,
            keys,
            precheck=lambda url: None,
            access_log_enabled=False,
            store_timeout=store_timeout,
        )
        async with asgi_lifespan(app):
            finished = counter.expect(1)
            submitted = await engine.submit(Caller("bench"), "fleet", job.targets)
            crowd = _Followers.of(app, submitted.id, route)
            measured = await _measure(
                engine,
                job,
                crowd,
                finished,
                reads,
                followers=followers,
                wave=wave,
                deadline=deadline,
                route=route,
                measure_heap=measure_heap,
            )

    if measured.failure is not None:
        raise RuntimeError(measured.failure)  # here, not in a nursery: as itself, not in a group
    waiting = measured.waiting
    return FollowerRun(
        followers,
        targets,
        route,
        waiting.rss_bytes,
        waiting.heap_bytes,
        waiting.connect_cpu,
        measured.run_cpu,
        reads[0],
        crowd.received,
    )


@dataclass(frozen=True)
class FollowerCost:
    """Per-follower figures of one store and route, from :func:`measure`."""

    rss_bytes: list[float]
    """RSS a waiting follower holds, per repeat (empty: no /proc)."""
    heap_bytes: list[float]
    """Python heap a waiting follower holds (one tracemalloc run)."""
    connect_cpu: list[float]
    """CPU seconds to connect a follower, per repeat."""
    target_cpu: list[float]
    """CPU seconds a follower adds to one stored target, per repeat."""
    reads_per_target: list[float]
    """Store reads per stored target, all followers together, per repeat."""


def one_repeat(
    kind: str,
    workdir: str,
    pg_dsn: str,
    *,
    followers: int,
    targets: int,
    route: str,
    wave: int = 50,
    workers: int = 2,
    measure_heap: bool = False,
) -> dict[str, Any]:
    """One repeat of one route, in this process: the job alone, then with the followers, then
    (``measure_heap``) with them under tracemalloc; the runs as a JSON-able dict.

    The run with the followers comes right after the run alone: that one warms the code paths
    and the imports, and frees nothing a follower's memory could reuse, so the RSS it measures
    is the followers'. A second run with followers in the same process would reuse the memory
    the first one freed, hence :func:`measure` runs each repeat in a fresh process.
    """
    run = functools.partial(
        follower_run, kind, workdir, pg_dsn, targets=targets, wave=wave, workers=workers
    )
    alone = trio.run(functools.partial(run, followers=0, route=route))
    got = trio.run(functools.partial(run, followers=followers, route=route))
    out = {"alone": dataclasses.asdict(alone), "followers": dataclasses.asdict(got)}
    if measure_heap:
        traced = trio.run(
            functools.partial(run, followers=followers, route=route, measure_heap=True)
        )
        out["heap"] = dataclasses.asdict(traced)
    return out


def measure(
    kind: str,
    pg_dsn: str,
    *,
    followers: int,
    targets: int,
    routes: Sequence[str] = tuple(ROUTES),
    wave: int = 50,
    repeats: int = 3,
    workers: int = 2,
) -> dict[str, FollowerCost]:
    """Each route's per-follower cost on one store: ``repeats`` runs of :func:`one_repeat`, each
    in a fresh process (``python -m bench.followers --json``), the first one with the heap.

    Raises:
        RuntimeError: a run failed (its error output is in the message).
    """
    out = {r: FollowerCost([], [], [], [], []) for r in routes}
    for rep in range(repeats):
        for route in routes:
            argv = [
                sys.executable, "-m", "bench.followers", "--json", "--store", kind,
                "--route", route, "--followers", str(followers), "--targets", str(targets),
                "--wave", str(wave), "--workers", str(workers),
            ]  # fmt: skip
            if rep == 0:
                argv.append("--heap")
            done = subprocess.run(
                argv,
                cwd=HERE.parent,
                env={
                    **os.environ,
                    PG_ENV: pg_dsn,
                },  # not on the command line: it may hold a password
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                error = done.stderr.strip()[-2000:]
                raise RuntimeError(f"W6 {kind} {route} failed (exit {done.returncode}): {error}")
            runs = json.loads(done.stdout)
            alone, got = runs["alone"], runs["followers"]
            cost = out[route]
            if got["rss_bytes"] is not None:
                cost.rss_bytes.append(got["rss_bytes"] / followers)
            cost.connect_cpu.append(got["connect_cpu"] / followers)
            cost.target_cpu.append((got["run_cpu"] - alone["run_cpu"]) / followers / targets)
            cost.reads_per_target.append(got["reads"] / targets)
            if "heap" in runs:
                cost.heap_bytes.append(runs["heap"]["heap_bytes"] / followers)
    return out


def describe(kind: str, route: str, cost: FollowerCost, followers: int, targets: int) -> str:
    """The figures of one store and route as a few lines of text (medians over the repeats)."""
    med = statistics.median
    rss = f"{med(cost.rss_bytes) / 1024:.1f} KiB RSS, " if cost.rss_bytes else ""
    per_target = med(cost.target_cpu)
    return (
        f"{kind} {route} ({LABELS[route]}): {followers} followers x {targets} targets, "
        f"median of {len(cost.target_cpu)}\n"
        f"  a waiting follower: {rss}{med(cost.heap_bytes) / 1024:.1f} KiB Python heap\n"
        f"  CPU: {med(cost.connect_cpu) * 1e6:.0f} us to connect a follower; "
        f"{per_target * 1e6:.1f} us a follower a stored target "
        f"({per_target * followers * 1e3:.2f} ms a stored target for all {followers})\n"
        f"  store reads a stored target, all followers together: "
        f"{med(cost.reads_per_target):.2f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.followers``: measure one store's followers and print the figures."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.followers", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--followers", type=int, default=200)
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--route", choices=[*ROUTES, "both"], default="both")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--wave", type=int, default=50, help="followers connecting at once")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pg", default=os.environ.get(PG_ENV, ""), help="PostgreSQL DSN")
    parser.add_argument(
        "--json", action="store_true", help="one repeat of one route in this process, as JSON"
    )
    parser.add_argument("--heap", action="store_true", help="with --json: the tracemalloc run too")
    args = parser.parse_args(argv)
    if args.followers < 1 or args.targets < 1 or args.repeat < 1:
        parser.error("--followers, --targets and --repeat must be at least 1")
    if args.store == "postgres" and not args.pg:
        parser.error(f"--store postgres needs --pg DSN or {PG_ENV}")
    routes = tuple(ROUTES) if args.route == "both" else (args.route,)
    if args.json:
        if len(routes) != 1:
            parser.error("--json measures one --route")
        with tempfile.TemporaryDirectory(prefix="trio-batch-followers-") as workdir:
            runs = one_repeat(
                args.store,
                workdir,
                args.pg,
                followers=args.followers,
                targets=args.targets,
                route=routes[0],
                wave=args.wave,
                workers=args.workers,
                measure_heap=args.heap,
            )
        print(json.dumps(runs))
        return 0
    costs = measure(
        args.store,
        args.pg,
        followers=args.followers,
        targets=args.targets,
        routes=routes,
        wave=args.wave,
        repeats=args.repeat,
        workers=args.workers,
    )
    for route, cost in costs.items():
        print(describe(args.store, route, cost, args.followers, args.targets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
