"""Writing answers: a job's summary and links, a target, and when a finished job expires.

A target is :func:`trio_batch._model.target_json`, the same line the CLI writes, plus its
``options``, ``started_at`` and ``finished_at``.
"""

from __future__ import annotations

import dataclasses

from .._crawl import CrawlInfo
from .._engine import EngineStatistics, WaitingTarget
from .._headers import shown_headers
from .._model import (
    Job,
    JSONValue,
    Options,
    Result,
    Submitted,
    TargetState,
    TargetStatus,
    target_json,
)
from ..stores import JobSummary


def shown_options(options: Options) -> dict[str, JSONValue]:
    """A target's options as answers show them: a credential's value is ``"<secret>"``."""
    shown: dict[str, JSONValue] = dict(options.to_json())
    if options.headers:
        shown["headers"] = shown_headers(options.headers)
    return shown


def target(t: TargetStatus, waiting: WaitingTarget | None = None) -> dict[str, JSONValue]:
    """One target with its options and times, between ``hint`` and ``result``.

    A pending target that waits for its host's budget (``waiting``, the job's) carries
    ``waiting``: its ``reason`` and ``until`` (Unix seconds, or null).
    """
    line = target_json(t)
    result = line.pop("result")
    wait: dict[str, JSONValue] = {}
    if waiting is not None and waiting.idx == t.idx and t.status is TargetState.PENDING:
        wait["waiting"] = {"reason": waiting.reason, "until": waiting.until}
    return {
        **line,
        "options": shown_options(t.options),
        "started_at": t.started_at,
        "finished_at": t.finished_at,
        **wait,
        "result": result,
    }


def fetched(url: str, result: Result) -> dict[str, JSONValue]:
    """The answer to a single fetch."""
    return {"url": url, "result": {"content": result.content, "meta": result.meta}}


def links(job_id: str) -> dict[str, JSONValue]:
    """Where to read the job: its summary, its results (JSON, NDJSON stream) and its events."""
    return {
        "self": f"/v1/batch/{job_id}",
        "results": f"/v1/batch/{job_id}?results=1",
        "stream": f"/v1/batch/{job_id}/results",
        "events": f"/v1/batch/{job_id}/events",
    }


def expires_at(job: Job, ttl: float) -> float:
    """Unix seconds after which a finished job may be gone: ``ttl`` after its last touch."""
    return max(job.lease, job.created_at) + ttl


def summary_of(
    js: JobSummary, ttl: float, *, lease: float | None = None, crawl: CrawlInfo | None = None
) -> dict[str, JSONValue]:
    """A job's summary from a store's counts: status, counts by target state, times and links.

    Every answer with a summary (a job read, a cancel, a listing, an events stream's ``end``, a
    webhook's ``end``) makes it from these counts, so they all agree. ``lease``, when given, is
    a touch at that time that the store may not show yet. A crawl's answer carries its
    ``crawl`` object (``CrawlInfo``: limit, max_depth, done, skipped); a batch's has no such key.
    """
    job = js.job
    if lease is not None:
        job = dataclasses.replace(job, lease=max(job.lease, lease))
    counts = {"pending": js.pending, "running": js.running, "done": js.done, "failed": js.failed}
    total = max(job.targets_total, sum(counts.values()))
    # Targets the store did not count have not run: count them pending, so counts sum to total.
    counts["pending"] += total - sum(counts.values())
    return with_crawl(_summary(job, total, counts, ttl), crawl)


def with_crawl(body: dict[str, JSONValue], crawl: CrawlInfo | None) -> dict[str, JSONValue]:
    """``body`` with the job's ``crawl`` object when it is a crawl's, as it is otherwise."""
    if crawl is not None:
        body["crawl"] = crawl.to_json()
    return body


def _summary(job: Job, total: int, counts: dict[str, int], ttl: float) -> dict[str, JSONValue]:
    return {
        "id": job.id,
        "status": job.status.value,
        "error": job.error,
        "targets_total": total,
        "counts": counts,
        "created_at": job.created_at,
        "updated_at": job.updated_at or job.created_at,
        "expires_at": expires_at(job, ttl),
        "links": links(job.id),
    }


def submitted(sub: Submitted, job: Job, ttl: float) -> dict[str, JSONValue]:
    """The answer to a submit: the job's id, whether it was reused, and where to poll it.

    Made from the job's row alone (``engine.job``): the answer needs no target.
    """
    return {
        "id": sub.id,
        "reused": sub.reused,
        "status": job.status.value,
        "targets_total": job.targets_total,
        "expires_at": expires_at(job, ttl),
        "links": links(sub.id),
    }


def with_lease(job: Job, now: float) -> Job:
    """``job`` as a touch at ``now`` leaves it, without reading the store again."""
    return dataclasses.replace(job, lease=max(job.lease, now))


def health(stats: EngineStatistics, problem: tuple[str, str] | None) -> dict[str, JSONValue]:
    """``/healthz``: ``ok`` with the engine's counts, or ``unhealthy`` with what and what to do."""
    body: dict[str, JSONValue] = {"status": "ok" if problem is None else "unhealthy"}
    if problem is not None:
        body["error"], body["hint"] = problem
    body["live_jobs"] = stats.live_jobs
    body["inflight_targets"] = stats.inflight_targets
    return body
