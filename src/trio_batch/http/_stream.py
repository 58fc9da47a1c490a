"""Streamed answers (SPEC §7): a job's results as NDJSON, and its events as Server-Sent Events.

Both read the store in chunks of :data:`CHUNK` targets, so memory does not grow with the job's
size, and both follow a live job by waiting on the engine's own changes
(``BatchEngine.watch``), never by polling it (a store that several instances share is read
again once a second too: another instance's outcomes do not reach this engine).

The body is written by :class:`Streamed`, an ASGI response that watches the connection while it
writes: a client that goes away cancels the writer at once, which frees its watch and its store
calls. A failure after the answer has begun cannot become an error status any more: the stream
then stops without its proper end (no last chunk), so a client sees a broken transfer, never a
short answer that looks complete. Failures are logged by type only.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TypeVar, cast, final

import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .._crawl import CrawlInfo
from .._engine import WaitingTarget
from .._model import Job, JSONValue, TargetState, TargetStatus, target_json
from ..stores import JobSummary
from . import _answers as answers
from ._context import Ctx, authenticate
from ._deadline import StoreTimeout
from ._errors import ApiError, not_found
from ._parse import path_id, query_flag, query_int, query_states
from ._stopping import Stopping

_log = logging.getLogger("trio_batch.http")

CHUNK = 16
"""Targets read from the store at once: with 64 KiB results, 1 MiB in memory at most (five
followers of a 38 MiB job then stay within 60 MiB; `python -m bench.results_memory`)."""

_FINISHED = (TargetState.DONE, TargetState.FAILED)

Write = Callable[[bytes], Awaitable[None]]
T = TypeVar("T")
Read = Callable[[], Awaitable[T]]


@final
class Streamed(Response):
    """A 200 whose body ``produce(write)`` writes, ended early by a client that goes away.

    ``produce`` returns normally: the body ends properly. It raises (a store failure, the engine
    closing): the body stops without its end. ``stopping`` set (the server shuts down): the
    writer is cancelled, and the body ends properly if ``end_on_stop`` (an events stream, which
    a client resumes with ``Last-Event-ID``), else stops without its end. ``stopping`` None: a
    body that ends by itself soon, left to finish.
    """

    def __init__(
        self,
        produce: Callable[[Write], Awaitable[None]],
        *,
        media_type: str,
        stopping: Stopping | None,
        end_on_stop: bool = False,
    ) -> None:
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._produce = produce
        self._stopping = stopping
        self._end_on_stop = end_on_stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        if scope.get("method") == "HEAD":  # the headers alone: never wait for a job to end
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return

        async def write(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        ended = gone = False
        stopping = self._stopping
        async with trio.open_nursery() as nursery:

            async def watch_client() -> None:
                nonlocal gone
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_client)
            with (
                contextlib.nullcontext()
                if stopping is None
                else stopping.cancelling(nursery.cancel_scope)
            ):
                try:
                    await self._produce(write)
                    ended = True
                except Exception as exc:
                    kind = type(exc).__name__
                    _log.warning(
                        "a stream stopped early: %s",
                        kind,
                        extra={"error_type": kind, "op": "stream"},
                    )
                nursery.cancel_scope.cancel()
        if gone:
            return
        stopped = stopping is not None and stopping.is_set and not ended
        if ended or (stopped and self._end_on_stop):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # Otherwise return without the body's end: the server drops the connection.


def ndjson_line(t: TargetStatus) -> bytes:
    """One target as a line of NDJSON (``target_json``: no options)."""
    return _dumps(target_json(t)) + b"\n"


def ndjson_lines(found: list[TargetStatus]) -> bytes:
    return b"".join(ndjson_line(t) for t in found)


def target_event(t: TargetStatus) -> dict[str, JSONValue]:
    """The data of a ``target`` event, in the events stream and in a webhook delivery alike.

    ``{idx, url, status, error, hint}``: enough for a follower to act on a failure without
    fetching the target; never the content, which may be large (read it from the results).
    """
    return {
        "idx": t.idx,
        "url": t.url,
        "status": t.status.value,
        "error": t.error,
        "hint": t.hint,
    }


def target_events(found: list[TargetStatus]) -> bytes:
    """A ``target`` event per target: id = its index, data = :func:`target_event`."""
    return b"".join(sse("target", str(t.idx), target_event(t)) for t in found)


def _dumps(value: JSONValue) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate in a result: escape it, still valid JSON
        return json.dumps(value, separators=(",", ":")).encode()


async def _read(ctx: Ctx, fn: Callable[[], Awaitable[T]]) -> T:
    """A read once the answer has begun, inline under the store deadline.

    Before the answer, a read runs through ``ctx.calls`` (a task of the lifespan's, so a store
    that cannot stop a read still answers 503 in time). After it there is no status left to
    give, so the stream's own task reads (no task spawned per read: a follower wakes at every
    stored target) and a read past the deadline breaks the body.
    """
    with trio.move_on_after(ctx.calls.timeout):
        return await fn()
    raise StoreTimeout(ctx.calls.timeout, write=False)


async def _read_targets(
    ctx: Ctx, job_id: str, after: int, states: Sequence[TargetState] | None, *, results: bool
) -> list[TargetStatus]:
    read = functools.partial(
        ctx.engine.targets, job_id, after=after, limit=CHUNK, states=states, results=results
    )
    return await _read(ctx, read)


async def finished_in_order(
    ctx: Ctx, job_id: str, after: int, wanted: Sequence[TargetState], *, results: bool
) -> tuple[list[TargetStatus], int, bool]:
    """The ``wanted`` targets after ``after`` that have ended with every target before them.

    A job of more ``concurrency`` may end target 3 before target 2: 3 is emitted once 2 has
    ended, so a follower reads input order and an index to resume after never skips one. One
    read of a chunk of targets in every state. Returns the targets, the index to read after
    next time, and whether more may follow now (a whole chunk had ended).
    """
    found = await _read_targets(ctx, job_id, after, None, results=results)
    ended = list(itertools.takewhile(lambda t: t.status in _FINISHED, found))
    last = ended[-1].idx if ended else after
    return [t for t in ended if t.status in wanted], last, len(ended) == CHUNK


async def _owned_job(ctx: Ctx, request: Request, caller: str) -> Job:
    """The job in the path if it is ``caller``'s (else 404), its lease moved in the background."""
    job_id = path_id(request)
    store = ctx.calls.request()
    job = await store.read(ctx.engine.job, job_id)
    if job is None or job.caller != caller:
        raise not_found()
    await store.write_soon(ctx.engine.touch, job_id, key=("touch", job_id))
    return job


@final
class _Shared:
    """A read that the followers of one job share: the first makes it, the others wait for it."""

    __slots__ = ("done", "ok", "value")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.ok = False
        self.value: object = None


async def _shared(memo: dict[Hashable, object] | None, key: Hashable, fn: Read[T]) -> T:
    """``await fn()``, or what another follower got from the same read since the last change.

    If the follower making the read goes away (or its read fails), the others read for
    themselves.
    """
    if memo is None:
        return await fn()
    entry = memo.get(key)
    if isinstance(entry, _Shared):
        await entry.done.wait()
        return cast("T", entry.value) if entry.ok else await fn()
    mine = memo[key] = _Shared()
    try:
        mine.value = value = await fn()
        mine.ok = True
        return value
    finally:
        if not mine.ok and memo.get(key) is mine:
            del memo[key]
        mine.done.set()


async def follow_targets(
    ctx: Ctx,
    job_id: str,
    after: int,
    states: Sequence[TargetState] | None,
    encode: Callable[[list[TargetStatus]], bytes],
    emit: Write,
    *,
    results: bool,
    idle: Callable[[], Awaitable[None]] | None = None,
    woken: Callable[[int], Awaitable[None]] | None = None,
) -> Job | None:
    """Emit each target after ``after`` once it is done or failed, in input order, until the job
    is terminal; return the job as it ended (None if it was swept meanwhile).

    A target is emitted once it and every target before it have ended (:func:`finished_in_order`:
    a job of more ``concurrency`` may end them out of order). Each change costs a store call:
    the job's row, and the new targets only when its status or its count of finished targets
    moved. Followers of the same job at the same place share that call and its
    encoded bytes (``JobWatch.memo``), so 200 of them cost about one read a change. ``idle``
    runs after each ``ctx.keepalive`` seconds without a change; ``woken(after)`` after each
    change has been emitted. ``encode`` must depend on
    ``results`` and ``states`` only.
    """
    wanted = tuple(s for s in _FINISHED if states is None or s in states)
    seen: tuple[str, int] | None = None

    async def step() -> tuple[Job | None, bool, int, bytes]:
        """The job; whether more may follow at once, the index to read after, the bytes."""
        job = await ctx.engine.job(job_id)
        if job is None or not wanted or (job.status.value, job.targets_done) == seen:
            return job, False, after, b""
        found, last, more = await finished_in_order(ctx, job_id, after, wanted, results=results)
        return job, more, last, encode(found) if found else b""

    with ctx.engine.watch(job_id) as watch:
        while True:
            key = (encode, results, wanted, after, seen)
            job, more, after, data = await _shared(
                watch.memo, key, functools.partial(_read, ctx, step)
            )
            if job is None:
                return None
            if data:
                await emit(data)
            while more:
                found, after, more = await finished_in_order(
                    ctx, job_id, after, wanted, results=results
                )
                if found:
                    await emit(encode(found))
            if woken is not None and job.status.live:
                await woken(after)
            seen = (job.status.value, job.targets_done)
            if not job.status.live:
                return job
            while True:
                with trio.move_on_after(ctx.keepalive) as quiet:
                    await watch.wait()
                if not quiet.cancelled_caught:
                    break
                if idle is not None:
                    await idle()


async def results(ctx: Ctx, request: Request) -> Response:
    """``GET /v1/batch/{id}/results``: one NDJSON line per target, in input order."""
    record = authenticate(ctx, request)
    states = query_states(request)
    chosen = None if states is None else [TargetState(s) for s in sorted(states)]
    after = query_int(request, "after", None, 0)
    start = -1 if after is None else after
    follow = query_flag(request, "follow")
    job_id = (await _owned_job(ctx, request, record.name)).id

    async def produce(write: Write) -> None:
        if follow:
            ended = await follow_targets(
                ctx, job_id, start, chosen, ndjson_lines, write, results=True
            )
            if ended is None:
                raise LookupError("the job is gone")  # swept while followed: a broken end
            return
        after = start
        while True:
            found = await _read_targets(ctx, job_id, after, chosen, results=True)
            if found:
                after = found[-1].idx
                await write(ndjson_lines(found))
            if len(found) < CHUNK:
                return

    return Streamed(
        produce, media_type="application/x-ndjson", stopping=ctx.stopping if follow else None
    )


ENDED = -2
"""``Last-Event-ID: end``: the client read the ``end`` event already (:func:`_last_event_id`)."""


def _last_event_id(request: Request) -> int | None:
    """The target index to resume after, from ``Last-Event-ID``; :data:`ENDED` for ``end``."""
    raw = request.headers.get("last-event-id", "").strip()
    if raw == "":
        return None
    if raw == "end":
        return ENDED
    if not raw.isdigit() or len(raw) > 10:
        raise ApiError(
            400,
            f"Last-Event-ID must be an event id this stream sent: a target index or 'end' "
            f"(got {raw[:40]!r})",
            "send back the id of the last event you read, or no Last-Event-ID to start over",
            field="Last-Event-ID",
        )
    return int(raw)


def sse(event: str, event_id: str, data: JSONValue) -> bytes:
    """One Server-Sent Event: ``id``, ``event`` and one ``data`` line of JSON."""
    return f"id: {event_id}\nevent: {event}\ndata: ".encode() + _dumps(data) + b"\n\n"


KEEPALIVE = b": keep-alive\n\n"


def waiting_event(waiting: WaitingTarget) -> bytes:
    """A ``waiting`` event: a target waits for its host's budget. It has no ``id``, so a
    client's ``Last-Event-ID`` stays the last target's and a resume skips nothing."""
    data: JSONValue = {"idx": waiting.idx, "reason": waiting.reason, "until": waiting.until}
    return b"event: waiting\ndata: " + _dumps(data) + b"\n\n"


async def events(ctx: Ctx, request: Request) -> Response:
    """``GET /v1/batch/{id}/events``: ``target`` events as targets end, then ``end``.

    A reconnect after the ``end`` event (``Last-Event-ID: end``, what a browser's
    ``EventSource`` sends when the closed stream makes it try again) is answered 204 No
    Content, which tells the browser to stop reconnecting (the HTML standard's way): the job
    has nothing more to say.
    """
    record = authenticate(ctx, request)
    resume = _last_event_id(request)
    job_id = (await _owned_job(ctx, request, record.name)).id
    if resume == ENDED:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    touched = ctx.wall_clock()

    async def produce(write: Write) -> None:
        async def idle() -> None:
            await write(KEEPALIVE)

        sent: tuple[int, str, float | None] | None = None

        async def woken(after: int) -> None:
            """A ``waiting`` event each time the next target begins a wait for its host: a new
            target, reason or deadline (a target that came back busy three times waits three
            times)."""
            nonlocal sent
            waiting = ctx.engine.waiting(job_id)
            now = None if waiting is None else (waiting.idx, waiting.reason, waiting.deadline)
            if waiting is not None and now != sent and waiting.idx > after:
                await write(waiting_event(waiting))
            sent = now

        start = -1 if resume is None else resume
        ended = await follow_targets(
            ctx, job_id, start, None, target_events, write, results=False, idle=idle, woken=woken
        )
        last: tuple[JobSummary | None, CrawlInfo | None] = (None, None)
        if ended is not None:
            # The job's followers all end at once: they read its summary once between them.
            with ctx.engine.watch(job_id) as watch:
                read = functools.partial(_summary_and_crawl, ctx, job_id)
                last = await _shared(watch.memo, events, functools.partial(_read, ctx, read))
        summary, crawl = last
        if summary is None:
            raise LookupError("the job is gone")
        body = answers.summary_of(summary, ctx.ttl, lease=touched, crawl=crawl)
        await write(sse("end", "end", body))

    return Streamed(
        produce, media_type="text/event-stream", stopping=ctx.stopping, end_on_stop=True
    )


async def _summary_and_crawl(ctx: Ctx, job_id: str) -> tuple[JobSummary | None, CrawlInfo | None]:
    """What an events stream's ``end`` says: the job's summary, and its crawl's if it is one."""
    summary = await ctx.engine.summary(job_id)
    if summary is None or job_id in ctx.batches:
        return summary, None
    crawl = await ctx.engine.crawl_info(job_id)
    if crawl is None:
        ctx.batches.add(job_id)
    return summary, crawl
