"""The in-process transport of the MCP doors: answers stream as the app writes them.

Small ASGI apps written here, called through ``httpx`` on :func:`open_in_process`; no network.
"""

from __future__ import annotations

import httpx
import pytest
import trio
from starlette.types import Receive, Scope, Send

from trio_batch._mcp._inprocess import open_in_process


class Ticker:
    """An app that answers one chunk, then another each time the test lets it, until told to stop
    or the client goes away (which it records)."""

    def __init__(self) -> None:
        self.more = trio.Event()
        self.disconnected = trio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert {"type": "http.request", "body": b"hello", "more_body": False} == await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                assert "http.disconnect" == (await receive())["type"]
                self.disconnected.set()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await self.more.wait()
            await send({"type": "http.response.body", "body": b"second\n", "more_body": False})
            nursery.cancel_scope.cancel()


async def test_an_answer_streams_before_the_app_ends() -> None:
    """The first chunk is read while the app still runs; the rest as it is sent."""
    app = Ticker()
    async with (
        open_in_process(app) as transport,
        httpx.AsyncClient(transport=transport, base_url="http://in") as http,
        http.stream("POST", "/x", content=b"hello") as response,
    ):
        lines = response.aiter_lines()
        with trio.fail_after(10):  # a transport that reads the whole answer first never returns
            first = await anext(lines)
        app.more.set()
        rest = [line async for line in lines]

    assert (200, "1") == (response.status_code, response.headers["x-a"])
    assert ("first", ["second"]) == (first, rest)


async def test_closing_an_answer_tells_the_app_the_client_went_away() -> None:
    """Leaving a stream early sends the app http.disconnect, as a closed connection does."""
    app = Ticker()
    async with open_in_process(app) as transport, httpx.AsyncClient(transport=transport) as http:
        async with http.stream("POST", "http://in/x", content=b"hello") as response:
            await anext(response.aiter_lines())
        with trio.fail_after(10):
            await app.disconnected.wait()


async def test_an_app_that_fails_before_answering_is_a_500() -> None:
    """A failure before the answer starts is a 500 with no body, as a server answers it."""

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    async with (
        open_in_process(failing) as transport,
        httpx.AsyncClient(transport=transport) as http,
    ):
        response = await http.get("http://in/x")

    assert (500, b"") == (response.status_code, response.content)


async def test_an_answer_cut_short_is_a_broken_transfer() -> None:
    """An app that stops before its last chunk breaks the transfer: a client resumes, never
    takes it for a whole answer."""

    async def cut(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("the store went away")

    async with (
        open_in_process(cut) as transport,
        httpx.AsyncClient(transport=transport) as http,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("http://in/x")
