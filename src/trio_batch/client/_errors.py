"""Error answers of the API: read once (:class:`ErrorBody`), then raised as the door needs.

Every error answer of the HTTP API has the same body, ``{"error", "hint", "code", "field"}``
and on some answers ``status`` (docs/http.md), and a 429 or 503 a ``Retry-After`` header.
:meth:`ErrorBody.of` reads it, the one reader of that body for every door that calls the API:
this client turns it into an exception chosen by ``code`` (:func:`error_from`), and the MCP
tools hand it back to a model as a tool error (``trio_batch._mcp``), so the two read the same
fields the same way, ``Retry-After`` included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self, final

import httpx

from .._errors import Busy, CallerBusy, Error, NoTargets, SubmitError, TooManyTargets


@final
class ClientError(Error):
    """An error answer of the API (or no answer: ``status`` 0), with what to do about it.

    ``code`` is the answer's machine-readable reason (``"not_found"``, ``"not_retryable"``,
    ``"store_unavailable"``, ...; ``docs/http.md`` lists them), or ``""`` when there was no
    answer or it carried none. Decide on ``code``; ``error`` and ``hint`` are for people.
    """

    def __init__(
        self,
        status: int,
        error: str,
        hint: str = "",
        *,
        code: str = "",
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {error}" if status else error)
        self.status = status
        self.code = code
        self.error = error
        self.hint = hint
        self.field = field
        self.retry_after = retry_after


def retry_after(headers: httpx.Headers) -> int | None:
    """The ``Retry-After`` header in whole seconds; None when absent or not a number of seconds.

    The server sends whole seconds; an HTTP date (which only a proxy in between could send) is
    read as no advice, as is anything else.
    """
    raw = headers.get("retry-after", "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


@final
@dataclass(frozen=True, slots=True)
class ErrorBody:
    """An error answer of the API, read: its status, the body's fields and ``Retry-After``."""

    status: int
    error: str
    """What went wrong; for an answer without one, its status in words (``Bad Gateway``)."""
    hint: str
    """What to do about it; "" when the answer gave none."""
    code: str
    """The machine-readable reason (docs/http.md); "" when the answer gave none."""
    field: str | None
    """The input the error is about (``"targets[2].url"``), when it is about one."""
    job_status: str | None
    """The job's status, when the answer says it (a job that cannot be cancelled: how it
    ended)."""
    retry_after: int | None
    """Seconds the server asked to wait before trying again (:func:`retry_after`)."""

    @classmethod
    def of(cls, response: httpx.Response) -> Self:
        """The error answer ``response``; a body that is not a JSON object leaves "" and None."""
        try:
            data = response.json()
        except ValueError:
            data = None
        body = data if isinstance(data, dict) else {}

        def text(name: str) -> str | None:
            value = body.get(name)
            return value if isinstance(value, str) and value else None

        status = response.status_code
        return cls(
            status=status,
            error=text("error") or response.reason_phrase or f"HTTP {status}",
            hint=text("hint") or "",
            code=text("code") or "",
            field=text("field"),
            job_status=text("status"),
            retry_after=retry_after(response.headers),
        )


_SUBMIT_ERRORS: dict[str, type[SubmitError]] = {
    "caller_busy": CallerBusy,
    "busy": Busy,
    "too_many_targets": TooManyTargets,
    "no_targets": NoTargets,
}
"""The refusals that are the engine's own exceptions, by the answer's ``code``."""


def error_from(response: httpx.Response) -> Error:
    """The exception for an error answer (see the package docstring)."""
    body = ErrorBody.of(response)
    wait = None if body.retry_after is None else float(body.retry_after)
    kind = _SUBMIT_ERRORS.get(body.code)
    if kind is not None:
        exc = kind(f"{body.error}: {body.hint}" if body.hint else body.error)
        exc.retry_after = wait
        return exc
    return ClientError(
        body.status, body.error, body.hint, code=body.code, field=body.field, retry_after=wait
    )


def unreachable(exc: httpx.TransportError) -> ClientError:
    """The :class:`ClientError` (status 0) of a server that could not be reached."""
    return ClientError(
        0,
        f"could not talk to the server ({type(exc).__name__})",
        "check the base URL and that the server runs; streams resume by themselves",
    )
