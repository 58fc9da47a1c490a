"""``GET /v1/batch``: the caller's jobs, newest first, a page at a time (SPEC §7)."""

from __future__ import annotations

import functools
import math
import re
import sys

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._model import JobStatus, JSONValue
from ..stores import JobCursor
from . import _answers as answers
from ._context import Ctx, authenticate
from ._crawls import crawl_infos
from ._errors import ApiError
from ._parse import query_int

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
_LIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
_STATUS_WORDS = ["live", *(s.value for s in JobStatus)]


CURSOR_PATTERN = r"^[0-9]{1,20}(\.[0-9]{1,20})?(e[-+]?[0-9]{1,3})?~[0-9A-Za-z_-]{1,64}$"
"""Every cursor :func:`encode_cursor` makes, and every string :func:`decode_cursor` reads: the
OpenAPI document gives this pattern, so a ``before`` the document allows is one the server
reads (a cursor of a job that is not there pages from where it would be)."""
_CURSOR = re.compile(CURSOR_PATTERN)
_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


def encode_cursor(created_at: float, job_id: str) -> str:
    """The ``next`` cursor after a job: its creation time (as Python writes the float, so
    it reads back the same), ``~``, its id. Opaque to clients: pass it back as it is."""
    if created_at < 0 or not math.isfinite(created_at) or not _ID.fullmatch(job_id):
        raise ValueError("a job's creation time is a time, and its id is a short word")
    return f"{created_at!r}~{job_id}"


def decode_cursor(text: str) -> JobCursor:
    """A cursor from :func:`encode_cursor` (a time past any float's range is the newest).

    Raises:
        ApiError: 400 naming ``before`` for anything else.
    """
    if not _CURSOR.match(text):
        raise ApiError(
            400,
            f"before is not a cursor this server gave (got {text[:40]!r})",
            "pass the next value of the previous page as it was, or leave before out for "
            "the newest jobs",
            field="before",
        )
    created_at, _, job_id = text.partition("~")
    return (min(float(created_at), sys.float_info.max), job_id)


def query_statuses(request: Request) -> list[JobStatus] | None:
    """The job statuses of ``status``: ``live`` (queued and running) or a comma-separated list.

    Raises:
        ApiError: 400 naming ``status`` for a word that is not one, or for an empty value.
    """
    raw = request.query_params.get("status")
    if raw is None:
        return None
    chosen: set[JobStatus] = set()
    for word in (w.strip() for w in raw.split(",")):
        if word == "live":
            chosen.update(_LIVE)
        elif word in JobStatus.__members__.values():
            chosen.add(JobStatus(word))
        else:
            raise ApiError(
                400,
                f"status must be one or more of {', '.join(_STATUS_WORDS)}, comma-separated "
                f"(got {word[:40]!r})",
                "live means queued and running",
                field="status",
            )
    return sorted(chosen, key=list(JobStatus).index)


async def list_jobs(ctx: Ctx, request: Request) -> Response:
    """The caller's jobs, newest first: ``{"jobs": [summary, ...], "next": cursor or null}``.

    Listing reads, and does not move the jobs' expiry (one write per job listed would make a
    page of 500 jobs cost 500 writes): read a job itself to keep it.
    """
    record = authenticate(ctx, request)
    statuses = query_statuses(request)
    limit = query_int(request, "limit", DEFAULT_LIMIT, 1) or DEFAULT_LIMIT
    if limit > MAX_LIMIT:
        raise ApiError(
            400,
            f"limit must be from 1 to {MAX_LIMIT} (got {limit})",
            "page with the next cursor instead",
            field="limit",
        )
    raw_before = request.query_params.get("before")
    before = None if raw_before is None else decode_cursor(raw_before)
    read = functools.partial(
        ctx.engine.jobs, record.name, statuses=statuses, limit=limit + 1, before=before
    )
    store = ctx.calls.request()
    page = await store.read(read)
    shown = page[:limit]
    crawls = await crawl_infos(ctx.engine, store, ctx.batches, (js.job.id for js in shown))
    jobs: list[JSONValue] = [
        answers.summary_of(js, ctx.ttl, crawl=crawls.get(js.job.id)) for js in shown
    ]
    nxt = encode_cursor(shown[-1].job.created_at, shown[-1].job.id) if len(page) > limit else None
    return JSONResponse({"jobs": jobs, "next": nxt})
