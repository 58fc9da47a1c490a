"""A target's ``options.headers`` through the API: allowed ones reach the site, a refused one is
a 400 naming it, and a credential is never stored, answered or logged.

The app runs over a real ``WebFetcher`` allowed to reach loopback and an engine on a SQLite
file, so a test can read the very bytes the store wrote. The sites are local servers on
127.0.0.1 (the target's origin) and 127.0.0.2 (another one) that record each request's headers.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio
from starlette.types import ASGIApp

from tests.http.support import ALICE_KEY, auth, lifespan, make_keys
from tests.support import LocalSite, Reply, redirect, serve_site, wait_ended
from tests.web.support import TEXT
from trio_batch import BatchEngine, Config, Options, Target, open_engine
from trio_batch.client import open_client
from trio_batch.http import create_app
from trio_batch.stores import SQLiteStore
from trio_batch.web import WebFetcher, precheck

COOKIE = "sid=cookie-value-0b7d4"
BEARER = "Bearer token-value-91ac3"
VALUES = ("cookie-value", "token-value")
LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]
PAGE = Reply(body=b"page text", headers=TEXT)
"""What the sites answer a path with no route of its own."""


@pytest.fixture
async def site(nursery: trio.Nursery) -> LocalSite:
    return await serve_site(nursery, "127.0.0.1", PAGE)


@pytest.fixture
async def other(nursery: trio.Nursery) -> LocalSite:
    return await serve_site(nursery, "127.0.0.2", PAGE)


@dataclass
class WebApi:
    """The API over a real web fetcher (not a scripted fetch), and its SQLite file."""

    client: httpx.AsyncClient
    engine: BatchEngine
    db: Path
    app: ASGIApp

    async def submit(self, *targets: dict[str, object]) -> httpx.Response:
        body = json.dumps({"targets": list(targets)})  # ASCII: a lone surrogate as an escape
        return await self.client.post("/v1/batch", content=body, headers=auth())

    async def run(self, *targets: dict[str, object]) -> str:
        """Submit ``targets`` and wait for the job's end; its id."""
        answer = await self.submit(*targets)
        assert answer.status_code in (200, 202), answer.text
        job_id: str = answer.json()["id"]
        with trio.fail_after(60):
            await wait_ended(self.engine, job_id)
        return job_id

    def stored_bytes(self) -> bytes:
        """Every byte the SQLite store wrote: the database and its write-ahead log."""
        return b"".join(p.read_bytes() for p in self.db.parent.glob(self.db.name + "*"))


@contextlib.asynccontextmanager
async def open_web_api(tmp_path: Path) -> AsyncIterator[WebApi]:
    """The API over an engine and a web fetcher sharing one SQLite store (jobs and cache)."""
    db = tmp_path / "jobs.sqlite"
    async with (
        SQLiteStore.open(db) as store,
        WebFetcher(allow=LOOPBACK, store=store) as fetcher,
        open_engine(store, fetcher, Config(ttl=3600, jobs_per_caller=8)) as engine,
    ):
        app = create_app(
            engine, make_keys(), fetch=fetcher, precheck=functools.partial(precheck, allow=LOOPBACK)
        )
        transport = httpx.ASGITransport(app=app)
        async with (
            lifespan(app),
            httpx.AsyncClient(transport=transport, base_url="http://api.test") as client,
        ):
            yield WebApi(client, engine, db, app)


@pytest.fixture
async def web_api(tmp_path: Path) -> AsyncIterator[WebApi]:
    async with open_web_api(tmp_path) as s:
        yield s


def target(url: str, **headers: str) -> dict[str, object]:
    """A target sending ``headers`` (``Accept_Language`` is ``Accept-Language``)."""
    return {
        "url": url,
        "options": {"headers": {k.replace("_", "-"): v for k, v in headers.items()}},
    }


class TestSent:
    async def test_allowed_headers_reach_the_site(self, web_api: WebApi, site: LocalSite) -> None:
        """Every allowed header arrives, names in any case; User-Agent after ours."""
        headers = {
            "accept-language": "fr",
            "ACCEPT": "text/plain",
            "Referer": "https://example.org/",
            "User-Agent": "my-agent/1",
            "cookie": COOKIE,
            "Authorization": BEARER,
        }
        await web_api.run(target(site.url("/page"), **headers))
        [got] = site.headers_of("/page")

        assert "fr" == got["accept-language"]
        assert "text/plain" == got["accept"]
        assert "https://example.org/" == got["referer"]
        assert got["user-agent"].startswith("trio-batch/")
        assert got["user-agent"].endswith(" my-agent/1")
        assert COOKIE == got["cookie"]
        assert BEARER == got["authorization"]

    async def test_not_after_a_redirect_to_another_origin(
        self, web_api: WebApi, site: LocalSite, other: LocalSite
    ) -> None:
        """The site on 127.0.0.2 a redirect leads to records no credential."""
        site.route("/page", redirect(other.url("/landing")))
        await web_api.run(target(site.url("/page"), Cookie=COOKIE, Authorization=BEARER))
        [there] = other.headers_of("/landing")

        assert COOKIE == site.headers_of("/page")[0]["cookie"]
        assert "cookie" not in there
        assert "authorization" not in there

    async def test_a_target_with_a_cookie_bypasses_the_cache(
        self, web_api: WebApi, site: LocalSite
    ) -> None:
        """Two jobs with the same URL and cookie both reach the site."""
        await web_api.run(target(site.url("/page"), Cookie=COOKIE))
        await web_api.run(target(site.url("/page"), Cookie=COOKIE), {"url": site.url("/x")})

        assert 2 == len(site.headers_of("/page"))

    async def test_a_single_fetch_sends_them_and_echoes_none(
        self, web_api: WebApi, site: LocalSite
    ) -> None:
        """POST /v1/fetch sends the cookie; its answer does not hold it."""
        answer = await web_api.client.post(
            "/v1/fetch", json=target(site.url("/page"), Cookie=COOKIE), headers=auth()
        )

        assert 200 == answer.status_code
        assert COOKIE == site.headers_of("/page")[0]["cookie"]
        assert "cookie-value" not in answer.text


class TestNeverShown:
    async def test_not_in_the_store_nor_any_answer(
        self, web_api: WebApi, site: LocalSite, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Status, results, a target, the listing, the NDJSON and SSE streams and a retry show
        ``<secret>``; the store's bytes and every log record (DEBUG) hold no value."""
        caplog.set_level(logging.DEBUG)
        site.route("/gone", Reply(500, headers=TEXT))
        job = await web_api.run(
            target(site.url("/page"), Cookie=COOKIE, Accept_Language="de"),
            target(site.url("/gone"), Authorization=BEARER),
        )
        answers = [
            await web_api.client.get(f"/v1/batch/{job}?results=1", headers=auth()),
            await web_api.client.get(f"/v1/batch/{job}/0", headers=auth()),
            await web_api.client.get(f"/v1/batch/{job}/1", headers=auth()),
            await web_api.client.get("/v1/batch", headers=auth()),
            await web_api.client.get(f"/v1/batch/{job}/results", headers=auth()),
            await web_api.client.get(f"/v1/batch/{job}/events", headers=auth()),
        ]
        retry = await web_api.client.post(f"/v1/batch/{job}/retry", headers=auth())
        answers.append(retry)
        await wait_ended(web_api.engine, retry.json()["id"])
        retried = await web_api.client.get(f"/v1/batch/{retry.json()['id']}/0", headers=auth())
        answers.append(retried)
        logs = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)

        assert {"Cookie": "<secret>", "Accept-Language": "de"} == answers[1].json()["options"][
            "headers"
        ]
        assert {"Authorization": "<secret>"} == retried.json()["options"]["headers"]
        assert BEARER == site.headers_of("/gone")[-1]["authorization"]  # the retry sent it
        for answer in answers:
            assert answer.status_code in (200, 202)
            assert not any(v in answer.text for v in VALUES)
            assert "<secret " not in answer.text  # nor the store's reference
        assert not any(v.encode() in web_api.stored_bytes() for v in VALUES)
        assert caplog.records
        assert not any(v in logs for v in VALUES)


class TestIdempotency:
    async def test_the_same_cookie_reuses_the_job_another_does_not(
        self, web_api: WebApi, site: LocalSite
    ) -> None:
        """A repeat with the same cookie is the same job; with another cookie, a new one."""
        first = await web_api.submit(target(site.url("/page"), Cookie=COOKIE))
        again = await web_api.submit(target(site.url("/page"), cookie=COOKIE))
        other = await web_api.submit(target(site.url("/page"), Cookie="sid=another"))

        assert (202, 200, 202) == (first.status_code, again.status_code, other.status_code)
        assert first.json()["id"] == again.json()["id"]
        assert first.json()["id"] != other.json()["id"]


class TestRefused:
    @pytest.mark.parametrize(
        ("headers", "field", "words"),
        [
            ({"X-Forwarded-For": "1.2.3.4"}, "headers.X-Forwarded-For", "is not a header"),
            ({"Host": "metadata"}, "headers.Host", "is not a header"),
            ({"Cookie": "a=1\r\nX-Evil: 1"}, "headers.Cookie", "line break"),
            ({"Accept": "a\x00"}, "headers.Accept", "control"),
            ({"Referer": "r" * 5000}, "headers.Referer", "the limit is 4,096"),
            ({f"X-H{i}": "v" for i in range(500)}, "headers", "at most 6"),
            ({"Accept": 5}, "headers.Accept", "must be a string"),
            ({"Cookie": "\ud800"}, "headers.Cookie", "not valid Unicode"),
        ],
    )
    async def test_a_400_naming_the_header_with_a_hint(
        self,
        web_api: WebApi,
        site: LocalSite,
        headers: dict[str, object],
        field: str,
        words: str,
    ) -> None:
        """A name off the allow-list or a hostile value: 400, the field named, a hint; the
        value is never quoted; nothing reaches the site and /healthz stays fine."""
        answer = await web_api.submit({"url": site.url("/page"), "options": {"headers": headers}})
        body = answer.json()
        health = await web_api.client.get("/healthz")

        assert 400 == answer.status_code
        assert f"targets[0].options.{field}" == body["field"]
        assert words in body["error"]
        assert body["hint"]
        assert "X-Evil" not in answer.text
        assert [] == site.seen
        assert 200 == health.status_code

    async def test_a_refused_name_hints_at_the_allowed_ones(self, web_api: WebApi) -> None:
        """The hint lists the headers a target may send."""
        answer = await web_api.submit(target("http://127.0.0.1:9/", Forwarded="for=1"))

        assert (
            "Accept, Accept-Language, Authorization, Cookie, Referer and User-Agent"
            in (answer.json()["hint"])
        )

    async def test_headers_must_be_an_object(self, web_api: WebApi) -> None:
        """headers as a list is a 400 naming it."""
        answer = await web_api.submit({"url": "http://127.0.0.1:9/", "options": {"headers": []}})

        assert 400 == answer.status_code
        assert "targets[0].options.headers" == answer.json()["field"]


async def test_the_openapi_document_describes_headers(web_api: WebApi) -> None:
    """Options in /openapi.json has headers: an object of strings (and so the MCP tools)."""
    document = (await web_api.client.get("/openapi.json")).json()
    headers = document["components"]["schemas"]["Options"]["properties"]["headers"]

    assert "object" == headers["type"]
    assert "string" == headers["additionalProperties"]["type"]
    assert "Cookie" in headers["description"]


async def test_the_client_passes_headers_through(web_api: WebApi, site: LocalSite) -> None:
    """``BatchClient.submit`` with ``Options(headers=...)``: they reach the site; the status
    the client reads shows ``<secret>``."""
    transport = httpx.ASGITransport(app=web_api.app)
    headers = {"Cookie": COOKIE, "Accept-Language": "it"}
    async with open_client("http://api.test", ALICE_KEY, transport=transport) as client:
        sub = await client.submit([Target(site.url("/page"), Options(headers=headers))])
        await wait_ended(web_api.engine, sub.id)
        answer = await web_api.client.get(f"/v1/batch/{sub.id}/0", headers=auth())

    assert COOKIE == site.headers_of("/page")[0]["cookie"]
    assert "it" == site.headers_of("/page")[0]["accept-language"]
    assert {"Cookie": "<secret>", "Accept-Language": "it"} == answer.json()["options"]["headers"]
