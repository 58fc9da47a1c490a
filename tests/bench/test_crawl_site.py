"""The crawl site (``bench/crawl_site.py``) every crawl test and CRAWL use: its pages, its
traps and its log, and a plain crawl over it with the crawl's rules that fetches each page once."""

from __future__ import annotations

import html
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
import trio
from bench.crawl_site import CrawlSite, serve_crawl_site

from trio_batch._crawl import CrawlScope, CrawlSpec
from trio_batch._crawl_rules import QUERY_VARIANTS, CrawlRules

_HREF = re.compile(r'<a href="([^"]*)"')
_CANONICAL = re.compile(r'<link rel="canonical" href="([^"]*)"')


async def _get(client: httpx.AsyncClient, site: CrawlSite, url: str) -> httpx.Response:
    """GET ``url``, reaching a named host at its loopback address (the fake DNS's answer)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if site.names:
        address = (await site.resolver(host, parts.port or 80))[0]
        url = url.replace(f"//{host}:", f"//{address}:", 1)
        return await client.get(url, headers={"host": parts.netloc})
    return await client.get(url)


@dataclass
class Crawled:
    """What a plain crawl stored (page ids, in order) and skipped (counts by reason)."""

    stored: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


async def plain_crawl(site: CrawlSite, spec: CrawlSpec) -> Crawled:
    """A breadth-first crawl, one page at a time, deduplicated by the rules' keys: a redirect
    is judged as a link (followed only in scope), robots.txt's Disallow is obeyed, and a page
    whose ``rel=canonical`` was stored already is a duplicate. What the engine's crawl does,
    without the store: it shows the site and the rules together make every page one key."""
    rules = CrawlRules(spec)
    visited = {rules.start_key}
    stored_keys: set[str] = set()
    queue = deque([(spec.url, 0)])
    crawled = Crawled()
    async with httpx.AsyncClient(follow_redirects=False) as client:
        robots = (await _get(client, site, site.url("/robots.txt"))).text
        disallowed = [
            line.split(":", 1)[1].strip() for line in robots.splitlines() if "Disallow" in line
        ]
        while queue:
            url, depth = queue.popleft()
            answer = await _get(client, site, url)
            if answer.is_redirect:
                found, at = [urljoin(url, answer.headers["location"])], depth
            else:
                canonical = _CANONICAL.search(answer.text)
                key = rules.key(urljoin(url, canonical.group(1)) if canonical else url) or url
                if key in stored_keys:
                    crawled.skipped["duplicate"] += 1
                else:
                    stored_keys.add(key)
                    visited.add(key)
                    crawled.stored.append(
                        site.page_of(urlsplit(url).path + "?" + urlsplit(url).query)
                    )
                found = [urljoin(url, html.unescape(h)) for h in _HREF.findall(answer.text)]
                at = depth + 1
            for link in found:
                key, reason = rules.judge(link, at)
                if not reason and any(urlsplit(link).path.startswith(d) for d in disallowed):
                    reason = "robots"
                if not reason and key in visited:
                    reason = "duplicate"
                if reason:
                    crawled.skipped[reason] += 1
                    continue
                visited.add(key)
                queue.append((link, at))
    return crawled


class TestTheSite:
    def test_every_page_is_reachable_at_its_tree_depth(self) -> None:
        """Following the pages' links from the home page reaches every page, each at the depth
        the site reports (what a test expects a crawl of ``max_depth`` to store)."""
        site = CrawlSite(200, port=8080)
        depths = {site.id_of(0): 0}
        frontier = [site.start]
        while frontier:
            following = []
            for url in frontier:
                page = site.page_of(urlsplit(url).path)
                for link in site.links(int(page.split("/")[1])):
                    target = urljoin(url, link)
                    parts = urlsplit(target)
                    other = site.page_of(f"{parts.path}?{parts.query}")
                    if other.startswith("page/") and other not in depths and "8080" in parts.netloc:
                        depths[other] = depths[page] + 1
                        following.append(target)
            frontier = following

        assert {site.id_of(i): site.depth(i) for i in range(200)} == depths
        assert site.reachable(2) == {p for p, d in depths.items() if d <= 2}

    async def test_every_spelling_of_a_page_is_one_page_in_the_log(
        self, nursery: trio.Nursery
    ) -> None:
        """Slash, no slash, ``index.html``, tracking parameters and the ``www.`` twin are one
        page to the log, so "fetched twice" means the same page, whatever its spelling."""
        site = await serve_crawl_site(nursery, 20)
        async with httpx.AsyncClient() as client:
            for url in (
                site.url("/d4/"),
                site.url("/d4"),
                site.url("/d4/index.html?utm_source=x"),
                site.url("/d4/", which=1),
            ):
                assert 200 == (await client.get(url)).status_code

        assert {"page/4": 4} == dict(site.hits)
        assert ["page/4"] == site.twice()
        assert {"site": 3, "www": 1} == site.hosts_hit()

    async def test_robots_and_the_sitemap_describe_the_site(self, nursery: trio.Nursery) -> None:
        """robots.txt disallows ``/private/`` and names the sitemap, which lists the N pages."""
        site = await serve_crawl_site(nursery, 30)
        async with httpx.AsyncClient() as client:
            robots = (await client.get(site.url("/robots.txt"))).text
            sitemap = (await client.get(site.url("/sitemap.xml"))).text

        assert "Disallow: /private/" in robots
        assert f"Sitemap: {site.url('/sitemap.xml')}" in robots
        assert site.urls() == re.findall(r"<loc>([^<]*)</loc>", sitemap)

    async def test_the_traps_answer_as_documented(self, nursery: trio.Nursery) -> None:
        """The redirects, the twins' one canonical, the calendar, the counter and the growing
        query answer as the module says, and a session id changes on every view."""
        site = await serve_crawl_site(nursery, 10)
        async with httpx.AsyncClient() as client:
            out = await client.get(site.url("/out"))
            old = await client.get(site.url("/old"))
            twin = (await client.get(site.url("/twins/b"))).text
            december = (await client.get(site.url("/calendar/2031/12"))).text
            feed = (await client.get(site.url("/feed?page=7"))).text
            grown = (await client.get(site.url("/list?p=1&p=2"))).text
            views = [(await client.get(site.url("/p1.html"))).text for _ in range(2)]

        assert (302, site.url("/landing", which=2)) == (out.status_code, out.headers["location"])
        assert (301, "/new") == (old.status_code, old.headers["location"])
        assert '<link rel="canonical" href="/twins/a">' in twin
        assert {"/calendar/2032/01", "/calendar/2031/11"} <= set(_HREF.findall(december))
        assert "/feed?page=8" in _HREF.findall(feed)
        assert "/list?p=1&amp;p=2&amp;p=3" in _HREF.findall(grown)
        sessions = [re.findall(r"jsessionid=(\w+)", view) for view in views]
        assert sessions[0] != sessions[1]

    async def test_the_other_host_answers_its_own_pages(self, nursery: trio.Nursery) -> None:
        """Where ``/out`` leads is a page of another host, logged apart from the site's."""
        site = await serve_crawl_site(nursery, 10)
        async with httpx.AsyncClient() as client:
            landing = await client.get(site.url("/landing", which=2))

        assert 200 == landing.status_code
        assert {"other:/landing": 1} == dict(site.hits)

    async def test_a_page_answers_after_its_seconds(
        self, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
    ) -> None:
        """``seconds`` delays every page (not robots.txt): the site stands for a slow server."""
        site = await serve_crawl_site(nursery, 10, seconds=30.0)
        async with httpx.AsyncClient(timeout=None) as client:  # the clock jumps
            start = trio.current_time()
            await client.get(site.url("/robots.txt"))
            robots = trio.current_time() - start
            await client.get(site.url("/p1.html"))
            page = trio.current_time() - start - robots

        assert robots < 30.0 <= page

    def test_a_site_of_no_pages_is_refused(self) -> None:
        """A site needs its home page."""
        with pytest.raises(ValueError, match="at least one page"):
            CrawlSite(0)


class TestAPlainCrawlWithTheRules:
    async def _crawl(
        self, nursery: trio.Nursery, pages: int, max_depth: int, scope: CrawlScope = "host"
    ) -> tuple[CrawlSite, Crawled]:
        site = await serve_crawl_site(nursery, pages, names=scope == "domain")
        spec = CrawlSpec(site.start, limit=10 * pages, max_depth=max_depth, scope=scope)
        return site, await plain_crawl(site, spec)

    async def test_it_stores_every_page_once_and_nothing_disallowed_or_off_the_site(
        self, nursery: trio.Nursery
    ) -> None:
        """Every reachable page stored once, no page requested twice in any spelling, nothing
        under the Disallow, nothing of the other host or the ``www.`` twin, and the twins
        stored as one page."""
        site, crawled = await self._crawl(nursery, 200, max_depth=5)
        stored = Counter(crawled.stored)

        assert site.reachable(5) <= set(stored)
        assert [] == [page for page, n in stored.items() if n > 1]
        assert [] == site.twice()
        assert [] == site.disallowed()
        assert {"site"} == set(site.hosts_hit())
        assert 1 == stored["twins/a"] + stored["twins/b"]
        assert {"scope", "robots", "trap", "duplicate"} <= set(crawled.skipped)

    async def test_the_traps_are_bounded_whatever_the_depth(self, nursery: trio.Nursery) -> None:
        """At the deepest ``max_depth`` the crawl still ends: the counter stops at its query
        variants, the growing query at two, the session ids at one page each; the calendar,
        written in the path, is what ``max_depth`` bounds (two months a level)."""
        site, crawled = await self._crawl(nursery, 20, max_depth=64)
        stored = Counter(page.split("?")[0].split("/")[0] for page in crawled.stored)

        assert QUERY_VARIANTS >= stored["feed"]
        assert 2 == stored["list"]
        assert (1, 1) == (stored["account"], stored["cart"])
        assert 2 * 64 >= stored["calendar"]
        assert [] == site.twice()

    async def test_with_domain_scope_the_www_twin_is_the_same_pages(
        self, nursery: trio.Nursery
    ) -> None:
        """With scope ``domain`` the ``www.`` twin is in scope, yet no page is fetched under
        both names; the other site stays out."""
        site, crawled = await self._crawl(nursery, 200, max_depth=5, scope="domain")

        assert site.reachable(5) <= set(crawled.stored)
        assert [] == site.twice()
        assert 0 == site.hosts_hit().get("other", 0)
