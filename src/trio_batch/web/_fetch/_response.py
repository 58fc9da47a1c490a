"""Reading a response: its content type, the redirect it asks for, and its body (a page's,
within the size limit, or a robots.txt's).

The fetcher follows redirects itself, one checked hop at a time. Every way a redirect can fail
(a Location that does not parse, another scheme, a refused address, too many hops) is a
``TargetError`` with a hint here, never an exception from httpx: :func:`hide_location` keeps
httpx from reading ``Location`` at all, since even with redirects off it parses it to build
``next_request``, and raised a bare ``InvalidURL`` (an internal error) for ``https:x``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import httpx

from ..._errors import TargetError
from .._extract._shape import Body
from .._guard._check import Checked, Network, check_url
from .._guard._errors import BUSY_STATUSES, busy_error, status_error, too_large
from ._robots import MAX_ROBOTS_BYTES

REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
LOCATION: Final = "x-trio-batch-location"
"""Where :func:`hide_location` moves the ``Location`` header."""


async def hide_location(response: httpx.Response) -> None:
    """An httpx response hook: move ``Location`` to ``LOCATION``, where httpx does not look."""
    location = response.headers.get("location")
    if location is not None:
        del response.headers["location"]
        response.headers[LOCATION] = location


class Refused(Exception):
    """The guard refused a hop; carries the TargetError (never served from the cache)."""

    def __init__(self, error: TargetError) -> None:
        super().__init__(error.msg)
        self.error = error


@dataclass(frozen=True, slots=True)
class Download:
    """A response body read in full, and what the cache needs to know about it."""

    body: Body
    status: int
    redirects: int
    cache_control: str


def content_type(value: str) -> tuple[str, str | None]:
    """The media type (lower case, no parameters) and the charset of a ``Content-Type``."""
    mime, *params = value.split(";")
    charset = None
    for param in params:
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'") or None
    return mime.strip().lower(), charset


def next_hop(
    current: Checked,
    location: str,
    hop: int,
    *,
    max_redirects: int,
    allow: Sequence[Network],
) -> Checked:
    """The checked URL that hop ``hop``'s ``Location`` leads to.

    Raises:
        TargetError: more than ``max_redirects`` hops, or a Location that cannot be joined to
            the current URL (status 502).
        Refused: the guard refuses the new URL (another scheme, a non-public address,
            credentials, a malformed host...): its error has status 403 and a hint.
    """
    if hop >= max_redirects:
        raise TargetError(
            f"the site redirected more than {max_redirects} times",
            hint="the URL loops or bounces through many addresses: open the page's final "
            "address directly",
            status=502,
        )
    try:
        target = current.url.join(location)
    except (httpx.InvalidURL, ValueError):
        raise TargetError(
            "the site redirected to an invalid address",
            hint="the site's redirect is broken; look for the page's current address",
            status=502,
        ) from None
    try:
        return check_url(str(target), allow)
    except TargetError as refused:
        raise Refused(
            TargetError(
                f"the page redirects to a URL that cannot be fetched: {refused.msg}",
                hint="the site sends this page to an address trio-batch does not fetch "
                "(not public, not http(s), or malformed); look for the page's current "
                "public address",
                status=403,
            )
        ) from None


async def read_page(
    response: httpx.Response,
    current: Checked,
    hop: int,
    *,
    max_bytes: int,
    now: float,
    cap: float,
) -> Download:
    """The final answer of a page's fetch, read in full: ``max_bytes`` at most, ``now`` (the
    wall clock) and ``cap`` to read a busy answer's ``Retry-After``.

    Raises:
        RetryLater: the site answered 429 or 503.
        TargetError: another error status, or a body over ``max_bytes`` (declared or read).
    """
    status = response.status_code
    if status in BUSY_STATUSES:
        raise busy_error(status, response.headers.get("retry-after"), now=now, cap=cap)
    error = status_error(status)
    if error is not None:
        raise error
    mime, charset = content_type(response.headers.get("content-type", ""))
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large(int(declared), limit=max_bytes, mime=mime)
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > max_bytes:
            raise too_large(None, limit=max_bytes, mime=mime)
    return Download(
        body=Body(bytes(data), mime, charset, str(current.url)),
        status=status,
        redirects=hop,
        cache_control=response.headers.get("cache-control", "").lower(),
    )


async def read_robots(response: httpx.Response, current: Checked, hop: int) -> tuple[int, bytes]:
    """A robots.txt answer, whatever its status: the status and at most
    ``MAX_ROBOTS_BYTES + 1`` bytes (the parser reads the first ``MAX_ROBOTS_BYTES``)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ROBOTS_BYTES:
            break
    return response.status_code, bytes(body)
