"""``GET /v1/batch``: the caller's jobs, newest first, a page at a time (SPEC §7)."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._model import JobStatus, JSONValue
from ..stores import JobCursor
from . import _answers as answers
from ._context import Ctx, authenticate
from ._errors import ApiError
from ._parse import query_int

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
_LIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
_STATUS_WORDS = ["live", *(s.value for s in JobStatus)]


def encode_cursor(created_at: float, job_id: str) -> str:
    """The ``next`` cursor after a job: opaque to clients (URL-safe base64 of JSON)."""
    raw = json.dumps([created_at, job_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> JobCursor:
    """A cursor from :func:`encode_cursor`.

    Raises:
        ApiError: 400 naming ``before`` for anything else.
    """
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        created_at, job_id = json.loads(raw)
        if (
            not isinstance(created_at, (int, float))
            or isinstance(created_at, bool)
            or not math.isfinite(created_at)
            or not isinstance(job_id, str)
            or len(job_id) > 200
        ):
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise ApiError(
            400,
            f"before is not a cursor this server gave (got {text[:40]!r})",
            "pass the next value of the previous page as it was, or leave before out for "
            "the newest jobs",
            field="before",
        ) from None
    return (float(created_at), job_id)


def query_statuses(request: Request) -> list[JobStatus] | None:
    """The job statuses of ``status``: ``live`` (queued and running) or a comma-separated list."""
    raw = request.query_params.get("status")
    if raw is None or raw == "":
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
    before = decode_cursor(raw_before) if raw_before else None
    read = functools.partial(
        ctx.engine.jobs, record.name, statuses=statuses, limit=limit + 1, before=before
    )
    page = await ctx.calls.request().read(read)
    shown = page[:limit]
    jobs: list[JSONValue] = [answers.summary_of(js, ctx.ttl) for js in shown]
    nxt = encode_cursor(shown[-1].job.created_at, shown[-1].job.id) if len(page) > limit else None
    return JSONResponse({"jobs": jobs, "next": nxt})
