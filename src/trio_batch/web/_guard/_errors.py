"""What the agent is told when a fetch fails: transport, timeout, status, busy and size errors.

Every failure becomes a :class:`~trio_batch.TargetError` with the status a single fetch would
answer and a hint the agent can act on, never the text of the underlying exception (which may
name the host). Transport failures are a table read top to bottom, in the manner of httpcore's
``map_exceptions``: the first row whose exception type matches gives the message.
"""

from __future__ import annotations

import contextlib
import email.utils
import http
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import httpx

from ..._errors import RetryLater, TargetError, iter_chain


@dataclass(frozen=True, slots=True)
class _Row:
    """One way an exchange fails: the exception that shows it, and what the agent is told."""

    kind: type[BaseException]
    msg: str
    """The message; ``{port}`` and ``{timeout}`` are filled in."""
    hint: str
    status: int = 502
    in_chain: bool = False
    """Look for ``kind`` in the exception's chain (``iter_chain(exc, hidden=True)``), not only
    in the exception raised: TLS and socket errors sit under httpx's and httpcore's."""

    def matches(self, exc: BaseException, chain: Sequence[BaseException]) -> bool:
        if self.in_chain:
            return any(isinstance(e, self.kind) for e in chain)
        return isinstance(exc, self.kind)


_TIMEOUT: Final = _Row(
    httpx.TimeoutException,
    "the site did not answer within {timeout:g} s",
    hint="the site is slow or hanging; try again later, or ask for a smaller page "
    "(recover=true serves the last cached copy)",
    status=504,
)

_TRANSPORT: Final = (
    _TIMEOUT,
    _Row(
        ssl.SSLCertVerificationError,
        "the site's TLS certificate could not be verified",
        hint="the certificate is invalid, expired or for another name, and trio-batch "
        "never skips verification: use another source for this content",
        in_chain=True,
    ),
    _Row(
        ssl.SSLError,
        "the TLS handshake with the site failed",
        hint="the site's HTTPS setup is broken or outdated; try again later or use another source",
        in_chain=True,
    ),
    _Row(
        ConnectionRefusedError,
        "the site refused the connection on port {port}",
        hint="nothing listens there: check the URL's host and port, or try again later",
        in_chain=True,
    ),
    _Row(
        httpx.ConnectError,
        "could not connect to the site",
        hint="the site is down or unreachable; try again later",
    ),
    _Row(
        httpx.DecodingError,
        "the site sent a body that cannot be decompressed",
        hint="the site's response is broken; try again later or use another source",
    ),
    _Row(
        httpx.RemoteProtocolError,
        "the site sent a malformed or truncated response",
        hint="try again later; if it persists, use another source",
    ),
    _Row(httpx.HTTPError, "the connection to the site failed", hint="try again later"),
)
"""First match wins, so a specific row comes before a general one; the last row matches all."""


def _error(row: _Row, *, port: int = 0, timeout: float = 0.0) -> TargetError:
    return TargetError(row.msg.format(port=port, timeout=timeout), hint=row.hint, status=row.status)


def timeout_error(timeout: float) -> TargetError:
    """The error for a fetch that passed its deadline of ``timeout`` seconds (status 504)."""
    return _error(_TIMEOUT, timeout=timeout)


def transport_error(exc: httpx.HTTPError, *, port: int, timeout: float) -> TargetError:
    """The agent-facing error for a failed connection or exchange (the first matching row)."""
    chain = tuple(iter_chain(exc, hidden=True))
    row = next((row for row in _TRANSPORT if row.matches(exc, chain)), _TRANSPORT[-1])
    return _error(row, port=port, timeout=timeout)


@contextlib.contextmanager
def map_transport_errors(*, port: int, timeout: float) -> Iterator[None]:
    """Raise :func:`transport_error` for an httpx error in the block, hiding its chain."""
    try:
        yield
    except httpx.HTTPError as exc:
        raise transport_error(exc, port=port, timeout=timeout) from None


def phrase(status: int) -> str:
    """``404 Not Found``, or the bare number for a status without a standard phrase."""
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


BUSY_STATUSES: Final = frozenset({429, 503})
"""Statuses that mean only busy: the engine tries the target again later."""


def busy_error(status: int, retry_after: str | None, *, now: float, cap: float) -> RetryLater:
    """The ``RetryLater`` for a busy status; ``after`` is its ``Retry-After`` header (seconds,
    or an HTTP date taken from ``now``, the wall clock) within ``[0, cap]``, else None."""
    return RetryLater(
        f"the site is busy ({phrase(status)})", after=_seconds(retry_after, now=now, cap=cap)
    )


def _seconds(retry_after: str | None, *, now: float, cap: float) -> float | None:
    if retry_after is None:
        return None
    value = retry_after.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - now
    return min(max(seconds, 0.0), cap)


_LOGIN: Final = (
    "the site wants credentials: if you may use them, send them with the target "
    '(options.headers, such as {"Authorization": "Bearer ..."} or {"Cookie": "..."}); '
    "else use a public source"
)
_REFUSED: Final = (
    "the site refuses this request (a login it wants, or a block on automated access): "
    "with credentials of your own, send them in options.headers (Authorization or Cookie); "
    "else use a public source"
)
_GONE: Final = "the page does not exist (any more): check the URL, or search for its new address"
_STATUS_HINTS: Final[Mapping[int, str]] = {
    400: "the site rejected the request: check the URL's path and query parameters",
    401: _LOGIN,
    403: _REFUSED,
    404: _GONE,
    407: "a proxy between trio-batch and the site wants a login: ask the operator",
    410: _GONE,
    451: "the site withholds this page for legal reasons: use another source",
}
_OTHER_CLIENT_ERROR: Final = "the site refused the request: check the URL"


def status_error(status: int) -> TargetError | None:
    """The error for a final response status with no content to read; None for a 2xx.

    A 5xx becomes 502, a 4xx keeps its status (with a hint for the common ones), and any other
    status outside 2xx (a 1xx, or a 3xx without a ``Location``) becomes 502. The busy statuses
    (429, 503) never get here: the fetcher raises ``RetryLater`` for them first.
    """
    if status >= 500:
        return TargetError(
            f"the site failed with {phrase(status)}",
            hint="the site has a server error; try again later (recover=true serves the "
            "last cached copy)",
            status=502,
        )
    if status >= 400:
        return TargetError(
            f"the site answered {phrase(status)}",
            hint=_STATUS_HINTS.get(status, _OTHER_CLIENT_ERROR),
            status=status,
        )
    if not 200 <= status < 300:
        return TargetError(
            f"the site answered {phrase(status)}, which has no content to read",
            hint="open the page in a browser to see where it leads; use its final address",
            status=502,
        )
    return None


def size_text(n: int) -> str:
    """``n`` bytes for a reader: ``512 bytes``, ``4.9 KB``, ``2 MB``."""
    if n >= 2**20:
        return f"{n / 2**20:.1f}".removesuffix(".0") + " MB"
    if n >= 1024:
        return f"{n / 1024:.1f}".removesuffix(".0") + " KB"
    return f"{n} bytes"


def too_large(size: int | None, *, limit: int, mime: str) -> TargetError:
    """The error for a body over ``limit`` bytes: ``size`` when declared, else None (413)."""
    what = "PDF" if mime == "application/pdf" else "page"
    msg = (
        f"the {what} is {size_text(size)}; the limit is {size_text(limit)}"
        if size is not None
        else f"the {what} is larger than the limit of {size_text(limit)}"
    )
    if what == "PDF":
        hint = (
            "a PDF must be read whole to find its pages, so pages= cannot shrink the "
            "download: look for a smaller edition (a chapter, or an HTML version)"
        )
    else:
        hint = "fetch a smaller page: a single section, an article's print view, or an API"
    return TargetError(msg, hint=hint, status=413)
