"""``GET /ui`` in a real browser: Debian's Chromium, driven by Playwright for Python.

The page is served by hypercorn over a real socket; the browser pastes a key, lists the jobs and
follows a live one's events until its bar shows it done. Playwright's own browser downloads are
never used (no ``playwright install``): the test drives the system's ``chromium`` through
``executable_path`` and is skipped, saying why, where either is missing. ``.ci/run`` installs
Chromium. ``TRIO_BATCH_UI_SCREENSHOT=docs/ui.png`` saves the screenshot the docs show.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trio_batch import Config, TargetError, open_engine
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import precheck

from .support import ALICE_KEY, CHROMIUM, auth, browser_page, make_keys


class TestPage:
    async def test_the_page_is_self_contained(self) -> None:
        """One HTML answer: no external script, style or font; a CSP that allows only itself."""
        async with open_engine(MemoryStore(), ScriptedFetch()) as engine:
            app = create_app(engine, make_keys(), precheck=precheck)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                r = await client.get("/ui")

        csp = r.headers["content-security-policy"]
        assert 200 == r.status_code
        assert r.headers["content-type"].startswith("text/html")
        assert "src=" not in r.text
        assert re.search(r"""(?:href|action)\s*=\s*["']?(?:https?:)?//""", r.text, re.I) is None
        assert "url(" not in r.text and "@import" not in r.text
        assert "default-src 'none'" in csp
        assert "connect-src 'self'" in csp
        assert "sessionStorage" in r.text
        assert '<label for="key">' in r.text
        assert 'class: "retry"' in r.text


def _elsewhere(page: Any, partial: Any, submit: Callable[[], str]) -> dict[str, object]:
    """On the loaded page: who the key is, a job's failures, a job submitted elsewhere shows
    within the one-second poll and is cancelled at once, and the actions fit 400 px."""
    from playwright.sync_api import expect

    found: dict[str, object] = {}
    expect(page.locator("#who")).to_contain_text("alice")
    found["who"] = page.locator("#who").text_content()
    failure = partial.locator(".failures li").first
    expect(failure).to_contain_text("https://b.example.test/")
    found["failure"] = failure.text_content()
    later = submit()  # from elsewhere: the one-second poll brings it
    row = page.locator(f'tr[data-job-id="{later}"]')
    expect(row).to_have_attribute("data-status", "running", timeout=3_000)
    row.get_by_role("button", name="Cancel").click()
    expect(row).to_have_attribute("data-status", "cancelled", timeout=1_000)
    found["retry_after_cancel"] = row.get_by_role("button", name="Retry").is_enabled()
    page.set_viewport_size({"width": 400, "height": 800})
    box = row.get_by_role("button", name="Cancel").bounding_box()
    found["cancel_right_edge"] = None if box is None else box["x"] + box["width"]
    found["page_width"] = page.evaluate("document.documentElement.scrollWidth")
    return found


def _drive(
    base: str,
    job_ids: list[str],
    release: Callable[[], None],
    screenshot: Path,
    submit: Callable[[], str],
) -> dict[str, object]:
    """In a thread: load the page, use the key, watch the live job move to done; then a job
    submitted elsewhere shows, is cancelled, and the page still works at 400 px."""
    from playwright.sync_api import expect, sync_playwright

    seen: dict[str, object] = {"errors": []}
    with sync_playwright() as p, browser_page(p, 1100, 520) as (page, errors):
        page.goto(f"{base}/ui")
        seen["focused"] = page.evaluate("document.activeElement.id")
        page.get_by_label("API key").fill(ALICE_KEY)
        page.keyboard.press("Enter")  # the form works from the keyboard
        live = page.locator(f'tr[data-job-id="{job_ids[-1]}"]')
        expect(live).to_have_attribute("data-status", "running")
        expect(live.locator(".counts")).to_contain_text("1 done")
        seen["rows"] = page.locator("tbody tr").count()
        seen["first_row"] = page.locator("tbody tr").first.get_attribute("data-job-id")
        seen["bar_before"] = live.get_by_role("progressbar").get_attribute("aria-valuenow")
        page.screenshot(path=str(screenshot), full_page=True)  # a job mid-way, for the docs
        seen["shot_bytes"] = screenshot.stat().st_size
        release()  # the held target may finish now; the page learns it from the events
        expect(live).to_have_attribute("data-status", "done", timeout=10_000)
        expect(live.locator(".counts")).to_contain_text("2 done, 0 failed")
        seen["bar_after"] = live.get_by_role("progressbar").get_attribute("aria-valuenow")
        seen["cancel_disabled"] = live.get_by_role("button", name="Cancel").is_disabled()
        seen["ndjson"] = live.get_by_role("link", name="NDJSON").get_attribute("href")
        seen["retry_disabled_when_all_done"] = live.get_by_role(
            "button", name="Retry failed"
        ).is_disabled()
        partial = page.locator(f'tr[data-job-id="{job_ids[1]}"]')
        expect(partial).to_have_attribute("data-status", "partial")
        partial.get_by_role("button", name="Retry failed").click()
        expect(page.locator("tbody tr")).to_have_count(4)
        newest = page.locator("tbody tr").first
        expect(newest).to_have_attribute("data-status", "done", timeout=10_000)
        expect(newest.locator(".counts")).to_contain_text("1 done, 0 failed")
        seen["retried_as"] = newest.get_attribute("data-job-id")

        seen.update(_elsewhere(page, partial, submit))
        seen["errors"] = errors
    return seen


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
class TestInChromium:
    async def test_a_job_moves_to_done_on_the_page(self, tmp_path: Path) -> None:
        """The page lists the jobs, newest first, and a live job's bar follows its events."""
        pytest.importorskip("playwright", reason="playwright is not installed (group browser)")
        fetch = ScriptedFetch()
        fetch.script("https://b.example.test/", TargetError("gone", status=404))
        gate = fetch.hold("https://held.example.test/")
        fetch.hold("https://slow.example.test/")  # never released: cancelled on the page
        stop = trio.Event()
        config = Config(jobs_per_caller=5, jobs_total=5, targets_per_job=40)
        shot = Path(os.environ.get("TRIO_BATCH_UI_SCREENSHOT") or tmp_path / "ui.png")
        async with open_engine(MemoryStore(), fetch, config) as engine:
            app = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app, port=0, shutdown_trigger=stop.wait, task_status=task_status
                    )
                )
                base = f"http://127.0.0.1:{port}"
                ids = []
                async with httpx.AsyncClient(base_url=base, headers=auth()) as http:
                    batches = [
                        [f"https://a{i}.example.test/" for i in range(30)],
                        ["https://a.example.test/", "https://b.example.test/"],
                        ["https://c.example.test/", "https://held.example.test/"],
                    ]
                    for urls in batches:
                        r = await http.post(
                            "/v1/batch", json={"targets": [{"url": u} for u in urls]}
                        )
                        assert r.status_code == 202, r.text
                        ids.append(r.json()["id"])
                        if len(ids) < len(batches):
                            await http.get(f"/v1/batch/{ids[-1]}/events")  # until it ends

                    async def submit_later() -> str:
                        urls = ["https://slow.example.test/", "https://d.example.test/"]
                        r = await http.post(
                            "/v1/batch", json={"targets": [{"url": u} for u in urls]}
                        )
                        job_id: str = r.json()["id"]
                        return job_id

                    seen = await trio.to_thread.run_sync(
                        _drive,
                        base,
                        ids,
                        lambda: trio.from_thread.run_sync(gate.set),
                        shot,
                        lambda: trio.from_thread.run(submit_later),
                    )
                stop.set()

        assert [] == seen["errors"]
        assert "key" == seen["focused"]
        assert 3 == seen["rows"]
        assert ids[-1] == seen["first_row"]
        assert "1" == seen["bar_before"]
        assert "2" == seen["bar_after"]
        assert seen["cancel_disabled"] is True
        assert f"/v1/batch/{ids[-1]}/results" == seen["ndjson"]
        assert seen["retry_disabled_when_all_done"] is True
        assert seen["retried_as"] not in ids
        assert isinstance(seen["shot_bytes"], int)
        assert seen["shot_bytes"] > 0
        assert "alice" in str(seen["who"]) and "fleet" in str(seen["who"])
        assert "https://b.example.test/" in str(seen["failure"])
        assert "gone" in str(seen["failure"])
        assert seen["retry_after_cancel"] is True
        assert isinstance(seen["cancel_right_edge"], float)
        assert seen["cancel_right_edge"] <= 400
        assert isinstance(seen["page_width"], int)
        assert seen["page_width"] <= 400


def _drive_empty(base: str, submit: Callable[[], str]) -> dict[str, object]:
    """In a thread: the page without a key, then with a key and no job, then two jobs submitted
    elsewhere: what the empty state and the live region say at each step."""
    from playwright.sync_api import expect, sync_playwright

    seen: dict[str, object] = {}
    with sync_playwright() as p, browser_page(p, 1100, 700) as (page, errors):
        page.goto(f"{base}/ui")
        empty = page.locator("#empty")
        expect(empty).to_be_visible()
        seen["empty_before_key"] = empty.inner_text()
        page.get_by_label("API key").fill(ALICE_KEY)
        page.keyboard.press("Enter")
        expect(page.locator("#message")).to_have_text("No jobs yet for this key.")
        seen["empty_with_key"] = empty.is_visible()
        seen["submitted"] = [submit(), submit()]
        expect(page.locator("tbody tr")).to_have_count(2, timeout=5_000)
        expect(page.locator("#message")).to_have_text("2 jobs shown", timeout=5_000)
        seen["empty_after"] = empty.is_visible()
        seen["errors"] = errors
    return seen


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
class TestEmptyInChromium:
    async def test_an_empty_list_says_how_to_start_and_counts_the_jobs_that_come(self) -> None:
        """With no job, the page says how to get a key and submit (curl to this server, MCP at
        its /mcp); jobs submitted elsewhere replace it, and the live region counts them (it
        said "0 jobs shown" with two on screen)."""
        pytest.importorskip("playwright", reason="playwright is not installed (group browser)")
        fetch = ScriptedFetch()
        fetch.hold("https://held.example.test/")  # the jobs stay live: their rows stay
        stop = trio.Event()
        config = Config(jobs_per_caller=5, jobs_total=5)
        async with open_engine(MemoryStore(), fetch, config) as engine:
            app = create_app(engine, make_keys(), precheck=precheck, access_log_enabled=False)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app, port=0, shutdown_trigger=stop.wait, task_status=task_status
                    )
                )
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base, headers=auth()) as http:
                    made = 0

                    async def submit() -> str:
                        nonlocal made
                        made += 1
                        urls = ["https://held.example.test/", f"https://{made}.example.test/"]
                        r = await http.post(
                            "/v1/batch", json={"targets": [{"url": u} for u in urls]}
                        )
                        job_id: str = r.json()["id"]
                        return job_id

                    seen = await trio.to_thread.run_sync(
                        _drive_empty, base, lambda: trio.from_thread.run(submit)
                    )
                stop.set()

        text = str(seen["empty_before_key"])
        assert [] == seen["errors"]
        assert "trio-batch keys add NAME" in text
        assert f"curl -s -X POST {base}/v1/batch" in text
        assert f"{base}/mcp" in text and "batch_submit" in text
        assert seen["empty_with_key"] is True
        assert seen["empty_after"] is False
