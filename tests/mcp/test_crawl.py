"""The MCP tool ``crawl``: listed with its schema, its arguments checked with hints, and a crawl
that ends with exactly ``limit`` pages, followed with the job tools unchanged.

In-process (the SDK's in-process client over an app of ``create_app``) on a fake site whose
pages link to each other, and over ``/mcp`` on ``serve`` and ``trio-batch mcp`` on the local
trap site of ``bench/crawl_site.py`` (real fetcher, robots.txt and sitemaps read).

The tool is a request to ``POST /v1/crawl`` of the HTTP API, as every tool is to its route: the
API's checks, caps and hints are the tool's.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
import trio
from bench.crawl_site import CrawlSite, serve_crawl_site

from tests.mcp.support import (
    Progress,
    call,
    command,
    in_process,
    mcp_client,
    open_served,
    stdio_client,
)
from trio_batch import Caller, Config, Result, Target
from trio_batch._cli._mcp import LOCAL_HINTS
from trio_batch.testing import ScriptedFetch

CAP = 48 * 1024
SITE = "https://site.example.test"


class TreeSite:
    """Page n links to pages 2n+1 and 2n+2 and back to itself; counts every fetch."""

    def __init__(self) -> None:
        self.fetched: collections.Counter[str] = collections.Counter()

    async def __call__(self, caller: Caller, target: Target) -> Result:
        await trio.lowlevel.checkpoint()
        path = target.url[len(SITE) :]
        self.fetched[path] += 1
        n = int(path.rsplit("/", 1)[1] or 0)
        links = [f"{SITE}/{k}" for k in (2 * n + 1, 2 * n + 2, n)]
        meta: dict[str, Any] = {
            "url": target.url,
            "links": [{"url": u, "text": "", "internal": True} for u in links],
        }
        return Result(f"page {n}", meta)


def rows_of(page: dict[str, object]) -> list[dict[str, Any]]:
    return cast("list[dict[str, Any]]", page["results"])


async def test_the_crawl_tool_is_listed_with_its_schema() -> None:
    """tools/list shows crawl with a schema that takes a crawl's arguments and batch_submit's
    very options, and refuses a limit of 0, an unknown scope and too many patterns."""
    async with in_process(ScriptedFetch(), cap=CAP) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    crawl, submit = listed["crawl"], listed["batch_submit"]
    schema = crawl.input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    valid = jsonschema.Draft202012Validator(schema)
    good = {
        "url": f"{SITE}/docs/",
        "limit": 20,
        "max_depth": 2,
        "scope": "prefix",
        "prefix": "/docs/",
        "include": ["/docs/**"],
        "exclude": ["**/print/**"],
        "sitemaps": "include",
        "concurrency": 4,
        "options": {"mode": "markdown", "robots": True, "max_age": 0},
        "wait": 30,
    }
    assert valid.is_valid(good)
    assert not valid.is_valid({"url": SITE, "limit": 0})
    assert not valid.is_valid({"url": SITE, "scope": "galaxy"})
    assert not valid.is_valid({"url": SITE, "include": ["/a/*"] * 33})
    assert not valid.is_valid({"url": SITE, "options": {"colour": "red"}})
    assert not valid.is_valid({"limit": 10})
    assert submit.input_schema["$defs"]["Options"] == schema["$defs"]["Options"]
    assert crawl.annotations is not None and crawl.annotations.read_only_hint is False
    for words in ("limit", "robots", "batch_status", "batch_results", "map", "batch_submit"):
        assert words in str(crawl.description)


HOSTILE: list[tuple[dict[str, object], str]] = [
    ({"limit": 0}, "limit"),
    ({"limit": True}, "limit"),
    ({"limit": "100"}, "limit"),
    ({"limit": 10_001}, "limit"),
    ({"max_depth": -1}, "max_depth"),
    ({"max_depth": 65}, "max_depth"),
    ({"scope": "galaxy"}, "scope"),
    ({"scope": "x" * 100_000}, "scope"),
    ({"sitemaps": "all"}, "sitemaps"),
    ({"include": ["/a/*"] * 33}, "include"),
    ({"exclude": "**/print/**"}, "exclude"),
    ({"exclude": ["/" + "x" * 300]}, "exclude"),
    ({"include": [""]}, "include"),
    ({"prefix": 5}, "prefix"),
    ({"concurrency": 99}, "concurrency"),
    ({"options": {"mode": "pdfx"}}, "options"),
    ({"url": "ftp://site.example.test/"}, "url"),
]


async def test_the_tools_own_arguments_are_refused_before_any_request() -> None:
    """An argument crawl does not have, or a wait too long, is a bad_request naming it, with a
    hint, and no crawl is asked of the API."""
    requests: list[str] = []
    async with in_process(ScriptedFetch(), cap=CAP, requests=requests) as client:
        answers = [
            await call(client, "crawl", {"url": f"{SITE}/0", "colour": "red"}),
            await call(client, "crawl", {"url": f"{SITE}/0", "wait": 301}),
        ]

    assert [(True, "colour"), (True, "wait")] == [(bad, a["field"]) for bad, a in answers]
    assert all(answer["hint"] for _, answer in answers)
    assert "POST /v1/crawl" not in requests


async def test_bad_arguments_are_tool_errors_with_hints_and_the_server_carries_on() -> None:
    """A limit of 0 or over the server's cap, an unknown scope, 33 patterns ...: each a short
    bad_request tool error naming the argument, with a hint; the next call is answered as
    ever."""
    fetch = ScriptedFetch()
    fetch.script(f"{SITE}/0", Result("page 0"))
    async with in_process(fetch, cap=CAP) as client:
        answers = [await call(client, "crawl", {"url": f"{SITE}/0", **args}) for args, _ in HOSTILE]
        failed, fetched = await call(client, "fetch", {"url": f"{SITE}/0"})

    assert [(True, "bad_request", field) for _, field in HOSTILE] == [
        (refused, answer["code"], str(answer["field"]).split("[")[0]) for refused, answer in answers
    ]
    assert all(answer["hint"] for _, answer in answers)
    assert all(len(str(answer)) < 1000 for _, answer in answers)
    assert "10,000" in str(answers[3][1]["error"]) + str(answers[3][1]["hint"])
    assert "galaxy" in str(answers[6][1]["error"])
    assert "32" in str(answers[9][1]["error"])
    assert not failed
    assert "page 0" == cast("dict[str, object]", fetched["result"])["content"]


async def test_a_crawl_ends_with_exactly_its_limit_and_the_job_tools_follow_it() -> None:
    """crawl with wait answers the ended job: exactly limit pages done, progress in pages done
    of the limit; batch_status shows its crawl object, batch_results its pages with meta.crawl,
    and no page was fetched twice."""
    site = TreeSite()
    progress = Progress()
    config = Config(workers=4, max_workers=4, targets_per_job=50)
    async with in_process(site, cap=CAP, config=config) as client:
        failed, job = await call(
            client,
            "crawl",
            {"url": f"{SITE}/0", "limit": 12, "max_depth": 10, "concurrency": 4, "wait": 60},
            progress_callback=progress,
        )
        assert not failed, job
        failed_status, status = await call(client, "batch_status", {"id": job["id"]})
        failed_results, page = await call(
            client, "batch_results", {"id": job["id"], "limit": 100, "state": "done"}
        )

    crawl = cast("dict[str, Any]", job["crawl"])
    assert ("done", 12, 12) == (job["status"], crawl["done"], crawl["limit"])
    assert "batch_results" in str(job["next"])
    assert not failed_status
    assert status["crawl"] == crawl
    assert set(crawl["skipped"]) >= {"depth", "scope", "limit", "duplicate"}
    assert not failed_results
    rows = rows_of(page)
    assert 12 == len(rows) == len({row["url"] for row in rows})
    assert f"{SITE}/0" == rows[0]["url"]
    assert 0 == rows[0]["result"]["meta"]["crawl"]["depth"]
    assert all({"depth", "found_by"} <= set(row["result"]["meta"]["crawl"]) for row in rows)
    assert [] == [path for path, n in site.fetched.items() if n > 1]
    assert progress.seen
    assert (12.0, 12.0) == progress.seen[-1]
    assert [p for p, _ in progress.seen] == sorted(p for p, _ in progress.seen)


async def test_a_limit_over_the_servers_cap_names_the_cap() -> None:
    """A limit over Config.max_crawl_pages is the API's bad_request naming the cap; the
    server then admits a crawl within it."""
    config = Config(max_crawl_pages=50, targets_per_job=50)
    async with in_process(TreeSite(), cap=CAP, config=config) as client:
        refused, over = await call(client, "crawl", {"url": f"{SITE}/0", "limit": 51})
        failed, within = await call(client, "crawl", {"url": f"{SITE}/0", "limit": 50})

    assert refused
    assert "bad_request" == over["code"]
    assert "50" in f"{over['error']} {over['hint']}"
    assert not failed
    assert within["id"]


async def test_a_busy_caller_is_told_the_flags_of_trio_batch_mcp() -> None:
    """A crawl past the local user's live jobs is caller_busy, its hint naming trio-batch
    mcp's --jobs-per-caller (never serve's)."""
    fetch = ScriptedFetch()
    gate = fetch.hold("https://a.example/0")
    config = Config(jobs_per_caller=1, targets_per_job=50)
    async with in_process(fetch, cap=CAP, config=config, hints=LOCAL_HINTS) as client:
        failed, _ = await call(client, "batch_submit", {"targets": ["https://a.example/0"]})
        assert not failed
        refused, answer = await call(client, "crawl", {"url": f"{SITE}/0"})
        gate.set()

    assert refused
    assert "caller_busy" == answer["code"]
    assert "trio-batch mcp" in str(answer["hint"])
    assert "serve" not in str(answer["hint"])


@pytest.fixture
async def crawl_site() -> AsyncIterator[CrawlSite]:
    async with trio.open_nursery() as nursery:
        yield await serve_crawl_site(nursery, pages=200)
        nursery.cancel_scope.cancel()


async def crawl_the_site(client: Any, site: CrawlSite, limit: int) -> dict[str, Any]:
    """A crawl of ``site`` with its sitemaps, waited for: its job, checked against the site."""
    args = {"url": site.start, "limit": limit, "sitemaps": "include", "concurrency": 4}
    failed, job = await call(client, "crawl", {**args, "max_depth": 4, "wait": 120})
    assert not failed, job
    failed, page = await call(client, "batch_results", {"id": job["id"], "limit": 100})
    assert not failed, page

    crawl = cast("dict[str, Any]", job["crawl"])
    assert ("done", limit) == (job["status"], crawl["done"])
    done = [row for row in rows_of(page) if row["status"] == "done"]
    assert limit == len(done)
    assert all("depth" in row["result"]["meta"]["crawl"] for row in done)
    assert [] == site.twice()
    assert [] == site.disallowed()
    return job


@pytest.mark.slow
async def test_a_crawl_over_mcp_on_serve(tmp_path: Path, crawl_site: CrawlSite) -> None:
    """Over /mcp on serve (the web fetcher, robots.txt and sitemaps): a crawl of the local trap
    site stores exactly its limit, no page twice, nothing robots.txt disallows."""
    async with (
        open_served(tmp_path, allow_net=("127.0.0.0/8",)) as served,
        mcp_client(served.url, served.alice) as client,
    ):
        await crawl_the_site(client, crawl_site, 30)


@pytest.mark.slow
async def test_a_crawl_over_trio_batch_mcp(tmp_path: Path, crawl_site: CrawlSite) -> None:
    """trio-batch mcp's own engine reads sitemaps (its site guide): a crawl of the local trap
    site with sitemaps included stores exactly its limit, no page twice."""
    cmd = command(tmp_path, "--allow-net", "127.0.0.0/8")
    async with stdio_client(cmd) as client:
        await crawl_the_site(client, crawl_site, 30)
