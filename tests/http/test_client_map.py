"""The client's map (POST /v1/map), and the waits it shows: ``waiting`` events and targets."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from tests.http.support import ALICE, open_api
from trio_batch import Caller
from trio_batch.client import ClientError, open_client

SSE = (
    b'event: waiting\ndata: {"idx":0,"reason":"crawl_delay","until":1700000000.5}\n\n'
    b'id: 0\nevent: target\ndata: {"idx":0,"url":"u","status":"done","error":"","hint":""}\n\n'
    b'event: waiting\ndata: {"idx":1,"reason":"host_busy","until":null}\n\n'
    b'id: end\nevent: end\ndata: {"status":"done"}\n\n'
)


def events_server(asked: list[str | None]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("last-event-id"))
        return httpx.Response(200, content=SSE)

    return httpx.MockTransport(handler)


class TestWaiting:
    async def test_events_yield_waiting_between_targets(self) -> None:
        """A waiting event is yielded as it comes, with its idx, reason and until, and an
        empty id (the stream gives it none)."""
        async with open_client("http://x", ALICE, transport=events_server([])) as client:
            got = [(e.id, e.event, e.data) async for e in client.events("j")]

        assert [
            ("", "waiting", {"idx": 0, "reason": "crawl_delay", "until": 1700000000.5}),
            ("0", "target", {"idx": 0, "url": "u", "status": "done", "error": "", "hint": ""}),
            ("", "waiting", {"idx": 1, "reason": "host_busy", "until": None}),
            ("end", "end", {"status": "done"}),
        ] == got

    async def test_waiting_false_leaves_them_out(self) -> None:
        """events(waiting=False) yields the targets and the end, no waiting event."""
        async with open_client("http://x", ALICE, transport=events_server([])) as client:
            got = [e.event async for e in client.events("j", waiting=False)]

        assert ["target", "end"] == got

    async def test_wait_reads_past_waiting_events(self) -> None:
        """wait() reads past waiting events to the end, and answers its summary."""
        async with open_client("http://x", ALICE, transport=events_server([])) as client:
            summary = await client.wait("j")

        assert "done" == summary["status"]

    async def test_target_carries_its_wait(self) -> None:
        """target(id, idx) answers GET /v1/batch/{id}/{idx}, waiting included."""
        line = {"idx": 2, "status": "pending", "waiting": {"reason": "backoff", "until": 5.0}}

        def handler(request: httpx.Request) -> httpx.Response:
            assert "/v1/batch/j/2" == request.url.path
            return httpx.Response(200, json=line)

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            got = await client.target("j", 2)

        assert {"reason": "backoff", "until": 5.0} == got["waiting"]


async def fake_map(
    caller: Caller, url: str, limit: int, same_host: bool, robots: bool | None
) -> dict[str, object]:
    await trio.lowlevel.checkpoint()
    urls = [f"{url}{i}" for i in range(limit)]
    return {"urls": urls, "complete": same_host, "notes": [caller.name]}


class TestMap:
    async def test_map_through_the_api(self) -> None:
        """map() answers POST /v1/map's URLs, completeness and notes, as the caller asked."""
        async with (
            open_api(site_map=fake_map) as api,
            open_client(
                "http://api.test", ALICE, transport=httpx.ASGITransport(app=api.app)
            ) as client,
        ):
            found = await client.map("https://example.org/", limit=3, same_host=False)

        assert {
            "urls": ["https://example.org/0", "https://example.org/1", "https://example.org/2"],
            "complete": False,
            "notes": ["alice"],
        } == found

    async def test_a_bad_limit_is_a_client_error_naming_it(self) -> None:
        """A limit the API refuses is a 400 ClientError naming the field, with a hint."""
        async with (
            open_api(site_map=fake_map) as api,
            open_client(
                "http://api.test", ALICE, transport=httpx.ASGITransport(app=api.app)
            ) as client,
        ):
            with pytest.raises(ClientError) as refused:
                await client.map("https://example.org/", limit=0)

        assert 400 == refused.value.status
        assert "limit" == refused.value.field
        assert refused.value.hint

    async def test_the_body_sent(self) -> None:
        """map() sends the URL with the default limit (1,000) and same_host (true)."""
        sent: list[object] = []

        def handler(request: httpx.Request) -> httpx.Response:
            sent.append(json.loads(request.content))
            return httpx.Response(200, json={"urls": [], "complete": True, "notes": []})

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            await client.map("https://example.org/")

        assert [{"url": "https://example.org/", "limit": 1000, "same_host": True}] == sent
