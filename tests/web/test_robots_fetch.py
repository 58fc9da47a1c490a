"""WebFetcher(robots=True): the site's robots.txt decides, through the same guard and budget.

A mock site answers robots.txt and pages and records every request (real clock; lower bounds).
"""

from __future__ import annotations

import itertools

import httpx
import pytest
import trio

from tests.web.support import CALLER, LOOPBACK, TEXT, mock_transport
from trio_batch import HostBudget, Options, RetryLater, Target, TargetError
from trio_batch.web import WebFetcher

SITE = "http://127.0.0.1:8"


class MockSite:
    """A site behind a mock transport: its robots.txt, a page for every other path, and every
    request it received (path, Trio's time)."""

    def __init__(self, robots: httpx.Response) -> None:
        self.robots = robots
        self.requests: list[tuple[str, float]] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.url.path, trio.current_time()))
        if request.url.path == "/robots.txt":
            return self.robots
        return httpx.Response(200, text="page", headers=TEXT)

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


def robots_txt(text: str) -> httpx.Response:
    return httpx.Response(200, text=text, headers=TEXT)


async def test_a_disallowed_url_fails_without_a_request_and_quotes_the_rule() -> None:
    """A URL robots.txt disallows is a 403 quoting the rule, and the site never sees the request."""
    site = MockSite(robots_txt("User-agent: *\nDisallow: /private/\n"))
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(site.handle), robots=True
    ) as fetch:
        with pytest.raises(TargetError) as refused:
            await fetch(CALLER, Target(SITE + "/private/page"))
        page = await fetch(CALLER, Target(SITE + "/public"))
    assert 403 == refused.value.status
    assert "robots.txt disallows this URL" in refused.value.msg
    assert "Disallow: /private/" in refused.value.msg
    assert refused.value.hint
    assert "page" == page.content
    assert ["/robots.txt", "/public"] == site.paths()  # read once, the page never asked


async def test_without_robots_the_file_is_never_read() -> None:
    """Without ``robots=True`` the fetcher never asks for robots.txt."""
    site = MockSite(robots_txt("User-agent: *\nDisallow: /\n"))
    async with WebFetcher(allow=LOOPBACK, transport=mock_transport(site.handle)) as fetch:
        await fetch(CALLER, Target(SITE + "/x"))
    assert ["/x"] == site.paths()


async def test_an_unreachable_robots_txt_backs_off_then_fails() -> None:
    """A 5xx robots.txt: busy for now (the host backs off as for a 503); past the host's block
    limit, a 503 that says why."""
    site = MockSite(httpx.Response(500))
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(site.handle), robots=True
    ) as fetch:
        with pytest.raises(RetryLater, match=r"robots\.txt could not be read"):
            await fetch(CALLER, Target(SITE + "/a"))
    blocked = HostBudget(block_limit=0.0)
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(site.handle), robots=True, budget=blocked
    ) as fetch:
        with pytest.raises(TargetError) as failed:
            await fetch(CALLER, Target(SITE + "/a"))
    assert 503 == failed.value.status
    assert "RFC 9309" in failed.value.msg
    assert "/a" not in site.paths()


async def test_crawl_delay_spaces_the_host() -> None:
    """robots.txt's Crawl-delay spaces the fetches to the host, whatever its budget allows."""
    site = MockSite(robots_txt("User-agent: *\nCrawl-delay: 1\n"))
    budget = HostBudget(concurrency=4)
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(site.handle), robots=True, budget=budget
    ) as fetch:
        for i in range(3):
            await fetch(CALLER, Target(f"{SITE}/p{i}"))
    pages = [t for path, t in site.requests if path != "/robots.txt"]
    assert 3 == len(pages)
    assert all(b - a >= 1.0 - 0.02 for a, b in itertools.pairwise(pages))


async def test_a_target_may_ask_for_robots_or_not_whatever_the_default() -> None:
    """Options.robots decides for its target: True obeys with the default off, False does not
    with the default on."""
    site = MockSite(robots_txt("User-agent: *\nDisallow: /\n"))
    async with WebFetcher(allow=LOOPBACK, transport=mock_transport(site.handle)) as fetch:
        with pytest.raises(TargetError, match="robots"):
            await fetch(CALLER, Target(SITE + "/a", Options(robots=True)))
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(site.handle), robots=True
    ) as fetch:
        page = await fetch(CALLER, Target(SITE + "/b", Options(robots=False)))
    assert "page" == page.content
    assert ["/robots.txt", "/b"] == site.paths()


OTHER = "http://127.0.0.2:8"


class Hosts:
    """Two mock hosts, each with its robots.txt and its pages; records every request as
    ``host path`` (the path as sent on the wire)."""

    def __init__(self, robots: dict[str, str], pages: dict[str, httpx.Response]) -> None:
        self.robots = robots
        self.pages = pages
        self.requests: list[str] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.raw_path.decode()
        self.requests.append(f"{host} {path}")
        if path == "/robots.txt":
            return robots_txt(self.robots.get(host, ""))
        return self.pages.get(f"{host} {path}", httpx.Response(200, text="page", headers=TEXT))


def moved(to: str) -> httpx.Response:
    return httpx.Response(301, headers={"location": to})


class TestRedirectHops:
    """Item 1 of issue 36: every hop of a redirect obeys its own host's robots.txt."""

    async def test_a_hop_into_a_disallowed_path_is_refused_before_it_is_requested(self) -> None:
        """/go redirects to /private/x, which robots.txt disallows: a 403, never requested."""
        hosts = Hosts(
            {"127.0.0.1": "User-agent: *\nDisallow: /private\n"},
            {"127.0.0.1 /go": moved("/private/x")},
        )
        async with WebFetcher(
            allow=LOOPBACK, transport=mock_transport(hosts.handle), robots=True
        ) as fetch:
            with pytest.raises(TargetError) as refused:
                await fetch(CALLER, Target(SITE + "/go"))

        assert 403 == refused.value.status
        assert "redirects to a URL that robots.txt disallows" in refused.value.msg
        assert "Disallow: /private" in refused.value.msg
        assert ["127.0.0.1 /robots.txt", "127.0.0.1 /go"] == hosts.requests

    async def test_a_hop_to_another_host_obeys_that_hosts_robots_txt(self) -> None:
        """A redirect to another host reads that host's robots.txt and obeys it."""
        hosts = Hosts(
            {"127.0.0.2": "User-agent: *\nDisallow: /private\n"},
            {"127.0.0.1 /go": moved(OTHER + "/private/y")},
        )
        async with WebFetcher(
            allow=LOOPBACK, transport=mock_transport(hosts.handle), robots=True
        ) as fetch:
            with pytest.raises(TargetError) as refused:
                await fetch(CALLER, Target(SITE + "/go"))

        assert 403 == refused.value.status
        assert "127.0.0.2 /robots.txt" in hosts.requests
        assert "127.0.0.2 /private/y" not in hosts.requests

    async def test_an_allowed_hop_is_followed(self) -> None:
        """A hop that the other host's robots.txt allows is fetched as before."""
        hosts = Hosts(
            {"127.0.0.2": "User-agent: *\nDisallow: /private\n"},
            {"127.0.0.1 /go": moved(OTHER + "/public")},
        )
        async with WebFetcher(
            allow=LOOPBACK, transport=mock_transport(hosts.handle), robots=True
        ) as fetch:
            page = await fetch(CALLER, Target(SITE + "/go"))

        assert "page" == page.content
        assert 1 == page.meta["redirects"]
        assert "127.0.0.2 /public" in hosts.requests

    async def test_without_robots_hops_read_no_robots_txt(self) -> None:
        """robots off: no robots.txt of any hop is read."""
        hosts = Hosts({}, {"127.0.0.1 /go": moved(OTHER + "/private/y")})
        async with WebFetcher(allow=LOOPBACK, transport=mock_transport(hosts.handle)) as fetch:
            await fetch(CALLER, Target(SITE + "/go"))

        assert ["127.0.0.1 /go", "127.0.0.2 /private/y"] == hosts.requests


class TestTheFormSent:
    """Item 2 of issue 36: a rule stops the URL whichever way either side writes it (RFC 9309
    §2.2.2), and the URL is checked as it is sent."""

    @pytest.mark.parametrize(
        ("rule", "path"),
        [
            ("/a%3Cb", "/a<b"),
            ("/a<b", "/a%3Cb"),
            ("/a<b", "/a<b"),
            ("/q%22x", '/q"x'),
            ("/d%7Bx", "/d{x"),
            ("/p%7Cx", "/p|x"),
            ("/c%5Ex", "/c^x"),
            ("/b%60x", "/b`x"),
            ("/private", "/a/../private/x"),
            ("/private", "/a/%2e%2e/private/x"),
        ],
    )
    async def test_every_spelling_of_a_disallowed_path_is_refused(
        self, rule: str, path: str
    ) -> None:
        """The page is never requested, however the rule or the URL escapes its characters."""
        site = MockSite(robots_txt(f"User-agent: *\nDisallow: {rule}\n"))
        async with WebFetcher(
            allow=LOOPBACK, transport=mock_transport(site.handle), robots=True
        ) as fetch:
            with pytest.raises(TargetError) as refused:
                await fetch(CALLER, Target(SITE + path))

        assert 403 == refused.value.status
        assert ["/robots.txt"] == site.paths()


class TestRobotsRedirects:
    """Item 3 of issue 36: a robots.txt that redirects too often is unavailable (allow all),
    as RFC 9309 §2.3.1.2 permits and Google does."""

    @pytest.mark.parametrize("hops", [6, 0])
    async def test_too_many_redirects_or_a_loop_allow_everything(self, hops: int) -> None:
        """Six hops (or robots.txt redirecting to itself): no rules, the page is fetched."""
        seen: list[str] = []

        async def handle(request: httpx.Request) -> httpx.Response:
            path = request.url.path
            seen.append(path)
            if path == "/robots.txt":
                return moved("/r1" if hops else "/robots.txt")
            if path.startswith("/r") and int(path[2:]) < hops:
                return moved(f"/r{int(path[2:]) + 1}")
            if path.startswith("/r"):
                return robots_txt("User-agent: *\nDisallow: /\n")
            return httpx.Response(200, text="page", headers=TEXT)

        async with WebFetcher(allow=LOOPBACK, transport=mock_transport(handle), robots=True) as f:
            page = await f(CALLER, Target(SITE + "/page"))

        assert "page" == page.content
        if hops:  # five redirects followed, the sixth not
            assert ["/robots.txt", "/r1", "/r2", "/r3", "/r4", "/r5", "/page"] == seen
        else:  # the loop went round as often, then the file counts as unavailable
            assert ["/robots.txt"] * 6 + ["/page"] == seen

    async def test_five_redirects_are_followed_and_their_rules_obeyed(self) -> None:
        """Five hops reach the file, whose rules apply (RFC 9309: at least five)."""

        async def handle(request: httpx.Request) -> httpx.Response:
            path = request.url.path
            if path == "/robots.txt":
                return moved("/r1")
            if path.startswith("/r") and int(path[2:]) < 5:
                return moved(f"/r{int(path[2:]) + 1}")
            if path == "/r5":
                return robots_txt("User-agent: *\nDisallow: /\n")
            return httpx.Response(200, text="page", headers=TEXT)

        async with WebFetcher(allow=LOOPBACK, transport=mock_transport(handle), robots=True) as f:
            with pytest.raises(TargetError) as refused:
                await f(CALLER, Target(SITE + "/page"))

        assert 403 == refused.value.status
