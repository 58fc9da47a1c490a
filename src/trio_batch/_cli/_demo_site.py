"""A small local web site for ``trio-batch demo`` and the CLI tests.

It serves, on 127.0.0.1 only, everything the web fetcher knows how to handle and the failures it
must handle well:

* ``/articles/{n}``: HTML articles (n = 1..12), for ``mode``, ``grep`` and ``question``;
* ``/api/items``: a JSON API, for ``jq``;
* ``/report.pdf``: a multi-page PDF, for ``pages``;
* ``/busy?as=...``: answers 429 (with ``Retry-After``) twice per query string, then 200;
* ``/slow``: answers after ``slow_seconds``;
* ``/redirect-private``: a redirect into a link-local address (the cloud metadata endpoint),
  which the fetcher's guard must refuse without sending a packet there;
* anything else: 404.

The server is a deliberately small HTTP/1.1 server on Trio (one request per connection,
``Connection: close``), so the demo needs no web framework and starts in milliseconds. It runs
inside the caller's nursery: ``site = await nursery.start(serve_demo_site)``.
"""

from __future__ import annotations

import contextlib
import html
import json
from collections import Counter
from dataclasses import dataclass
from typing import final
from urllib.parse import urlsplit

import trio

__all__ = ["ARTICLES", "DemoSite", "make_pdf", "serve_demo_site"]

# Where /redirect-private points: the link-local cloud metadata address, the classic SSRF target.
PRIVATE_REDIRECT = "http://169.254.169.254/latest/meta-data/"

_MAX_HEAD = 16 * 1024  # a request head larger than this is refused with 431

_TOPICS = [
    ("Structured concurrency", "nurseries", "Every task lives in a nursery that outlives it."),
    ("Cancellation", "cancel scopes", "A cancel scope stops everything inside it, cleanly."),
    ("Fair scheduling", "rotation", "Workers rotate over live jobs one target at a time."),
    ("Rate limits", "Retry-After", "A busy upstream answers 429; polite clients wait and retry."),
    ("Group commit", "transactions", "Many small writes share one commit and one fsync."),
    ("Backpressure", "channels", "A bounded channel makes a fast producer wait for consumers."),
    ("Idempotency", "keys", "The same request twice must not do the work twice."),
    ("Timeouts", "deadlines", "A deadline belongs to the caller, not to the callee."),
    ("Observability", "metrics", "Count what happened; never log what a user typed."),
    ("Caching", "freshness", "A stale copy beats no copy when the origin is down."),
    ("SSRF", "guards", "A fetcher must never be talked into reaching a private address."),
    ("Testing", "mock clocks", "Virtual time turns a ten-minute wait into a millisecond."),
]

ARTICLES: dict[int, tuple[str, str]] = {
    n: (
        title,
        f"<h1>{html.escape(title)}</h1>\n"
        f"<p>This demo article is about {html.escape(keyword)}. {html.escape(lede)}</p>\n"
        f"<p>Article {n} of {len(_TOPICS)} on the trio-batch demo site. It has a few paragraphs "
        "so that the readable-text, grep and question options have something to work on.</p>\n"
        f"<h2>Why {html.escape(keyword)} matter</h2>\n"
        f"<p>Batch systems fail in boring ways. {html.escape(title)} is one of the ideas that "
        "keep them boring: small rules, applied every time, tested with fakes.</p>\n"
        "<ul><li>One job never starves another.</li><li>Every outcome is stored.</li>"
        "<li>A busy target is retried later, not failed.</li></ul>\n",
    )
    for n, (title, keyword, lede) in enumerate(_TOPICS, start=1)
}

_ITEMS = [
    {"id": i, "name": name, "price": price, "tags": tags}
    for i, (name, price, tags) in enumerate(
        [
            ("nursery", 12.5, ["trio", "core"]),
            ("cancel scope", 8.0, ["trio", "core"]),
            ("memory channel", 5.25, ["trio", "sync"]),
            ("capacity limiter", 3.75, ["trio", "sync"]),
            ("mock clock", 1.0, ["trio", "testing"]),
        ],
        start=1,
    )
]

_PDF_PAGES = [
    [
        "trio-batch demo report",
        "Page 1: summary.",
        "Three callers share two workers; nobody waits for anybody else's big job.",
    ],
    ["Page 2: rotation.", "a1 b1 c1 a2 b2 c2 ... one target of each live job in turn."],
    ["Page 3: retries.", "A 429 puts the target back; the job re-enters the rotation later."],
    ["Page 4: storage.", "Every outcome is written to SQLite before the next target starts."],
]


def _pdf_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[list[str]]) -> bytes:
    """A minimal, valid PDF with one page per item of ``pages`` (lines of Helvetica text)."""
    kids = [4 + 2 * i for i in range(len(pages))]
    bodies = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        (
            f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(pages)} >>"
        ).encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, lines in enumerate(pages):
        bodies.append(
            (
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
            ).encode()
        )
        text = " ".join(f"({_pdf_text(line)}) Tj T*" for line in lines)
        stream = f"BT /F1 12 Tf 16 TL 72 720 Td {text} ET".encode()
        bodies.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(bodies, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(bodies) + 1,
        xref,
    )
    return bytes(out)


_PDF = make_pdf(_PDF_PAGES)


@final
@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


_REASONS = {
    200: "OK",
    302: "Found",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
}


def _page(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"</head><body>{body}</body></html>"
    ).encode()


@final
class DemoSite:
    """The demo site's state and request handling; :func:`serve_demo_site` puts it on a port.

    ``latency`` seconds pass before every answer, so a demo run is slow enough to watch.

    Attributes:
        base_url: ``http://127.0.0.1:PORT`` once served (empty before).
        requests: how many requests each path got (with its query string).
        most_at_once: the most requests it was answering at once (what a host budget bounds).
    """

    def __init__(
        self, *, slow_seconds: float = 2.0, retry_after: int = 1, latency: float = 0.0
    ) -> None:
        if slow_seconds < 0 or retry_after < 0 or latency < 0:
            raise ValueError("slow_seconds, retry_after and latency must be >= 0")
        self.slow_seconds = slow_seconds
        self.latency = latency
        self.retry_after = retry_after
        self.base_url = ""
        self.requests: Counter[str] = Counter()
        self.most_at_once = 0
        self._at_once = 0
        self.slow_started = trio.Event()
        """Set when the slow page is first asked for (tests interrupt a run there)."""
        self._busy_left: dict[str, int] = {}

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this site."""
        return self.base_url + path

    async def respond(self, method: str, target: str) -> _Response:
        """The response to ``method target`` (the site's routing)."""
        self._at_once += 1
        self.most_at_once = max(self.most_at_once, self._at_once)
        try:
            return await self._respond(method, target)
        finally:
            self._at_once -= 1

    async def _respond(self, method: str, target: str) -> _Response:
        parts = urlsplit(target)
        path = parts.path
        key = path + (f"?{parts.query}" if parts.query else "")
        self.requests[key] += 1
        if self.latency:
            await trio.sleep(self.latency)
        if method not in ("GET", "HEAD"):
            return _Response(405, b"", headers=(("Allow", "GET, HEAD"),))
        if path == "/":
            return self._index()
        elif path.startswith("/articles/"):
            try:
                n = int(path.removeprefix("/articles/"))
            except ValueError:
                n = 0
            if n in ARTICLES:
                title, body = ARTICLES[n]
                return _Response(200, _page(title, body))
        elif path == "/api/items":
            data = json.dumps({"items": _ITEMS, "count": len(_ITEMS)}, indent=1).encode()
            return _Response(200, data, "application/json")
        elif path == "/report.pdf":
            return _Response(200, _PDF, "application/pdf")
        elif path == "/busy":
            left = self._busy_left.setdefault(key, 2)
            if left > 0:
                self._busy_left[key] = left - 1
                return _Response(
                    429,
                    _page("Busy", "<p>Too many requests; come back later.</p>"),
                    headers=(("Retry-After", str(self.retry_after)),),
                )
            return _Response(200, _page("Not busy now", "<p>Thanks for waiting politely.</p>"))
        elif path == "/slow":
            self.slow_started.set()
            await trio.sleep(self.slow_seconds)
            return _Response(200, _page("Slow page", "<p>This page took its time.</p>"))
        elif path == "/redirect-private":
            return _Response(302, b"", headers=(("Location", PRIVATE_REDIRECT),))
        return _Response(404, _page("Not found", "<p>No such page on the demo site.</p>"))

    def _index(self) -> _Response:
        links = "".join(
            f"<li><a href='/articles/{n}'>{html.escape(title)}</a></li>"
            for n, (title, _) in ARTICLES.items()
        )
        return _Response(200, _page("trio-batch demo site", f"<ul>{links}</ul>"))

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one request on ``stream`` and close it."""
        async with stream:
            head = bytearray()
            while b"\r\n\r\n" not in head:
                if len(head) > _MAX_HEAD:
                    await _send(stream, "GET", _Response(431, b""))
                    return
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                head += chunk
            request_line = bytes(head).split(b"\r\n", 1)[0].decode("latin-1")
            try:
                method, target, _version = request_line.split(" ")
            except ValueError:
                await _send(stream, "GET", _Response(400, b""))
                return
            response = await self.respond(method, target)
            await _send(stream, method, response)


async def _send(stream: trio.abc.Stream, method: str, response: _Response) -> None:
    lines = [
        f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Unknown')}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if method != "HEAD":
        data += response.body
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)  # a client that went away needs no answer


async def _serve_connection(site: DemoSite, stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await site.handle(stream)  # a client may go away mid-request


async def serve_demo_site(
    site: DemoSite | None = None,
    *,
    port: int = 0,
    task_status: trio.TaskStatus[DemoSite] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``site`` (a new :class:`DemoSite` by default) on 127.0.0.1 until cancelled.

    Use ``site = await nursery.start(serve_demo_site)``: it reports the site once listening,
    with ``site.base_url`` set (``port=0`` picks a free port).
    """
    site = site if site is not None else DemoSite()
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    bound = listeners[0].socket.getsockname()[1]
    site.base_url = f"http://127.0.0.1:{bound}"

    async def handler(stream: trio.SocketStream) -> None:
        await _serve_connection(site, stream)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handler, listeners)
        task_status.started(site)
