"""site_map: a site's URLs from robots.txt's sitemaps (or /sitemap.xml), index files, gzip and
the start page's links; bounded against hostile sitemaps, through the fetcher's guard.

A local site on 127.0.0.1 answers each path as a test scripts it (``LocalSite``).
"""

from __future__ import annotations

import gzip
import ipaddress
import zlib

import pytest
import trio

from tests.support import LocalSite, Reply, serve_site
from tests.web.support import CALLER, HTML, LOOPBACK
from trio_batch import HostBudget, TargetError
from trio_batch.web import WebFetcher
from trio_batch.web._fetch._sitemap import MAX_LIMIT, MapBounds, site_map

XML = [("content-type", "application/xml")]
GZIP = [("content-type", "application/gzip")]


def urlset(*urls: str) -> bytes:
    locs = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
    ).encode()


def index(*urls: str) -> bytes:
    locs = "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in urls)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</sitemapindex>'
    ).encode()


def fetcher(**settings: object) -> WebFetcher:
    return WebFetcher(allow=LOOPBACK, budget=HostBudget(), **settings)  # type: ignore[arg-type]


def the_site(server: LocalSite) -> None:
    """robots.txt names an index of a plain sitemap and a gzip one; the home page links."""
    u = server.url
    server.route(
        "/",
        Reply(
            body=(
                f'<html><body><a href="/about#team">About</a><a href="{u("/a")}">A</a>'
                '<a href="mailto:x@example.org">mail</a><a href="https://elsewhere.example/">'
                'out</a><a href="/about">again</a></body></html>'
            ).encode(),
            headers=HTML,
        ),
    )
    server.route(
        "/robots.txt",
        Reply(body=f"User-agent: *\nDisallow:\nSitemap: {u('/index.xml')}\n".encode()),
    )
    server.route("/index.xml", Reply(body=index(u("/pages.xml"), u("/posts.xml.gz")), headers=XML))
    server.route("/pages.xml", Reply(body=urlset(u("/a"), u("/b"), u("/b#x")), headers=XML))
    server.route(
        "/posts.xml.gz", Reply(body=gzip.compress(urlset(u("/p/1"), u("/p/2"))), headers=GZIP)
    )


class TestSources:
    async def test_robots_sitemap_index_gzip_and_links(self, server: LocalSite) -> None:
        """The start page, the sitemaps robots.txt names (through their index, gzip too), then
        the page's same-host links: deduplicated, without fragments."""
        the_site(server)
        u = server.url
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert [u("/"), u("/a"), u("/b"), u("/p/1"), u("/p/2"), u("/about")] == list(found.urls)
        assert found.complete
        assert 0 == server.hits["/sitemap.xml"]

    async def test_sitemap_xml_when_robots_names_none(self, server: LocalSite) -> None:
        """Without a robots.txt, /sitemap.xml is read; a gzip Content-Encoding is undone."""
        u = server.url
        server.route("/", Reply(body=b"<p>no links</p>", headers=HTML))
        server.route(
            "/sitemap.xml",
            Reply(
                body=gzip.compress(urlset(u("/x"))), headers=[*XML, ("content-encoding", "gzip")]
            ),
        )
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert [u("/"), u("/x")] == list(found.urls)
        assert 1 == server.hits["/robots.txt"]

    async def test_a_plain_text_sitemap(self, server: LocalSite) -> None:
        """A text sitemap (a URL a line, as the sitemaps protocol allows) is read too."""
        u = server.url
        server.route("/sitemap.xml", Reply(body=f"{u('/t1')}\n\n{u('/t2')}".encode()))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert [u("/t1"), u("/t2")] == list(found.urls)  # the start page is a 404: left out
        assert not found.complete

    async def test_other_hosts_are_left_out_unless_asked(self, server: LocalSite) -> None:
        """Links to other hosts are left out of the map unless ``same_host=False`` asks for them."""
        the_site(server)
        u = server.url
        async with fetcher() as fetch:
            same = await site_map(fetch, CALLER, u("/"))
            every = await site_map(fetch, CALLER, u("/"), same_host=False)

        assert "https://elsewhere.example/" not in same.urls
        assert "https://elsewhere.example/" == every.urls[-1]

    async def test_the_limit_cuts_the_list_and_says_so(self, server: LocalSite) -> None:
        """Past ``limit`` URLs the map stops, in the sitemap's order, is marked incomplete and
        says why."""
        u = server.url
        server.route("/sitemap.xml", Reply(body=urlset(*(u(f"/n{i}") for i in range(500)))))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"), limit=10)

        assert [u(f"/n{i}") for i in range(10)] == list(found.urls)
        assert not found.complete
        assert any("limit of 10" in note for note in found.notes)

    @pytest.mark.parametrize("limit", [0, MAX_LIMIT + 1, True, "5"])
    async def test_a_bad_limit_is_refused(self, limit: object, server: LocalSite) -> None:
        """A limit that is not a whole number from 1 to 10,000 is a ValueError saying so."""
        async with fetcher() as fetch:
            with pytest.raises(ValueError, match=r"^limit must be a whole number from 1 to 10,000"):
                await site_map(fetch, CALLER, server.url("/"), limit=limit)  # type: ignore[arg-type]


class TestGuard:
    async def test_a_private_start_page_is_refused(self) -> None:
        """A start page the fetcher may not reach (loopback here) is a 400 before anything is
        read."""
        async with WebFetcher() as fetch:  # loopback not allowed
            with pytest.raises(TargetError) as refused:
                await site_map(fetch, CALLER, "http://127.0.0.1:9/")

        assert 400 == refused.value.status

    async def test_a_sitemap_on_a_private_host_is_never_reached(
        self, server: LocalSite, nursery: trio.Nursery
    ) -> None:
        """With every host allowed by the caller, the guard still refuses a private address
        the fetcher does not allow: nothing connects to it."""
        other = await serve_site(nursery, "127.0.0.2")
        port = other.port
        u = server.url
        server.route("/", Reply(body=b"<p>home</p>", headers=HTML))
        server.route("/sitemap.xml", Reply(body=index(f"http://127.0.0.2:{port}/private.xml")))
        other.route("/private.xml", Reply(body=urlset(f"http://127.0.0.2:{port}/secret")))
        only_one = [ipaddress.ip_network("127.0.0.1/32")]
        async with WebFetcher(allow=only_one, budget=HostBudget()) as fetch:
            found = await site_map(fetch, CALLER, u("/"), same_host=False)

        assert (u("/"),) == found.urls
        assert 0 == sum(other.hits.values())


def home(server: LocalSite) -> None:
    server.route("/", Reply(body=b"<p>home</p>", headers=HTML))


class TestHostile:
    async def test_an_index_that_lists_itself_is_read_once(self, server: LocalSite) -> None:
        """A sitemap index that lists itself (or loops through another) reads each document once."""
        home(server)
        u = server.url
        server.route("/sitemap.xml", Reply(body=index(u("/sitemap.xml"), u("/s.xml"))))
        server.route("/s.xml", Reply(body=index(u("/sitemap.xml"), u("/s.xml"))))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert 1 == server.hits["/sitemap.xml"]
        assert 1 == server.hits["/s.xml"]
        assert (u("/"),) == found.urls

    async def test_indexes_nested_past_the_depth_stop(self, server: LocalSite) -> None:
        """Indexes nested deeper than ``MapBounds.depth`` are not read, and the map says so."""
        home(server)
        u = server.url
        server.route("/sitemap.xml", Reply(body=index(u("/i1.xml"))))
        for i in range(1, 10):
            server.route(f"/i{i}.xml", Reply(body=index(u(f"/i{i + 1}.xml"))))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"), bounds=MapBounds(depth=3))

        assert [1, 1, 1, 0] == [server.hits[f"/i{i}.xml"] for i in range(1, 5)]
        assert any("deeper than 3 levels" in note for note in found.notes)
        assert not found.complete

    async def test_documents_are_counted(self, server: LocalSite) -> None:
        """At most ``MapBounds.documents`` documents are fetched, the start page and robots.txt
        counted."""
        home(server)
        u = server.url
        server.route("/sitemap.xml", Reply(body=index(*(u(f"/s{i}.xml") for i in range(100)))))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"), bounds=MapBounds(documents=5))

        assert 5 == server.hits["/"] + server.hits["/robots.txt"] + sum(
            n for path, n in server.hits.items() if path.startswith("/s")
        )
        assert any("at most 5 documents" in note for note in found.notes)

    async def test_billion_laughs_is_refused_at_its_doctype(self, server: LocalSite) -> None:
        """A sitemap declaring a DTD (billion laughs) is refused at once, keeping the start page."""
        home(server)
        laughs = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
        body = (
            f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY l0 "ha">{laughs}]>'
            "<urlset><url><loc>&l9;</loc></url></urlset>"
        )
        server.route("/sitemap.xml", Reply(body=body.encode()))
        async with fetcher() as fetch:
            with trio.fail_after(5):
                found = await site_map(fetch, CALLER, server.url("/"))

        assert (server.url("/"),) == found.urls
        assert any("declares a DTD" in note for note in found.notes)

    async def test_a_gzip_bomb_is_read_up_to_the_cap(self, server: LocalSite) -> None:
        """64 MiB of XML in 64 KiB of gzip: inflated a piece at a time, only the first MiB."""
        home(server)
        u = server.url
        squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
        head = urlset(u("/first"))[:-9]  # without </urlset>
        parts = [squeeze.compress(head)]
        blank = b" " * 2**20
        parts += [squeeze.compress(blank) for _ in range(64)]
        parts.append(squeeze.flush())
        bomb = b"".join(parts)
        assert len(bomb) < 2**17
        server.route("/sitemap.xml", Reply(body=bomb, headers=GZIP))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"), bounds=MapBounds(document_bytes=2**20))

        assert [u("/"), u("/first")] == list(found.urls)
        assert any("over 1 MiB (decompressed)" in note for note in found.notes)

    async def test_deep_nesting_and_malformed_xml_keep_what_was_read(
        self, server: LocalSite
    ) -> None:
        """Elements nested too deep or XML that breaks off: the URLs read before it are kept,
        noted."""
        home(server)
        u = server.url
        deep = urlset(u("/ok"))[:-9] + b"<a>" * 100_000
        server.route("/sitemap.xml", Reply(body=index(u("/deep.xml"), u("/bad.xml"))))
        server.route("/deep.xml", Reply(body=deep))
        server.route("/bad.xml", Reply(body=urlset(u("/fine"))[:-9] + b"<url><loc>x</urlset>"))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert [u("/"), u("/ok"), u("/fine")] == list(found.urls)
        assert any("deeper than 16" in note for note in found.notes)
        assert any("not well-formed" in note for note in found.notes)

    async def test_the_map_ends_at_its_time(self, server: LocalSite) -> None:
        """A sitemap that stalls mid-body ends the map at ``MapBounds.seconds`` with what was
        read."""
        home(server)
        u = server.url
        server.route("/sitemap.xml", Reply(chunks=[urlset(u("/a"))[:-9]], stall=True))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"), bounds=MapBounds(seconds=0.5))

        assert [u("/"), u("/a")] == list(found.urls), found.notes
        assert any("took its 0.5 s" in note for note in found.notes), found.notes


async def second_server(nursery: trio.Nursery, host: str = "127.0.0.2") -> LocalSite:
    """Another local site, on ``host``."""
    return await serve_site(nursery, host)


def on(server: LocalSite, host: str, path: str) -> str:
    return f"http://{host}:{server.port}{path}"


class TestCrossSubmission:
    """Issue 36, item 10: the sitemaps protocol's cross-submission, and no sitemap skipped
    without a note."""

    async def test_a_sitemap_robots_txt_names_on_another_host_is_read(
        self, server: LocalSite, nursery: trio.Nursery
    ) -> None:
        """robots.txt names a sitemap kept on another host: it is read, and this host's URLs
        in it are kept (the other host's are not)."""
        cdn = await second_server(nursery)
        u = server.url
        home(server)
        server.route(
            "/robots.txt", Reply(body=f"Sitemap: {on(cdn, '127.0.0.2', '/s.xml')}\n".encode())
        )
        cdn.route(
            "/s.xml",
            Reply(body=urlset(u("/x1"), u("/x2"), on(cdn, "127.0.0.2", "/y")), headers=XML),
        )
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert [u("/"), u("/x1"), u("/x2")] == list(found.urls)
        assert found.complete
        assert 1 == cdn.hits["/s.xml"]

    async def test_an_index_naming_another_hosts_sitemap_says_so(
        self, server: LocalSite, nursery: trio.Nursery
    ) -> None:
        """An index may list its own host's sitemaps only: another host's is not read, and the
        answer is not complete and says why."""
        other = await second_server(nursery)
        u = server.url
        home(server)
        server.route(
            "/sitemap.xml", Reply(body=index(on(other, "127.0.0.2", "/s.xml")), headers=XML)
        )
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert 0 == other.hits["/s.xml"]
        assert not found.complete
        assert any("another host" in note for note in found.notes)

    async def test_a_named_sitemap_at_a_refused_address_says_so(self, server: LocalSite) -> None:
        """robots.txt naming a sitemap at an address the guard refuses: a note, not complete."""
        u = server.url
        home(server)
        server.route("/robots.txt", Reply(body=b"Sitemap: http://127.0.0.3:9/s.xml\n"))
        only_one = [ipaddress.ip_network("127.0.0.1/32")]
        async with WebFetcher(allow=only_one, budget=HostBudget()) as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert not found.complete
        assert any("a sitemap was not read" in note for note in found.notes)


class TestRobots:
    """Issue 36, item 1: with robots on, the map's every request obeys robots.txt."""

    def robots_site(self, server: LocalSite) -> None:
        u = server.url
        server.route("/", Reply(body=f'<a href="{u("/a")}">a</a>'.encode(), headers=HTML))
        server.route(
            "/robots.txt",
            Reply(
                body=(
                    "User-agent: *\nDisallow: /private\n"
                    f"Sitemap: {u('/private/s.xml')}\nSitemap: {u('/go.xml')}\n"
                ).encode()
            ),
        )
        server.route("/private/s.xml", Reply(body=urlset(u("/secret")), headers=XML))
        server.route("/go.xml", Reply(302, headers=[("location", u("/private/t.xml"))]))
        server.route("/private/t.xml", Reply(body=urlset(u("/hidden")), headers=XML))

    @pytest.mark.parametrize("where", ["map", "fetcher"])
    async def test_a_disallowed_sitemap_or_hop_is_not_read(
        self, server: LocalSite, where: str
    ) -> None:
        """robots on (asked by the map, or the fetcher's default): neither the disallowed
        sitemap nor the one a redirect leads into is requested; each is a note."""
        self.robots_site(server)
        u = server.url
        async with fetcher(robots=where == "fetcher") as fetch:
            found = await site_map(fetch, CALLER, u("/"), robots=True if where == "map" else None)

        assert [u("/"), u("/a")] == list(found.urls)
        assert 0 == server.hits["/private/s.xml"] + server.hits["/private/t.xml"]
        assert not found.complete
        assert 2 == sum("robots.txt disallows" in note for note in found.notes)

    async def test_without_robots_the_map_reads_them(self, server: LocalSite) -> None:
        """robots off (the default): the same sitemaps are read."""
        self.robots_site(server)
        u = server.url
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"))

        assert {u("/secret"), u("/hidden")} <= set(found.urls)

    async def test_a_disallowed_start_page_is_not_read(self, server: LocalSite) -> None:
        """The start page itself disallowed: not requested; its sitemaps are still read."""
        u = server.url
        server.route("/", Reply(body=b"<p>home</p>", headers=HTML))
        server.route("/robots.txt", Reply(body=b"User-agent: *\nDisallow: /$\n"))
        server.route("/sitemap.xml", Reply(body=urlset(u("/x")), headers=XML))
        async with fetcher() as fetch:
            found = await site_map(fetch, CALLER, u("/"), robots=True)

        assert [u("/x")] == list(found.urls)
        assert 0 == server.hits["/"]
        assert any("robots.txt disallows" in note for note in found.notes)
