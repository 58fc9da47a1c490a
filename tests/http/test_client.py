"""``trio_batch.client`` against a served app: real sockets, hypercorn's Trio worker."""

from __future__ import annotations

import gc
import json
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
import trio
import trio.testing

from trio_batch import (
    BatchEngine,
    Busy,
    CallerBusy,
    Config,
    NoTargets,
    Options,
    Submitted,
    Target,
    TargetError,
    TooManyTargets,
    open_engine,
)
from trio_batch.client import BatchClient, BatchEvent, ClientError, open_client
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import precheck

from .support import ALICE, auth, make_keys

A, B, C = "https://a.example.test/", "https://b.example.test/", "https://c.example.test/"


@dataclass
class Served:
    url: str
    engine: BatchEngine
    fetch: ScriptedFetch


@asynccontextmanager
async def served(config: Config | None = None) -> AsyncIterator[Served]:
    fetch = ScriptedFetch()
    stop = trio.Event()
    async with open_engine(MemoryStore(), fetch, config or Config()) as engine:
        app = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(
                lambda task_status: serve(
                    app, port=0, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            try:
                yield Served(f"http://127.0.0.1:{port}", engine, fetch)
            finally:
                stop.set()


@asynccontextmanager
async def client_of(config: Config | None = None) -> AsyncIterator[tuple[BatchClient, Served]]:
    async with served(config) as server, open_client(server.url, ALICE) as client:
        yield client, server


class TestClient:
    async def test_a_stream_left_at_its_end_event_leaves_nothing_to_the_gc(self) -> None:
        """``wait`` stops reading at ``end``: the line reader is closed, not garbage collected."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            async with client_of() as (client, _):
                sub = await client.submit([A, B])
                await client.wait(sub.id)
                async with client.events(sub.id) as events:
                    await anext(events)
                gc.collect()
                await trio.testing.wait_all_tasks_blocked()

        assert [] == [str(w.message) for w in caught if w.category is ResourceWarning]

    async def test_submit_status_results_and_wait(self) -> None:
        """The round trip: submit, wait for the end, read the results as typed dicts."""
        async with client_of() as (client, server):
            server.fetch.script(B, TargetError("gone", hint="later"))
            sub = await client.submit([A, Target(B, Options(mode="raw"))])
            again = await client.submit([A, Target(B, Options(mode="raw"))])
            end = await client.wait(sub.id)
            summary = await client.status(sub.id)
            async with client.results(sub.id) as stream:
                lines = [line async for line in stream]
            failed = [line async for line in client.results(sub.id, state=["failed"])]

        assert Submitted(sub.id, False) == sub
        assert Submitted(sub.id, True) == again
        assert "partial" == end["status"] == summary["status"]
        assert {"pending": 0, "running": 0, "done": 1, "failed": 1} == summary["counts"]
        assert [0, 1] == [line["idx"] for line in lines]
        result = lines[0]["result"]
        assert result is not None
        assert f"content of {A}" == result["content"]
        assert [("failed", "gone", "later")] == [
            (x["status"], x["error"], x["hint"]) for x in failed
        ]

    async def test_follow_yields_lines_as_targets_land(self) -> None:
        """results(follow=True) yields the first target while the second is still running."""
        async with client_of() as (client, server):
            gate = server.fetch.hold(B)
            sub = await client.submit([A, B])
            async with client.results(sub.id, follow=True) as stream:
                first = await anext(stream)
                gate.set()
                rest = [line async for line in stream]

        assert 0 == first["idx"]
        assert [1] == [line["idx"] for line in rest]

    async def test_events_then_end(self) -> None:
        """events() yields each target's event, then end with the summary, then stops."""
        async with client_of() as (client, server):
            gate = server.fetch.hold(A)
            sub = await client.submit([A, B])
            got: list[BatchEvent] = []
            async with client.events(sub.id) as stream:
                gate.set()
                got = [event async for event in stream]

        assert [("0", "target"), ("1", "target"), ("end", "end")] == [(e.id, e.event) for e in got]
        assert {"idx": 1, "url": B, "status": "done", "error": "", "hint": ""} == got[1].data
        assert "done" == got[2].data["status"]

    async def test_jobs_walks_every_page(self) -> None:
        """jobs() yields every job newest first, across pages, filtered by status."""
        config = Config(jobs_per_caller=10, jobs_total=10)
        async with client_of(config) as (client, _server):
            ids = []
            for i in range(5):
                sub = await client.submit([f"https://t{i}.example.test/"])
                await client.wait(sub.id)
                ids.append(sub.id)
            listed = [j["id"] async for j in client.jobs(page_size=2)]
            live = [j["id"] async for j in client.jobs(status="live")]
            done = [j["id"] async for j in client.jobs(status=["done", "partial"])]

        assert set(ids) == set(listed)
        assert 5 == len(listed)
        assert [] == live
        assert set(ids) == set(done)

    async def test_retry_runs_the_failed_targets_again(self) -> None:
        """retry() gives a new job of the failed targets; a live job is a 409 ClientError."""
        async with client_of() as (client, server):
            server.fetch.script(B, TargetError("gone", hint="later"))
            sub = await client.submit([A, B])
            await client.wait(sub.id)
            retried = await client.retry(sub.id)
            again = await client.retry(sub.id)
            await client.wait(retried.id)
            results = [t async for t in client.results(retried.id)]
            gate = server.fetch.hold(C)
            other = await client.submit([C])
            with pytest.raises(ClientError) as live:
                await client.retry(other.id)
            gate.set()

        assert (retried.id, True) == (again.id, again.reused)
        assert [B] == [t["url"] for t in results]
        assert ["done"] == [t["status"] for t in results]
        assert 409 == live.value.status and "running" in live.value.error
        assert live.value.hint

    async def test_submit_asks_for_concurrency(self) -> None:
        """submit(concurrency=4) fetches four targets of the job at once, each its own host."""
        urls = [f"https://h{i}.example.test/" for i in range(4)]
        async with client_of(Config(workers=4, max_workers=4)) as (client, server):
            gates = [server.fetch.hold(url) for url in urls]
            sub = await client.submit(urls, concurrency=4)
            await trio.testing.wait_all_tasks_blocked()
            running = server.fetch.running
            for gate in gates:
                gate.set()
            end = await client.wait(sub.id)
            other = await client.submit(urls, concurrency=2)

        assert 4 == running
        assert "done" == end["status"]
        assert (False, True) == (other.reused, other.id != sub.id)

    async def test_a_concurrency_the_server_refuses_is_a_client_error_naming_it(self) -> None:
        """A concurrency over the server's max_concurrency is a 400 naming the field."""
        async with client_of(Config(max_concurrency=2)) as (client, _):
            with pytest.raises(ClientError) as refused:
                await client.submit([A], concurrency=3)

        assert (400, "concurrency") == (refused.value.status, refused.value.field)
        assert refused.value.hint

    async def test_cancel(self) -> None:
        """cancel() is True for a live job, False once it is finished or for an unknown id."""
        async with client_of() as (client, server):
            gate = server.fetch.hold(A)
            sub = await client.submit([A, B])
            first = await client.cancel(sub.id)
            second = await client.cancel(sub.id)
            unknown = await client.cancel("0" * 32)
            gate.set()

        assert (True, False, False) == (first, second, unknown)

    async def test_refusals_are_the_engines_exceptions_with_retry_after(self) -> None:
        """429 is CallerBusy, 503 Busy, 413 TooManyTargets, an empty batch NoTargets."""
        config = Config(targets_per_job=2, jobs_per_caller=2, jobs_total=2)
        async with client_of(config) as (client, server):
            server.fetch.hold(A)
            server.fetch.hold(B)
            await client.submit([A])
            await client.submit([B])
            with pytest.raises(CallerBusy) as caller_busy:
                await client.submit([C])
            with pytest.raises(TooManyTargets):
                await client.submit([A, B, C])
            with pytest.raises(NoTargets):
                await client.submit([])
            async with open_client(server.url, "tb_bob-test-key") as bob:
                with pytest.raises(Busy) as busy:
                    await bob.submit([C])

        assert 5.0 == caller_busy.value.retry_after == busy.value.retry_after
        assert 5.0 == busy.value.retry_after

    async def test_other_errors_are_client_errors_with_status_error_and_hint(self) -> None:
        """A bad URL, an unknown job, a bad key: ClientError carrying status, error and hint."""
        async with client_of() as (client, server):
            with pytest.raises(ClientError) as bad_url:
                await client.submit(["ftp://example.org/"])
            with pytest.raises(ClientError) as unknown:
                await client.status("0" * 32)
            with pytest.raises(ClientError) as unknown_retry:
                await client.retry("0" * 32)
            async with open_client(server.url, "tb_wrong") as wrong:
                with pytest.raises(ClientError) as bad_key:
                    await wrong.status("0" * 32)

        assert (400, "targets[0].url") == (bad_url.value.status, bad_url.value.field)
        assert bad_url.value.hint
        assert 404 == unknown.value.status
        assert unknown.value.hint
        assert 404 == unknown_retry.value.status
        assert 401 == bad_key.value.status

    async def test_an_unreachable_server_is_a_client_error(self) -> None:
        """Nothing listens: ClientError with status 0, for a call and for a stream alike."""
        async with served() as server:
            url = server.url
        async with open_client(url, ALICE) as client:
            with pytest.raises(ClientError) as info:
                await client.status("x")
            with pytest.raises(ClientError) as stream:  # a stream that never began: at once
                async with client.results("x", follow=True) as lines:
                    await anext(lines)

        assert 0 == info.value.status == stream.value.status


class TestCodes:
    async def test_refusals_are_chosen_by_code_not_by_words(self) -> None:
        """A 503 is Busy only when its code is busy; the words of the error do not matter."""
        bodies = {
            "/v1/batch": {"error": "reworded one day", "hint": "", "code": "busy"},
            "/v1/batch/j": {
                "error": "the server has as many live batches as it may",
                "hint": "",
                "code": "store_unavailable",
            },
        }

        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(503, json=bodies[request.url.path], headers={"Retry-After": "7"})

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            with pytest.raises(Busy) as busy:
                await client.submit([A])
            with pytest.raises(ClientError) as away:
                await client.status("j")

        assert 7.0 == busy.value.retry_after
        assert ("store_unavailable", 503) == (away.value.code, away.value.status)

    async def test_client_errors_carry_the_answers_code(self) -> None:
        """A bad URL, an unknown job, a live job retried, a bad key: each ClientError's code."""
        async with client_of() as (client, server):
            gate = server.fetch.hold(A)
            live = await client.submit([A])
            with pytest.raises(ClientError) as bad_url:
                await client.submit(["ftp://example.org/"])
            with pytest.raises(ClientError) as unknown:
                await client.status("0" * 32)
            with pytest.raises(ClientError) as not_retryable:
                await client.retry(live.id)
            async with open_client(server.url, "tb_wrong") as wrong:
                with pytest.raises(ClientError) as bad_key:
                    await wrong.status("0" * 32)
            gate.set()

        assert ["bad_request", "not_found", "not_retryable", "unauthorized"] == [
            bad_url.value.code,
            unknown.value.code,
            not_retryable.value.code,
            bad_key.value.code,
        ]


class TestBody:
    async def test_submit_sends_concurrency_only_when_asked(self) -> None:
        """Without concurrency the body has none (the server's default applies); with it, it."""
        sent: list[dict[str, object]] = []

        def handler(request: httpx.Request) -> httpx.Response:
            sent.append(json.loads(request.content))
            return httpx.Response(201, json={"id": "j", "reused": False})

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            await client.submit([A])
            await client.submit([A], concurrency=3)

        assert [None, 3] == [body.get("concurrency") for body in sent]
        assert ["concurrency" in body for body in sent] == [False, True]


class TestErrorBody:
    async def test_an_answer_without_a_json_body_is_read_as_its_status(self) -> None:
        """A proxy's HTML 502 is a ClientError saying the status in words, with no code."""
        transport = httpx.MockTransport(
            lambda request: httpx.Response(502, text="<html>Bad Gateway</html>")
        )
        async with open_client("http://x", ALICE, transport=transport) as client:
            with pytest.raises(ClientError) as info:
                await client.status("j")

        assert (502, "", "") == (info.value.status, info.value.code, info.value.hint)
        assert "Bad Gateway" == info.value.error
        assert "502 Bad Gateway" == str(info.value)

    @pytest.mark.parametrize(
        ("header", "expected"),
        [("7", 7.0), (" 12 ", 12.0), ("1.5", None), ("\u00b2", None), ("Wed, 21 Oct 2015", None)],
    )
    async def test_retry_after_is_whole_seconds_or_nothing(
        self, header: str, expected: float | None
    ) -> None:
        """Retry-After in whole seconds is kept; anything else (a date, a fraction) is none."""
        body = {"error": "busy", "hint": "later", "code": "busy"}
        transport = httpx.MockTransport(
            lambda request: httpx.Response(
                503, json=body, headers=[(b"Retry-After", header.encode("utf-8"))]
            )
        )
        async with open_client("http://x", ALICE, transport=transport) as client:
            with pytest.raises(Busy) as busy:
                await client.submit([A])

        assert expected == busy.value.retry_after


class TestClosed:
    async def test_a_client_used_after_its_block_raises_closed_resource_error(self) -> None:
        """After open_client's block, a call and a stream raise trio.ClosedResourceError."""
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
        async with open_client("http://x", ALICE, transport=transport) as client:
            pass

        message = r"^this BatchClient's open_client\(\) block has ended; use the client inside "
        with pytest.raises(trio.ClosedResourceError, match=message):
            await client.status("j")
        with pytest.raises(trio.ClosedResourceError, match=message):
            client.results("j")
        with pytest.raises(trio.ClosedResourceError, match=message):
            await client.cancel("j")


class _CutStream(httpx.AsyncByteStream):
    """A body that yields ``chunks`` then breaks like a dropped connection."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        raise httpx.RemoteProtocolError("peer closed connection")


class TestResume:
    async def test_a_broken_results_stream_resumes_after_the_last_line(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """The stream breaks after line 0: the client asks again with after=0 and goes on."""
        asked: list[str | None] = []

        def handler(request: httpx.Request) -> httpx.Response:
            after = request.url.params.get("after")
            asked.append(after)
            line = '{"idx":%d,"url":"u","status":"done","error":"","hint":"","result":null}\n'
            if after is None:
                return httpx.Response(200, stream=_CutStream([(line % 0).encode()]))
            return httpx.Response(200, content=(line % 1 + line % 2).encode())

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            got = [line["idx"] async for line in client.results("j", follow=True)]

        assert [0, 1, 2] == got
        assert [None, "0"] == asked

    async def test_a_broken_event_stream_resumes_with_last_event_id(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """The events stream breaks after event 0: the client resends Last-Event-ID: 0."""
        asked: list[str | None] = []

        def handler(request: httpx.Request) -> httpx.Response:
            last = request.headers.get("last-event-id")
            asked.append(last)
            if last is None:
                body = [b'id: 0\nevent: target\ndata: {"idx":0,"status":"done"}\n\n']
                return httpx.Response(200, stream=_CutStream(body))
            return httpx.Response(
                200,
                content=b': keep-alive\n\nid: 1\nevent: target\ndata: {"idx":1,"status":"done"}'
                b'\n\nid: end\nevent: end\ndata: {"status":"done"}\n\n',
            )

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            got = [e.id async for e in client.events("j")]

        assert ["0", "1", "end"] == got
        assert [None, "0"] == asked

    async def test_an_event_stream_closed_before_its_end_is_resumed(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A server that closes the stream properly but before `end` (shutting down): resume."""
        asked: list[str | None] = []

        def handler(request: httpx.Request) -> httpx.Response:
            last = request.headers.get("last-event-id")
            asked.append(last)
            if last is None:
                return httpx.Response(
                    200, content=b'id: 0\nevent: target\ndata: {"idx":0,"status":"done"}\n\n'
                )
            return httpx.Response(200, content=b'id: end\nevent: end\ndata: {"status":"done"}\n\n')

        transport = httpx.MockTransport(handler)
        async with open_client("http://x", ALICE, transport=transport) as client:
            got = [e.id async for e in client.events("j")]

        assert ["0", "end"] == got
        assert [None, "0"] == asked


class TestShutdown:
    async def test_stopping_the_server_ends_streams_without_the_grace_wait(self) -> None:
        """serve's trigger ends an events stream properly and cuts a followed NDJSON body at
        once, instead of holding the shutdown for graceful_timeout."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        stop = trio.Event()
        async with open_engine(MemoryStore(), fetch) as engine:
            app = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app,
                        port=0,
                        shutdown_trigger=stop.wait,
                        graceful_timeout=60,
                        task_status=task_status,
                    )
                )
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base, headers=auth()) as http:
                    r = await http.post("/v1/batch", json={"targets": [{"url": A}]})
                    job = r.json()["id"]
                    async with (
                        http.stream("GET", f"/v1/batch/{job}/events") as sse,
                        http.stream("GET", f"/v1/batch/{job}/results?follow=1") as ndjson,
                    ):
                        while engine.watchers < 2:
                            await trio.testing.wait_all_tasks_blocked()
                        t0 = trio.current_time()
                        stop.set()
                        body = await sse.aread()
                        with pytest.raises(httpx.RemoteProtocolError):
                            await ndjson.aread()
                        seconds = trio.current_time() - t0
            gate.set()

        assert b"" == body
        assert seconds < 10
