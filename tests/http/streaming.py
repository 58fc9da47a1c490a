"""Driving a streamed answer through ASGI directly, a chunk at a time.

httpx's ASGI transport reads a whole body before it returns, and cannot hang up in the middle;
this driver does both: it hands the app a request, collects what the app sends, and tells the
app the client went away when the block is left (or on :meth:`Stream.hang_up`).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from urllib.parse import urlencode

import trio
from starlette.types import ASGIApp, Message


class Stream:
    """The answer as it arrives: status, headers, the body so far, and how it ended."""

    def __init__(self, inbox: trio.MemoryReceiveChannel[Message], gone: trio.Event) -> None:
        self._inbox = inbox
        self._gone = gone
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.complete = False
        """The app sent the body's end (``more_body: False``)."""
        self.closed = False
        """The app returned: with ``complete`` False, the body stopped without its end."""

    async def start(self) -> None:
        message = await self._inbox.receive()
        assert message["type"] == "http.response.start", message
        self.status = message["status"]
        self.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}

    async def _next(self) -> bool:
        try:
            message = await self._inbox.receive()
        except trio.EndOfChannel:
            self.closed = True
            return False
        self.body += message.get("body", b"")
        if not message.get("more_body", False):
            self.complete = True
        return True

    async def read_until(self, marker: bytes) -> bytes:
        """Read until the body holds ``marker``; return the body so far."""
        while marker not in self.body:
            if not await self._next():
                raise AssertionError(f"the stream ended before {marker!r}: {self.body!r}")
        return self.body

    async def read_all(self) -> bytes:
        """Read until the app returns."""
        while await self._next():
            pass
        return self.body

    def hang_up(self) -> None:
        self._gone.set()


@asynccontextmanager
async def open_stream(
    app: ASGIApp,
    path: str,
    *,
    key: str,
    headers: Mapping[str, str] | None = None,
    **params: object,
) -> AsyncIterator[Stream]:
    """GET ``path`` on ``app``; the block reads the answer, leaving it hangs up."""
    sent = False
    gone = trio.Event()
    outbox, inbox = trio.open_memory_channel[Message](math.inf)
    all_headers = {"authorization": f"Bearer {key}", **(headers or {})}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": urlencode(params).encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("api.test", 80),
        "state": {},
    }

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        outbox.send_nowait(message)

    async def run() -> None:
        with outbox:
            await app(scope, receive, send)

    stream = Stream(inbox, gone)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await stream.start()
        try:
            yield stream
        finally:
            gone.set()
