"""A local web site to crawl: N pages with link structure, the usual traps, and a request log.

The crawl's tests (engine, doors) and CRAWL in ``bench/crawl.py`` all crawl this site, so it is
here, where both ``tests/`` and ``bench/`` import it. Nothing leaves 127.0.0.0/8.

**Hosts.** Three loopback addresses on one port: the site (127.0.0.2), its ``www.`` twin
(127.0.0.3, serving the very same pages) and another site (127.0.0.4, where redirects lead off
the site). With ``names=True`` they are called ``site.test``, ``www.site.test`` and
``other.test``: give the fetcher :meth:`CrawlSite.resolver` (``WebFetcher(resolver=...,
allow=site.allow)``); without names (a child process's CLI cannot take a resolver) the URLs
hold the addresses, and the ``www.`` twin is just another host.

**Pages** (``pages`` of them, ids 0..N-1, the "reachable pages"): page 0 is ``/``; an even id
is a directory, ``/d{i}/``, an odd id a file, ``/p{i}.html``. Page ``i`` links to its parent
``(i - 1) // fanout``, its children ``fanout * i + 1 ...``, the pages before and after it, and
the home page, so every page is reachable and its depth is its depth in the tree
(:meth:`CrawlSite.depth`). Links to a directory take the forms ``/d{j}/``, ``/d{j}`` and
``/d{j}/index.html`` in turn (all three answer the same page, without a redirect), some are
relative (``../d{j}/``), some carry ``#fragments`` or ``utm_*`` parameters, and some pages link
the ``www.`` twin of the next page. ``/sitemap.xml`` lists the N pages; ``/robots.txt``
disallows ``/private/`` and names the sitemap.

**Traps**, linked from the home page: a calendar (``/calendar/2031/01``: each month links the
next and the one before, forever: only ``max_depth`` and the ``limit`` bound it), a counter
(``/feed?page=1`` links ``?page=2`` ...), a query that grows (``/list?p=1`` links
``?p=1&p=2`` ...), session ids that change on every page view (``/account;jsessionid=...``
and ``/cart?sid=...`` on every page), two URLs with one ``rel=canonical`` (``/twins/a`` and
``/twins/b``, both naming ``/twins/a``), a disallowed page (``/private/secret``), a redirect
within the site (``/old`` to ``/new``, linked nowhere else) and one off the site (``/out`` to
the other host's ``/landing``).

**The log.** Every request is recorded as the *page* it asked for (:meth:`CrawlSite.page_of`:
every spelling of one page is one id, on both twins), by host, so a test asserts "no page
fetched twice" (:meth:`CrawlSite.twice`), "none disallowed" (:meth:`CrawlSite.disallowed`) and
"none off the site" (:meth:`CrawlSite.hosts_hit`). ``seconds`` delays every page's answer.

In a test: ``site = await serve_crawl_site(nursery, pages=500)``. As a process (the bench):
``python -m bench.crawl_site --pages 10000`` prints one JSON line (its port and hosts) and serves
until killed; ``GET /_site/stats`` answers the log as JSON and ``GET /_site/reset`` clears it
(neither is linked, nor logged).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import ipaddress
import json
import secrets
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

import h11
import trio

ADDRESSES: Final = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
"""The site, its ``www.`` twin and the other site, in that order."""
NAMES: Final = ("site.test", "www.site.test", "other.test")
"""Their names with ``names=True``."""
DISALLOWED: Final = "/private/"
TRAP_IDS: Final = frozenset({"account", "cart", "twins/a", "twins/b", "old", "new", "out"})
"""The pages besides the N regular ones, the calendar, the feed and the list (which have many)."""

_BUSY = (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError)


@dataclass
class CrawlSite:
    """The site's pages and its log (see the module's docstring); served by :func:`serve`."""

    pages: int
    seconds: float = 0.0
    fanout: int = 8
    names: bool = False
    addresses: tuple[str, str, str] = ADDRESSES
    port: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    """Requests per page id (both twins together)."""
    by_host: Counter[str] = field(default_factory=Counter)
    """Requests per host (``site``, ``www``, ``other``)."""
    requests: int = 0

    def __post_init__(self) -> None:
        if self.pages < 1 or self.fanout < 1:
            raise ValueError("CrawlSite needs at least one page and a fanout of at least 1")
        self._depths = self._bfs()

    # -- addresses ----------------------------------------------------------------------------

    @property
    def hosts(self) -> tuple[str, str, str]:
        """How URLs name the site, its twin and the other site."""
        return NAMES if self.names else self.addresses

    def origin(self, which: int = 0) -> str:
        """``http://host:port`` of the site (0), its ``www.`` twin (1) or the other site (2)."""
        return f"http://{self.hosts[which]}:{self.port}"

    def url(self, path: str, which: int = 0) -> str:
        return self.origin(which) + path

    @property
    def start(self) -> str:
        """The home page's URL."""
        return self.url("/")

    @property
    def allow(self) -> list[ipaddress.IPv4Network]:
        """What the fetcher must be allowed to reach (``WebFetcher(allow=...)``)."""
        return [ipaddress.IPv4Network("127.0.0.0/8")]

    async def resolver(self, host: str, port: int) -> list[str]:
        """A fake DNS for ``names=True``: the three names to their loopback addresses."""
        await trio.lowlevel.checkpoint()
        for name, address in zip(NAMES, self.addresses, strict=True):
            if host == name:
                return [address]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    # -- the pages ----------------------------------------------------------------------------

    def path(self, page: int) -> str:
        """The plain path of page ``page`` (its form in the sitemap)."""
        if page == 0:
            return "/"
        return f"/d{page}/" if page % 2 == 0 else f"/p{page}.html"

    def urls(self) -> list[str]:
        """The N pages' URLs, as the sitemap lists them (``run`` over the same pages)."""
        return [self.url(self.path(i)) for i in range(self.pages)]

    def depth(self, page: int) -> int:
        """The fewest links from the home page to page ``page``."""
        return self._depths[page]

    def reachable(self, max_depth: int) -> set[str]:
        """The ids of the regular pages a crawl with ``max_depth`` reaches."""
        return {self.id_of(i) for i, d in enumerate(self._depths) if d <= max_depth}

    @staticmethod
    def id_of(page: int) -> str:
        return f"page/{page}"

    def _neighbours(self, page: int) -> list[int]:
        found = [(page - 1) // self.fanout] if page else []
        found += range(
            self.fanout * page + 1, min(self.fanout * page + self.fanout, self.pages - 1) + 1
        )
        found += [p for p in (page - 1, page + 1, 0) if 0 <= p < self.pages]
        return [p for p in dict.fromkeys(found) if p != page]

    def _bfs(self) -> list[int]:
        depths = [-1] * self.pages
        depths[0] = 0
        frontier = [0]
        while frontier:
            following = []
            for page in frontier:
                for other in self._neighbours(page):
                    if depths[other] < 0:
                        depths[other] = depths[page] + 1
                        following.append(other)
            frontier = following
        return depths

    def _link(self, page: int, to: int) -> str:
        """One spelling of a link from ``page`` to ``to`` (they vary on purpose)."""
        path = self.path(to)
        turn = (page + to) % 6
        if to and to % 2 == 0:
            path = (path, path[:-1], path + "index.html", f"..{path}", path, path)[turn]
        if turn == 4:
            path += "#top"
        elif turn == 5:
            path += "?utm_source=crawl-site&utm_medium=link"
        return path

    def links(self, page: int) -> list[str]:
        """The links page ``page`` holds, as its HTML writes them (some relative)."""
        links = [self._link(page, other) for other in self._neighbours(page)]
        session = secrets.token_hex(16)
        links += [f"/account;jsessionid={session}", f"/cart?sid={session}"]
        if page % 7 == 3 and page + 1 < self.pages:
            links.append(self.url(self.path(page + 1), which=1))  # the www. twin
        if page == 0:
            links += [
                "/index.html",
                "/calendar/2031/01",
                "/feed?page=1",
                "/list?p=1",
                "/twins/a",
                "/twins/b",
                "/private/secret",
                "/old",
                "/out",
            ]
        return links

    # -- answers ------------------------------------------------------------------------------

    def page_of(self, target: str, which: int = 0) -> str:
        """The id of the page ``target`` (a request's path and query) asks for: every spelling
        of one page (slash, ``index.html``, tracking or session parameters, either twin) is
        one id; the other site's pages are ``other:{path}``."""
        parts = urlsplit(target)
        path = parts.path.split(";", 1)[0]
        if which == 2:
            return f"other:{path}"
        if path.endswith("/index.html"):
            path = path[: -len("index.html")]
        if path in ("", "/"):
            return self.id_of(0)
        bare = path.strip("/")
        if bare[:1] in ("d", "p") and bare[1:].removesuffix(".html").isdigit():
            return self.id_of(int(bare[1:].removesuffix(".html")))
        query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("utm_"))
        if bare in ("feed", "list"):
            return f"{bare}?{query}"
        return bare

    def answer(self, target: str, which: int) -> tuple[int, list[tuple[str, str]], bytes]:
        """Status, headers and body for ``target`` on host ``which``."""
        page = self.page_of(target, which)
        if which == 2:
            return self._html(page, "Another site", [])
        if page == "robots.txt":
            body = f"User-agent: *\nDisallow: {DISALLOWED}\nSitemap: {self.url('/sitemap.xml')}\n"
            return 200, [("content-type", "text/plain")], body.encode()
        if page == "sitemap.xml":
            return 200, [("content-type", "application/xml")], self._sitemap()
        if page.startswith("page/"):
            number = int(page[5:])
            if number >= self.pages:
                return 404, [("content-type", "text/plain")], b"no such page"
            return self._html(page, f"Page {number}", self.links(number))
        return self._trap(page)

    def _trap(self, page: str) -> tuple[int, list[tuple[str, str]], bytes]:
        session = secrets.token_hex(16)
        common = ["/", f"/account;jsessionid={session}"]
        if page.startswith("calendar/"):
            year, month = (int(x) for x in page.split("/")[1:3])
            after = (year + month // 12, month % 12 + 1)
            before = (year - (month == 1), (month - 2) % 12 + 1)
            links = [f"/calendar/{y}/{m:02d}" for y, m in (after, before)]
            return self._html(page, f"Calendar {year}-{month:02d}", [*links, *common])
        if page.startswith("feed?page="):
            number = int(page.split("=")[1] or 0)
            return self._html(page, f"Feed {number}", [f"/feed?page={number + 1}", *common])
        if page.startswith("list?"):
            query = page.split("?", 1)[1]
            grown = f"/list?{query}&p={query.count('&') + 2}"
            return self._html(page, "A list", [grown, *common])
        if page in ("twins/a", "twins/b"):
            return self._html(page, "A twin", common, canonical="/twins/a")
        if page == "old":
            return 301, [("location", "/new")], b""
        if page == "out":
            return 302, [("location", self.url("/landing", which=2))], b""
        if page in ("account", "cart", "new", "private/secret"):
            return self._html(page, page.capitalize(), common)
        return 404, [("content-type", "text/plain")], b"no such page"

    def _html(
        self, page: str, title: str, links: Sequence[str], canonical: str = ""
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
        items = "".join(
            f'<li><a href="{html.escape(link)}">{i}</a></li>' for i, link in enumerate(links)
        )
        body = (
            f"<!doctype html><html><head><title>{title}</title>{head}</head><body>"
            f"<h1>{title}</h1><p>This is {html.escape(page)} of a site made to be crawled. "
            "It has a paragraph of text, so that shaping it costs what a small page costs, "
            "and a list of links, some of them to the same pages under other spellings.</p>"
            f"<ul>{items}</ul></body></html>"
        )
        return 200, [("content-type", "text/html; charset=utf-8")], body.encode()

    def _sitemap(self) -> bytes:
        locs = "".join(f"<url><loc>{html.escape(u)}</loc></url>" for u in self.urls())
        return (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
        ).encode()

    # -- the log ------------------------------------------------------------------------------

    def record(self, target: str, which: int) -> None:
        self.requests += 1
        self.by_host[("site", "www", "other")[which]] += 1
        self.hits[self.page_of(target, which)] += 1

    def twice(self) -> list[str]:
        """The pages requested more than once (robots.txt and the sitemap aside: a fleet's
        instances each read them)."""
        return sorted(
            p for p, n in self.hits.items() if n > 1 and p not in ("robots.txt", "sitemap.xml")
        )

    def disallowed(self) -> list[str]:
        """The pages under ``/private/`` that were requested (robots.txt disallows them)."""
        return sorted(p for p in self.hits if p.startswith(DISALLOWED.strip("/") + "/"))

    def hosts_hit(self) -> dict[str, int]:
        """Requests per host: ``site``, ``www`` and ``other``."""
        return dict(self.by_host)

    def fetched(self) -> set[str]:
        """Every page id requested at least once."""
        return set(self.hits)

    def stats(self) -> dict[str, object]:
        """The log as JSON (what ``/_site/stats`` answers)."""
        return {
            "requests": self.requests,
            "hits": dict(self.hits),
            "by_host": dict(self.by_host),
            "twice": self.twice(),
            "disallowed": self.disallowed(),
        }

    def reset(self) -> None:
        self.hits.clear()
        self.by_host.clear()
        self.requests = 0

    # -- serving ------------------------------------------------------------------------------

    async def handle(self, which: int, stream: trio.SocketStream) -> None:
        """Serve one connection (HTTP/1.1, keep-alive) on host ``which``."""
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request = await _next_request(conn, stream)
                if request is None:
                    return
                await self._respond(conn, stream, request.target.decode("ascii", "replace"), which)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except _BUSY:
            return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _respond(
        self, conn: h11.Connection, stream: trio.SocketStream, target: str, which: int
    ) -> None:
        if target.startswith("/_site/"):
            if target == "/_site/reset":
                self.reset()
            status, headers, body = 200, [("content-type", "application/json")], b""
            body = json.dumps(self.stats()).encode()
        else:
            self.record(target, which)
            status, headers, body = self.answer(target, which)
            if self.seconds and status == 200 and not target.startswith(("/robots", "/sitemap")):
                await trio.sleep(self.seconds)
        headers = [*headers, ("content-length", str(len(body)))]
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
        await stream.send_all(conn.send(h11.Data(data=body)))
        await stream.send_all(conn.send(h11.EndOfMessage()))


async def _next_request(conn: h11.Connection, stream: trio.SocketStream) -> h11.Request | None:
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


async def serve(
    site: CrawlSite, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``site`` on its three addresses, one port for all (``site.port`` if set, else a
    free one, tried a few times); reports the port when listening."""
    for attempt in range(20):
        listeners: list[trio.SocketListener] = []
        try:
            port = site.port
            for address in site.addresses:
                listeners += await trio.open_tcp_listeners(port, host=address)
                port = listeners[0].socket.getsockname()[1]
        except OSError:
            for listener in listeners:
                await listener.aclose()
            if site.port or attempt == 19:
                raise
            continue
        site.port = port
        break
    async with trio.open_nursery() as nursery:
        for which, listener in enumerate(listeners):
            nursery.start_soon(
                functools.partial(
                    trio.serve_listeners, functools.partial(site.handle, which), [listener]
                )
            )
        task_status.started(site.port)


async def serve_crawl_site(
    nursery: trio.Nursery,
    pages: int,
    *,
    seconds: float = 0.0,
    fanout: int = 8,
    names: bool = False,
) -> CrawlSite:
    """A :class:`CrawlSite` served by ``nursery`` until it is cancelled."""
    site = CrawlSite(pages, seconds, fanout, names)
    await nursery.start(serve, site)
    return site


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.crawl_site``: serve a site until killed, after one JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.crawl_site", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=0.0, help="delay of each page's answer")
    parser.add_argument("--fanout", type=int, default=8)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    site = CrawlSite(args.pages, args.seconds, args.fanout, port=args.port)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, site)
            print(json.dumps({"port": site.port, "hosts": list(site.hosts)}), flush=True)

    trio.run(run)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
