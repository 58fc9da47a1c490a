"""What every test room shares.

- The callers ``ALICE`` and ``BOB``, a movable :class:`WallClock`, a :class:`Recorder` of the
  engine's hooks, ``CLEAN_ENV`` for a command in a child process.
- Waiting until a job ends: :func:`wait_ended` on the engine's watch, :func:`wait_ended_polling`
  for a fleet.
- Wall-clock bounds a loaded machine cannot break: :func:`fastest` (the least of a few timings)
  and :func:`slack` (a bound's floor, or a multiple of a baseline measured in the same test).
- :class:`FakeHosts`, a fetch function over hosts that record what they received (for the host
  budgets).
- :class:`LocalSite`, a local HTTP site that answers as a test routes it and records every
  request (for the web fetcher, the headers a target sends, the browser, the served kill tests).
- :class:`TrioGuestDriver`, Trio driven from synchronous Hypothesis rules (the state machines).
"""

from __future__ import annotations

import functools
import os
import queue
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import h11
import outcome
import trio
import trio.testing

from trio_batch import BatchEngine, Caller, Hooks, JobStatus, Result, RetryLater, Target

T = TypeVar("T")

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_BATCH_")}
"""This environment without its ``TRIO_BATCH_*`` variables, the settings a ``trio-batch``
command in a child process would read (pass it as ``env``; never change it)."""

ALICE = Caller("alice")
BOB = Caller("bob")


def fresh_python(script: str) -> str:
    """What ``script`` prints, run in a new interpreter (nothing the tests imported is loaded)."""
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return run.stdout


def slack(floor: float, baseline: float, times: float = 10.0) -> float:
    """Seconds a wall-clock bound may pass its promise by: ``floor`` on an idle machine, or
    ``times`` a ``baseline`` measured in the same test if that is more (a loaded machine
    stretches the baseline as much as what the bound is about)."""
    return max(floor, times * baseline)


def fastest(fn: Callable[[], object], rounds: int = 5) -> float:
    """The shortest wall-clock time of ``rounds`` calls of ``fn``, in seconds.

    What a test of "this is cheap" compares, against the same measure of a baseline made in
    the same test: on a loaded machine one call may lose the CPU to another process for a
    while, but not every one of them, and the baseline slows down as much as the call does.
    """
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class WallClock:
    """A wall clock the test moves by hand (for leases and TTL)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    """Hooks that record every call, and a way to wait for a condition on them."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.targets: list[tuple[BaseException | None, float, int]] = []
        self.job_seconds: list[float] = []
        self.depths: list[int] = []
        self.inflights: list[int] = []
        self.retries: list[float] = []
        self.evictions: list[int] = []
        self.claims: list[tuple[int, int]] = []
        self._changed = trio.Event()

    def hooks(self) -> Hooks:
        return Hooks(
            job=self._add(self.jobs),
            target=lambda err, secs, size: self._record(self.targets, (err, secs, size)),
            job_seconds=self._add(self.job_seconds),
            depth=self._add(self.depths),
            inflight=self._add(self.inflights),
            retry=self._add(self.retries),
            evicted=self._add(self.evictions),
            claimed=lambda turns, taken_over: self._record(self.claims, (turns, taken_over)),
        )

    def _add(self, into: list[T]) -> Callable[[T], None]:
        return lambda value: self._record(into, value)

    def _record(self, into: list[T], value: T) -> None:
        into.append(value)
        self._changed.set()
        self._changed = trio.Event()

    def terminal(self) -> int:
        """How many jobs the hooks saw end (done, partial, failed or cancelled)."""
        return sum(e in ("done", "partial", "failed", "cancelled") for e in self.jobs)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (on hook events, not on time) until ``condition()`` holds."""
        await wait_any_until([self], condition)


async def wait_any_until(recorders: list[Recorder], condition: Callable[[], bool]) -> None:
    """Wait (on hook events of any of ``recorders``, not on time) until ``condition()``
    holds: for a condition on several engines' hooks, as a fleet's."""

    async def wake(event: trio.Event, scope: trio.CancelScope) -> None:
        await event.wait()
        scope.cancel()

    while not condition():
        async with trio.open_nursery() as nursery:
            for rec in recorders:
                nursery.start_soon(wake, rec._changed, nursery.cancel_scope)


async def wait_ended(engine: BatchEngine, *job_ids: str) -> list[JobStatus]:
    """The jobs' statuses once each has ended (is no longer live), in order: woken by the
    engine's watch of each job, never by time, so it suits Trio's ``autojump_clock``.

    The watch opens before each read, so an end between the read and the wait is not missed.
    The engine runs its hooks before a watcher wakes, so a :class:`Recorder` has seen the end
    too. Unbounded: a test on the real clock bounds it with ``trio.fail_after``. On a fleet, a
    job another instance runs ends unseen by this engine's watch: use
    :func:`wait_ended_polling` there.
    """
    ended = []
    for job_id in job_ids:
        with engine.watch(job_id) as watch:
            while (job := await engine.job(job_id)) is not None and job.status.live:
                await watch.wait()
        assert job is not None, f"no job {job_id}"
        ended.append(job.status)
    return ended


POLL_SECONDS = 0.02
"""How often :func:`wait_ended_polling` reads a shared store."""


async def wait_ended_polling(
    engine: BatchEngine, *job_ids: str, within: float = 60.0
) -> list[JobStatus]:
    """:func:`wait_ended` for a fleet (several engines on one store): the jobs' statuses once
    each has ended, read from the shared store every ``POLL_SECONDS`` on the real clock.

    Another instance's outcomes reach no watch or hook of ``engine``, so this polls; the wait
    fails with :class:`trio.TooSlowError` past ``within`` seconds.
    """
    ended = []
    with trio.fail_after(within):
        for job_id in job_ids:
            while True:
                job = await engine.job(job_id)
                assert job is not None, f"no job {job_id}"
                if not job.status.live:
                    break
                await trio.sleep(POLL_SECONDS)  # other processes write it: poll the real clock
            ended.append(job.status)
    return ended


def targets(prefix: str, n: int) -> list[Target]:
    return [Target(f"https://{prefix}.example.test/page/{i}") for i in range(n)]


def url(prefix: str, i: int) -> str:
    return f"https://{prefix}.example.test/page/{i}"


def host_of(target: Target) -> str:
    return urlsplit(target.url).netloc


class FakeHosts:
    """A fetch function over hosts that record when each request started, in which order, and
    how many were in flight at once; a host answers 429 until its ``busy_until``."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds
        self.starts: dict[str, list[float]] = {}
        self.order: dict[str, list[str]] = {}
        self.in_flight: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.busy_until: dict[str, float] = {}  # answer 429 before this time
        self.retry_after: float | None = 2.0

    async def fetch(self, caller: Caller, target: Target) -> Result:
        host = host_of(target)
        self.starts.setdefault(host, []).append(trio.current_time())
        self.order.setdefault(host, []).append(target.url)
        self.in_flight[host] = self.in_flight.get(host, 0) + 1
        self.most[host] = max(self.most.get(host, 0), self.in_flight[host])
        try:
            await trio.sleep(self.seconds)
            if trio.current_time() < self.busy_until.get(host, -1.0):
                raise RetryLater("429 Too Many Requests", after=self.retry_after)
            return Result("ok")
        finally:
            self.in_flight[host] -= 1


# -- a local HTTP site ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What the local site answers to one request."""

    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[bytes] | None = None
    """Send these chunked, without a Content-Length."""
    stall: bool = False
    """Send the headers and the first chunk, then hang."""
    silent: bool = False
    """Send nothing, ever (a request that never ends)."""
    hold: trio.Event | None = None
    """Wait for this event before answering."""
    delay: float = 0.0
    """Wait this long (Trio's clock) before answering."""


NOT_FOUND = Reply(404, b"not found", [("content-type", "text/plain")])
"""What the site answers a path with no route."""


def redirect(to: str, status: int = 302) -> Reply:
    """A redirect to ``to``."""
    return Reply(status, headers=[("location", to)])


@dataclass(frozen=True)
class Seen:
    """One request the site received."""

    path: str
    """The request target without its query."""
    headers: dict[str, str]
    """Its headers, by lower-case name."""
    at: float
    """When it arrived (Trio's clock)."""


class LocalSite:
    """A small HTTP/1.1 site (h11 over Trio, keep-alive) on a loopback address: it answers each
    path with the replies a test routed there, and records every request it received."""

    def __init__(self, host: str = "127.0.0.1", unrouted: Reply = NOT_FOUND) -> None:
        self.host = host
        self.port = 0
        self.unrouted = unrouted
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.arrived = trio.Event()
        """Set once a request has arrived."""
        self._routes: dict[str, list[Reply]] = {}

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.origin + path

    def route(self, path: str, *replies: Reply) -> None:
        """Answer ``path`` with ``replies`` in turn; the last one repeats."""
        self._routes[path] = list(replies)

    def paths(self) -> list[str]:
        """The path of every request, in order."""
        return [seen.path for seen in self.seen]

    @property
    def hits(self) -> Counter[str]:
        """Requests per path."""
        return Counter(self.paths())

    def headers_of(self, path: str) -> list[dict[str, str]]:
        """The headers of each request for ``path``, in order."""
        return [seen.headers for seen in self.seen if seen.path == path]

    def header(self, name: str) -> list[str]:
        """Header ``name`` of every request, in order ("" where it was not sent)."""
        return [seen.headers.get(name, "") for seen in self.seen]

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one connection (what ``trio.serve_tcp`` calls)."""
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await _next_request(conn, stream)
                if request is None:
                    return
                await self._answer(conn, stream, self._record(request))
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    def _record(self, request: h11.Request) -> Reply:
        path = request.target.decode().split("?", 1)[0]
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        self.seen.append(Seen(path, headers, trio.current_time()))
        self.arrived.set()
        replies = self._routes.get(path)
        if not replies:
            return self.unrouted
        return replies.pop(0) if len(replies) > 1 else replies[0]

    async def _answer(self, conn: h11.Connection, stream: trio.abc.Stream, reply: Reply) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if reply.silent:
                await trio.sleep_forever()
            if reply.hold is not None:
                await reply.hold.wait()
            if reply.delay:
                await trio.sleep(reply.delay)
            headers = list(reply.headers)
            if reply.chunks is None:
                headers.append(("content-length", str(len(reply.body))))
            response = h11.Response(status_code=reply.status, headers=headers)
            await stream.send_all(conn.send(response))
            for chunk in reply.chunks if reply.chunks is not None else [reply.body]:
                if chunk:
                    await stream.send_all(conn.send(h11.Data(data=chunk)))
                if reply.stall:
                    await trio.sleep_forever()
            await stream.send_all(conn.send(h11.EndOfMessage()))
        finally:
            self.in_flight -= 1


async def _next_request(conn: h11.Connection, stream: trio.abc.Stream) -> h11.Request | None:
    """The next whole request on ``conn`` (None: the client closed or wants to switch)."""
    request = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def serve_site(
    nursery: trio.Nursery, host: str = "127.0.0.1", unrouted: Reply = NOT_FOUND
) -> LocalSite:
    """A :class:`LocalSite` on ``host`` (any free port), served until ``nursery`` ends."""
    site = LocalSite(host, unrouted)
    listeners: list[trio.SocketListener] = await nursery.start(
        functools.partial(trio.serve_tcp, site.handle, 0, host=host)
    )
    site.port = listeners[0].socket.getsockname()[1]
    return site


@asynccontextmanager
async def open_site(
    host: str = "127.0.0.1", unrouted: Reply = NOT_FOUND
) -> AsyncIterator[LocalSite]:
    """A :class:`LocalSite` on ``host`` (any free port) for the block's life."""
    async with trio.open_nursery() as nursery:
        yield await serve_site(nursery, host, unrouted)
        nursery.cancel_scope.cancel()


# -- Trio from synchronous Hypothesis rules -------------------------------------------------------


class TrioGuestDriver:
    """One Trio guest run, hosted by the calling thread, for the life of one Hypothesis example.

    Drive a long-lived Trio run from synchronous Hypothesis rules, via Trio's guest mode.

    Hypothesis runs the rules of a ``RuleBasedStateMachine`` as plain synchronous calls, and a
    ``trio.run`` per rule would close every nursery (an engine's, a store's) when the rule returns.
    So one run per example is started with ``trio.lowlevel.start_guest_run`` as the guest of a tiny
    host loop: a ``queue.SimpleQueue`` of callbacks that the test thread pumps until the rule's call
    has an answer. Trio thus runs in the test's own thread (plain tracebacks, nothing shared across
    threads), an engine opened in one rule stays open across rules, and a crash of the run is
    re-raised at the next step. A nursery must be exited by the task that entered it, so
    :meth:`TrioGuestDriver.enter` holds each ``async with`` open in one holder task. (The
    ``hypothesis-trio`` package would do this, but it no longer imports with current Hypothesis and
    fails under Trio's strict exception groups.)
    """

    def __init__(self, clock: trio.abc.Clock | None = None) -> None:
        self._queue: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._done: outcome.Outcome[None] | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._exits: list[trio.Event] = []
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self._queue.put,
            done_callback=self._on_done,
            clock=clock,
        )
        self._pump_until(lambda: self._nursery is not None)

    def _on_done(self, result: outcome.Outcome[None]) -> None:
        self._done = result

    async def _main(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _pump_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            if self._done is not None:
                self._done.unwrap()
                raise RuntimeError("the trio run ended unexpectedly")
            self._queue.get()()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` inside the guest run and return its result."""
        box: list[outcome.Outcome[T]] = []

        async def runner() -> None:
            box.append(await outcome.acapture(fn, *args))

        nursery = self._nursery
        assert nursery is not None
        self._queue.put(lambda: nursery.start_soon(runner))
        self._pump_until(lambda: bool(box))
        return box[0].unwrap()

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Hold ``async with manager`` open in one task until :meth:`close`."""

        async def start() -> T:
            async def holder(task_status: trio.TaskStatus[tuple[T, trio.Event]]) -> None:
                leave = trio.Event()
                async with manager as value:
                    task_status.started((value, leave))
                    await leave.wait()

            assert self._nursery is not None
            value: T
            value, leave = await self._nursery.start(holder)
            self._exits.append(leave)
            return value

        return self.call(start)

    def close(self) -> None:
        """Leave every :meth:`enter` block (the last entered first), then end the run."""
        while self._exits:
            leave = self._exits.pop()

            async def fire(leave: trio.Event = leave) -> None:
                leave.set()
                await trio.testing.wait_all_tasks_blocked()

            self.call(fire)
        assert self._stop is not None
        self._queue.put(self._stop.set)
        self._pump_until(lambda: self._done is not None)
        assert self._done is not None
        self._done.unwrap()
