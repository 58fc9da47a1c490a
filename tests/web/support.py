"""What the web room's tests share: fake DNS, PDFs, mock transports, pages, the browser's sites.

Nothing here sends a packet beyond 127.0.0.1: the fake DNS answers what each test says, the
recording network backend refuses every address outside loopback, and mock transports answer
in-process. The local HTTP site is every room's (``tests.support.LocalSite``); the fixtures that
start one (``server``, ``tls_server``) are in ``conftest.py``; this module holds what a test
imports.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import httpcore
import httpx
import trio

from tests.support import LocalSite, Reply as Reply
from trio_batch import Caller, Options
from trio_batch.stores import CacheEntry, ResponseCache
from trio_batch.web import WebFetcher, shape
from trio_batch.web._render._browser import find_chromium

Marked = TypeVar("Marked", bound=Callable[..., object])

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


LocalServer = LocalSite
"""The name this room's tests knew the local site by; tests/web/test_options.py and
test_formats.py still use it (and import ``Reply`` from here)."""


@dataclass
class TlsServer:
    """A local HTTPS server whose certificate names ``secure.example``, and a client context
    that trusts its CA."""

    server: LocalSite
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


# -- the browser's sites ---------------------------------------------------------------------------
# The proxy and render tests serve pages from ALLOWED_HOST, the one address the guard lets
# through there; a listener on FORBIDDEN_HOST plays the private address nothing may reach.

ALLOWED_HOST = "127.0.0.2"
"""The site's address: the only one the guard lets through in these tests."""
FORBIDDEN_HOST = "127.0.0.3"
"""The "private" address: a listener there must never see a connection."""
ALLOW = [ipaddress.ip_network(f"{ALLOWED_HOST}/32")]


def needs_chromium(test: Marked) -> Marked:
    """Skip ``test`` (a function or a class) where Debian's Chromium is not installed."""
    import pytest  # here, not above: the benchmarks import this module without pytest

    skip = pytest.mark.skipif(
        find_chromium() is None, reason="no /usr/bin/chromium (apt-get install chromium)"
    )
    return cast("Marked", skip(test))


SPA = b"""<!doctype html><html><head><title>App</title></head><body>
<div id="app">Loading...</div>
<script>
setTimeout(() => {
  document.getElementById("app").innerHTML = '<h1 id="ready">Rendered by a script</h1>';
}, 50);
</script></body></html>"""
"""A single-page app: its text is written by a script 50 ms after load."""


def html_page(
    body: bytes = b"",
    status: int = 200,
    headers: list[tuple[str, str]] | None = None,
    *,
    hold: trio.Event | None = None,
) -> Reply:
    """A page as a browser gets it: HTML unless ``headers`` say otherwise."""
    return Reply(
        status, body, [("content-type", "text/html")] if headers is None else headers, hold=hold
    )


@dataclass
class CountingListener:
    """A TCP listener (and a UDP socket on the same port) that counts whoever reaches it."""

    host: str
    port: int = 0
    connections: int = 0
    datagrams: int = 0


@asynccontextmanager
async def open_counting_listener(host: str = FORBIDDEN_HOST) -> AsyncIterator[CountingListener]:
    """A :class:`CountingListener` on ``host``: every TCP connection is counted and closed at
    once, every UDP datagram is counted."""
    counter = CountingListener(host)

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


# -- the fixture pages -----------------------------------------------------------------------------
# The pages of tests/web/fixtures/pages and their expected outputs: the main content (the
# default) in NAME.txt and NAME.md, the whole page (main_content: false) of each HTML page in
# NAME.whole.txt and NAME.whole.md; ``python -m tests.web.pages`` writes the outputs again after
# a deliberate change to the extractor.

FIXTURE_PAGES = Path(__file__).parent / "fixtures" / "pages"
MODES = ("text", "markdown")
"""The shapes every fixture page is compared in."""


@dataclass(frozen=True)
class Page:
    """A fixture page: its file, the URL and content type it is shaped as."""

    name: str
    url: str
    content_type: str

    @property
    def body(self) -> bytes:
        return (FIXTURE_PAGES / self.name).read_bytes()

    def expected_path(self, mode: str, *, whole: bool = False) -> Path:
        """The file holding this page's expected output in ``mode`` (``whole``: of the whole
        page, not its main content)."""
        kind = ".whole" if whole else ""
        return FIXTURE_PAGES / f"{self.name}{kind}.{'md' if mode == 'markdown' else 'txt'}"

    def shaped(self, mode: str, *, whole: bool = False) -> tuple[str, dict[str, object]]:
        """The page shaped in ``mode`` now (``whole``: ``main_content=False``): its content and
        meta."""
        options = Options(mode=mode, main_content=not whole)
        result = shape(self.body, url=self.url, content_type=self.content_type, options=options)
        return result.content, result.meta


def pages() -> list[Page]:
    """Every fixture page, as ``pages.json`` lists them."""
    manifest = json.loads((FIXTURE_PAGES / "pages.json").read_text(encoding="utf-8"))
    return [Page(name, **entry) for name, entry in manifest.items()]
