"""The API as outside suites and standards check it (issue 36): every parameter bounded at the
edge, every method of a path in a 405's Allow, a reconnect after the end told to stop, CORS for
the origins an operator names, /mcp's Origin checked, and the OpenAPI document as strict as
the API (issue 39 too: a bare URL is a target).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping
from typing import Any

import jsonschema
import pytest
import trio
import trio.testing
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from tests.support import Reply, redirect, serve_site
from tests.web.support import LOOPBACK, TEXT
from trio_batch import Config, HostBudget, open_engine
from trio_batch.http import create_app
from trio_batch.stores import MemoryStore, ServiceStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import WebFetcher, precheck

from .support import BOB_KEY, Api, auth, make_keys, open_api

A, B = "https://a.example.test/", "https://b.example.test/"
DASHBOARD = "https://dashboard.example.org"


async def a_job(api: Api, *urls: str) -> str:
    targets = [{"url": url} for url in urls or [A]]
    r = await api.client.post("/v1/batch", json={"targets": targets}, headers=auth())
    assert r.status_code == 202, r.text
    await trio.testing.wait_all_tasks_blocked()
    job_id: str = r.json()["id"]
    return job_id


class TestEveryStore:
    """Items 4 and 5: the listing's statuses, and a target index past any, on every store."""

    @pytest.mark.parametrize(
        "status", ["live", "queued", "running", "done", "partial", "failed", "cancelled"]
    )
    async def test_each_status_lists(self, store: ServiceStore, status: str) -> None:
        """GET /v1/batch?status=S answers 200 on every store (SQLite answered queued or
        running alone with 503)."""
        async with open_api(store=store) as api:
            await a_job(api)
            r = await api.get("/v1/batch", status=status)

        assert 200 == r.status_code, r.text
        assert all(job["status"] in (status, "queued", "running") for job in r.json()["jobs"])

    @pytest.mark.parametrize("idx", ["9223372036854775808", "18446744073709551616", "9" * 30])
    async def test_an_index_past_any_target_is_404(self, store: ServiceStore, idx: str) -> None:
        """An index past 2^63 (past what SQLite can bind) is the 404 of any absent target."""
        async with open_api(store=store) as api:
            job = await a_job(api)
            r = await api.get(f"/v1/batch/{job}/{idx}")

        assert (404, "not_found") == (r.status_code, r.json()["code"])
        assert "numbered from 0 to 0" in r.json()["hint"]

    async def test_a_job_id_longer_than_any_is_404(self, api: Api) -> None:
        """A 5,000-character id names no job: 404 at the edge, on every route of a job."""
        long = "x" * 5_000
        for path in (f"/v1/batch/{long}", f"/v1/batch/{long}/results", f"/v1/batch/{long}/0"):
            r = await api.get(path)
            assert (404, "not_found") == (r.status_code, r.json()["code"]), path


class TestAllow:
    """Item 6: a 405 lists every method of its path (RFC 9110 §15.5.6)."""

    @pytest.mark.parametrize(
        ("path", "methods"),
        [("/v1/batch", {"GET", "POST"}), ("/v1/batch/abc", {"GET", "DELETE"})],
    )
    async def test_a_405_lists_every_method(self, api: Api, path: str, methods: set[str]) -> None:
        """A method the path does not take is a 405 whose Allow lists every method it does."""
        r = await api.client.request("OPTIONS", path, headers=auth())

        assert 405 == r.status_code
        assert methods <= {m.strip() for m in r.headers["allow"].split(",")}


class TestEventsAfterTheEnd:
    """Item 7: a reconnect after ``end`` is told to stop (204), as the HTML standard says."""

    async def test_last_event_id_end_is_204_and_a_target_id_still_resumes(self, api: Api) -> None:
        """``Last-Event-ID: end`` answers 204 (an EventSource stops); a target's id still resumes
        after it."""
        job = await a_job(api, A, B)

        ended = await api.client.get(
            f"/v1/batch/{job}/events", headers={**auth(), "Last-Event-ID": "end"}
        )
        resumed = await api.client.get(
            f"/v1/batch/{job}/events", headers={**auth(), "Last-Event-ID": "0"}
        )

        assert (204, b"") == (ended.status_code, ended.content)
        assert b"id: 1\n" in resumed.content and b"id: end\n" in resumed.content

    async def test_another_callers_job_is_404_not_204(self, api: Api) -> None:
        """The 204 is for the job's owner: anyone else gets the usual 404."""
        job = await a_job(api)
        r = await api.client.get(
            f"/v1/batch/{job}/events",
            headers={"Authorization": f"Bearer {BOB_KEY}", "Last-Event-ID": "end"},
        )

        assert 404 == r.status_code


@contextlib.asynccontextmanager
async def cors_api(**app_kwargs: Any) -> AsyncIterator[Api]:
    async with open_api(cors_origins=[DASHBOARD], **app_kwargs) as api:
        yield api


class TestCors:
    """Item 8: CORS for the origins on the allow-list, and for none other."""

    async def test_a_preflight_from_an_allowed_origin_succeeds(self) -> None:
        """A preflight from an allowed origin is a 204 naming the origin, the methods and the
        headers."""
        async with cors_api() as api:
            r = await api.client.options(
                "/v1/batch",
                headers={
                    "Origin": DASHBOARD,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type",
                },
            )

        assert 204 == r.status_code
        assert DASHBOARD == r.headers["access-control-allow-origin"]
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        assert "Origin" in r.headers["vary"]

    async def test_another_origin_gets_no_allow_origin(self) -> None:
        """Another origin's preflight and request get no Access-Control-Allow-Origin; the read
        still answers."""
        async with cors_api() as api:
            preflight = await api.client.options(
                "/v1/batch",
                headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
            )
            read = await api.client.get(
                "/v1/batch", headers={**auth(), "Origin": "https://evil.example"}
            )

        assert "access-control-allow-origin" not in preflight.headers
        assert 200 == read.status_code
        assert "access-control-allow-origin" not in read.headers

    async def test_an_allowed_origins_answers_carry_it(self) -> None:
        """An answer (an error too) to an allowed page carries its origin and what it may read."""
        async with cors_api() as api:
            ok = await api.client.get("/v1/batch", headers={**auth(), "Origin": DASHBOARD})
            denied = await api.client.get("/v1/batch", headers={"Origin": DASHBOARD})

        assert DASHBOARD == ok.headers["access-control-allow-origin"]
        assert "Retry-After" in ok.headers["access-control-expose-headers"]
        assert (401, DASHBOARD) == (
            denied.status_code,
            denied.headers["access-control-allow-origin"],
        )

    async def test_no_cors_by_default(self, api: Api) -> None:
        """Without ``cors_origins`` a preflight is a 405 with no CORS header."""
        r = await api.client.options(
            "/v1/batch", headers={"Origin": DASHBOARD, "Access-Control-Request-Method": "GET"}
        )

        assert 405 == r.status_code
        assert "access-control-allow-origin" not in r.headers

    @pytest.mark.parametrize(
        ("origin", "words"),
        [
            ("*", "requests carry an API key"),
            ("https://dashboard.example.org/app", "not an origin"),
            ("dashboard.example.org", "not an origin"),
        ],
    )
    async def test_a_star_or_a_non_origin_is_refused_at_start(
        self, origin: str, words: str
    ) -> None:
        """'*' or a value that is not an origin stops the app from starting, saying why."""
        with pytest.raises(ValueError, match=words):
            async with open_api(cors_origins=[origin]):
                pass


class FakeMcp:
    """A mounted app that answers 200 and says it ran."""

    def __init__(self) -> None:
        self.calls = 0

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        await JSONResponse({"ok": True})(scope, receive, send)


class TestMcpOrigin:
    """Item 9: /mcp checks Origin: none (a program) or an allowed one passes, others get 403."""

    @pytest.mark.parametrize(
        ("origin", "status"),
        [(None, 200), (DASHBOARD, 200), ("http://evil.example.com", 403), ("null", 403)],
    )
    async def test_origin(self, origin: str | None, status: int) -> None:
        """No Origin (a program) or an allowed one reaches /mcp; any other is a 403 naming
        --cors-origin."""
        mcp = FakeMcp()
        async with cors_api(mounts={"/mcp": mcp}) as api:
            headers = {**auth(), **({"Origin": origin} if origin else {})}
            r = await api.client.post("/mcp", json={}, headers=headers)

        assert status == r.status_code
        assert mcp.calls == (1 if status == 200 else 0)
        if status == 403:
            assert "origin_refused" == r.json()["code"]
            assert "--cors-origin" in r.json()["hint"]


class TestTheDocumentAgrees:
    """Item 12: what the OpenAPI document allows the API accepts, and what it forbids, the API
    refuses; each request body has an example the API accepts."""

    async def document(self, api: Api) -> dict[str, Any]:
        doc: dict[str, Any] = (await api.client.get("/openapi.json")).json()
        return doc

    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"status": ""}, "status"),
            ({"before": "0"}, "before"),
            ({"before": ""}, "before"),
            ({"limit": ""}, "limit"),
        ],
    )
    async def test_the_listings_empty_or_foreign_values_are_400(
        self, api: Api, params: dict[str, str], field: str
    ) -> None:
        """An empty or unknown value in the listing's query is a 400 naming the parameter, with a
        hint."""
        r = await api.get("/v1/batch", **params)

        assert (400, field) == (r.status_code, r.json()["field"])
        assert r.json()["hint"]

    @pytest.mark.parametrize(
        ("params", "field"), [({"state": ""}, "state"), ({"follow": ""}, "follow")]
    )
    async def test_a_streams_empty_values_are_400(
        self, api: Api, params: dict[str, str], field: str
    ) -> None:
        """An empty value in a results stream's query is a 400 naming the parameter."""
        job = await a_job(api)
        r = await api.get(f"/v1/batch/{job}/results", **params)

        assert (400, field) == (r.status_code, r.json()["field"])

    async def test_a_cursor_the_document_allows_is_read(self, api: Api) -> None:
        """The cursor's pattern is the document's: a page's next passes it, and any value
        that matches it is read (a job that is not there pages from where it would be)."""
        for i in range(3):
            await a_job(api, f"https://t{i}.example.test/")
        first = (await api.get("/v1/batch", limit="2")).json()
        doc = await self.document(api)
        [before] = [
            p for p in doc["paths"]["/v1/batch"]["get"]["parameters"] if p["name"] == "before"
        ]
        made_up = await api.get("/v1/batch", before="12.5~abc")

        jsonschema.validate(first["next"], before["schema"])
        assert 200 == made_up.status_code

    async def test_the_documents_limits_are_the_apis(self, api: Api) -> None:
        """The OpenAPI document's limits are the API's: target counts, concurrency, and the URLs
        it refuses."""
        doc = await self.document(api)
        batch = doc["components"]["schemas"]["BatchIn"]["properties"]
        target = doc["components"]["schemas"]["TargetIn"]["properties"]["url"]
        map_url = (
            doc["components"]["schemas"]["MapIn"]["properties"]["url"]
            if "MapIn" in doc["components"]["schemas"]
            else target
        )

        assert 1 == batch["targets"]["minItems"]
        assert api.engine.config.targets_per_job == batch["targets"]["maxItems"]
        assert api.engine.config.max_concurrency == batch["concurrency"]["maximum"]
        for schema in (target, map_url):
            for refused in ("HTTP://", "0", "http://10.0.0.1/", "http://user@a.example/"):
                with pytest.raises(jsonschema.ValidationError):
                    jsonschema.validate(refused, schema)
            jsonschema.validate("https://example.org/a?b=c", schema)

    async def test_every_request_body_has_an_example_the_api_accepts(self, api: Api) -> None:
        """Every request body in the document has an example, and the API accepts the submit's
        and the retry's."""
        doc = await self.document(api)
        schemas = doc["components"]["schemas"]
        for name in ("BatchIn", "TargetIn", "RetryIn", "MapIn"):
            if name in schemas:
                assert "example" in schemas[name], name
        submit = await api.client.post(
            "/v1/batch", json=schemas["BatchIn"]["example"], headers=auth()
        )
        await trio.testing.wait_all_tasks_blocked()
        retry = await api.client.post(
            f"/v1/batch/{submit.json()['id']}/retry",
            json=schemas["RetryIn"]["example"],
            headers=auth(),
        )

        assert 202 == submit.status_code, submit.text
        assert retry.status_code in (202, 409, 400), retry.text  # 400: alice has no secret
        fetched = await api.client.post(
            "/v1/fetch", json=schemas["TargetIn"]["example"], headers=auth()
        )
        assert 200 == fetched.status_code, fetched.text


class TestBareUrls:
    """Issue 39: a target may be its URL alone, as the client and MCP accept it."""

    async def test_a_bare_url_is_a_target_without_options(self, api: Api) -> None:
        """A target may be a bare URL string: a target with no options, beside full ones."""
        r = await api.client.post(
            "/v1/batch",
            json={"targets": [A, {"url": B, "options": {"mode": "markdown"}}]},
            headers=auth(),
        )
        await trio.testing.wait_all_tasks_blocked()
        job = (await api.get(f"/v1/batch/{r.json()['id']}", results="1")).json()

        assert 202 == r.status_code
        assert [A, B] == [t["url"] for t in job["targets"]]
        assert [{}, {"mode": "markdown"}] == [t["options"] for t in job["targets"]]

    async def test_the_document_says_so(self, api: Api) -> None:
        """The document allows a string among a batch's target items."""
        doc = (await api.client.get("/openapi.json")).json()
        items = doc["components"]["schemas"]["BatchIn"]["properties"]["targets"]["items"]

        assert {"string"} <= {alt.get("type") for alt in items["anyOf"]}

    @pytest.mark.parametrize("bad", ["", "ftp://a.example/", "http://10.0.0.1/"])
    async def test_a_bad_bare_url_is_400_naming_it(self, api: Api, bad: str) -> None:
        """A bare URL the guard refuses is a 400 naming its place in ``targets``, with a hint."""
        r = await api.client.post("/v1/batch", json={"targets": [A, bad]}, headers=auth())

        assert 400 == r.status_code
        assert r.json()["field"].startswith("targets[1]")
        assert r.json()["hint"]


class TestHints:
    """Item 11: a value of the wrong type for any option is a 400 with a hint, both doors."""

    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("formats", "markdown"),
            ("robots", "yes"),
            ("headers", ["a"]),
            ("render", None),
            ("wait_for", 5),
        ],
    )
    @pytest.mark.parametrize("door", ["/v1/batch", "/v1/fetch"])
    async def test_a_wrong_type_has_a_hint(
        self, api: Api, door: str, option: str, value: object
    ) -> None:
        """An option of the wrong type is a 400 naming it, with a hint, on /v1/batch and
        /v1/fetch."""
        target: Mapping[str, object] = {"url": A, "options": {option: value}}
        body = {"targets": [target]} if door == "/v1/batch" else target
        r = await api.client.post(door, json=body, headers=auth())

        assert 400 == r.status_code
        assert r.json()["field"].endswith(f"options.{option}")
        assert r.json()["hint"]


async def test_create_app_refuses_a_star_origin() -> None:
    """The allow-list is checked when the app is made, not at the first request."""
    async with open_engine(MemoryStore(), ScriptedFetch(), Config()) as engine:
        with pytest.raises(ValueError, match=r"'\*' is refused"):
            create_app(engine, make_keys(), cors_origins=["*"])


class TestCorsSetting:
    """serve's --cors-origin: repeatable, comma-separated in the environment, '*' refused."""

    def test_flags_and_environment(self) -> None:
        """--cors-origin repeats as flags and splits on commas in the environment, each origin in
        its normal form."""
        from trio_batch._cli._settings import load_settings

        flags = load_settings({"cors_origin": [DASHBOARD, "http://127.0.0.1:3000/"]}, environ={})
        env = load_settings(
            environ={"TRIO_BATCH_CORS_ORIGIN": "HTTPS://Dashboard.example.org:443, http://[::1]:8"}
        )

        assert ("http://127.0.0.1:3000", DASHBOARD) == flags.cors_origin
        assert ("http://[::1]:8", DASHBOARD) == env.cors_origin

    @pytest.mark.parametrize("value", ["*", "https://a.example/path", "ftp://a.example"])
    def test_a_bad_origin_stops_the_start(self, value: str) -> None:
        """A '*', a path or another scheme in cors_origin stops the start naming the setting."""
        from trio_batch._cli._settings import SettingsError, load_settings

        with pytest.raises(SettingsError, match="setting cors_origin"):
            load_settings({"cors_origin": [value]}, environ={})


async def test_post_fetch_refuses_a_redirect_into_a_disallowed_path(nursery: trio.Nursery) -> None:
    """Item 1 through the API: with robots, POST /v1/fetch of a page that redirects into a path
    robots.txt disallows is a 403 naming the rule, and the path is never requested."""
    site = await serve_site(nursery)
    site.route("/robots.txt", Reply(body=b"User-agent: *\nDisallow: /private\n"))
    site.route("/go", redirect("/private/secret", 301))
    site.route("/private/secret", Reply(body=b"the private page", headers=TEXT))
    async with (
        WebFetcher(allow=LOOPBACK, budget=HostBudget(), robots=True) as fetch,
        open_api(fetch=fetch, precheck=functools.partial(precheck, allow=LOOPBACK)) as api,  # type: ignore[arg-type]
    ):
        r = await api.client.post("/v1/fetch", json={"url": site.url("/go")}, headers=auth())

    assert 403 == r.status_code
    assert "robots.txt disallows" in r.json()["error"]
    assert 0 == site.hits["/private/secret"]
