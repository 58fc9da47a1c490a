"""The ASGI app of SPEC §5: ``create_app``, authentication and the routes.

Reading requests is in ``_parse``, writing answers in ``_answers``, error answers in ``_errors``,
the store calls' deadline in ``_deadline`` and the access log with the request metrics in
``_observe``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Protocol, TypeVar

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .._config import DEFAULT_CONCURRENCY
from .._engine import BatchEngine, FetchFunc
from .._errors import (
    CallerBusy,
    NoTargets,
    NotRetryable,
    SubmitError,
    TargetError,
    classify_failure,
)
from .._model import Caller, Job, JobStatus, JSONValue, Submitted, Target
from ..metrics import PrometheusMetrics
from ..stores import JobSummary
from . import _answers as answers, _stream as stream
from ._context import KEEPALIVE_SECONDS, Ctx, authenticate
from ._cors import Cors, OriginGuard, check_origins
from ._crawl_input import parse_crawl
from ._crawls import crawl_info
from ._deadline import StoreBudget, StoreCalls, StoreTimeout
from ._errors import (
    ApiError,
    answer_errors,
    not_found,
    refusal,
    routing_error,
    store_failure,
)
from ._keys import KeyRecord, KeyRing
from ._listing import list_jobs
from ._observe import Observe
from ._openapi import openapi_document
from ._parse import (
    MAX_BODY,
    MAX_INT,
    OptionsCheckFunc,
    PrecheckFunc,
    check_fields,
    check_target,
    check_text,
    parse_batch,
    parse_concurrency,
    parse_target,
    path_id,
    query_flag,
    query_int,
    query_states,
    read_json,
    sealed,
    shown,
    whole,
)
from ._results import with_targets
from ._ui import ui_page
from ._webhook_input import parse_retry_body, parse_webhook

R = TypeVar("R", Job, JobSummary)

SiteMapFunc = Callable[[Caller, str, int, bool, bool | None], Awaitable[Mapping[str, JSONValue]]]
"""``await site_map(caller, url, limit, same_host, robots)`` -> ``{"urls", "complete", "notes"}``:
what ``POST /v1/map`` answers (``trio_batch.web``'s ``site_map`` over the engine's fetcher).
``robots`` None: the fetcher's own setting (``serve --robots``)."""

MAP_LIMIT = 10_000
"""The most URLs ``POST /v1/map`` answers."""
MAP_DEFAULT_LIMIT = 1_000
"""The URLs ``POST /v1/map`` answers when the body gives no ``limit``."""


class MountedApp(Protocol):
    """An ASGI app served beside the API at a path of its own (``/mcp``), with a lifetime.

    ``running()`` is entered for the API app's lifespan (the store calls' nursery's): what the
    mounted app needs while requests are served, such as the MCP SDK's session manager.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...

    def running(self) -> contextlib.AbstractAsyncContextManager[None]: ...


def _default_precheck() -> PrecheckFunc:
    from ..web import precheck

    return precheck


def _default_options_check() -> OptionsCheckFunc | None:
    try:
        from ..web import validate_options
    except ImportError:
        return None
    return validate_options


def _default_site_map(fetch: FetchFunc | None) -> SiteMapFunc | None:
    """``POST /v1/map`` over ``fetch`` when it is a ``WebFetcher`` (and the web room maps)."""
    try:
        web = importlib.import_module("trio_batch.web")
    except ImportError:
        return None
    mapper = getattr(web, "site_map", None)
    fetch = getattr(fetch, "__wrapped__", fetch)  # a fetcher wrapped for its hints (serve)
    if mapper is None or not isinstance(fetch, web.WebFetcher):
        return None

    async def site_map(
        caller: Caller, url: str, limit: int, same_host: bool, robots: bool | None
    ) -> dict[str, JSONValue]:
        found = await mapper(fetch, caller, url, limit=limit, same_host=same_host, robots=robots)
        answer: dict[str, JSONValue] = found.to_json()
        return answer

    return site_map


def create_app(
    engine: BatchEngine,
    keys: KeyRing,
    *,
    fetch: FetchFunc | None = None,
    site_map: SiteMapFunc | None = None,
    precheck: PrecheckFunc | None = None,
    validate_options: OptionsCheckFunc | None = None,
    metrics: PrometheusMetrics | None = None,
    ttl: float | None = None,
    retry_after: int = 5,
    access_log_enabled: bool = True,
    max_body: int = MAX_BODY,
    wall_clock: Callable[[], float] = time.time,
    store_timeout: float = 5.0,
    keepalive: float = KEEPALIVE_SECONDS,
    mounts: Mapping[str, MountedApp] | None = None,
    cors_origins: Iterable[str] = (),
    default_concurrency: int | None = None,
) -> ASGIApp:
    """The ASGI app of the batch API (SPEC §5) over ``engine``, letting in the callers in ``keys``.

    Args:
        engine: the engine jobs are submitted to; the app never closes it.
        keys: who may call; a request's bearer key is looked up here.
        fetch: the fetch function behind ``POST /v1/fetch`` (the engine's own fetcher, so single
            fetches share its pool). Without it, that route does not exist.
        site_map: what answers ``POST /v1/map``; by default ``trio_batch.web``'s map over
            ``fetch`` when ``fetch`` is a ``WebFetcher``. Without either, that route does not
            exist.
        precheck: checks each target URL at submit; defaults to ``trio_batch.web.precheck``.
        validate_options: checks each target's options at submit; defaults to
            ``trio_batch.web.validate_options`` when the web fetcher is installed.
        metrics: where request and engine metrics go (``/metrics``); a new one by default.
        ttl: seconds a finished job is kept after its last read, for ``expires_at``; defaults
            to the engine's ``Config.ttl``.
        retry_after: the ``Retry-After`` seconds of 429 and 503 answers.
        access_log_enabled: log one line per request on ``trio_batch.http.access``.
        max_body: largest request body in bytes (256 KiB).
        wall_clock: unix time, for ``expires_at`` (the engine's wall clock).
        store_timeout: seconds a request may wait for the store in all; after that it answers
            503 with ``Retry-After``, and ``/healthz`` answers 503 when its check of the store
            takes longer. Store calls run in a nursery of the app's ASGI lifespan (hypercorn,
            and so :func:`serve`, runs it), so that a write the store has queued, which cannot
            be cancelled, is left to finish in the background; an app driven without lifespan
            events waits for such writes.
        mounts: other apps answered at their paths, such as ``{"/mcp": McpEndpoint()}`` (the
            MCP server of ``serve``); each one's ``running()`` is open for the app's lifespan.
            A request to one with an ``Origin`` header off ``cors_origins`` gets 403
            (``_cors.OriginGuard``: a browser page, maybe DNS rebinding).
        cors_origins: origins (``https://dashboard.example.org``) whose pages may call the
            API: their preflights are answered, their answers carry
            ``Access-Control-Allow-Origin`` (``_cors``). None by default.
        default_concurrency: a submit's ``concurrency`` when its body does not say (the
            client, MCP and ``run --server`` leave it out unless asked). None: 4, or the
            engine's ``Config.max_concurrency`` if less; 4 rather than SPEC's 1 since each
            host's budget, not a job's concurrency, is what keeps a site safe
            (``trio_batch._config.DEFAULT_CONCURRENCY``).

    Raises:
        ValueError: ``store_timeout`` is not > 0, a CORS origin is ``*`` or not an origin, or
            ``default_concurrency`` is not from 1 to the engine's ``Config.max_concurrency``.
    """
    origins = check_origins(cors_origins)
    most = engine.config.max_concurrency
    if default_concurrency is None:
        default_concurrency = min(DEFAULT_CONCURRENCY, most)
    if not 1 <= default_concurrency <= most:
        raise ValueError(
            f"create_app default_concurrency must be from 1 to the engine's max_concurrency "
            f"({most}) (got {default_concurrency!r})"
        )
    ctx = Ctx(
        engine=engine,
        keys=keys,
        fetch=fetch,
        precheck=precheck if precheck is not None else _default_precheck(),
        check_options=validate_options
        if validate_options is not None
        else _default_options_check(),
        metrics=metrics if metrics is not None else PrometheusMetrics(),
        ttl=ttl if ttl is not None else engine.config.ttl,
        retry_after=retry_after,
        max_body=max_body,
        wall_clock=wall_clock,
        calls=StoreCalls(store_timeout),
        default_concurrency=default_concurrency,
        keepalive=keepalive,
    )
    mapper = site_map if site_map is not None else _default_site_map(fetch)
    document = openapi_document(
        with_fetch=fetch is not None,
        with_map=mapper is not None,
        max_body=max_body,
        retry_after=retry_after,
        targets_per_job=engine.config.targets_per_job,
        max_concurrency=engine.config.max_concurrency,
        max_crawl_pages=engine.config.max_crawl_pages,
    )

    table: dict[str, dict[str, Endpoint]] = {}

    def route(path: str, fn: Callable[[Ctx, Request], Awaitable[Response]], method: str) -> None:
        table.setdefault(path, {})[method] = answer_errors(
            functools.partial(fn, ctx),
            retry_after_seconds=retry_after,
            throttle=ctx.calls.health.throttle,
        )

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    route("/v1/batch", _submit, "POST")
    route("/v1/batch", list_jobs, "GET")
    route("/v1/crawl", _crawl, "POST")
    route("/v1/batch/{id}/results", stream.results, "GET")
    route("/v1/batch/{id}/events", stream.events, "GET")
    route("/v1/batch/{id}", _get_batch, "GET")
    route("/v1/batch/{id}", _cancel, "DELETE")
    route("/v1/batch/{id}/retry", _retry, "POST")
    route("/v1/me", _me, "GET")
    route("/v1/batch/{id}/{idx:int}", _get_target, "GET")
    route("/healthz", _healthz, "GET")
    route("/metrics", _metrics, "GET")
    if fetch is not None:
        route("/v1/fetch", _fetch, "POST")
    if mapper is not None:
        route("/v1/map", functools.partial(_map, mapper), "POST")
    # One route a path, with all its methods: a 405's Allow lists every one (RFC 9110).
    routes: list[BaseRoute] = [
        Route(path, _by_method(methods), methods=list(methods), name=path)
        for path, methods in table.items()
    ]
    routes += [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/ui", ui_page, methods=["GET"]),
    ]
    mounted = {path: OriginGuard(sub, origins) for path, sub in (mounts or {}).items()}
    routes.extend(Route(path, sub) for path, sub in mounted.items())

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with ctx.calls.running(), contextlib.AsyncExitStack() as stack:
            for sub in mounted.values():
                await stack.enter_async_context(sub.running())
            yield

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: routing_error},
        lifespan=lifespan,
    )
    return Observe(
        Cors(app, origins), routes, ctx.metrics, access_log_enabled, stopping=ctx.stopping
    )


Endpoint = Callable[[Request], Awaitable[Response]]


def _by_method(methods: Mapping[str, Endpoint]) -> Endpoint:
    """One endpoint for a path's methods (HEAD is GET's, as Starlette routes it)."""

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await methods[method](request)

    return endpoint


async def _owned(
    ctx: Ctx,
    store: StoreBudget,
    request: Request,
    record: KeyRecord,
    read: Callable[[str], Awaitable[R | None]],
) -> R:
    """The job in the path as ``read`` gives it (its row, or its summary), if it is ``record``'s.

    Else 404, the same for a job that does not exist and one that is another caller's. ``read``
    is the cheapest read the answer needs: ``engine.job`` (one row) or ``engine.summary`` (the
    row and the targets counted by state); never a whole snapshot of every target.
    """
    found = await store.read(read, path_id(request))
    job = found if isinstance(found, Job) else found.job if found is not None else None
    if found is None or job is None or job.caller != record.name:
        raise not_found()
    return found


async def _touch(ctx: Ctx, store: StoreBudget, job_id: str) -> float:
    """Move the job's expiry, as a read by its owner does; the time the answer shows as lease.

    The touch is a write, and a read must not wait for the writer: it runs in the background
    (at most one per job at a time) and the answer shows the lease it sets.
    """
    await store.write_soon(ctx.engine.touch, job_id, key=("touch", job_id))
    return ctx.wall_clock()


# -- routes -------------------------------------------------------------------------------------


async def _submit(ctx: Ctx, request: Request) -> Response:
    record = authenticate(ctx, request)
    body = await read_json(request, ctx.max_body)
    targets = parse_batch(body)
    for i, target in enumerate(targets):
        check_target(
            target, f"targets[{i}]", precheck=ctx.precheck, check_options=ctx.check_options
        )
    targets = [sealed(record.name, target) for target in targets]
    submit = functools.partial(
        ctx.engine.submit,
        webhook=parse_webhook(body, record, precheck=ctx.precheck),
        concurrency=parse_concurrency(
            body, ctx.engine.config.max_concurrency, ctx.default_concurrency
        ),
    )

    store = ctx.calls.request()
    try:
        sub = await store.write(submit, record.caller(), record.caller_class, targets)
    except SubmitError as exc:
        raise refusal(
            exc,
            count=len(targets),
            limits=ctx.engine.config,
            retry_after_seconds=_retry_after(ctx, exc, record.caller().name),
        ) from None

    ctx.batches.add(sub.id)
    return await _answer_submitted(ctx, store, sub)


async def _crawl(ctx: Ctx, request: Request) -> Response:
    """``POST /v1/crawl``: a job whose targets grow by following links (issue 38); answered
    as a submit is, with the job's ``crawl`` object."""
    record = authenticate(ctx, request)
    body = await read_json(request, ctx.max_body)
    config = ctx.engine.config
    spec = parse_crawl(
        body,
        max_pages=config.max_crawl_pages,
        max_concurrency=config.max_concurrency,
        default_concurrency=ctx.default_concurrency,
        precheck=ctx.precheck,
        check_options=ctx.check_options,
    )
    # No credential to seal (parse_crawl refuses them); header names in their canonical case.
    spec = dataclasses.replace(
        spec, options=sealed(record.name, Target(spec.url, spec.options)).options
    )
    crawl = functools.partial(
        ctx.engine.crawl, webhook=parse_webhook(body, record, precheck=ctx.precheck)
    )

    store = ctx.calls.request()
    try:
        sub = await store.write(crawl, record.caller(), record.caller_class, spec)
    except NoTargets as exc:
        raise ApiError(
            400,
            str(exc),
            'send "sitemaps": "include" to start from url too',
            code="no_targets",
            field="sitemaps",
        ) from None
    except SubmitError as exc:
        raise refusal(
            exc,
            count=1,
            limits=config,
            retry_after_seconds=_retry_after(ctx, exc, record.caller().name),
        ) from None
    except ValueError as exc:  # parse_crawl checked the rest: sitemaps with no site guide
        raise ApiError(
            400,
            str(exc),
            'this server reads no sitemaps: leave sitemaps out (or send "skip")',
            field="sitemaps",
        ) from None

    info = await crawl_info(ctx.engine, store, ctx.batches, sub.id)
    extra: dict[str, JSONValue] = {} if info is None else {"crawl": info.to_json()}
    return await _answer_submitted(ctx, store, sub, **extra)


MAX_RETRY_AFTER = 3600
"""A computed ``Retry-After`` is at most an hour: past that, asking again costs little."""


def _retry_after(ctx: Ctx, exc: SubmitError, caller: str) -> int:
    """A refused submit's ``Retry-After``: the work ahead of it (the caller's own live jobs
    for ``CallerBusy``, every one for ``Busy``), at least the ``retry_after`` setting."""
    ahead = ctx.engine.work_ahead(caller if isinstance(exc, CallerBusy) else None)
    if ahead is None:
        return ctx.retry_after
    return max(ctx.retry_after, min(MAX_RETRY_AFTER, math.ceil(ahead)))


async def _answer_submitted(
    ctx: Ctx, store: StoreBudget, sub: Submitted, **extra: JSONValue
) -> Response:
    """The answer to a submit or a retry that made (202) or reused (200) the job ``sub``.

    It reads the job's row alone (status, targets_total, lease), not the job back with its
    targets. A reused job is touched, as a read by its owner would.
    """
    lease = await _touch(ctx, store, sub.id) if sub.reused else None
    job = await store.read(ctx.engine.job, sub.id)
    if job is None:  # evicted or swept in between: vanishingly rare
        raise not_found()
    if lease is not None:
        job = answers.with_lease(job, lease)

    return JSONResponse(
        {**answers.submitted(sub, job, ctx.ttl), **extra},
        status_code=200 if sub.reused else 202,
        headers={"Location": f"/v1/batch/{sub.id}"},
    )


async def _get_batch(ctx: Ctx, request: Request) -> Response:
    record = authenticate(ctx, request)
    results = query_flag(request, "results")
    states = query_states(request)
    offset = query_int(request, "offset", 0, 0) or 0
    limit = query_int(request, "limit", None, 1)

    store = ctx.calls.request()
    summary = await _owned(ctx, store, request, record, ctx.engine.summary)
    lease = await _touch(ctx, store, summary.job.id)
    crawl = await crawl_info(ctx.engine, store, ctx.batches, summary.job.id)
    body = answers.summary_of(summary, ctx.ttl, lease=lease, crawl=crawl)
    if results:  # streamed: memory bounded by a page of results, not the job's (_results)
        return await with_targets(ctx, store, summary, body, states, offset, limit)
    return JSONResponse(body)


async def _get_target(ctx: Ctx, request: Request) -> Response:
    record = authenticate(ctx, request)
    store = ctx.calls.request()
    job = await _owned(ctx, store, request, record, ctx.engine.job)
    await _touch(ctx, store, job.id)

    idx: int = request.path_params["idx"]
    shown = idx if idx <= MAX_INT else f"{str(idx)[:12]}..."
    missing = ApiError(
        404,
        f"the job has no target {shown}",
        f"targets are numbered from 0 to {job.targets_total - 1}",
    )
    if not 0 <= idx < min(job.targets_total, MAX_INT + 1):  # checked before the store sees it
        raise missing
    found = await store.read(functools.partial(ctx.engine.targets, job.id, after=idx - 1, limit=1))
    if not found or found[0].idx != idx:
        raise missing
    return JSONResponse(answers.target(found[0], ctx.engine.waiting(job.id)))


async def _cancel(ctx: Ctx, request: Request) -> Response:
    record = authenticate(ctx, request)
    store = ctx.calls.request()
    before = await _owned(ctx, store, request, record, ctx.engine.summary)

    job_id = before.job.id
    if not await store.write(ctx.engine.cancel, job_id):
        now = await store.read(ctx.engine.job, job_id)
        status = (now or before.job).status.value
        raise ApiError(
            409,
            f"the job is {status} already; only a queued or running job can be cancelled",
            "read its results instead",
            code="not_cancellable",
            extra={"status": status},
        )

    after = await store.read(ctx.engine.summary, job_id)
    crawl = await crawl_info(ctx.engine, store, ctx.batches, job_id)
    return JSONResponse(answers.summary_of(after or before, ctx.ttl, crawl=crawl))


async def _retry(ctx: Ctx, request: Request) -> Response:
    record = authenticate(ctx, request)
    body = await read_json(request, ctx.max_body, optional=True)
    retry = functools.partial(
        ctx.engine.retry, webhook=parse_retry_body(body, record, precheck=ctx.precheck)
    )

    store = ctx.calls.request()
    summary = await _owned(ctx, store, request, record, ctx.engine.summary)
    job_id = summary.job.id
    try:
        sub = await store.write(retry, record.caller(), record.caller_class, job_id)
    except NotRetryable:
        now = await store.read(ctx.engine.job, job_id)
        raise _not_retryable(job_id, (now or summary.job).status) from None
    except SubmitError as exc:
        raise refusal(
            exc,
            count=summary.failed + summary.pending + summary.running,
            limits=ctx.engine.config,
            retry_after_seconds=ctx.retry_after,
        ) from None
    if sub is None:  # swept in between
        raise not_found()

    return await _answer_submitted(ctx, store, sub, retry_of=job_id)


async def _me(ctx: Ctx, request: Request) -> Response:
    """``GET /v1/me``: who the key is (its caller's name, workspace and class); no store call.

    What the ``/ui`` shows after a key is pasted, and what a script checks before it submits.
    The key itself and its hash are never in the answer.
    """
    record = authenticate(ctx, request)
    return JSONResponse(
        {
            "name": record.name,
            "workspace": record.workspace,
            "class": record.caller_class,
        }
    )


def _not_retryable(job_id: str, status: JobStatus) -> ApiError:
    """The 409 of a retry of a live job, or of a finished one with no failed or unfinished
    target (an interrupted or cancelled job's unfinished targets are retried: docs/spec.md)."""
    if status.live:
        return ApiError(
            409,
            f"the job is {status.value}; only a finished job can be retried",
            f"wait for it to end (GET /v1/batch/{job_id}/events), or cancel it, then retry",
            code="not_retryable",
            extra={"status": status.value},
        )
    return ApiError(
        409,
        f"the job ended {status.value} with no failed target and none unfinished: nothing to retry",
        f"every target is done: read its results (GET /v1/batch/{job_id}/results)",
        code="not_retryable",
        extra={"status": status.value},
    )


async def _fetch(ctx: Ctx, request: Request) -> Response:
    record = authenticate(ctx, request)
    target = parse_target(await read_json(request, ctx.max_body), "body")
    check_target(target, "body", precheck=ctx.precheck, check_options=ctx.check_options)
    assert ctx.fetch is not None
    try:
        result = await ctx.fetch(record.caller(), target)
    except Exception as exc:
        raise _fetch_failure(ctx, exc) from None
    return JSONResponse(answers.fetched(target.url, result))


_MAP_FIELDS = ("url", "limit", "same_host", "robots")


def _parse_map(body: object) -> tuple[str, int, bool, bool | None]:
    """The ``url``, ``limit``, ``same_host`` and ``robots`` of a ``POST /v1/map`` body."""
    if not isinstance(body, dict):
        raise ApiError(
            400,
            "the body must be a JSON object with a url",
            'send {"url": "https://example.org/", "limit": 1000}',
            field="body",
        )
    check_fields(body, _MAP_FIELDS)
    url = body.get("url")
    if not isinstance(url, str) or not url:
        raise ApiError(
            400,
            "url must be a non-empty string",
            "send the site's start page, such as https://example.org/",
            field="url",
        )
    check_text("url", url)
    raw = body.get("limit", MAP_DEFAULT_LIMIT)
    limit = whole(raw)
    if limit is None or not 1 <= limit <= MAP_LIMIT:
        raise ApiError(
            400,
            f"limit must be a whole number from 1 to {MAP_LIMIT:,} (got {shown(json.dumps(raw))})",
            f"leave it out for {MAP_DEFAULT_LIMIT:,} URLs; at most {MAP_LIMIT:,}",
            field="limit",
        )
    same_host = body.get("same_host", True)
    if not isinstance(same_host, bool):
        raise ApiError(
            400,
            "same_host must be true or false",
            "true (the default) keeps the start page's host only",
            field="same_host",
        )
    robots = body.get("robots")
    if robots is not None and not isinstance(robots, bool):
        raise ApiError(
            400,
            "robots must be true or false",
            "true checks every document of the map against its site's robots.txt; leave it "
            "out for the server's setting",
            field="robots",
        )
    return url, limit, same_host, robots


async def _map(site_map: SiteMapFunc, ctx: Ctx, request: Request) -> Response:
    """``POST /v1/map``: a site's URLs, from its sitemaps and its start page's links."""
    record = authenticate(ctx, request)
    url, limit, same_host, robots = _parse_map(await read_json(request, ctx.max_body))
    try:
        ctx.precheck(url)
    except TargetError as exc:
        raise ApiError(400, f"url: {exc.msg}", exc.hint, field="url") from None
    try:
        answer = await site_map(record.caller(), url, limit, same_host, robots)
    except Exception as exc:
        raise _fetch_failure(ctx, exc) from None
    return JSONResponse(dict(answer))


def _fetch_failure(ctx: Ctx, exc: Exception) -> ApiError:
    """A failed single fetch (or map) as its answer: the fetch's status with its hint, or 503
    with ``Retry-After`` when the pool or the site is busy; anything else is re-raised."""
    kind = classify_failure(exc)
    if kind is None:
        raise exc
    if isinstance(kind, TargetError):
        status = kind.status if 400 <= kind.status <= 599 else 502
        headers = ctx.busy_headers() if status in (429, 503) else None
        return ApiError(status, kind.msg, kind.hint, code="fetch_failed", headers=headers)
    return ApiError(
        503,
        "the fetch pool or the target is busy",
        "try again after Retry-After seconds, or submit a batch (it retries by itself)",
        code="fetch_busy",
        headers=ctx.busy_headers(kind.after),
    )


async def _healthz(ctx: Ctx, request: Request) -> Response:
    """200 when the store answers a read, and writes are neither stuck nor failing; else 503.

    The check writes nothing: it reads a job that does not exist, then waits for the writes the
    API started longer than ``store_timeout`` ago, if any (a writer stuck behind a lock shows
    there), then asks how the API's and the engine's latest writes ended (a full disk fails
    them at once while reads still answer: ``_health``).
    """
    stats = ctx.engine.statistics()
    store = ctx.calls.request()
    problem: tuple[str, str] | None = None
    try:
        await store.read(ctx.engine.status, "")
        if not await ctx.calls.wait_stale_writes(store.deadline):
            problem = (
                f"writes to the database have not finished for over {ctx.calls.timeout:g} s",
                "the database is slow or a lock holds the writer; requests get 503 meanwhile",
            )
        else:
            problem = ctx.calls.health.problem(stats)
    except StoreTimeout:
        problem = (
            f"the database did not answer within {ctx.calls.timeout:g} s",
            "the database is slow or unreachable; requests get 503 meanwhile",
        )
    except trio.ClosedResourceError:
        problem = ("the server is shutting down", "send requests to another instance")
    except Exception as exc:
        failure = store_failure(exc)
        if failure is None:
            raise
        problem = (
            "the database is unavailable",
            f"the store reported {type(failure).__name__}; requests get 503 meanwhile",
        )
    body = answers.health(stats, problem)
    if problem is None:
        return JSONResponse(body)
    return JSONResponse(body, status_code=503, headers=ctx.busy_headers())


async def _metrics(ctx: Ctx, request: Request) -> Response:
    stats = ctx.engine.statistics()
    ctx.metrics.live_jobs.set(stats.live_jobs)
    ctx.metrics.inflight.set(stats.inflight_targets)
    body, content_type = ctx.metrics.render()
    return Response(body, media_type=content_type)
