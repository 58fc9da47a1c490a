"""An httpx transport to an ASGI app in this process, whose answers stream as the app writes them.

httpx's own ``ASGITransport`` runs the app to its end before it returns the response, so an
answer that lasts as long as a job (its events, ``GET /v1/batch/{id}/events``) would arrive
only once the job had ended, all at once: no progress to report while waiting. Here the app
runs as a task of a nursery its door keeps open (:func:`open_in_process`): the response is
returned when the app starts its answer, and its body yields each chunk as the app sends it,
holding at most :data:`BUFFER` chunks for a reader that is behind (then the app waits).

Closing the response tells the app that the client went away (``http.disconnect``), as a
server does when a connection closes; what the app sends after that is dropped. An answer that
stops before its end (the app failed, or returned without its last chunk) is a broken transfer,
``httpx.RemoteProtocolError``, as a dropped connection is; an app that fails before it answers
is a 500, as ``ASGITransport(raise_app_exceptions=False)`` answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import final

import httpx
import trio
from starlette.types import ASGIApp, Message, Scope

from .._util import raise_single_exception_from_group

BUFFER = 16
"""Body chunks held for a reader that has not read them yet; past that, the app waits."""

Head = tuple[int, list[tuple[bytes, bytes]]]
"""An answer's status and headers."""


@final
class _Exchange:
    """One request's conversation with the app: the request's body in, the answer's chunks out."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body
        self.gone = trio.Event()
        """Set when the reader closed the response: the app is told ``http.disconnect``."""
        self.chunks_in, self.chunks_out = trio.open_memory_channel[bytes](BUFFER)
        self.complete = False
        """Whether the app sent its answer's last chunk (``more_body`` false)."""

    async def receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send_body(self, message: Message) -> None:
        try:
            if message.get("body"):
                await self.chunks_in.send(message["body"])
            if not message.get("more_body", False):
                self.complete = True
                await self.chunks_in.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the reader has gone: dropped, as on a closed connection


@final
class _Body(httpx.AsyncByteStream):
    """The answer's body as the app sends it."""

    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._exchange.chunks_out:
                yield chunk
        except trio.ClosedResourceError:
            return  # closed by aclose: the reader chose to stop
        if not self._exchange.complete:
            raise httpx.RemoteProtocolError("the answer stopped before its end")

    async def aclose(self) -> None:
        self._exchange.gone.set()
        await self._exchange.chunks_out.aclose()


@final
class InProcess(httpx.AsyncBaseTransport):
    """Requests of ``app`` in this process, each run as a task of ``nursery``, answers streamed."""

    def __init__(self, app: ASGIApp, nursery: trio.Nursery) -> None:
        self._app = app
        self._nursery = nursery

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": ("127.0.0.1", 0),
            "root_path": "",
        }
        exchange = _Exchange(body)
        status, headers = await self._nursery.start(self._run, scope, exchange)
        return httpx.Response(status, headers=headers, stream=_Body(exchange))

    async def _run(
        self, scope: Scope, exchange: _Exchange, task_status: trio.TaskStatus[Head]
    ) -> None:
        """The app on one request: started once it answers (500 if it fails before)."""
        started = False

        async def send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                task_status.started((message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body" and started:
                await exchange.send_body(message)

        with exchange.chunks_in:
            # The app's own failure (it logs it): a 500 before its answer, else a broken answer.
            with contextlib.suppress(Exception):
                await self._app(scope, exchange.receive, send)
            if not started:
                exchange.complete = True
                task_status.started((500, []))


@contextlib.asynccontextmanager
async def open_in_process(app: ASGIApp) -> AsyncIterator[InProcess]:
    """An :class:`InProcess` transport to ``app`` for the block; requests still open end with it."""
    try:
        async with trio.open_nursery() as nursery:
            yield InProcess(app, nursery)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise
