"""The 413 for an over-cap body reaches every client: lingering close (issue 12).

Before, hypercorn closed the connection the moment the 413 was sent, while the client was
still uploading; the kernel reset the connection and the client often lost the answer
("server disconnected without sending a response"). Now the answer says ``Connection: close``
and the rest of the body is read and discarded (bounded) before the connection closes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
import trio.testing
from starlette.types import Message, Receive, Scope, Send

from trio_batch import open_engine
from trio_batch.http import create_app, serve
from trio_batch.http._linger import LingeringClose
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import precheck

from .support import ALICE_KEY, make_keys

OVER_CAP = 300 * 1024
FAST_ROUNDS = 20
SLOW_ROUNDS = 200


@asynccontextmanager
async def served() -> AsyncIterator[int]:
    """The API served on 127.0.0.1 (a free port), as ``trio-batch serve`` serves it."""
    shutdown = trio.Event()
    async with open_engine(MemoryStore(), ScriptedFetch()) as engine, trio.open_nursery() as n:
        app = create_app(engine, make_keys(), fetch=ScriptedFetch(), precheck=precheck)
        port: int = await n.start(
            lambda task_status: serve(
                app, port=0, shutdown_trigger=shutdown.wait, task_status=task_status
            )
        )
        yield port
        shutdown.set()


async def raw_exchange(port: int, head: bytes, body_chunks: list[bytes]) -> bytes:
    """Send a request as a plain client does (everything, then read), return all it read."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        first = b""
        while b'"status"' not in first:  # the kept-alive connection's first answer
            first += await stream.receive_some()
        await stream.send_all(head)
        for chunk in body_chunks:
            await stream.send_all(chunk)
        answer = b""
        while chunk := await stream.receive_some():
            answer += chunk
    return answer


def post_head(path: str, framing: bytes, auth: bool = True) -> bytes:
    key = f"authorization: Bearer {ALICE_KEY}\r\n".encode() if auth else b""
    return b"POST " + path.encode() + b" HTTP/1.1\r\nhost: t\r\n" + key + framing + b"\r\n"


def content_length_body(size: int) -> tuple[bytes, list[bytes]]:
    return f"content-length: {size}\r\n".encode(), [b"x" * size]


def chunked_body(size: int, chunk: int = 1024) -> tuple[bytes, list[bytes]]:
    chunks = [b"%x\r\n" % chunk + b"x" * chunk + b"\r\n" for _ in range(size // chunk)]
    return b"transfer-encoding: chunked\r\n", [*chunks, b"0\r\n\r\n"]


FRAMINGS = {"content-length": content_length_body, "chunked": chunked_body}


async def over_cap_rounds(rounds: int) -> list[bytes]:
    answers = []
    async with served() as port:
        for i in range(rounds):
            framing, chunks = FRAMINGS["chunked" if i % 2 else "content-length"](OVER_CAP)
            answers.append(await raw_exchange(port, post_head("/v1/batch", framing), chunks))
    return answers


class TestServed:
    async def test_the_413_reaches_the_client_every_time(self) -> None:
        """An over-cap body, chunked or with Content-Length, on a kept-alive connection: every
        round reads a 413 with Connection: close, then the server closes cleanly."""
        answers = await over_cap_rounds(FAST_ROUNDS)

        for answer in answers:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 "), answer[:200]
            assert b"\r\nconnection: close" in head.lower()
            assert b'"field":"body"' in body

    @pytest.mark.slow
    async def test_many_rounds(self) -> None:
        """The same, 200 rounds: no round ends in a reset."""
        answers = await over_cap_rounds(SLOW_ROUNDS)

        assert [] == [a[:100] for a in answers if not a.startswith(b"HTTP/1.1 413 ")]

    @pytest.mark.parametrize("framing", ["content-length", "chunked"])
    async def test_httpx_reads_the_413(self, framing: str) -> None:
        """httpx, which sends the whole body before reading, reads the 413 (it used to see
        "server disconnected without sending a response")."""

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(OVER_CAP // 1024):
                yield b"x" * 1024

        statuses = []
        async with served() as port, httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(FAST_ROUNDS):
                assert 200 == (await c.get("/healthz")).status_code
                content = chunks() if framing == "chunked" else b"x" * OVER_CAP
                r = await c.post(
                    "/v1/batch", content=content, headers={"authorization": f"Bearer {ALICE_KEY}"}
                )
                statuses.append(r.status_code)

        assert [413] * FAST_ROUNDS == statuses

    async def test_an_early_401_is_read_too(self) -> None:
        """Any answer sent before the body was read lingers: a 401 for a big body without
        a key."""
        framing, chunks = content_length_body(OVER_CAP)
        async with served() as port:
            answer = await raw_exchange(port, post_head("/v1/batch", framing, auth=False), chunks)

        assert answer.startswith(b"HTTP/1.1 401 ")
        assert b"connection: close" in answer.lower()

    async def test_a_client_that_hangs_up_while_the_server_lingers(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A client that reads the 413 and closes mid-body ends the linger quietly: no error
        in the log, and the server goes on answering."""
        caplog.set_level(logging.WARNING)
        async with served() as port:
            for _ in range(5):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(post_head("/v1/batch", b"content-length: 1000000\r\n"))
                await stream.send_all(b"x" * OVER_CAP)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some()
                await stream.aclose()
                assert head.startswith(b"HTTP/1.1 413 ")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                assert 200 == (await client.get("/healthz")).status_code

        assert [] == [r.getMessage() for r in caplog.records]

    async def test_requests_that_read_their_body_keep_the_connection(self) -> None:
        """A normal POST (its body read) and a GET keep the connection alive."""
        async with served() as port, httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            r = await c.post(
                "/v1/batch",
                json={"targets": [{"url": "https://example.org/"}]},
                headers={"authorization": f"Bearer {ALICE_KEY}"},
            )
            again = await c.get("/healthz")

        assert 202 == r.status_code
        assert "close" != r.headers.get("connection")
        assert "close" != again.headers.get("connection")


# -- the wrapper on its own, on Trio's mock clock --------------------------------------------------


class Script:
    """A scripted ASGI exchange: the client's body messages, and what the app sent."""

    def __init__(self, body: list[Message], *, stall: bool = False) -> None:
        self.body = body
        self.stall = stall
        self.received = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if self.received < len(self.body):
            self.received += 1
            await trio.lowlevel.checkpoint()
            return self.body[self.received - 1]
        if self.stall:
            await trio.sleep_forever()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        await trio.lowlevel.checkpoint()
        self.sent.append(message)


SCOPE: Scope = {"type": "http", "headers": [(b"content-length", b"999999")]}


async def answer_at_once(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that answers 413 after reading one message of the body."""
    await receive()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"x", b"1")]})
    await send({"type": "http.response.body", "body": b"too big"})


def chunk(more: bool = True) -> Message:
    return {"type": "http.request", "body": b"x" * 1000, "more_body": more}


class TestLingeringClose:
    async def test_drains_the_rest_then_finishes_the_answer(self) -> None:
        """The answer goes out whole, marked close; it is finished after the body ends."""
        script = Script([chunk(), chunk(), chunk(), chunk(more=False)])
        await LingeringClose(answer_at_once)(SCOPE, script.receive, script.send)

        assert 4 == script.received
        assert [(b"x", b"1"), (b"connection", b"close")] == script.sent[0]["headers"]
        assert [b"too big", b""] == [m["body"] for m in script.sent[1:]]
        assert [True, False] == [m["more_body"] for m in script.sent[1:]]

    async def test_drains_at_most_max_bytes(self) -> None:
        """A client that sends more than the bound is not read further."""
        script = Script([chunk() for _ in range(100)])
        await LingeringClose(answer_at_once, max_bytes=5000)(SCOPE, script.receive, script.send)

        assert 7 == script.received  # 1 read by the app, then 6 x 1000 bytes (> 5000)
        assert not script.sent[-1]["more_body"]

    async def test_drains_for_at_most_seconds(self, autojump_clock: trio.testing.MockClock) -> None:
        """A client that stops sending is waited for at most ``seconds``."""
        script = Script([chunk(), chunk()], stall=True)
        start = trio.current_time()
        await LingeringClose(answer_at_once, seconds=5.0)(SCOPE, script.receive, script.send)

        assert 5.0 == trio.current_time() - start
        assert not script.sent[-1]["more_body"]

    async def test_an_answer_after_the_body_is_untouched(self) -> None:
        """An app that read the whole body answers as it likes (keep-alive included)."""

        async def reads_all(scope: Scope, receive: Receive, send: Send) -> None:
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        script = Script([chunk(), chunk(more=False)])
        await LingeringClose(reads_all)(SCOPE, script.receive, script.send)

        assert [] == script.sent[0]["headers"]
        assert [{"type": "http.response.body", "body": b"ok"}] == script.sent[1:]
