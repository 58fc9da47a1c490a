"""A guarded HTTP proxy on loopback: the only way out for a headless browser.

A rendered page runs scripts a site wrote, so every request the browser makes (the page, its
subresources, scripts' ``fetch``, redirects, WebSockets) goes through :class:`GuardedProxy`,
which applies the fetcher's rules to each one: it resolves the host itself (the browser
resolves nothing), refuses the request unless every address is allowed (``_guard``), connects
to those checked addresses only, and holds the host's slot of the shared
:class:`~trio_batch.HostBudget` while the request runs. A refused request gets a 403 and counts
in :attr:`ProxyStatistics.refused`. While a render obeys robots.txt (:meth:`GuardedProxy.holding`
with ``robots``), a plain HTTP request robots.txt disallows gets a 403 too, never sent, and
counts in :attr:`ProxyStatistics.disallowed`; a tunnel's paths are unseen here (TLS), so the
page checks every request itself before the browser sends it (``_page``).

Two request forms arrive:

- plain HTTP in absolute form (``GET http://host/path HTTP/1.1``): forwarded with
  ``Connection: close`` both ways, one request per connection, its slot held until the
  response has been relayed (a 429 or 503 pushes the host back as the fetcher's do);
- ``CONNECT host:port`` tunnels (HTTPS, and WebSockets over either scheme, which Chromium
  always tunnels through an HTTP proxy): the bytes are relayed as they are, and the slot is
  held for the tunnel's life (the proxy cannot see the requests inside TLS).

Bounded: connections open at once (``max_connections``; past it a 503), the request head's
size (431), the idle time of a connection or tunnel, and the time to connect upstream.
Nothing is logged with a URL or a host.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, final

import trio

from ..._budget import HostBlocked, HostBudget, HostSlot
from ..._errors import TargetError
from .._guard._check import Checked, Network, Resolver, check_url, resolve_checked, system_resolver

MAX_HEAD_BYTES: Final = 32 * 1024
"""Largest request head (request line and headers) the proxy reads; past it a 431."""
MAX_RESPONSE_HEAD_BYTES: Final = 64 * 1024
"""Largest response head read from a site before it is relayed; past it a 502."""
REFUSED_HEADER: Final = "X-Trio-Batch-Refused"
"""A header of the proxy's 403 for a refused address, so the renderer can tell it from a
site's own 403."""
RobotsCheck = Callable[[str], Awaitable[str | None]]
"""``await robots(url)``: the robots.txt rule that disallows ``url`` (quoted in an error), or
None when a rendered page may request it (the fetcher's check)."""
_CHUNK: Final = 64 * 1024
_TURN_AWAY_SECONDS: Final = 1.0
_BUSY_STATUSES: Final = (429, 503)
_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)


@final
@dataclass(frozen=True, slots=True)
class ProxyStatistics:
    """What a :class:`GuardedProxy` has done since it opened."""

    requests: int
    """Plain HTTP requests relayed (refused ones not counted)."""
    tunnels: int
    """CONNECT tunnels opened (refused ones not counted)."""
    refused: int
    """Requests and tunnels the guard refused (each answered 403)."""
    open_connections: int
    """Browser connections open now."""
    disallowed: int = 0
    """Plain HTTP requests robots.txt disallowed (each answered 403, never sent)."""


class _Refused(Exception):
    """A request the proxy answers with an error status instead of relaying it."""

    def __init__(
        self, status: int, reason: str, *, refused: bool = False, disallowed: bool = False
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.refused = refused
        self.disallowed = disallowed


@dataclass(frozen=True, slots=True)
class _Head:
    method: str
    target: str
    headers: list[tuple[str, str]]
    first_line: str
    rest: bytes
    """Bytes read past the head (the start of a body, or of a tunnel's first message)."""


@final
class GuardedProxy:
    """An HTTP proxy on 127.0.0.1 that lets a request through only to addresses the guard
    allows, each in its host's budget. Obtain one from :func:`open_guarded_proxy`.

    Attributes:
        port: the ephemeral port it listens on (``--proxy-server=http://127.0.0.1:PORT``).
    """

    def __init__(
        self,
        *,
        allow: Sequence[Network],
        resolver: Resolver,
        budget: HostBudget | None,
        max_connections: int,
        idle_seconds: float,
        connect_seconds: float,
    ) -> None:
        self.port = 0
        self._allow = tuple(allow)
        self._resolve = resolver
        self._budget = budget
        self._connections = trio.CapacityLimiter(max_connections)
        self._idle = idle_seconds
        self._connect = connect_seconds
        self._requests = 0
        self._tunnels = 0
        self._refused = 0
        self._disallowed = 0
        self._held: HostSlot | None = None
        self._held_lock = trio.Lock()
        self._robots: RobotsCheck | None = None

    def statistics(self) -> ProxyStatistics:
        """Counts of relayed and refused requests, and the connections open now."""
        return ProxyStatistics(
            requests=self._requests,
            tunnels=self._tunnels,
            refused=self._refused,
            open_connections=self._connections.borrowed_tokens,
            disallowed=self._disallowed,
        )

    @contextlib.contextmanager
    def holding(self, slot: HostSlot | None, robots: RobotsCheck | None = None) -> Iterator[None]:
        """Run the requests of ``slot``'s scope in that slot (the one the engine took for the
        target), one at a time, instead of taking another: with ``concurrency=1`` a second
        slot of the same scope would wait for the first forever. ``robots``: the render obeys
        robots.txt, which is asked about each plain HTTP request first."""
        self._held = slot
        self._robots = robots
        try:
            yield
        finally:
            self._held = None
            self._robots = None

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one browser connection: one plain request, or one tunnel."""
        try:
            self._connections.acquire_on_behalf_of_nowait(stream)
        except trio.WouldBlock:
            await _turn_away(stream)
            return
        try:
            await self._serve(stream)
        finally:
            self._connections.release_on_behalf_of(stream)
            await trio.aclose_forcefully(stream)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        try:
            head = await _read_head(stream, MAX_HEAD_BYTES, self._idle, request=True)
            if head is None:
                return
            if head.method == "CONNECT":
                await self._tunnel(stream, head)
            else:
                await self._forward(stream, head)
        except _Refused as exc:
            self._refused += exc.refused
            self._disallowed += exc.disallowed
            marker = "guard" if exc.refused else "robots" if exc.disallowed else None
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await _send_error(stream, exc.status, exc.reason, marker=marker)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError):
            pass  # the browser or the site went away, or went silent: the connection ends

    async def _checked(self, url: str) -> tuple[Checked, tuple[str, ...]]:
        """The request's parsed URL and the addresses it may connect to.

        Raises:
            _Refused: 403 when the guard refuses the URL or an address; 502 when the host does
                not resolve.
        """
        try:
            checked = check_url(url, self._allow)
        except TargetError:
            raise _Refused(403, "the guard refused this address", refused=True) from None
        if checked.literal is not None:
            return checked, (str(checked.literal),)
        addresses = await resolve_checked(self._resolve, checked.host, checked.port, self._allow)
        if addresses is None:
            raise _Refused(403, "the guard refused this address", refused=True)
        if not addresses:
            raise _Refused(502, "the host name does not resolve")
        return checked, addresses

    @contextlib.asynccontextmanager
    async def _slot(self, checked: Checked) -> AsyncIterator[list[bool]]:
        """Hold the host's slot while the body runs; the body appends True to the yielded
        list when the site answered 429 or 503 (the scope is then pushed back)."""
        outcome: list[bool] = []
        scope = checked.scope
        held = self._held
        if self._budget is None:
            yield outcome
        elif held is not None and held.scope == scope:
            async with self._held_lock:
                yield outcome
        else:
            try:
                slot = await self._budget.acquire(scope)
            except HostBlocked:
                raise _Refused(503, "the site asked us to slow down") from None
            try:
                yield outcome
            finally:
                slot.release(rate_limited=bool(outcome))

    async def _open(self, addresses: tuple[str, ...], port: int) -> trio.SocketStream:
        """A connection to the first checked address that answers."""
        for address in addresses:
            with trio.move_on_after(self._connect):
                try:
                    return await trio.open_tcp_stream(address, port)
                except OSError:
                    continue
        raise _Refused(502, "the site did not accept a connection")

    async def _tunnel(self, stream: trio.abc.Stream, head: _Head) -> None:
        authority = head.target
        if "/" in authority or ":" not in authority.rsplit("]", 1)[-1]:
            raise _Refused(400, "CONNECT needs host:port")
        checked, addresses = await self._checked(f"https://{authority}/")
        async with self._slot(checked):
            upstream = await self._open(addresses, checked.port)
            async with upstream:
                self._tunnels += 1
                await stream.send_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                if head.rest:
                    await upstream.send_all(head.rest)
                await _relay(stream, upstream, self._idle)

    async def _forward(self, stream: trio.abc.Stream, head: _Head) -> None:
        if not head.target.lower().startswith("http://"):
            raise _Refused(400, "the proxy takes absolute http:// URLs and CONNECT only")
        checked, addresses = await self._checked(head.target)
        robots = self._robots
        if robots is not None and await robots(head.target) is not None:
            raise _Refused(403, "robots.txt disallows this URL", disallowed=True)
        length = _content_length(head.headers)
        async with self._slot(checked) as outcome:
            upstream = await self._open(addresses, checked.port)
            async with upstream:
                self._requests += 1
                path = checked.url.raw_path.decode("ascii") or "/"
                await upstream.send_all(_request_head(head, path))
                await _send_body(stream, upstream, head.rest, length, self._idle)
                status = await self._relay_response(upstream, stream)
                if status in _BUSY_STATUSES:
                    outcome.append(True)

    async def _relay_response(self, upstream: trio.SocketStream, stream: trio.abc.Stream) -> int:
        """Relay the site's answer with ``Connection: close``; returns its status."""
        answer = await _read_head(upstream, MAX_RESPONSE_HEAD_BYTES, self._idle, request=False)
        if answer is None:
            raise _Refused(502, "the site closed the connection without an answer")
        status = int(answer.target) if answer.target.isdigit() else 502
        lines = [answer.first_line]
        lines += [f"{k}: {v}" for k, v in answer.headers if k.lower() not in _HOP_BY_HOP]
        lines.append("Connection: close")
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + answer.rest)
        while True:
            with trio.fail_after(self._idle):
                chunk = await upstream.receive_some(_CHUNK)
            if not chunk:
                return status
            await stream.send_all(chunk)


def _content_length(headers: list[tuple[str, str]]) -> int:
    """The request body's length; a body without one (chunked uploads) is refused."""
    length = 0
    for name, value in headers:
        low = name.lower()
        if low == "transfer-encoding":
            raise _Refused(411, "the proxy takes request bodies with a Content-Length only")
        if low == "content-length":
            if not value.strip().isdigit():
                raise _Refused(400, "the Content-Length is not a number")
            length = int(value)
    return length


def _request_head(head: _Head, path: str) -> bytes:
    lines = [f"{head.method} {path} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in head.headers if k.lower() not in _HOP_BY_HOP]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send_body(
    stream: trio.abc.Stream, upstream: trio.SocketStream, start: bytes, length: int, idle: float
) -> None:
    """Relay exactly ``length`` bytes of request body (``start`` was read with the head)."""
    sent = start[:length]
    if sent:
        await upstream.send_all(sent)
    left = length - len(sent)
    while left > 0:
        with trio.fail_after(idle):
            chunk = await stream.receive_some(min(_CHUNK, left))
        if not chunk:
            raise _Refused(400, "the request body ended early")
        await upstream.send_all(chunk)
        left -= len(chunk)


async def _relay(a: trio.abc.Stream, b: trio.abc.Stream, idle: float) -> None:
    """Copy bytes both ways until either side closes or neither sends for ``idle`` seconds."""
    with trio.CancelScope(deadline=trio.current_time() + idle) as scope:

        async def copy(src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                while chunk := await src.receive_some(_CHUNK):
                    scope.deadline = trio.current_time() + idle
                    await dst.send_all(chunk)
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(copy, a, b)
            nursery.start_soon(copy, b, a)


async def _read_head(
    stream: trio.abc.Stream, limit: int, idle: float, *, request: bool
) -> _Head | None:
    """Read one HTTP head (request or response); None when the peer closed before a byte.

    For a response, ``method`` is the protocol version and ``target`` the status code.

    Raises:
        _Refused: over ``limit`` bytes (431), malformed (400/502), or idle too long (408/504).
    """
    data = bytearray()
    while (end := data.find(b"\r\n\r\n")) < 0:
        if len(data) > limit:
            raise _Refused(431 if request else 502, "the head is too large")
        with trio.move_on_after(idle) as waited:
            chunk = await stream.receive_some(_CHUNK)
        if waited.cancelled_caught:
            raise _Refused(408 if request else 504, "no complete head in time")
        if not chunk:
            if not data:
                return None
            raise _Refused(400 if request else 502, "the head ended early")
        data += chunk
    if end > limit:
        raise _Refused(431 if request else 502, "the head is too large")
    return _parse_head(bytes(data[:end]), bytes(data[end + 4 :]), request=request)


def _parse_head(raw: bytes, rest: bytes, *, request: bool) -> _Head:
    bad = 400 if request else 502
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover (latin-1 decodes every byte)
        raise _Refused(bad, "the head is not text") from None
    first, *lines = text.split("\r\n")
    parts = first.split(" ", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise _Refused(bad, "malformed first line")
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise _Refused(bad, "malformed header line")
        headers.append((name, value.strip()))
    return _Head(parts[0], parts[1], headers, first, rest)


async def _turn_away(stream: trio.abc.Stream) -> None:
    """Answer a connection past the limit with a 503, after reading its head for at most
    ``_TURN_AWAY_SECONDS`` (closing a socket with unread bytes resets it, and the peer may then
    lose the answer)."""
    with contextlib.suppress(
        trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, _Refused, OSError
    ):
        with trio.move_on_after(_TURN_AWAY_SECONDS):
            await _read_head(stream, MAX_HEAD_BYTES, _TURN_AWAY_SECONDS, request=True)
        await _send_error(stream, 503, "the proxy has too many connections open")
    await trio.aclose_forcefully(stream)


async def _send_error(
    stream: trio.abc.Stream, status: int, reason: str, *, marker: str | None = None
) -> None:
    """An error answer; ``marker`` (``guard``, ``robots``) goes in :data:`REFUSED_HEADER`."""
    body = (reason + "\n").encode()
    header = f"{REFUSED_HEADER}: {marker}\r\n" if marker else ""
    await stream.send_all(
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n{header}"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    411: "Length Required",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@contextlib.asynccontextmanager
async def open_guarded_proxy(
    *,
    allow: Sequence[Network] = (),
    resolver: Resolver | None = None,
    budget: HostBudget | None = None,
    max_connections: int = 64,
    idle_seconds: float = 30.0,
    connect_seconds: float = 10.0,
) -> AsyncIterator[GuardedProxy]:
    """Serve a :class:`GuardedProxy` on 127.0.0.1 (an ephemeral port) for the block's life.

    Args:
        allow: networks the guard lets through although they are not public (tests' loopback).
        resolver: the DNS lookup; the system's by default (the fetcher's, to share fake DNS).
        budget: the host budget each request takes a slot of (the fetcher's); None: none.
        max_connections: browser connections open at once; past it a connection gets a 503.
        idle_seconds: a connection or tunnel silent this long is closed.
        connect_seconds: the longest one connection attempt to a site may take.

    Raises:
        ValueError: a setting is out of range; the message names it.
    """
    if max_connections < 1:
        raise ValueError(f"max_connections must be >= 1 (got {max_connections!r})")
    for name, value in (("idle_seconds", idle_seconds), ("connect_seconds", connect_seconds)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
    proxy = GuardedProxy(
        allow=allow,
        resolver=resolver or system_resolver,
        budget=budget,
        max_connections=max_connections,
        idle_seconds=idle_seconds,
        connect_seconds=connect_seconds,
    )
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        proxy.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, proxy.handle, listeners)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel("the guarded proxy closed")
