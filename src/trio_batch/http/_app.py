"""The ASGI app of SPEC §5: routes, auth, input checks, and the access log."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, final

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._engine import BatchEngine, FetchFunc
from .._errors import (
    Busy,
    CallerBusy,
    NoTargets,
    TargetError,
    TooManyTargets,
    find_retry_later,
)
from .._model import Job, Options, Snapshot, Target, TargetState, TargetStatus
from ..metrics import PrometheusMetrics
from ._keys import KeyRecord, KeyRing
from ._openapi import openapi_document

PrecheckFunc = Callable[[str], None]
"""Checks a target URL before it is accepted; raises ``TargetError`` (status 400) if it fails."""
OptionsCheckFunc = Callable[[Options], None]
"""Checks a target's options; raises ``TargetError`` (status 400) if they are not usable."""

MAX_BODY = 256 * 1024
"""Largest request body, in bytes, counted while it is read."""
MAX_URL = 2048
_MAX_INT = 2**31 - 1
_CALLER_KEY = "trio_batch.caller"
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")  # "{idx:int}" -> "{idx}" in route labels

access_log = logging.getLogger("trio_batch.http.access")
_log = logging.getLogger("trio_batch.http")


@final
class ApiError(Exception):
    """An error answer: status, ``{"error", "hint"}`` and optional extra fields and headers."""

    def __init__(
        self,
        status: int,
        error: str,
        hint: str = "",
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.body: dict[str, Any] = {"error": error, "hint": hint}
        if field is not None:
            self.body["field"] = field
        if extra:
            self.body.update(extra)
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status, headers=self.headers)


def _default_precheck() -> PrecheckFunc:
    from ..web import precheck

    return precheck


def _default_options_check() -> OptionsCheckFunc | None:
    try:
        from ..web import validate_options
    except ImportError:
        return None
    return validate_options


@final
@dataclass(frozen=True, slots=True)
class _Ctx:
    engine: BatchEngine
    keys: KeyRing
    fetch: FetchFunc | None
    precheck: PrecheckFunc
    check_options: OptionsCheckFunc | None
    metrics: PrometheusMetrics
    ttl: float
    retry_after: int
    max_body: int
    wall_clock: Callable[[], float]

    def busy_headers(self, after: float | None = None) -> dict[str, str]:
        seconds = self.retry_after if after is None else max(1, math.ceil(after))
        return {"Retry-After": str(seconds)}


def create_app(
    engine: BatchEngine,
    keys: KeyRing,
    *,
    fetch: FetchFunc | None = None,
    precheck: PrecheckFunc | None = None,
    validate_options: OptionsCheckFunc | None = None,
    metrics: PrometheusMetrics | None = None,
    ttl: float | None = None,
    retry_after: int = 5,
    access_log_enabled: bool = True,
    max_body: int = MAX_BODY,
    wall_clock: Callable[[], float] = time.time,
) -> ASGIApp:
    """The ASGI app of the batch API (SPEC §5) over ``engine``, letting in the callers in ``keys``.

    Args:
        engine: the engine jobs are submitted to; the app never closes it.
        keys: who may call; a request's bearer key is looked up here.
        fetch: the fetch function behind ``POST /v1/fetch`` (the engine's own fetcher, so single
            fetches share its pool). Without it, that route does not exist.
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
    """
    ctx = _Ctx(
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
    )
    document = openapi_document(
        with_fetch=fetch is not None, max_body=max_body, retry_after=retry_after
    )

    def route(path: str, fn: Callable[[_Ctx, Request], Awaitable[Response]], method: str) -> Route:
        async def endpoint(request: Request) -> Response:
            return await _guard(fn, ctx, request)

        return Route(path, endpoint, methods=[method], name=f"{method} {path}")

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    routes: list[BaseRoute] = [
        route("/v1/batch", _submit, "POST"),
        route("/v1/batch/{id}", _get_batch, "GET"),
        route("/v1/batch/{id}", _cancel, "DELETE"),
        route("/v1/batch/{id}/{idx:int}", _get_target, "GET"),
        route("/healthz", _healthz, "GET"),
        route("/metrics", _metrics, "GET"),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    if fetch is not None:
        routes.append(route("/v1/fetch", _fetch, "POST"))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            error = ApiError(405, "this method is not allowed here", "see /openapi.json")
        else:
            error = ApiError(exc.status_code, "no such route", "see /openapi.json for the routes")
        error.headers.update(exc.headers or {})
        return error.response()

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    return _Observe(app, routes, ctx.metrics, access_log_enabled)


# -- plumbing -----------------------------------------------------------------------------------


@final
class _Observe:
    """ASGI wrapper: the access log line and the request metrics, by route template."""

    def __init__(
        self, app: ASGIApp, routes: list[BaseRoute], metrics: PrometheusMetrics, log: bool
    ) -> None:
        self.app = app
        self.routes = routes
        self.metrics = metrics
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = trio.current_time()
        status = 500
        template = self._template(scope)

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            seconds = trio.current_time() - t0
            method = str(scope.get("method", "")).upper()
            self.metrics.observe_request(method, template, status, seconds)
            if self.log:
                access_log.info(
                    "%s %s %d %.1fms %s",
                    method,
                    template,
                    status,
                    seconds * 1000,
                    scope.get(_CALLER_KEY) or "-",
                    extra={
                        "method": method,
                        "route": template,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 3),
                        "caller": scope.get(_CALLER_KEY) or "",
                    },
                )

    def _template(self, scope: Scope) -> str:
        partial = None
        for r in self.routes:
            match, _ = r.matches(scope)
            if match == Match.FULL:
                return _CONVERTOR.sub(r"{\1}", str(getattr(r, "path", "unmatched")))
            if match == Match.PARTIAL and partial is None:
                partial = _CONVERTOR.sub(r"{\1}", str(getattr(r, "path", "unmatched")))
        return partial or "unmatched"


async def _guard(
    fn: Callable[[_Ctx, Request], Awaitable[Response]], ctx: _Ctx, request: Request
) -> Response:
    try:
        return await fn(ctx, request)
    except ApiError as exc:
        return exc.response()
    except trio.ClosedResourceError:
        return ApiError(
            503,
            "the server is shutting down",
            "try again in a moment",
            headers=ctx.busy_headers(),
        ).response()
    except ClientDisconnect:
        return ApiError(400, "the client went away while sending the body").response()
    except Exception as exc:
        _log.error(
            "request failed with %s",
            type(exc).__name__,
            extra={"error_type": type(exc).__name__},
        )
        return ApiError(
            500, "internal error", "try again; if it persists, tell the operator"
        ).response()


def _authenticate(ctx: _Ctx, request: Request) -> KeyRecord:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    record = ctx.keys.lookup(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
    if record is None:
        raise ApiError(
            401,
            "missing or unknown API key" if header else "missing API key",
            "send the header 'Authorization: Bearer <key>'; an operator makes keys with "
            "'trio-batch keys add NAME'",
            headers={"WWW-Authenticate": 'Bearer realm="trio-batch"'},
        )
    request.scope[_CALLER_KEY] = record.name
    return record


async def _read_json(ctx: _Ctx, request: Request) -> object:
    too_big = ApiError(
        413,
        f"the body is over {ctx.max_body // 1024} KiB",
        "send fewer targets per request, or split the batch",
        field="body",
    )
    length = request.headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > ctx.max_body:
        raise too_big
    body = bytearray()
    async with contextlib.aclosing(request.stream()) as stream:
        async for chunk in stream:
            body += chunk
            if len(body) > ctx.max_body:
                raise too_big
    try:
        return json.loads(bytes(body), parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            f"the body is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            'send a JSON object like {"targets": [{"url": "https://example.org/"}]}',
            field="body",
        ) from None
    except (ValueError, RecursionError):
        raise ApiError(
            400,
            "the body is not valid JSON (bad encoding, a number too long, or nested too deep)",
            "send UTF-8 JSON",
            field="body",
        ) from None


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not allowed")


_OPTION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "mode": ((str,), "a string"),
    "question": ((str,), "a string"),
    "pages": ((str,), "a string"),
    "grep": ((str,), "a string"),
    "jq": ((str,), "a string"),
    "context": ((bool, type(None)), "true, false or null"),
    "recover": ((bool,), "true or false"),
}


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _parse_target(item: object, where: str) -> Target:
    if not isinstance(item, dict):
        raise ApiError(
            400,
            f'{where} must be an object like {{"url": "https://..."}} (got {_type_name(item)})',
            field=where,
        )
    for name in item:
        if name not in ("url", "options"):
            raise ApiError(
                400,
                f"{where}.{name} is not a field; a target has url and options",
                "remove the field",
                field=f"{where}.{name}",
            )
    url = item.get("url")
    if not isinstance(url, str) or not url:
        got = "missing" if "url" not in item else f"{_type_name(url)}"
        raise ApiError(
            400,
            f"{where}.url must be a non-empty string (got {got})",
            "give every target an absolute http(s) URL",
            field=f"{where}.url",
        )
    raw = item.get("options", {})
    if not isinstance(raw, dict):
        raise ApiError(
            400,
            f"{where}.options must be an object (got {_type_name(raw)})",
            field=f"{where}.options",
        )
    for name, value in raw.items():
        spec = _OPTION_TYPES.get(name)
        if spec is None:
            raise ApiError(
                400,
                f"{where}.options.{name} is not an option; options: {', '.join(_OPTION_TYPES)}",
                "remove the option",
                field=f"{where}.options.{name}",
            )
        types, want = spec
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise ApiError(
                400,
                f"{where}.options.{name} must be {want} (got {_type_name(value)})",
                field=f"{where}.options.{name}",
            )
    return Target(url, Options(**raw))


def _check_target(ctx: _Ctx, target: Target, where: str) -> None:
    try:
        ctx.precheck(target.url)
    except TargetError as exc:
        raise ApiError(400, f"{where}.url: {exc.msg}", exc.hint, field=f"{where}.url") from None
    if ctx.check_options is not None:
        try:
            ctx.check_options(target.options)
        except TargetError as exc:
            raise ApiError(
                400, f"{where}.options: {exc.msg}", exc.hint, field=f"{where}.options"
            ) from None


def _parse_batch(data: object) -> list[Target]:
    if not isinstance(data, dict):
        raise ApiError(
            400,
            f"the body must be a JSON object with a targets array (got {_type_name(data)})",
            'send {"targets": [{"url": "https://example.org/"}]}',
            field="body",
        )
    for name in data:
        if name != "targets":
            raise ApiError(
                400,
                f"{name} is not a field; the body has one field, targets",
                "remove the field",
                field=name,
            )
    if "targets" not in data:
        raise ApiError(
            400,
            "targets is missing",
            'send {"targets": [{"url": "https://example.org/"}]}',
            field="targets",
        )
    items = data["targets"]
    if not isinstance(items, list):
        raise ApiError(400, f"targets must be an array (got {_type_name(items)})", field="targets")
    return [_parse_target(item, f"targets[{i}]") for i, item in enumerate(items)]


def _target_json(t: TargetStatus) -> dict[str, Any]:
    return {
        "idx": t.idx,
        "url": t.url,
        "status": t.status.value,
        "error": t.error,
        "hint": t.hint,
        "options": t.options.to_json(),
        "result": None
        if t.result is None
        else {"content": t.result.content, "meta": t.result.meta},
    }


def _links(job_id: str) -> dict[str, str]:
    return {"self": f"/v1/batch/{job_id}", "results": f"/v1/batch/{job_id}?results=1"}


def _summary(ctx: _Ctx, snap: Snapshot) -> dict[str, Any]:
    job = snap.job
    counts = {state.value: 0 for state in TargetState}
    for t in snap.targets:
        counts[t.status.value] += 1
    total = max(job.targets_total, len(snap.targets))
    # Targets a snapshot did not list have not run: count them pending, so counts sum to total.
    counts[TargetState.PENDING.value] += total - len(snap.targets)
    return {
        "id": job.id,
        "status": job.status.value,
        "error": job.error,
        "targets_total": total,
        "counts": counts,
        "created_at": job.created_at,
        "updated_at": job.updated_at or job.created_at,
        "expires_at": _expires_at(ctx, snap),
        "links": _links(job.id),
    }


def _expires_at(ctx: _Ctx, snap: Snapshot) -> float:
    return max(snap.job.lease, snap.job.created_at) + ctx.ttl


def _not_found() -> ApiError:
    return ApiError(
        404,
        "no job with this id",
        "check the id: a job is visible only to the key that submitted it, and a finished job "
        "is kept for a while after it was last read",
    )


async def _owned(ctx: _Ctx, request: Request, record: KeyRecord, *, touch: bool) -> Snapshot:
    job_id = request.path_params["id"]
    snap = await ctx.engine.status(job_id)
    if snap is None or snap.job.caller != record.name:
        raise _not_found()
    if touch and await ctx.engine.touch(job_id):
        now = ctx.wall_clock()
        snap = Snapshot(_with_lease(snap, now), snap.targets)
    return snap


def _with_lease(snap: Snapshot, now: float) -> Job:
    return dataclasses.replace(snap.job, lease=max(snap.job.lease, now))


# -- endpoints ----------------------------------------------------------------------------------


async def _submit(ctx: _Ctx, request: Request) -> Response:
    record = _authenticate(ctx, request)
    targets = _parse_batch(await _read_json(ctx, request))
    for i, target in enumerate(targets):
        _check_target(ctx, target, f"targets[{i}]")
    try:
        sub = await ctx.engine.submit(record.caller(), record.caller_class, targets)
    except NoTargets:
        raise ApiError(
            400, "targets is empty", "send at least one target", field="targets"
        ) from None
    except TooManyTargets:
        limit = ctx.engine.config.targets_per_job
        raise ApiError(
            413,
            f"{len(targets)} targets is more than the {limit} a batch may have",
            f"split the targets into batches of at most {limit}",
            field="targets",
        ) from None
    except CallerBusy:
        raise ApiError(
            429,
            "you have as many live batches as you may",
            "wait for one to finish (poll it), or cancel one, then submit again",
            headers=ctx.busy_headers(),
        ) from None
    except Busy:
        raise ApiError(
            503,
            "the server has as many live batches as it may",
            "try again after Retry-After seconds",
            headers=ctx.busy_headers(),
        ) from None
    if sub.reused:
        await ctx.engine.touch(sub.id)
    snap = await ctx.engine.status(sub.id)
    if snap is None:  # evicted or swept in between: vanishingly rare
        raise _not_found()
    if sub.reused:
        snap = Snapshot(_with_lease(snap, ctx.wall_clock()), snap.targets)
    body = {
        "id": sub.id,
        "reused": sub.reused,
        "status": snap.job.status.value,
        "targets_total": snap.job.targets_total,
        "expires_at": _expires_at(ctx, snap),
        "links": _links(sub.id),
    }
    return JSONResponse(
        body, status_code=200 if sub.reused else 202, headers={"Location": f"/v1/batch/{sub.id}"}
    )


def _query_int(request: Request, name: str, default: int | None, lo: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not lo <= int(raw) <= _MAX_INT:
        raise ApiError(
            400,
            f"{name} must be a whole number from {lo} to {_MAX_INT} (got {raw[:40]!r})",
            field=name,
        )
    return int(raw)


def _query_flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "0").lower()
    if raw in ("1", "true"):
        return True
    if raw in ("0", "false", ""):
        return False
    raise ApiError(400, f"{name} must be 1 or 0 (got {raw[:40]!r})", field=name)


def _query_states(request: Request) -> set[str] | None:
    raw = request.query_params.get("state")
    if raw is None or raw == "":
        return None
    states = {s.strip() for s in raw.split(",")}
    allowed = {s.value for s in TargetState}
    bad = sorted(states - allowed)
    if bad:
        raise ApiError(
            400,
            f"state must be one or more of {', '.join(allowed)}, comma-separated "
            f"(got {bad[0][:40]!r})",
            field="state",
        )
    return states


async def _get_batch(ctx: _Ctx, request: Request) -> Response:
    record = _authenticate(ctx, request)
    results = _query_flag(request, "results")
    states = _query_states(request)
    offset = _query_int(request, "offset", 0, 0) or 0
    limit = _query_int(request, "limit", None, 1)
    snap = await _owned(ctx, request, record, touch=True)
    body = _summary(ctx, snap)
    if results:
        chosen = [t for t in snap.targets if states is None or t.status.value in states]
        end = len(chosen) if limit is None else min(len(chosen), offset + limit)
        body["targets"] = [_target_json(t) for t in chosen[offset:end]]
        body["targets_matched"] = len(chosen)
        body["next_offset"] = end if end < len(chosen) else None
    return JSONResponse(body)


async def _get_target(ctx: _Ctx, request: Request) -> Response:
    record = _authenticate(ctx, request)
    snap = await _owned(ctx, request, record, touch=True)
    idx: int = request.path_params["idx"]
    if not 0 <= idx < len(snap.targets):
        raise ApiError(
            404,
            f"the job has no target {idx}",
            f"targets are numbered from 0 to {len(snap.targets) - 1}",
        )
    return JSONResponse(_target_json(snap.targets[idx]))


async def _cancel(ctx: _Ctx, request: Request) -> Response:
    record = _authenticate(ctx, request)
    snap = await _owned(ctx, request, record, touch=False)
    if not await ctx.engine.cancel(snap.job.id):
        now = await ctx.engine.status(snap.job.id)
        status = (now or snap).job.status.value
        raise ApiError(
            409,
            f"the job is {status} already; only a queued or running job can be cancelled",
            "read its results instead",
            extra={"status": status},
        )
    after = await ctx.engine.status(snap.job.id)
    return JSONResponse(_summary(ctx, after or snap))


async def _fetch(ctx: _Ctx, request: Request) -> Response:
    record = _authenticate(ctx, request)
    target = _parse_target(await _read_json(ctx, request), "body")
    _check_target(ctx, target, "body")
    assert ctx.fetch is not None
    try:
        result = await ctx.fetch(record.caller(), target)
    except TargetError as exc:
        status = exc.status if 400 <= exc.status <= 599 else 502
        headers = ctx.busy_headers() if status in (429, 503) else None
        raise ApiError(status, exc.msg, exc.hint, headers=headers) from None
    except Exception as exc:
        busy = find_retry_later(exc)
        if busy is None:
            raise
        raise ApiError(
            503,
            "the fetch pool or the target is busy",
            "try again after Retry-After seconds, or submit a batch (it retries by itself)",
            headers=ctx.busy_headers(busy.after),
        ) from None
    return JSONResponse(
        {"url": target.url, "result": {"content": result.content, "meta": result.meta}}
    )


async def _healthz(ctx: _Ctx, request: Request) -> Response:
    stats = ctx.engine.statistics()
    return JSONResponse(
        {"status": "ok", "live_jobs": stats.live_jobs, "inflight_targets": stats.inflight_targets}
    )


async def _metrics(ctx: _Ctx, request: Request) -> Response:
    stats = ctx.engine.statistics()
    ctx.metrics.live_jobs.set(stats.live_jobs)
    ctx.metrics.inflight.set(stats.inflight_targets)
    body, content_type = ctx.metrics.render()
    return Response(body, media_type=content_type)
