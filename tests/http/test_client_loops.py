"""The client on every loop (issue 24): the same calls under Trio, asyncio, and blocking.

The server runs under Trio in a thread of its own, on a real socket, so the test's own loop is
free to be asyncio (``asyncio.run``) or none at all (:class:`BlockingClient`).
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Iterator

import pytest
import trio

from trio_batch import Config, Submitted, TargetError, open_engine
from trio_batch.client import BatchClient, BlockingClient, ClientError, open_client
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import precheck

from .support import ALICE, make_keys

A, B = "https://a.example.test/", "https://b.example.test/"
Seen = dict[str, object]


def _serve(ready: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.Event]]) -> None:
    """In a thread: an engine and the API on a free port until its stop event is set."""

    async def main() -> None:
        fetch = ScriptedFetch()
        fetch.script(B, TargetError("gone", hint="later"))  # once: its retry succeeds
        stop = trio.Event()
        async with open_engine(MemoryStore(), fetch, Config(jobs_per_caller=2)) as engine:
            app = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
            async with trio.open_nursery() as nursery:
                start = functools.partial(serve, app, port=0, shutdown_trigger=stop.wait)
                port: int = await nursery.start(lambda task_status: start(task_status=task_status))
                ready.put((f"http://127.0.0.1:{port}", trio.lowlevel.current_trio_token(), stop))

    trio.run(main)


@pytest.fixture
def server() -> Iterator[str]:
    ready: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.Event]] = queue.Queue()
    thread = threading.Thread(target=_serve, args=(ready,), daemon=True)
    thread.start()
    url, token, stop = ready.get(timeout=20)
    try:
        yield url
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=20)


async def round_trip(client: BatchClient) -> Seen:
    """Every method once, on any loop."""
    sub = await client.submit([A, B])
    end = await client.wait(sub.id)
    async with client.results(sub.id) as stream:
        lines = [(line["idx"], line["status"]) async for line in stream]
    async with client.events(sub.id) as events:
        kinds = [event.event async for event in events]
    retried = await client.retry(sub.id)
    await client.wait(retried.id)
    listed = [job["id"] async for job in client.jobs()]
    return {
        "end": end["status"],
        "lines": lines,
        "kinds": kinds,
        "retried": (await client.status(retried.id))["status"],
        "listed": listed == [retried.id, sub.id],
        "cancel": await client.cancel(sub.id),
    }


EXPECTED: Seen = {
    "end": "partial",
    "lines": [(0, "done"), (1, "failed")],
    "kinds": ["target", "target", "end"],
    "retried": "done",
    "listed": True,
    "cancel": False,  # a finished job
}


async def on_any_loop(url: str) -> Seen:
    async with open_client(url, ALICE) as client:
        return await round_trip(client)


class TestLoops:
    async def test_under_trio(self, server: str) -> None:
        """open_client under Trio: submit, wait, results, events, retry, jobs, cancel."""
        seen = await on_any_loop(server)

        assert EXPECTED == seen

    def test_under_asyncio(self, server: str) -> None:
        """The same code under asyncio.run (httpx on AnyIO's asyncio backend)."""
        seen = asyncio.run(on_any_loop(server))

        assert EXPECTED == seen

    def test_blocking(self, server: str) -> None:
        """BlockingClient: the same methods and answers, blocking; submit takes concurrency too."""
        with BlockingClient(server, ALICE) as client:
            sub = client.submit([A, B])
            end = client.wait(sub.id)
            with client.results(sub.id) as stream:
                lines = [(line["idx"], line["status"]) for line in stream]
            with client.events(sub.id) as events:
                kinds = [event.event for event in events]
            retried = client.retry(sub.id)
            client.wait(retried.id)
            seen: Seen = {
                "end": end["status"],
                "lines": lines,
                "kinds": kinds,
                "retried": client.status(retried.id)["status"],
                "listed": [job["id"] for job in client.jobs()] == [retried.id, sub.id],
                "cancel": client.cancel(sub.id),
            }
            again = client.submit([A, B])
            wider = client.submit([A, B], concurrency=2)  # another concurrency: another job
            client.wait(wider.id)

        assert EXPECTED == seen
        assert Submitted(sub.id, True) == again
        assert (False, True) == (wider.reused, wider.id != sub.id)

    def test_blocking_errors_and_closed(self, server: str) -> None:
        """An error answer is the same ClientError; outside its block the client refuses."""
        client = BlockingClient(server, ALICE)
        with client, pytest.raises(ClientError) as caught:
            client.status("0" * 32)
        with pytest.raises(trio.ClosedResourceError, match="not open"):
            client.status("0" * 32)

        assert ("not_found", 404) == (caught.value.code, caught.value.status)
