"""What the MCP tests share: a site of local pages, the official client on both transports, and
the walk through the tools that both transports must pass.

- :class:`Site` (:func:`open_site`): pages on 127.0.0.1 that answer at once, one that answers
  only when the test lets it (so a job is known to be running), one that is missing the first
  time and there after (a failed target that a retry fetches), one that counts its requests,
  and one of 200 KB.
- :func:`open_served`: ``serve`` (``run_service``) in this process on a free port, with two
  callers; :func:`mcp_client`: the official client on its ``/mcp``.
- :func:`in_process`: the tools over an app of ``create_app`` on a scripted fetch function,
  called by the SDK's in-process client (no network), every request of the API recorded;
  :func:`open_endpoint`: the same app with ``/mcp`` mounted, served on a free port.
- :func:`call`: one tool call with the official client, its JSON answer and whether it is a
  tool error.
- :func:`walk_the_tools`: lists the tools (their schemas checked), fetches a page, submits a
  batch with progress, pages through its results, retries its failed target and cancels a
  running job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx2
import jsonschema
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from trio_batch import Config, FetchFunc, SiteGuide, open_engine
from trio_batch._cli._mcp import TOOL_NAMES as CLI_TOOL_NAMES
from trio_batch._cli._settings import Settings
from trio_batch.http import KeyRecord, KeyRing, add_key, create_app, hash_key, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

TOOL_NAMES = list(CLI_TOOL_NAMES)
"""The tools, as ``trio-batch mcp --help`` names them: ``tools/list`` must list these, in order."""

ENV = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_BATCH_")}
"""This environment without the ``TRIO_BATCH_*`` variables a command would read."""

BIG_PARAGRAPHS = 2000
"""Paragraphs of ``/big``: about 200 KB of text, several times an answer's cap."""


@dataclass
class Site:
    """Local pages, and the switches a test holds them with."""

    port: int = 0
    release: trio.Event = field(default_factory=trio.Event)
    """``/hold/{n}`` answers once this is set."""
    held: trio.Event = field(default_factory=trio.Event)
    """Set when a ``/hold`` page has been asked for: its job is running."""
    flaky_hits: int = 0
    count_hits: int = 0
    """Requests ``/count`` has had (it answers their number)."""

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def app(self) -> Starlette:
        async def page(request: Request) -> Response:
            n = request.path_params["n"]
            return HTMLResponse(f"<html><body><h1>Page {n}</h1><p>Text of page {n}.</p></body>")

        async def hold(request: Request) -> Response:
            self.held.set()
            await self.release.wait()
            return await page(request)

        async def flaky(request: Request) -> Response:
            self.flaky_hits += 1
            if self.flaky_hits == 1:
                return HTMLResponse("<p>not yet</p>", status_code=404)
            return HTMLResponse("<html><body><p>Flaky page, there now.</p></body></html>")

        async def count(request: Request) -> Response:
            self.count_hits += 1
            return HTMLResponse(f"<html><body><p>Hit {self.count_hits}.</p></body></html>")

        async def big(request: Request) -> Response:
            body = "".join(
                f"<p>Paragraph {i}: {'lorem ipsum dolor sit amet ' * 3}</p>"
                for i in range(BIG_PARAGRAPHS)
            )
            return HTMLResponse(f"<html><body>{body}</body></html>")

        return Starlette(
            routes=[
                Route("/page/{n:int}", page),
                Route("/hold/{n:int}", hold),
                Route("/flaky", flaky),
                Route("/count", count),
                Route("/big", big),
            ]
        )


@contextlib.asynccontextmanager
async def served_at(app: ASGIApp) -> AsyncIterator[int]:
    """``app`` served on 127.0.0.1 by the same server as the API, for the block: its port."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(
            lambda task_status: serve(
                app, port=0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        try:
            yield port
        finally:
            stop.set()


@contextlib.asynccontextmanager
async def open_site() -> AsyncIterator[Site]:
    """The pages of a :class:`Site`, served on 127.0.0.1 by the same server as the API."""
    site = Site()
    async with served_at(site.app()) as site.port:
        try:
            yield site
        finally:
            site.release.set()


@dataclasses.dataclass
class Served:
    url: str
    alice: str
    bob: str


@contextlib.asynccontextmanager
async def open_served(
    tmp_path: Path, allow_net: tuple[str, ...] = ("127.0.0.1/32",)
) -> AsyncIterator[Served]:
    """``serve`` on a free port with two callers, alice and bob; its ``/mcp`` URL and keys.

    Its fetcher may reach ``allow_net``."""
    from trio_batch._cli._service import run_service

    keys = tmp_path / "keys.toml"
    _, alice = add_key(keys, "alice")
    _, bob = add_key(keys, "bob")
    settings = dataclasses.replace(
        Settings(),
        db=str(tmp_path / "serve.sqlite"),
        keys=str(keys),
        port=0,
        access_log=False,
        allow_net=allow_net,
        log_level="warning",
    )
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(
            lambda task_status: run_service(settings, task_status=task_status)
        )
        yield Served(f"http://127.0.0.1:{port}/mcp", alice, bob)
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str) -> AsyncIterator[Client]:
    """The official client on Streamable HTTP, sending ``key`` as the bearer on each request."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx2.Timeout(30.0, read=300.0),
        ) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def call(
    client: Client, tool: str, args: dict[str, object], **kwargs: object
) -> tuple[bool, dict[str, object]]:
    """Call ``tool``: whether the answer is a tool error, and its JSON text decoded."""
    result = await client.call_tool(tool, args, **kwargs)  # type: ignore[arg-type]
    assert len(result.content) == 1
    text = result.content[0]
    assert text.type == "text"

    return result.is_error, cast("dict[str, object]", json.loads(text.text))


@dataclass
class Progress:
    """The progress notifications of one tool call."""

    seen: list[tuple[float, float | None]] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total))


async def check_tool_list(client: Client) -> None:
    """The tools, each with a valid JSON Schema that accepts and refuses what it should."""
    listed = await client.list_tools()
    schemas = {tool.name: tool.input_schema for tool in listed.tools}

    assert TOOL_NAMES == [tool.name for tool in listed.tools]
    for schema in schemas.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    submit = jsonschema.Draft202012Validator(schemas["batch_submit"])
    good = {"targets": ["https://a.example/", {"url": "https://b.example/", "options": {}}]}
    assert submit.is_valid(good)
    assert not submit.is_valid({"targets": [{"url": "https://a.example/", "options": {"x": 1}}]})
    assert not submit.is_valid({"targets": [{"url": "https://a.example/", "extra": 1}]})
    assert all(tool.description for tool in listed.tools)


async def walk_the_tools(client: Client, site: Site) -> None:
    """Everything an agent does with the tools, on local pages, as the issue's test lists it."""
    await check_tool_list(client)

    failed, fetched = await call(client, "fetch", {"url": site.url("/page/1")})
    assert not failed
    result = cast("dict[str, object]", fetched["result"])
    assert "Page 1" in str(result["content"])

    # A batch with one target that fails, waited for with progress notifications.
    progress = Progress()
    pages = [site.url(f"/page/{n}") for n in (2, 3, 4)] + [site.url("/flaky")]
    failed, job = await call(
        client,
        "batch_submit",
        {"targets": pages, "wait": 120},
        progress_callback=progress,
    )
    assert not failed
    assert "partial" == job["status"]
    assert progress.seen, "no progress notification"
    assert (4.0, 4.0) == progress.seen[-1]
    assert [p for p, _ in progress.seen] == sorted(p for p, _ in progress.seen)

    # The results, two at a time, in input order, with the failure's error and hint.
    job_id = str(job["id"])
    failed, first = await call(client, "batch_results", {"id": job_id, "limit": 2})
    assert not failed
    assert "2" == first["next_cursor"]
    failed, second = await call(
        client, "batch_results", {"id": job_id, "limit": 2, "cursor": first["next_cursor"]}
    )
    assert not failed
    assert second["next_cursor"] is None
    rows = cast("list[dict[str, object]]", first["results"]) + cast(
        "list[dict[str, object]]", second["results"]
    )
    assert [0, 1, 2, 3] == [row["idx"] for row in rows]
    assert ["done", "done", "done", "failed"] == [row["status"] for row in rows]
    assert rows[3]["error"] and rows[3]["hint"]

    # The failed target, run again: the page is there now.
    failed, retried = await call(client, "batch_retry", {"id": job_id})
    assert not failed
    assert job_id == retried["retry_of"]
    failed, status = await call(client, "batch_status", {"id": retried["id"], "wait": 120})
    assert not failed
    assert "done" == status["status"]
    assert {"pending": 0, "running": 0, "done": 1, "failed": 0} == status["counts"]

    # A running job, cancelled while its first page is being fetched.
    failed, live = await call(
        client, "batch_submit", {"targets": [site.url("/hold/1"), site.url("/page/9")]}
    )
    assert not failed
    with trio.fail_after(60):
        await site.held.wait()
    failed, cancelled = await call(client, "batch_cancel", {"id": live["id"]})
    site.release.set()
    assert not failed
    assert "cancelled" == cancelled["status"]
    assert "batch_retry" in str(cancelled["next"])


async def check_tool_errors(client: Client, site: Site, *, answer_bytes: int) -> None:
    """A refused URL, a cap and a bad option are tool errors with a hint; a long page is cut."""
    failed, refused = await call(client, "fetch", {"url": "http://10.1.2.3/private"})
    assert failed
    assert "body.url" == refused["field"]
    assert refused["hint"]

    too_many = [site.url(f"/page/{n}") for n in range(33)]
    failed, capped = await call(client, "batch_submit", {"targets": too_many})
    assert failed
    assert "too_many_targets" == capped["code"]
    assert "32" in str(capped["hint"])

    bad = [{"url": site.url("/page/1"), "options": {"mode": "pdfx"}}]
    failed, option = await call(client, "batch_submit", {"targets": bad})
    assert failed
    assert "targets[0].options" == option["field"]
    assert option["hint"]

    failed, unknown = await call(client, "batch_status", {"id": "abc", "colour": "red"})
    assert failed
    assert "colour" == unknown["field"]

    result = await client.call_tool("fetch", {"url": site.url("/big")})
    text = result.content[0]
    assert text.type == "text"
    assert not result.is_error
    assert len(text.text.encode("utf-8")) <= answer_bytes
    cut = json.loads(text.text)["content_cut"]
    assert cut["shown_bytes"] < cut["total_bytes"]
    assert "grep" in cut["hint"]


KEY = "tb_local-test-key"
"""The key of the one caller, ``local``, of :func:`in_process` and :func:`open_endpoint`."""


def _keys() -> KeyRing:
    return KeyRing([KeyRecord("local", "", "fleet", hash_key(KEY))])


def recording(app: ASGIApp, requests: list[str]) -> ASGIApp:
    """``app``, appending ``"METHOD /path"`` to ``requests`` for each HTTP request it gets."""

    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            requests.append(f"{scope['method']} {scope['path']}")
        await app(scope, receive, send)

    return recorded


@contextlib.asynccontextmanager
async def in_process(
    fetch: FetchFunc,
    *,
    cap: int,
    config: Config | None = None,
    requests: list[str] | None = None,
    hints: dict[str, str] | None = None,
    site_guide: SiteGuide | None = None,
) -> AsyncIterator[Client]:
    """The tools over an engine on ``fetch``, every answer at most ``cap`` bytes.

    The API's requests are appended to ``requests``; ``hints`` replace the tools' own; the
    engine reads robots.txt and sitemaps through ``site_guide``.
    """
    from trio_batch._mcp import SERVER_HINTS, Tools, build_server, open_api

    async with open_engine(
        MemoryStore(), fetch, config or Config(targets_per_job=50), site_guide=site_guide
    ) as engine:
        app = create_app(engine, _keys(), fetch=fetch, precheck=lambda url: None)
        async with open_api(
            key=KEY, app=recording(app, [] if requests is None else requests)
        ) as api:

            @contextlib.asynccontextmanager
            async def same(ctx: object) -> AsyncIterator[object]:
                yield api

            tools = Tools(answer_bytes=cap, hints=SERVER_HINTS if hints is None else hints)
            server = build_server(tools, same)  # type: ignore[arg-type]
            async with Client(server) as client:
                yield client


@contextlib.asynccontextmanager
async def open_endpoint(fetch: ScriptedFetch, config: Config | None = None) -> AsyncIterator[str]:
    """An app of ``create_app`` on ``fetch`` with ``/mcp`` mounted, on a free port: its URL."""
    from trio_batch._mcp import McpEndpoint

    async with open_engine(MemoryStore(), fetch, config or Config()) as engine:
        app = create_app(
            engine,
            _keys(),
            fetch=fetch,
            precheck=lambda url: None,
            access_log_enabled=False,
            mounts={"/mcp": McpEndpoint()},
        )
        async with served_at(app) as port:
            yield f"http://127.0.0.1:{port}/mcp"


MCP = [sys.executable, "-c", "from trio_batch._cli import entry; entry()", "mcp"]
"""The ``trio-batch mcp`` command, as the installed script runs it."""


def command(tmp_path: Path, *args: str) -> list[str]:
    """``trio-batch mcp`` on a store in ``tmp_path``, allowed to reach 127.0.0.1."""
    return [*MCP, "--db", str(tmp_path / "mcp.sqlite"), "--allow-net", "127.0.0.1/32", *args]


@contextlib.asynccontextmanager
async def stdio_client(cmd: list[str], env: dict[str, str] = ENV) -> AsyncIterator[Client]:
    """An MCP client session over stdio with ``cmd`` (a child process it owns)."""
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)
    async with Client(params, read_timeout_seconds=300) as client:
        yield client
