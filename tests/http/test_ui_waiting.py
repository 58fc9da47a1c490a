"""``/ui`` shows a target that waits for its host, in words and until when, and drops the line
once the target has run (issue 23, "Visible").

Driven in Debian's Chromium through Playwright, as ``test_ui.py`` is (skipped, saying why,
without either). The server has a host budget of one request at a time: one job holds its host
while a second job on that host waits (``host_busy``), and a third host answers 429 with
``Retry-After: 2`` until the test lets it recover (``backoff``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from trio_batch import (
    Caller,
    Config,
    HostBudget,
    Result,
    RetryLater,
    Target,
    open_engine,
)
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.web import precheck

from .support import ALICE_KEY, CHROMIUM, auth, browser_page, make_keys

HELD = "https://held.example.test/"
LIMITED = "https://limited.example.test/"


class Hosts:
    """``held`` answers once ``release`` is set; ``limited`` answers 429 (Retry-After: 2 s)
    until ``recover`` is set."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.recover = trio.Event()

    async def fetch(self, caller: Caller, target: Target) -> Result:
        if target.url.startswith(HELD):
            await self.release.wait()
        elif target.url.startswith(LIMITED) and not self.recover.is_set():
            raise RetryLater("429 Too Many Requests", after=2.0)
        return Result("ok")


def _host(target: Target) -> str:
    return urlsplit(target.url).netloc


def _drive(
    base: str, ids: dict[str, str], release: Callable[[], None], recover: Callable[[], None]
) -> dict[str, object]:
    """In a thread: load the page, read each waiting job's line, let the hosts go, and see the
    lines go as the jobs end."""
    from playwright.sync_api import expect, sync_playwright

    seen: dict[str, object] = {}
    with sync_playwright() as p, browser_page(p, 1100, 600) as (page, errors):
        page.goto(f"{base}/ui")
        page.get_by_label("API key").fill(ALICE_KEY)
        page.keyboard.press("Enter")
        rows = {name: page.locator(f'tr[data-job-id="{i}"]') for name, i in ids.items()}
        expect(rows["busy"]).to_have_attribute("data-waiting", "host_busy")
        expect(rows["backoff"]).to_have_attribute("data-waiting", "backoff")
        for name in ("busy", "backoff"):
            line = rows[name].locator(".waiting")
            expect(line).to_be_visible()
            seen[name] = line.text_content()
        seen["holder_waits"] = rows["holder"].get_attribute("data-waiting")
        seen["crawl_delay"] = page.evaluate(
            "waitWords({idx: 2, reason: 'crawl_delay', until: Date.now() / 1000 + 5}, 4)"
        )
        release()
        for name in ("holder", "busy"):
            expect(rows[name]).to_have_attribute("data-status", "done", timeout=10_000)
        expect(rows["busy"].locator(".waiting")).to_be_hidden()
        seen["busy_after"] = rows["busy"].get_attribute("data-waiting")
        expect(rows["backoff"]).to_have_attribute("data-waiting", "backoff")  # still 429
        recover()
        expect(rows["backoff"]).to_have_attribute("data-status", "done", timeout=10_000)
        expect(rows["backoff"].locator(".waiting")).to_be_hidden()
        seen["backoff_after"] = rows["backoff"].get_attribute("data-waiting")
        seen["errors"] = errors
    return seen


async def _submit(http: httpx.AsyncClient, url: str) -> str:
    r = await http.post("/v1/batch", json={"targets": [{"url": url}]})
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
class TestWaitsInChromium:
    async def test_a_waiting_target_shows_why_and_until_when(self) -> None:
        """A job behind a busy host says its site has as many requests as it takes; a job on a
        host answering 429 says the site asked us to slow down and when we try again; both
        lines go once their targets have run."""
        pytest.importorskip("playwright", reason="playwright is not installed (group browser)")
        hosts = Hosts()
        budget = HostBudget(concurrency=1)
        config = Config(workers=2, max_workers=2, jobs_per_caller=3, jobs_total=3)
        stop = trio.Event()
        async with open_engine(
            MemoryStore(), hosts.fetch, config, budget=budget, scope=_host
        ) as engine:
            app = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app, port=0, shutdown_trigger=stop.wait, task_status=task_status
                    )
                )
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base, headers=auth()) as http:
                    ids = {
                        "holder": await _submit(http, HELD + "1"),
                        "busy": await _submit(http, HELD + "2"),
                        "backoff": await _submit(http, LIMITED + "1"),
                    }
                    seen: dict[str, Any] = await trio.to_thread.run_sync(
                        _drive,
                        base,
                        ids,
                        lambda: trio.from_thread.run_sync(hosts.release.set),
                        lambda: trio.from_thread.run_sync(hosts.recover.set),
                    )
                stop.set()

        clock = r"\d{1,2}:\d{2}:\d{2}"
        assert [] == seen["errors"]
        assert "Target 1 of 1 is waiting" in seen["busy"]
        assert "as many requests from this server as it takes at once" in seen["busy"]
        assert "asked us to slow down (HTTP 429 or 503)" in seen["backoff"]
        assert re.search(f"trying again at {clock}", seen["backoff"]), seen["backoff"]
        assert seen["holder_waits"] is None
        assert "Target 3 of 4 is waiting" in seen["crawl_delay"]
        assert "robots.txt asks for a pause between requests (Crawl-delay)" in seen["crawl_delay"]
        assert re.search(f"next request at {clock}", seen["crawl_delay"]), seen["crawl_delay"]
        assert seen["busy_after"] is None
        assert seen["backoff_after"] is None
