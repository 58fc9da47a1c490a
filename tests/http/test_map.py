"""POST /v1/map: a site's URLs from its sitemaps and start page, with 400s that say what to fix.

The site is a local server on 127.0.0.1; the map runs over a real ``WebFetcher`` allowed to
reach loopback, as the app's ``site_map``.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import trio

from tests.http.support import auth, open_api
from tests.support import LocalSite, Reply, serve_site
from tests.web.support import HTML, LOOPBACK
from trio_batch import Caller, HostBudget
from trio_batch.web import WebFetcher, precheck
from trio_batch.web._fetch._sitemap import site_map

XML = [("content-type", "application/xml")]


@pytest.fixture
async def site(nursery: trio.Nursery) -> LocalSite:
    """A home page linking /about, and a sitemap.xml of /a and /b."""
    local = await serve_site(nursery)
    u = local.url
    local.route("/", Reply(body=b'<a href="/about">About</a>', headers=HTML))
    body = f"<urlset><url><loc>{u('/a')}</loc></url><url><loc>{u('/b')}</loc></url></urlset>"
    local.route("/sitemap.xml", Reply(body=body.encode(), headers=XML))
    return local


@pytest.fixture
async def fetcher() -> AsyncIterator[WebFetcher]:
    async with WebFetcher(allow=LOOPBACK, budget=HostBudget()) as fetch:
        yield fetch


def mapping(fetch: WebFetcher):  # type: ignore[no-untyped-def]
    async def mapped(
        caller: Caller, url: str, limit: int, same_host: bool, robots: bool | None
    ) -> dict[str, object]:
        found = await site_map(fetch, caller, url, limit=limit, same_host=same_host, robots=robots)
        return found.to_json()

    return mapped


LOCAL_PRECHECK = functools.partial(precheck, allow=LOOPBACK)


async def test_a_site_map(site: LocalSite, fetcher: WebFetcher) -> None:
    """The start page, the sitemap's URLs, the page's links."""
    async with open_api(site_map=mapping(fetcher), precheck=LOCAL_PRECHECK) as api:
        answer = await api.client.post("/v1/map", json={"url": site.url("/")}, headers=auth())

    assert 200 == answer.status_code
    u = site.url
    assert {"urls": [u("/"), u("/a"), u("/b"), u("/about")], "complete": True, "notes": []} == (
        answer.json()
    )


async def test_the_limit(site: LocalSite, fetcher: WebFetcher) -> None:
    """``limit`` cuts the map's URLs and the answer says it is not complete."""
    async with open_api(site_map=mapping(fetcher), precheck=LOCAL_PRECHECK) as api:
        answer = await api.client.post(
            "/v1/map", json={"url": site.url("/"), "limit": 2}, headers=auth()
        )

    body = answer.json()
    assert [site.url("/"), site.url("/a")] == body["urls"]
    assert body["complete"] is False


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"url": "https://example.org/", "limit": 0}, "limit", "from 1 to 10,000"),
        ({"url": "https://example.org/", "limit": 10_001}, "limit", "from 1 to 10,000"),
        ({"url": "https://example.org/", "limit": "9"}, "limit", "from 1 to 10,000"),
        ({"url": "https://example.org/", "depth": 9}, "depth", "is not a field"),
        ({"url": "https://example.org/", "same_host": "yes"}, "same_host", "true or false"),
        ({"url": "https://example.org/", "robots": "yes"}, "robots", "true or false"),
        ({"limit": 5}, "url", "non-empty string"),
        ({"url": "http://10.0.0.1/"}, "url", "non-public"),
        (["https://example.org/"], "body", "JSON object"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    body: object, field: str, words: str, fetcher: WebFetcher
) -> None:
    """A malformed map request is a 400 naming the field, with a hint."""
    async with open_api(site_map=mapping(fetcher)) as api:
        answer = await api.client.post("/v1/map", json=body, headers=auth())

    assert 400 == answer.status_code
    assert field == answer.json()["field"]
    assert words in answer.json()["error"]
    assert answer.json()["hint"]


async def test_a_key_is_needed(fetcher: WebFetcher) -> None:
    """``POST /v1/map`` without a key is a 401."""
    async with open_api(site_map=mapping(fetcher)) as api:
        answer = await api.client.post("/v1/map", json={"url": "https://example.org/"})

    assert 401 == answer.status_code


async def test_a_start_page_that_fails_with_nothing_found_answers_its_status(
    site: LocalSite, fetcher: WebFetcher
) -> None:
    """A start page that fails, with no sitemap either, answers its own status (404,
    ``fetch_failed``)."""
    site.route("/sitemap.xml", Reply(404))
    async with open_api(site_map=mapping(fetcher), precheck=LOCAL_PRECHECK) as api:
        answer = await api.client.post("/v1/map", json={"url": site.url("/gone")}, headers=auth())

    assert 404 == answer.status_code
    assert "fetch_failed" == answer.json()["code"]


async def test_the_route_and_its_document_follow_the_web_fetcher(fetcher: WebFetcher) -> None:
    """An app whose fetch is a WebFetcher maps through it; one with another fetch function
    has no /v1/map, in its routes and in its OpenAPI document."""
    async with open_api() as api:
        without = await api.client.post("/v1/map", json={}, headers=auth())
        document = (await api.client.get("/openapi.json")).json()
    assert 404 == without.status_code
    assert "/v1/map" not in document["paths"]

    async with open_api(fetch=fetcher) as api:  # type: ignore[arg-type]
        refused = await api.client.post("/v1/map", json={"url": "http://[::1]/"}, headers=auth())
        document = (await api.client.get("/openapi.json")).json()
    assert 400 == refused.status_code
    assert "/v1/map" in document["paths"]
    assert "MapIn" in document["components"]["schemas"]


async def test_robots_true_checks_the_maps_documents(site: LocalSite, fetcher: WebFetcher) -> None:
    """robots: true in the body: a sitemap robots.txt disallows is not read, and a note says so."""
    site.route("/robots.txt", Reply(body=b"User-agent: *\nDisallow: /sitemap.xml\n"))
    async with open_api(site_map=mapping(fetcher), precheck=LOCAL_PRECHECK) as api:
        plain = await api.client.post("/v1/map", json={"url": site.url("/")}, headers=auth())
        polite = await api.client.post(
            "/v1/map", json={"url": site.url("/"), "robots": True}, headers=auth()
        )

    assert site.url("/a") in plain.json()["urls"]
    assert site.url("/a") not in polite.json()["urls"]
    assert polite.json()["complete"] is False
    assert any("robots.txt disallows" in note for note in polite.json()["notes"])
    assert 1 == site.hits["/sitemap.xml"]
