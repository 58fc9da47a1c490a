"""Error answers: ``ApiError``, the wrapper that turns exceptions into them, and the refusals.

Every error the API answers is JSON, ``{"error", "hint", "code"}`` plus a ``field`` when an
input is at fault (SPEC §5; ``code`` is our addition). ``error`` and ``hint`` are for people and
may be reworded; ``code`` is for programs and stays: :data:`CODES` is the one table of them, and
the client (``trio_batch.client``) maps its exceptions on it. A route raises :class:`ApiError`;
:func:`answer_errors` turns it, a shutdown, a database that is down or slow, or a bug into the
response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, final

import trio
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from .._config import Config
from .._errors import (
    Busy,
    CallerBusy,
    NoTargets,
    SubmitError,
    TooManyTargets,
    is_store_outage,
    iter_chain,
)
from .._model import JSONValue
from ._deadline import StoreTimeout
from ._health import LogThrottle

_log = logging.getLogger("trio_batch.http")

Endpoint = Callable[[Request], Awaitable[Response]]

CODES: Final[dict[str, tuple[int, str]]] = {
    "bad_request": (400, "the request is malformed or an input fails a check; `field` names it"),
    "no_targets": (400, "a submit with an empty targets array"),
    "unauthorized": (401, "no API key, or one the server does not know"),
    "origin_refused": (403, "/mcp from a browser page whose Origin is not on the allow-list"),
    "not_found": (404, "no such job (or another caller's), target or route"),
    "method_not_allowed": (405, "the route has no such method; `Allow` lists those it has"),
    "not_cancellable": (409, "a cancel of a job that has finished; `status` says how"),
    "not_retryable": (
        409,
        "a retry of a live job, or of one with no failed target; `status` says which",
    ),
    "body_too_large": (413, "the request body is over the server's cap"),
    "too_many_targets": (413, "more targets than a batch may have"),
    "caller_busy": (429, "the caller has as many live batches as it may"),
    "internal_error": (500, "a bug; the server log has its type"),
    "busy": (503, "the server has as many live batches as it may"),
    "shutting_down": (503, "the server is shutting down"),
    "store_unavailable": (503, "the database is down, or refused the call"),
    "store_timeout": (503, "the database did not answer within the request's deadline"),
    "fetch_failed": (0, "POST /v1/fetch: the fetch failed; the status is the fetch's (4xx, 5xx)"),
    "fetch_busy": (503, "POST /v1/fetch: the fetch pool or the target is busy"),
}
"""Every ``code`` an error answer may carry: its status (0: varies) and what it means.

A program decides on ``code`` rather than on ``error``, whose words may change; one status can
mean several things (a 503 is a full server, a shutdown or a database away), ``code`` says which.
"""

_CODE_OF_STATUS: Final[dict[int, str]] = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    500: "internal_error",
}
"""The code of an :class:`ApiError` that names none: a status's when it means one thing."""


@final
class ApiError(Exception):
    """An error answer: status, ``{"error", "hint", "code"}`` and optional fields and headers.

    ``code`` (a key of :data:`CODES`) may be left out where the status means one thing only
    (400, 401, 404, 405, 413, 500); a status that means several (409, 429, 503, a failed
    fetch's) must name it.

    Raises:
        ValueError: ``code`` is not in :data:`CODES`, or it is left out where it must be given.
    """

    def __init__(
        self,
        status: int,
        error: str,
        hint: str = "",
        *,
        code: str | None = None,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        extra: Mapping[str, JSONValue] | None = None,
    ) -> None:
        super().__init__(error)
        code = code if code is not None else _CODE_OF_STATUS.get(status)
        if code not in CODES:
            raise ValueError(f"an error answer of status {status} needs a code from CODES")

        self.status = status
        self.code = code
        self.body: dict[str, JSONValue] = {"error": error, "hint": hint, "code": code}
        if field is not None:
            self.body["field"] = field
        if extra:
            self.body.update(extra)
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, status_code=self.status, headers=self.headers)


def retry_after_header(seconds: int) -> dict[str, str]:
    """The ``Retry-After`` header of a 429 or 503 answer."""
    return {"Retry-After": str(seconds)}


def store_failure(exc: BaseException) -> BaseException | None:
    """The database failure in ``exc``'s chain, if it holds one, else None.

    A database failure is what the engine would try again (:func:`is_store_outage`): a
    :class:`~trio_batch.StoreError`, or a driver's operational error (a connection lost, the
    server shutting down, a query cancelled by ``statement_timeout``, SQLite locked or out of
    disk).
    """
    return next((e for e in iter_chain(exc) if is_store_outage(e)), None)


def store_unavailable(retry_after_seconds: int) -> ApiError:
    """The 503 of a store call that failed because the database is down or refused it."""
    return ApiError(
        503,
        "the database is unavailable",
        "try again after Retry-After seconds; if it persists, tell the operator (the server "
        "log says what failed)",
        code="store_unavailable",
        headers=retry_after_header(retry_after_seconds),
    )


def store_timed_out(exc: StoreTimeout, retry_after_seconds: int) -> ApiError:
    """The 503 of a request whose store calls did not finish within its deadline."""
    if exc.backlog:
        error = "the database is not keeping up: too many writes are waiting for it"
    else:
        error = f"the database did not answer within {exc.seconds:g} s"
    hint = "the database is slow or unreachable; try again after Retry-After seconds"
    if exc.write:
        hint += (
            "; the change may still be made: repeating the same request is safe (the same "
            "batch submitted again is the same job)"
        )
    return ApiError(
        503, error, hint, code="store_timeout", headers=retry_after_header(retry_after_seconds)
    )


def answer_errors(
    endpoint: Endpoint, *, retry_after_seconds: int, throttle: LogThrottle | None = None
) -> Endpoint:
    """``endpoint``, answering every exception it raises with a JSON error.

    An :class:`ApiError` is its own answer; a closed engine is 503 with ``Retry-After``; so is a
    store call that failed because the database is down (:func:`store_failure`) or that did not
    finish within the request's deadline (:class:`StoreTimeout`); a client that hangs up
    mid-body is 400; anything else is a bug: 500. Failures are logged by type only (never the
    message, which may hold a URL, a key or a DSN). With ``throttle``, the warnings of a
    database that is down or slow are logged once per kind every few seconds, not per request.
    """
    warn = throttle.warning if throttle is not None else _warning

    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ApiError as exc:
            return exc.response()
        except trio.ClosedResourceError:
            return ApiError(
                503,
                "the server is shutting down",
                "try again in a moment",
                code="shutting_down",
                headers=retry_after_header(retry_after_seconds),
            ).response()
        except StoreTimeout as exc:
            warn(
                "request gave up on the store after %g s%s",
                exc.seconds,
                " (too many writes waiting)" if exc.backlog else "",
                kind=f"StoreTimeout {exc.backlog}",
                error_type="StoreTimeout",
            )
            return store_timed_out(exc, retry_after_seconds).response()
        except ClientDisconnect:
            return ApiError(
                400,
                "the client went away while sending the body",
                "send the whole body again",
            ).response()
        except Exception as exc:
            failure = store_failure(exc)
            kind = type(failure if failure is not None else exc).__name__
            if failure is not None:
                warn("store unavailable: %s", kind, kind=f"unavailable {kind}", error_type=kind)
                return store_unavailable(retry_after_seconds).response()
            _log.error("request failed with %s", kind, extra={"error_type": kind})
            return ApiError(
                500, "internal error", "try again; if it persists, tell the operator"
            ).response()

    return answered


def _warning(message: str, *args: object, kind: str, error_type: str) -> None:
    _log.warning(message, *args, extra={"error_type": error_type})


async def routing_error(request: Request, exc: Exception) -> Response:
    """Starlette's 404 (no route) and 405 (wrong method) as JSON errors, keeping ``Allow``."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        error = ApiError(405, "this method is not allowed here", "see /openapi.json")
    else:
        error = ApiError(
            exc.status_code, "no such route", "see /openapi.json for the routes", code="not_found"
        )
    error.headers.update(exc.headers or {})
    return error.response()


def not_found() -> ApiError:
    """The 404 of a job that does not exist or is another caller's (the two look the same)."""
    return ApiError(
        404,
        "no job with this id",
        "check the id: a job is visible only to the key that submitted it, and a finished job "
        "is kept for a while after it was last read",
    )


@final
@dataclass(frozen=True, slots=True)
class _Refusal:
    status: int
    code: str
    error: str
    """May use ``{count}`` (targets sent), ``{targets_per_job}``, and ``{jobs_per_caller}`` and
    ``{jobs_total}`` as words ("1 live batch", "2 live batches")."""
    hint: str
    field: str | None = None
    retry_after: bool = False


_REFUSALS: dict[type[SubmitError], _Refusal] = {
    NoTargets: _Refusal(
        400, "no_targets", "targets is empty", "send at least one target", field="targets"
    ),
    TooManyTargets: _Refusal(
        413,
        "too_many_targets",
        "{count} targets is more than the {targets_per_job} a batch may have",
        "split the targets into batches of at most {targets_per_job}",
        field="targets",
    ),
    # The caller may be the operator too (a server on their own machine): the hint says the
    # limit and the setting that raises it, in serve's words.
    CallerBusy: _Refusal(
        429,
        "caller_busy",
        "you already have the {jobs_per_caller} a key may have at once",
        "wait for one to finish (poll it), or cancel one, then submit again; the server's "
        "operator can raise the limit with trio-batch serve --jobs-per-caller N",
        retry_after=True,
    ),
    Busy: _Refusal(
        503,
        "busy",
        "the server already has the {jobs_total} it may have at once",
        "try again after Retry-After seconds; the server's operator can raise the limit with "
        "trio-batch serve --jobs-total N",
        retry_after=True,
    ),
}


def _live_batches(n: int) -> str:
    return f"{n} live batch{'' if n == 1 else 'es'}"


def refusal(exc: SubmitError, *, count: int, limits: Config, retry_after_seconds: int) -> ApiError:
    """The answer to a refused submit of ``count`` targets, naming the ``limits`` it met.

    Raises:
        SubmitError: ``exc`` itself when the table has no row for it, so it is answered as a
            bug (500).
    """
    row = _REFUSALS.get(type(exc))
    if row is None:
        raise exc
    words = {
        "count": count,
        "targets_per_job": limits.targets_per_job,
        "jobs_per_caller": _live_batches(limits.jobs_per_caller),
        "jobs_total": _live_batches(limits.jobs_total),
    }
    return ApiError(
        row.status,
        row.error.format_map(words),
        row.hint.format_map(words),
        code=row.code,
        field=row.field,
        headers=retry_after_header(retry_after_seconds) if row.retry_after else None,
    )
