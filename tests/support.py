"""What every test room shares: the callers, a movable wall clock, an event recorder, waiting
until a job ends, a site of hosts that records what it received (for the host budgets), and a
real HTTP server that records each request's headers (for the headers a target sends)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

import h11
import trio

from trio_batch import BatchEngine, Caller, Hooks, JobStatus, Result, RetryLater, Target

T = TypeVar("T")

ALICE = Caller("alice")
BOB = Caller("bob")


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
        while not condition():
            await self._changed.wait()


async def wait_ended(engine: BatchEngine, *job_ids: str) -> list[JobStatus]:
    """The jobs' statuses once each has ended (is no longer live), in order: woken by the
    engine's watch of each job, never by time, so it suits Trio's ``autojump_clock``.

    The watch opens before each read, so an end between the read and the wait is not missed.
    The engine reports a job's end before its hooks return, so a :class:`Recorder` has seen it
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


class Site:
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


Route = tuple[int, list[tuple[str, str]], bytes]
"""An answer of :class:`RecordingSite`: status, headers, body."""


class RecordingSite:
    """A local HTTP/1.1 server (h11, keep-alive) that records each request's path and headers
    (lower-case names) and answers from its routes; a path with no route gets ``unrouted``."""

    def __init__(self, host: str, unrouted: Route = (404, [], b"not found")) -> None:
        self.host = host
        self.port = 0
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.routes: dict[str, Route] = {}
        self.unrouted = unrouted

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def route(self, path: str, body: bytes = b"ok", *, to: str = "", status: int = 200) -> None:
        """Answer ``path`` with ``status`` and ``body`` (plain text), or with a 302 to ``to``."""
        self.routes[path] = (302, [("location", to)], b"") if to else (status, [], body)

    def headers_of(self, path: str) -> list[dict[str, str]]:
        return [headers for p, headers in self.requests if p == path]

    async def handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                    if event is h11.NEED_DATA:
                        conn.receive_data(bytes(await stream.receive_some(65536)))
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                await self._answer(stream, conn, request)
                conn.start_next_cycle()
        except (trio.BrokenResourceError, h11.ProtocolError):
            return
        finally:
            await stream.aclose()

    async def _answer(
        self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request
    ) -> None:
        path = request.target.decode()
        self.requests.append((path, {k.decode(): v.decode() for k, v in request.headers}))
        status, headers, body = self.routes.get(path, self.unrouted)
        headers = [*headers, ("content-type", "text/plain"), ("content-length", str(len(body)))]
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
        await stream.send_all(conn.send(h11.Data(data=body)))
        await stream.send_all(conn.send(h11.EndOfMessage()))


async def serve_recording_site(
    nursery: trio.Nursery, host: str, unrouted: Route = (404, [], b"not found")
) -> RecordingSite:
    """A :class:`RecordingSite` on ``host`` (any free port), served by ``nursery``."""
    site = RecordingSite(host, unrouted)
    listeners: list[trio.SocketListener] = await nursery.start(
        functools.partial(trio.serve_tcp, site.handle, 0, host=host)
    )
    site.port = listeners[0].socket.getsockname()[1]
    return site
