"""What the web room's tests share: a local HTTP server, fake DNS, PDFs, mock transports, pages.

Nothing here sends a packet beyond 127.0.0.1: the fake DNS answers what each test says, the
recording network backend refuses every address outside loopback, and mock transports answer
in-process. The fixtures that start servers (``server``, ``tls_server``) are in
``conftest.py``; this module holds what a test imports.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

import h11
import httpcore
import httpx
import trio

from trio_batch import Caller
from trio_batch.stores import CacheEntry, ResponseCache
from trio_batch.web import WebFetcher

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]
PUBLIC_IP = "93.184.216.34"
"""A public address the fake DNS hands out with mock transports (no packet is ever sent)."""
SITE = "http://site.example"
"""The site of mock-transport tests (``site.example`` resolves to ``PUBLIC_IP``)."""
CALLER = Caller("agent")
"""The caller of tests that need one."""

TEXT = [("content-type", "text/plain")]
HTML = [("content-type", "text/html; charset=utf-8")]
JSON = [("content-type", "application/json")]
PDF = [("content-type", "application/pdf")]


@dataclass
class Reply:
    """What the local server answers to one request."""

    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[bytes] | None = None
    """Send these chunked, without a Content-Length."""
    stall: bool = False
    """Send the headers and the first chunk, then hang."""


class LocalServer:
    """A tiny HTTP/1.1 server on 127.0.0.1 (h11 over Trio) with scripted replies per path."""

    def __init__(self) -> None:
        self.port = 0
        self.hits: Counter[str] = Counter()
        self.user_agents: list[str] = []
        self.cookies: list[str] = []
        self._routes: dict[str, list[Reply]] = {}

    def route(self, path: str, *replies: Reply) -> None:
        """Answer ``path`` with ``replies`` in turn; the last one repeats."""
        self._routes[path] = list(replies)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _reply(self, target: str) -> Reply:
        path = target.split("?", 1)[0]
        self.hits[path] += 1
        replies = self._routes.get(path)
        if not replies:
            return Reply(404, b"not found", [("content-type", "text/plain")])
        return replies.pop(0) if len(replies) > 1 else replies[0]

    async def handle(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await self._next_request(conn, stream)
                if request is None:
                    return
                headers = dict(request.headers)
                self.user_agents.append(headers.get(b"user-agent", b"").decode())
                self.cookies.append(headers.get(b"cookie", b"").decode())
                await self._send(conn, stream, self._reply(request.target.decode()))
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    @staticmethod
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

    @staticmethod
    async def _send(conn: h11.Connection, stream: trio.abc.Stream, reply: Reply) -> None:
        headers = list(reply.headers)
        if reply.chunks is None:
            headers.append(("content-length", str(len(reply.body))))
        await stream.send_all(conn.send(h11.Response(status_code=reply.status, headers=headers)))
        for chunk in reply.chunks if reply.chunks is not None else [reply.body]:
            if chunk:
                await stream.send_all(conn.send(h11.Data(data=chunk)))
            if reply.stall:
                await trio.sleep_forever()
        await stream.send_all(conn.send(h11.EndOfMessage()))


@dataclass
class TlsServer:
    """A local HTTPS server whose certificate names ``secure.example``, and a client context
    that trusts its CA."""

    server: LocalServer
    client_context: ssl.SSLContext


class FakeDNS:
    """A resolver with scripted answers per host; each call takes the next answer."""

    def __init__(self, answers: dict[str, list[list[str]]] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[str] = []

    def set(self, host: str, *answers: list[str]) -> None:
        """Answer ``host`` with ``answers`` in turn; the last one repeats."""
        self.answers[host] = list(answers)

    async def __call__(self, host: str, port: int) -> list[str]:
        await trio.lowlevel.checkpoint()
        self.calls.append(host)
        answers = self.answers.get(host)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers.pop(0) if len(answers) > 1 else answers[0]


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Trio's network backend, recording every connect and refusing all but loopback."""

    def __init__(self) -> None:
        self.inner = httpcore.TrioBackend()
        self.connects: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append(host)
        if not host.startswith("127."):
            raise httpcore.ConnectError("test backend: only loopback is reachable")
        return await self.inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("not used")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


Handler = Callable[[httpx.Request], Coroutine[Any, Any, httpx.Response]]


def mock_transport(handler: Handler) -> httpx.MockTransport:
    """An in-process transport: ``handler`` answers every request."""
    return httpx.MockTransport(handler)


class SlowBody(httpx.AsyncByteStream):
    """A response body that sleeps (Trio's clock) before each chunk."""

    def __init__(self, chunks: list[bytes], delay: float) -> None:
        self._chunks = list(chunks)
        self._delay = delay

    def __aiter__(self) -> SlowBody:
        return self

    async def __anext__(self) -> bytes:
        if not self._chunks:
            raise StopAsyncIteration
        await trio.sleep(self._delay)
        return self._chunks.pop(0)


def _pdf_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one page per string (Helvetica text, one line per ``\\n``)."""
    page_ids = [4 + 2 * i for i in range(len(pages))]
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objects: dict[int, str] = {
        1: "<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>",
        3: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for page_id, text in zip(page_ids, pages, strict=True):
        shown = " ".join(f"({_pdf_text(line)}) Tj T*" for line in text.split("\n"))
        content = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET"
        objects[page_id] = (
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {page_id + 1} 0 R >>"
        )
        objects[page_id + 1] = f"<< /Length {len(content)} >>\nstream\n{content}\nendstream"
    out = bytearray(b"%PDF-1.4\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n{objects[number]}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for number in sorted(objects):
        out += f"{offsets[number]:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


ARTICLE_HTML = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Widget Guide</title>
<style>body { color: red }</style><script>var tracking = "SCRIPT-TEXT";</script></head>
<body>
<nav><a href="/">Home</a> <a href="/shop">Shop NAV-TEXT</a></nav>
<h1>Widgets</h1>
<p>Widgets are <b>small</b> parts that hold things together. See <a href="/docs">the docs</a>.</p>
<h2>Kinds</h2>
<ul><li>Blue widget</li><li>Red widget</li></ul>
<h2>Care</h2>
<p>Keep widgets dry. Rust ruins a widget within weeks when it is stored outdoors.</p>
<p>Oil the hinges of a widget once a year.</p>
<h2>Prices</h2>
<p>A blue widget costs 3 euros; a red widget costs 5 euros.</p>
</body></html>
"""

DATA_JSON = b'{"items": [{"name": "alpha", "price": 3}, {"name": "beta", "price": 5}], "total": 2}'

REPORT_PAGES = [
    "Annual report\nChapter one: the year in review",
    "Chapter two: revenue grew by ten percent",
    "Chapter three: outlook for next year",
]


# -- a response cache that stalls -----------------------------------------------------------------

URL = "http://site.example/private-path?token=s3cret"
"""What the stalled-cache tests fetch: a path and a token that no log may show."""


class StalledCache:
    """The cache calls of a store, each of which may hang until its gate opens.

    A read waits cancellably (a PostgreSQL read stops its query on cancel). A write waits as
    a queued SQLite or PostgreSQL write does, ``shielded``: a cancel does not end it, it
    lands once its gate opens. Either records how it ended.
    """

    def __init__(self, *, read: bool = False, write: bool = False, shielded: bool = True):
        self.read_gate = trio.Event() if read else None
        self.write_gate = trio.Event() if write else None
        self.shielded = shielded
        self.entries: dict[str, CacheEntry] = {}
        self.ended: list[str] = []

    async def cache_get(self, key: str) -> CacheEntry | None:
        try:
            await trio.lowlevel.checkpoint()
            if self.read_gate is not None:
                await self.read_gate.wait()
        except trio.Cancelled:
            self.ended.append("read cancelled")
            raise
        self.ended.append("read")
        return self.entries.get(key)

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        await trio.lowlevel.checkpoint()  # a cancel already pending: nothing is queued
        try:
            with trio.CancelScope(shield=self.shielded):
                if self.write_gate is not None:
                    await self.write_gate.wait()
        finally:
            self.ended.append(
                "write"
                if self.write_gate is None or self.write_gate.is_set()
                else "write cancelled"
            )
        self.entries[key] = entry  # one step: the entry lands whole, or not at all


def stalled_fetcher(cache: StalledCache | ResponseCache, **settings: object) -> WebFetcher:
    """A fetcher whose response cache lives in ``cache``; the site answers "fresh" at once."""

    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        return httpx.Response(200, text="fresh", headers={"content-type": "text/plain"})

    return WebFetcher(
        store=cache,
        resolver=FakeDNS({"site.example": [[PUBLIC_IP]]}),
        transport=httpx.MockTransport(handler),
        **settings,  # type: ignore[arg-type]
    )
