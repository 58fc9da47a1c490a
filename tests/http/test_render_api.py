"""``render`` through the HTTP API: submit-time 400s, and a rendered job over a real Chromium
(skipped when ``/usr/bin/chromium`` is missing)."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from tests.http.support import auth, lifespan, make_keys
from tests.support import open_site
from tests.web.support import (
    ALLOW,
    ALLOWED_HOST,
    SPA,
    html_page,
    needs_chromium,
)
from trio_batch import Config, open_engine
from trio_batch.http import create_app
from trio_batch.stores import MemoryStore
from trio_batch.web import WebFetcher, precheck


@contextlib.asynccontextmanager
async def open_api() -> AsyncIterator[httpx.AsyncClient]:
    store = MemoryStore()
    async with (
        WebFetcher(allow=ALLOW, store=store, render_workers=1) as fetcher,
        open_engine(store, fetcher, Config(jobs_per_caller=8)) as engine,
    ):
        app = create_app(
            engine, make_keys(), fetch=fetcher, precheck=functools.partial(precheck, allow=ALLOW)
        )
        async with (
            lifespan(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api.test"
            ) as client,
        ):
            yield client


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"render": "yes"}, "targets[0].options.render", "must be true or false"),
        ({"wait_for": "#app"}, None, "wait_for applies with render only"),
        ({"render": True, "wait_for": "#a\n#b"}, None, "control character"),
        ({"render": True, "wait_for": "#" * 2000}, None, "the limit is 1,024"),
    ],
)
async def test_a_bad_render_option_is_a_400(
    options: dict[str, object], field: str | None, words: str
) -> None:
    """A bad render option in a submit is a 400 naming the field where there is one."""
    async with open_api() as client:
        answer = await client.post(
            "/v1/batch",
            json={"targets": [{"url": "http://127.0.0.2/", "options": options}]},
            headers=auth(),
        )

    assert 400 == answer.status_code
    body = answer.json()
    assert words in body["error"]
    if field is not None:
        assert field == body["field"]


async def test_the_openapi_options_describe_render() -> None:
    """The OpenAPI document describes ``render`` (a boolean) and ``wait_for`` (a string)."""
    async with open_api() as client:
        document = (await client.get("/openapi.json")).json()

    properties = document["components"]["schemas"]["Options"]["properties"]
    assert "boolean" == properties["render"]["type"]
    assert "string" == properties["wait_for"]["type"]


@pytest.mark.slow
@needs_chromium
async def test_a_rendered_job_gives_the_rendered_text() -> None:
    """A job with ``render`` through the API ends done with the text a script wrote."""
    async with open_site(ALLOWED_HOST) as site, open_api() as client:
        site.route("/", html_page(SPA))
        target = {"url": site.url("/"), "options": {"render": True}}
        submitted = await client.post("/v1/batch", json={"targets": [target]}, headers=auth())
        assert 202 == submitted.status_code
        job = submitted.json()["id"]
        with trio.fail_after(60):  # follow=1 ends once the job is terminal
            lines = await client.get(f"/v1/batch/{job}/results?follow=1", headers=auth())

    [line] = [json.loads(text) for text in lines.text.splitlines()]
    assert "done" == line["status"]
    result = line["result"]
    assert "Rendered by a script" in result["content"]
    assert result["meta"]["rendered"] is True
