"""``GET /v1/batch/{id}?results=1``: a job's summary with its targets, written as it is read.

The answer is one JSON object, the summary then ``targets``, ``targets_matched`` and
``next_offset``, and without a ``limit`` it holds every target of the job (SPEC §5). Built whole,
a 38 MiB job cost the service about twice that at once (the targets read, then the encoded
body), and five readers at once five times as much. So the body is written in pieces instead:
the targets are read :data:`PAGE` at a time, each page encoded and sent before the next is
read, and the bytes are exactly those the whole object would have been (``json.dumps`` as
Starlette's ``JSONResponse`` calls it). Memory grows with one page's results, not the job's.

The first page is read before the answer begins, so a database that is down or slow still
answers 503 with ``Retry-After``. A read that fails later cannot change the status any more: the
body then stops without its end (``_stream.Streamed``), and the client sees a broken transfer,
never a short object that parses.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence

import trio
from starlette.responses import Response

from .._model import JSONValue, TargetState, TargetStatus
from ..stores import JobSummary
from ..stores._protocol import MAX_READ
from . import _answers as answers
from ._context import Ctx
from ._deadline import StoreBudget, StoreTimeout
from ._stream import Streamed, Write

PAGE = 16
"""Targets read and encoded at once: with 64 KiB results, about 1 MiB read and 1 MiB encoded
held per reader at a time."""


def json_bytes(value: JSONValue) -> bytes:
    """``value`` as ``JSONResponse`` encodes it; a lone surrogate is escaped (still valid JSON)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()


async def with_targets(
    ctx: Ctx,
    store: StoreBudget,
    summary: JobSummary,
    body: dict[str, JSONValue],
    states: Collection[str] | None,
    offset: int,
    limit: int | None,
) -> Response:
    """The answer ``body`` (a summary) with the page of targets the query asks for, streamed.

    ``targets`` holds the job's targets in ``states`` from the ``offset``-th on, at most
    ``limit`` of them (all without a limit), in input order.
    """
    matched = count_in(summary, states)
    end = matched if limit is None else min(matched, offset + limit)
    count = max(0, end - offset)
    wanted = None if states is None else [TargetState(s) for s in sorted(states)]
    job_id = summary.job.id

    after = await _start_after(ctx, store, job_id, wanted, offset) if count else None
    first: list[TargetStatus] = []
    if after is not None:
        first = await store.read(_page, ctx, job_id, after, min(PAGE, count), wanted)

    head = json_bytes(body)[:-1] + b',"targets":['
    next_offset = end if end < matched else None
    tail = b'],"targets_matched":%d,"next_offset":%s}' % (matched, json_bytes(next_offset))

    async def produce(write: Write) -> None:
        await write(head)
        page, sent = first, 0
        while page:
            waiting = ctx.engine.waiting(job_id)
            encoded = b",".join(json_bytes(answers.target(t, waiting)) for t in page)
            await write(b"," + encoded if sent else encoded)
            sent += len(page)
            if sent >= count:
                break
            page = await _read_late(ctx, job_id, page[-1].idx, min(PAGE, count - sent), wanted)
        await write(tail)

    return Streamed(produce, media_type="application/json", stopping=None)


def count_in(summary: JobSummary, states: Collection[str] | None) -> int:
    """How many of the job's targets are in ``states`` (all of them when None)."""
    counts = {
        TargetState.PENDING.value: summary.pending,
        TargetState.RUNNING.value: summary.running,
        TargetState.DONE.value: summary.done,
        TargetState.FAILED.value: summary.failed,
    }
    return sum(n for state, n in counts.items() if states is None or state in states)


async def _page(
    ctx: Ctx, job_id: str, after: int, count: int, states: Sequence[TargetState] | None
) -> list[TargetStatus]:
    return await ctx.engine.targets(job_id, after=after, limit=count, states=states, results=True)


async def _read_late(
    ctx: Ctx, job_id: str, after: int, count: int, states: Sequence[TargetState] | None
) -> list[TargetStatus]:
    """A page once the answer has begun: inline, under a deadline of ``store_timeout``."""
    with trio.move_on_after(ctx.calls.timeout):
        return await _page(ctx, job_id, after, count, states)
    raise StoreTimeout(ctx.calls.timeout, write=False)


async def _start_after(
    ctx: Ctx,
    store: StoreBudget,
    job_id: str,
    states: Sequence[TargetState] | None,
    offset: int,
) -> int | None:
    """The index the page starts after; None when fewer than ``offset`` targets match.

    Without ``states`` the offset is an index. With them, the skipped targets are read without
    their results, ``MAX_READ`` at a time, and only the last one's index is kept.
    """
    if states is None or offset == 0:
        return offset - 1

    after, skipped = -1, 0
    while skipped < offset:
        read = functools.partial(
            ctx.engine.targets,
            job_id,
            after=after,
            limit=min(MAX_READ, offset - skipped),
            states=states,
            results=False,
        )
        chunk = await store.read(read)
        if not chunk:
            return None
        skipped += len(chunk)
        after = chunk[-1].idx
    return after
