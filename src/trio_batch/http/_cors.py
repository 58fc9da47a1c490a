"""Requests from pages of other origins: CORS for an allow-list, and ``Origin`` checks on ``/mcp``.

A browser page on another origin (a dashboard on another port, say) may call the API only if
the server says so. :class:`Cors` answers the preflight (``OPTIONS`` with
``Access-Control-Request-Method``) of an origin on the allow-list, and adds
``Access-Control-Allow-Origin`` (with ``Vary: Origin``) to the answers it gets; an origin off
the list gets no such header, so the browser keeps the answer from its page. The list is
empty by default (no CORS at all), and ``*`` is refused: every request carries a bearer key,
and a page that holds one should be a page its operator named.

:class:`OriginGuard` wraps a mounted app (``/mcp``): the MCP transport requires a server to
check ``Origin`` against DNS rebinding. A request with no ``Origin`` (a program, not a
browser) or with an origin of the allow-list passes; any other gets 403.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Final, Protocol, final
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._errors import ApiError

ALLOW_METHODS: Final = "GET, POST, DELETE"
ALLOW_HEADERS: Final = "Authorization, Content-Type, Last-Event-ID"
EXPOSE_HEADERS: Final = "Location, Retry-After, WWW-Authenticate"
MAX_AGE: Final = "600"
"""Seconds a browser may keep a preflight's answer."""


def check_origins(origins: Iterable[str] | str) -> frozenset[str]:
    """The allow-list in the form browsers send ``Origin``: ``scheme://host[:port]``.

    ``origins`` is a list, or one string of them separated by commas (an environment
    variable's form).

    Raises:
        ValueError: ``*``, or a value that is not an http(s) origin (a path, no host); the
            message says what to write instead.
    """
    if isinstance(origins, str):
        origins = [part for part in origins.split(",") if part.strip()]
    checked: set[str] = set()
    for origin in origins:
        if not isinstance(origin, str):
            raise ValueError("must be a list of origins, like https://dashboard.example.org")
        if origin.strip() == "*":
            raise ValueError(
                "a CORS origin of '*' is refused: requests carry an API key, so name each "
                "origin whose pages may use it, like https://dashboard.example.org"
            )
        checked.add(_origin(origin.strip()))
    return frozenset(checked)


def _origin(text: str) -> str:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ValueError(
            f"{text!r} is not an origin: write scheme://host or scheme://host:port, like "
            "https://dashboard.example.org or http://127.0.0.1:3000 (no path)"
        )
    host = parts.hostname
    scheme = parts.scheme.lower()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != {"http": 80, "https": 443}[scheme]:  # a browser drops it
        netloc = f"{netloc}:{port}"
    return f"{scheme}://{netloc}"


@final
class Cors:
    """ASGI wrapper: CORS for the origins of ``origins`` (checked by :func:`check_origins`)."""

    def __init__(self, app: ASGIApp, origins: frozenset[str]) -> None:
        self.app = app
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.origins:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None or origin not in self.origins:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(origin, send)
            return

        async def allowed(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = MutableHeaders(scope=message)
                answer["Access-Control-Allow-Origin"] = origin
                answer["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
                answer.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, allowed)


async def _preflight(origin: str, send: Send) -> None:
    """204 with what an allowed origin's page may send."""
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", ALLOW_METHODS.encode()),
        (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
        (b"access-control-max-age", MAX_AGE.encode()),
        (b"vary", b"Origin"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


class Mounted(Protocol):
    """An app mounted beside the API (``/mcp``), with what it needs while requests are served."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...

    def running(self) -> contextlib.AbstractAsyncContextManager[None]: ...


@final
class OriginGuard:
    """A mounted app (``/mcp``) behind an ``Origin`` check: none, or one of ``origins``.

    ``running()`` is the wrapped app's (the API app enters it for its lifespan).
    """

    def __init__(self, app: Mounted, origins: frozenset[str]) -> None:
        self.app = app
        self.origins = origins

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.app.running()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = Headers(scope=scope).get("origin") if scope["type"] == "http" else None
        if origin is not None and origin not in self.origins:
            error = ApiError(
                403,
                "this Origin may not use /mcp (a page of another site, or DNS rebinding)",
                "call /mcp from a program (no Origin header), or have the operator add the "
                "page's origin with trio-batch serve --cors-origin ORIGIN",
                code="origin_refused",
            )
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)
