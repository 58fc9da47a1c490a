"""``/mcp`` on ``serve``: the official MCP client over Streamable HTTP, with the API's keys.

The server is ``run_service``, the code ``trio-batch serve`` runs, in this process on a free
port, with the web fetcher allowed to reach the local pages of :class:`~tests.mcp.support.Site`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.support import (
    Site,
    call,
    check_tool_errors,
    mcp_client,
    open_served,
    open_site,
    walk_the_tools,
)
from trio_batch import Options, Target
from trio_batch.client import open_client


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with open_site() as served:
        yield served


async def test_an_agent_walks_every_tool_over_http(tmp_path: Path, site: Site) -> None:
    """Over /mcp: list, fetch, submit with progress, page the results, retry, cancel."""
    async with open_served(tmp_path) as served, mcp_client(served.url, served.alice) as client:
        await walk_the_tools(client, site)


async def test_refusals_come_back_as_tool_errors_with_hints(tmp_path: Path, site: Site) -> None:
    """A refused URL, a cap and a bad option are tool errors carrying the API's hint."""
    async with open_served(tmp_path) as served, mcp_client(served.url, served.alice) as client:
        await check_tool_errors(client, site, answer_bytes=48 * 1024)


async def test_max_age_zero_fetches_again_through_every_door(tmp_path: Path, site: Site) -> None:
    """max_age: 0 reaches the site each time, through the API, the Python client and MCP;
    left out, the response cache answers a repeat."""
    url = site.url("/count")
    async with open_served(tmp_path) as served:
        base = served.url.removesuffix("/mcp")
        bearer = {"Authorization": f"Bearer {served.alice}"}
        async with httpx.AsyncClient(base_url=base, headers=bearer) as http:
            first = (await http.post("/v1/fetch", json={"url": url})).json()
            again = (await http.post("/v1/fetch", json={"url": url})).json()
            body = {"url": url, "options": {"max_age": 0}}
            fresh = (await http.post("/v1/fetch", json=body)).json()
        by_api = site.count_hits
        async with open_client(base, served.alice) as client:
            sub = await client.submit([Target(url, Options(max_age=0))])
            await client.wait(sub.id)
            async with client.results(sub.id) as rows:
                [line] = [row async for row in rows]
        by_client = site.count_hits
        async with mcp_client(served.url, served.alice) as mcp:
            failed, fetched = await call(mcp, "fetch", {"url": url, "options": {"max_age": 0}})
        by_mcp = site.count_hits

    assert (first["result"]["meta"]["cached"], again["result"]["meta"]["cached"]) == (False, True)
    assert (fresh["result"]["meta"]["cached"], by_api) == (False, 2)
    assert ("done", by_client) == (line["status"], 3)
    assert not failed
    assert by_mcp == 4
    assert "Hit 4." in str(cast("dict[str, object]", fetched["result"])["content"])


async def test_a_wrong_key_gets_the_apis_401(tmp_path: Path) -> None:
    """No MCP message is read without a key the API knows: 401 with the API's error and hint."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    async with open_served(tmp_path) as served, httpx.AsyncClient() as http:
        wrong = await http.post(
            served.url, json=initialize, headers={**accept, "Authorization": "Bearer nope"}
        )
        missing = await http.post(served.url, json=initialize, headers=accept)

        async with contextlib.AsyncExitStack() as stack:
            with pytest.raises(BaseException) as refused:  # noqa: PT011 - a group of MCPError
                await stack.enter_async_context(mcp_client(served.url, "tb_not-a-key"))

    assert 401 == wrong.status_code
    assert 401 == missing.status_code
    assert 'Bearer realm="trio-batch"' == wrong.headers["www-authenticate"]
    assert "unauthorized" == wrong.json()["code"]
    assert "trio-batch keys add" in wrong.json()["hint"]
    assert (
        refused.group_contains(MCPError)
        if isinstance(refused.value, BaseExceptionGroup)
        else isinstance(refused.value, MCPError)
    )


async def test_one_caller_cannot_see_anothers_jobs(tmp_path: Path, site: Site) -> None:
    """Bob's calls on alice's job answer not_found, as the API answers an unknown id."""
    async with (
        open_served(tmp_path) as served,
        mcp_client(served.url, served.alice) as alice,
        mcp_client(served.url, served.bob) as bob,
    ):
        failed, job = await call(
            alice, "batch_submit", {"targets": [site.url("/page/1")], "wait": 60}
        )
        assert not failed
        answers = [
            await call(bob, tool, {"id": job["id"]})
            for tool in ("batch_status", "batch_results", "batch_cancel", "batch_retry")
        ]
        failed, own = await call(alice, "batch_status", {"id": job["id"]})

    assert [(True, "not_found")] * 4 == [(failed, answer["code"]) for failed, answer in answers]
    assert not failed
    assert "done" == own["status"]
