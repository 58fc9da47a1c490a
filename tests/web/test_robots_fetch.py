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


class Site:
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
    site = Site(robots_txt("User-agent: *\nDisallow: /private/\n"))
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
    site = Site(robots_txt("User-agent: *\nDisallow: /\n"))
    async with WebFetcher(allow=LOOPBACK, transport=mock_transport(site.handle)) as fetch:
        await fetch(CALLER, Target(SITE + "/x"))
    assert ["/x"] == site.paths()


async def test_an_unreachable_robots_txt_backs_off_then_fails() -> None:
    """A 5xx robots.txt: busy for now (the host backs off as for a 503); past the host's block
    limit, a 503 that says why."""
    site = Site(httpx.Response(500))
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
    site = Site(robots_txt("User-agent: *\nCrawl-delay: 1\n"))
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
    site = Site(robots_txt("User-agent: *\nDisallow: /\n"))
    async with WebFetcher(allow=LOOPBACK, transport=mock_transport(site.handle)) as fetch:
        with pytest.raises(TargetError, match="robots"):
            await fetch(CALLER, Target(SITE + "/a", Options(robots=True)))
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(site.handle), robots=True
    ) as fetch:
        page = await fetch(CALLER, Target(SITE + "/b", Options(robots=False)))
    assert "page" == page.content
    assert ["/robots.txt", "/b"] == site.paths()
