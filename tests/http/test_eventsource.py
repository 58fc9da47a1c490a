"""A browser's own ``EventSource`` following a job to its end (issue 36, item 7).

After ``end`` the server closes the stream, and the HTML standard has an ``EventSource``
reconnect after its reconnection time, sending ``Last-Event-ID: end``. The server answers that
with 204, which closes the ``EventSource`` for good (``readyState`` 2): one request after the
end, and none after it. ``EventSource`` cannot send a key, so the page is served behind a
same-origin gateway that adds one (what a site with a cookie-to-bearer backend does); the
gateway records each events request and its answer. Chromium is driven through Playwright
(``executable_path``: ``playwright install`` is never run).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trio_batch import Config, open_engine
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import precheck

from .support import ALICE, CHROMIUM, browser_page, make_keys

PAGE = """<!doctype html><html><body><pre id="log"></pre><script>
const log = [];
const source = new EventSource("/v1/batch/JOB/events");
for (const kind of ["target", "end"]) {
  source.addEventListener(kind, (e) => log.push([kind, e.lastEventId]));
}
window.eventLog = log;
window.eventSource = source;
</script></body></html>"""


class Gateway:
    """The page at ``/page``; every other request goes to the API with alice's key, and each
    events request is recorded as ``(Last-Event-ID or None, status)``."""

    def __init__(self, api: ASGIApp, job: str) -> None:
        self.api = api
        self.job = job
        self.events: list[tuple[str | None, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/page":
            body = PAGE.replace("JOB", self.job).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/html")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        headers = [*scope["headers"], (b"authorization", f"Bearer {ALICE}".encode())]
        last = dict(scope["headers"]).get(b"last-event-id")
        record = scope["path"].endswith("/events")

        async def recording(message: Message) -> None:
            if record and message["type"] == "http.response.start":
                self.events.append((None if last is None else last.decode(), message["status"]))
            await send(message)

        await self.api({**scope, "headers": headers}, receive, recording)


def _follow(base: str) -> dict[str, Any]:
    """Open the page, wait until its EventSource is closed for good, and read what it saw."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, browser_page(p, 800, 600) as (page, _errors):
        page.goto(f"{base}/page")
        page.wait_for_function("window.eventSource.readyState === 2", timeout=60_000)
        seen: dict[str, Any] = {
            "log": page.evaluate("window.eventLog"),
            "state": page.evaluate("window.eventSource.readyState"),
        }
    return seen


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
async def test_an_eventsource_stops_after_the_end() -> None:
    """A page's EventSource reads the targets and the end, reconnects once (Last-Event-ID:
    end), gets 204 and closes: one request after the end, none after it."""
    pytest.importorskip("playwright", reason="playwright is not installed (group browser)")
    targets = [{"url": "https://a.example.test/"}, {"url": "https://b.example.test/"}]
    stop = trio.Event()
    async with open_engine(MemoryStore(), ScriptedFetch(), Config()) as engine:
        api = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
        gateway = Gateway(api, "")
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(
                lambda task_status: serve(
                    gateway, port=0, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base) as http:
                r = await http.post("/v1/batch", json={"targets": targets})
            gateway.job = r.json()["id"]
            seen = await trio.to_thread.run_sync(_follow, base)
            stop.set()

    assert [["target", "0"], ["target", "1"], ["end", "end"]] == seen["log"]
    assert 2 == seen["state"]
    assert [(None, 200), ("end", 204)] == gateway.events, json.dumps(gateway.events)
