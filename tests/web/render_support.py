"""What the proxy and render tests share: a scripted site on any loopback address, and a
listener that only counts who connects to it (the "private" address nothing may reach)."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h11
import trio

ALLOWED_HOST = "127.0.0.2"
"""The site's address: the only one the guard lets through in these tests."""
FORBIDDEN_HOST = "127.0.0.3"
"""The "private" address: a listener there must never see a connection."""
ALLOW = [ipaddress.ip_network(f"{ALLOWED_HOST}/32")]


@dataclass
class Page:
    """What the site answers on one path."""

    body: bytes = b""
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("content-type", "text/html")])
    stall: bool = False
    """Send nothing, ever (a request that never ends)."""
    hold: trio.Event | None = None
    """Wait for this event before answering."""


@dataclass
class Seen:
    """One request the site received."""

    path: str
    headers: dict[str, str]


class Site:
    """A small HTTP/1.1 site (h11 over Trio) with a page per path; records every request."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = 0
        self.pages: dict[str, Page] = {}
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.arrived = trio.Event()

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.origin + path

    async def handle(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await _next_request(conn, stream)
                if request is None:
                    return
                await self._answer(conn, stream, request)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _answer(
        self, conn: h11.Connection, stream: trio.abc.Stream, request: h11.Request
    ) -> None:
        path = request.target.decode().split("?", 1)[0]
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        self.seen.append(Seen(path, headers))
        self.arrived.set()
        page = self.pages.get(path, Page(b"not found", 404, [("content-type", "text/plain")]))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if page.stall:
                await trio.sleep_forever()
            if page.hold is not None:
                await page.hold.wait()
            response = h11.Response(
                status_code=page.status,
                headers=[*page.headers, ("content-length", str(len(page.body)))],
            )
            await stream.send_all(conn.send(response))
            await stream.send_all(conn.send(h11.Data(data=page.body)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
        finally:
            self.in_flight -= 1

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]


async def _next_request(conn: h11.Connection, stream: trio.abc.Stream) -> h11.Request | None:
    request = None
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


@asynccontextmanager
async def serve_site(host: str = ALLOWED_HOST) -> AsyncIterator[Site]:
    """A :class:`Site` on ``host`` (an ephemeral port) for the block's life."""
    site = Site(host)
    async with trio.open_nursery() as nursery:
        listeners: list[trio.SocketListener] = await nursery.start(
            functools.partial(trio.serve_tcp, site.handle, 0, host=host)
        )
        site.port = listeners[0].socket.getsockname()[1]
        yield site
        nursery.cancel_scope.cancel()


@dataclass
class Counter:
    """A TCP listener (and a UDP socket on the same port) that counts whoever reaches it."""

    host: str
    port: int = 0
    connections: int = 0
    datagrams: int = 0


@asynccontextmanager
async def serve_counter(host: str = FORBIDDEN_HOST) -> AsyncIterator[Counter]:
    """A :class:`Counter` on ``host``: every TCP connection is counted and closed at once,
    every UDP datagram is counted."""
    counter = Counter(host)

    async def count(stream: trio.SocketStream) -> None:
        counter.connections += 1
        await stream.aclose()

    udp = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)

    async def count_datagrams() -> None:
        while True:
            await udp.recv(65536)
            counter.datagrams += 1

    with udp:
        async with trio.open_nursery() as nursery:
            listeners: list[trio.SocketListener] = await nursery.start(
                functools.partial(trio.serve_tcp, count, 0, host=host)
            )
            counter.port = listeners[0].socket.getsockname()[1]
            await udp.bind((host, counter.port))
            nursery.start_soon(count_datagrams)
            yield counter
            nursery.cancel_scope.cancel()
