"""The MCP server: the official SDK's low-level ``Server`` with the eight tools, on two transports.

Everything that speaks the protocol is the SDK's (``mcp``): the JSON-RPC framing, the
handshake and protocol versions, ``tools/list`` and ``tools/call``, progress notifications, the
stdio transport and the Streamable HTTP session manager. What is ours: which tools there are
(``_tools``), where each call's :class:`~._api.Api` comes from, and for HTTP the key check in
front of the session manager.

- :func:`serve_stdio`: one client on this process's stdin and stdout, every call made with one
  :class:`~._api.Api` (``trio-batch mcp``: the local caller, or ``--server``'s key).
- :class:`McpEndpoint`: the ASGI app ``serve`` answers ``/mcp`` with: stateless Streamable
  HTTP (every request stands alone, so any instance of a fleet can answer any request), each
  request's bearer key checked by the API itself and used for the request's calls.

Both run on Trio through AnyIO; nothing here needs asyncio (docs/mcp.md says what was checked).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from typing import Final, final

import anyio
import anyio.to_thread
import httpx
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._model import JSONValue
from ..http import MAX_BODY
from ._api import Api, ApiFailure, open_http
from ._cap import encode
from ._tools import TOOLS, Tools

_log = logging.getLogger("trio_batch.mcp")

INSTRUCTIONS: Final = (
    "trio-batch fetches web pages for you, politely: fetch answers one page now; batch_submit "
    "queues many pages as a job that runs fairly beside other callers' jobs and keeps the "
    "results (concurrency fetches several at once, each site still at its polite pace). Then "
    "batch_status (wait for the end, with progress) and batch_results (a page of targets at a "
    "time, with a cursor). batch_cancel stops a job; batch_retry runs its failed targets "
    "again; map lists a site's URLs to submit; crawl fetches a site by following its links, as "
    "a job of exactly limit pages. Options narrow a page: grep, question, pages, jq. Every "
    "error carries a hint saying what to do."
)

ApiFor = Callable[
    [ServerRequestContext[dict[str, object], Request]], contextlib.AbstractAsyncContextManager[Api]
]
"""Where a tool call's :class:`Api` comes from, given the call's context."""

_MCP_BODY: Final = 2 * MAX_BODY
"""Largest MCP request body: a ``batch_submit`` carries up to the API's body, plus JSON-RPC."""


def _tool_list() -> list[types.Tool]:
    return [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=dict(tool.input_schema),
            annotations=types.ToolAnnotations(
                read_only_hint=tool.read_only,
                destructive_hint=False,
                idempotent_hint=tool.name != "batch_cancel",
                open_world_hint=True,
            ),
        )
        for tool in TOOLS
    ]


def _error(body: dict[str, JSONValue]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=encode(body))], is_error=True
    )


def build_server(tools: Tools, api_for: ApiFor) -> Server[dict[str, object]]:
    """The SDK's server with the tools; each call's :class:`Api` from ``api_for``."""
    listed = _tool_list()

    async def list_tools(
        ctx: ServerRequestContext[dict[str, object], Request],
        params: types.PaginatedRequestParams | None,
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[dict[str, object], Request],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult:
        async def progress(done: float, total: float, message: str) -> None:
            # A no-op unless the client asked for progress (a progressToken in _meta).
            await ctx.session.report_progress(done, total, message)

        try:
            async with api_for(ctx) as api:
                text = await tools.call(params.name, dict(params.arguments or {}), api, progress)
        except ApiFailure as exc:
            # The name only if it is a tool's: a client's string could hold anything.
            tool = params.name if params.name in tools_by_name else "?"
            _log.info(
                "tool %s failed: %s",
                tool,
                exc.code or exc.status,
                extra={"tool": tool, "code": exc.code},
            )
            return _error(exc.body())
        except Exception as exc:
            # Never a traceback or an exception's text (it may hold a URL): its type, logged.
            _log.error("tool call failed with %s", type(exc).__name__)
            return _error(
                {
                    "error": "internal error",
                    "hint": "try again; if it persists, tell the operator (the log has its type)",
                    "code": "internal_error",
                }
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    tools_by_name = {tool.name for tool in TOOLS}
    schemas = {tool.name: tool.input_schema for tool in TOOLS}
    return Server(
        "trio-batch",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=schemas.get,
    )


def _version() -> str:
    try:
        return importlib.metadata.version("trio-batch")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return ""


# -- stdio -----------------------------------------------------------------------------------------


@final
class _Stdin(anyio.AsyncFile[str]):
    """Standard input whose blocking read is abandoned when the server is cancelled.

    The SDK reads stdin in a worker thread; a thread blocked in ``readline`` cannot be
    interrupted, so on SIGINT or SIGTERM Trio would wait for the client to close stdin before
    the engine could close. Abandoning the read lets the process stop at once; the thread
    ends with the process.
    """

    async def readline(self) -> str:
        line: str = await anyio.to_thread.run_sync(self.wrapped.readline, abandon_on_cancel=True)
        return line


async def serve_stdio(tools: Tools, api: Api) -> None:
    """Serve one MCP client on stdin and stdout until it closes stdin; every call with ``api``.

    While serving, anything else written to file descriptor 1 goes to stderr (the SDK points
    fd 1 there), so no stray output can break the protocol.
    """

    @contextlib.asynccontextmanager
    async def same_api(
        ctx: ServerRequestContext[dict[str, object], Request],
    ) -> AsyncIterator[Api]:
        yield api

    server = build_server(tools, same_api)
    # A file of its own on a duplicate of fd 0, not sys.stdin: at exit the interpreter flushes
    # sys.stdin, and would wait for the lock an abandoned read still holds.
    wire = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    stdin = _Stdin(io.TextIOWrapper(wire, encoding="utf-8", errors="replace"))
    async with stdio_server(stdin=stdin) as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- Streamable HTTP -----------------------------------------------------------------------------


@final
class McpEndpoint:
    """The ASGI app of ``/mcp`` on ``serve``: stateless Streamable HTTP, keys checked per request.

    Every request is authenticated before the SDK sees it, by the API itself (``GET /v1/me``,
    in-process on the app that received the request): a missing or unknown key gets the API's
    own 401. A tool call then calls the API with that same key, so the caller is the key's on
    every request and a caller sees only its own jobs. Stateless mode keeps no session between
    requests: no session id can stand for a caller, and a load balancer needs no stickiness
    (progress notifications ride the response of the request that asked for them).

    :meth:`running` must be open while requests are served (``create_app`` enters it for the
    app's lifespan): the SDK runs each request's server task in its task group, and the key
    checks and the tools' calls of the API share one ``httpx`` pool that lives as long, the key
    sent on each request.
    """

    def __init__(self, tools: Tools | None = None) -> None:
        self._server = build_server(tools or Tools(), self._request_api)
        self._manager = StreamableHTTPSessionManager(
            app=self._server, stateless=True, max_request_body_size=_MCP_BODY
        )
        self._app: ASGIApp | None = None
        """The app this endpoint is mounted on, from the requests' scope (Starlette puts itself
        there): where the calls of the API go, in-process."""
        self._http: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The block in which the endpoint serves: the SDK's session manager and the pool."""
        async with open_http(app=self._mounted_on) as http, self._manager.run():
            self._http = http
            try:
                yield
            finally:
                self._http = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # pragma: no cover - mounted as an HTTP route only
            return
        if self._app is None:
            self._app = scope["app"]
        refused = await self._check_key(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)

    async def _mounted_on(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app this endpoint is mounted on (every call of the pool goes there)."""
        if self._app is None:  # pragma: no cover - a call follows a request, which set it
            raise RuntimeError("McpEndpoint has not served a request yet")
        await self._app(scope, receive, send)

    def _pool(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError(
                "McpEndpoint.running() is not open: create_app(mounts=...) enters it for the "
                "app's lifespan"
            )
        return self._http

    @contextlib.asynccontextmanager
    async def _request_api(
        self, ctx: ServerRequestContext[dict[str, object], Request]
    ) -> AsyncIterator[Api]:
        request = ctx.request
        if request is None:  # pragma: no cover - the HTTP transport always attaches it
            raise ApiFailure(401, "the request carries no API key", "send a bearer key")
        yield Api(self._pool(), _bearer(request.headers.get("authorization", "")))

    async def _check_key(self, scope: Scope) -> ASGIApp | None:
        """None when the request's bearer key is one the API knows; else the API's own answer."""
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", [])
            if k.lower() == b"authorization"
        }
        response = await self._pool().get("/v1/me", headers=headers)
        if response.status_code == 200:
            return None
        kept = {
            k: v
            for k, v in response.headers.items()
            if k.lower() in ("www-authenticate", "retry-after", "content-type")
        }
        return Response(response.content, status_code=response.status_code, headers=kept)


def _bearer(authorization: str) -> str:
    """The key of an ``Authorization: Bearer KEY`` header ("" for any other header)."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""
