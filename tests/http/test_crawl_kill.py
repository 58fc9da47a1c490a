"""A crawl through ``POST /v1/crawl``, its server killed with SIGKILL in the middle: the limit
stays exact and no page stored before a kill is fetched again.

The crawl's promise (docs/crawl.md, "Durable"): the frontier and the visited set are in the
store, and a page's links are admitted in the same write as its outcome, so a crash loses
nothing and a restart fetches no stored page again. Tried as it breaks in production: the real
``trio-batch serve`` in child processes, over the crawl trap site (``bench/crawl_site.py``, its
pages slowed so that kills land mid-crawl), on SQLite (``serve --resume`` started again after
each kill) and on a PostgreSQL fleet of three (the instance the crawl was posted to killed, then
another: the others carry the crawl on once the dead one's claims expire).

A page fetched when a kill came may be fetched again (its outcome was never stored); a page
whose outcome was stored before the kill may not.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trio
from bench.crawl_site import CrawlSite, serve_crawl_site

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema
from tests.support import CLEAN_ENV
from trio_batch.http import add_key

from .support import Server, wait_ended_over_http

KILLS = int(os.environ.get("TRIO_BATCH_CRAWL_KILLS", "3"))
LIMIT = 60
CRAWL = {"limit": LIMIT, "max_depth": 4, "concurrency": 4}
SERVE = [
    "--port=0",
    "--allow-net=127.0.0.0/8",
    "--workers=4",
    "--host-concurrency=4",
    "--no-access-log",
]


def page_id(site: CrawlSite, url: str) -> str:
    """The site's id of the page a result's URL names (every spelling of a page is one id)."""
    parts = urlsplit(url)
    which = site.hosts.index(parts.hostname or "")
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    return site.page_of(target, which)


async def stored_pages(client: httpx.AsyncClient, site: CrawlSite, job_id: str) -> list[str]:
    """The page ids of the crawl's targets stored ``done``, as its results say."""
    answer = await client.get(f"/v1/batch/{job_id}", params={"results": 1})
    assert answer.status_code == 200, answer.text
    return [page_id(site, t["url"]) for t in answer.json()["targets"] if t["status"] == "done"]


async def kill_when_stored(
    proc: trio.Process, client: httpx.AsyncClient, site: CrawlSite, job_id: str, least: int
) -> tuple[set[str], dict[str, int]]:
    """Wait until the crawl has stored ``least`` pages in all, then SIGKILL ``proc``: the
    pages stored by then (read before the kill, so all stored before it) and the site's
    request count per page at the kill."""
    with trio.fail_after(60):
        async with client.stream("GET", f"/v1/batch/{job_id}/events") as events:
            async for line in events.aiter_lines():  # a `target` event as each page ends
                if line.startswith("event: target"):
                    stored = await stored_pages(client, site, job_id)
                    if len(stored) >= least:
                        break
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    return set(stored), dict(site.hits)


def check_crawl(
    site: CrawlSite,
    summary: dict[str, object],
    pages: list[str],
    kills: list[tuple[set[str], dict[str, int]]],
    where: str,
) -> None:
    """The limit exact, each page stored once, none stored before a kill fetched after it,
    nothing disallowed or off the site."""
    assert summary["status"] == "done", where
    crawl = summary["crawl"]
    assert isinstance(crawl, dict)
    assert crawl["done"] == LIMIT, (crawl, where)
    assert len(pages) == LIMIT == len(set(pages)), where
    for stored, hits in kills:
        again = sorted(p for p in stored if site.hits[p] != hits[p])
        assert not again, f"stored before a kill, fetched after it: {again} ({where})"
    assert site.disallowed() == [], where
    assert site.hosts_hit().get("other", 0) == 0, where


@pytest.mark.slow
async def test_sqlite_crawl_survives_kill_9_and_resume(tmp_path: Path) -> None:
    """``serve --resume`` on SQLite killed mid-crawl again and again: the crawl carries on where
    it stopped and stores exactly ``limit`` pages, none fetched again once stored."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    keys_file = tmp_path / "keys.toml"
    _, key = add_key(keys_file, "alice")
    headers = {"Authorization": f"Bearer {key}"}
    args = [*SERVE, f"--db={tmp_path / 'jobs.sqlite'}", f"--keys={keys_file}", "--resume"]
    server = Server(args, CLEAN_ENV)
    kills: list[tuple[set[str], dict[str, int]]] = []
    async with trio.open_nursery() as nursery:
        site = await serve_crawl_site(nursery, 400, seconds=0.05)
        job_id = ""
        for kill in range(KILLS + 1):
            async with server.running() as (proc, port):
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base, headers=headers) as client:
                    if not job_id:
                        posted = await client.post("/v1/crawl", json={"url": site.start, **CRAWL})
                        assert posted.status_code == 202, posted.text
                        job_id = posted.json()["id"]
                    if kill < KILLS:
                        least = (kill + 1) * LIMIT // (KILLS + 2) + rng.randrange(3)
                        kills.append(await kill_when_stored(proc, client, site, job_id, least))
                        continue
                    [summary] = await wait_ended_over_http(client, [job_id])
                    pages = await stored_pages(client, site, job_id)
        nursery.cancel_scope.cancel()
    where = f"seed {seed}, stored at each kill {[len(s) for s, _ in kills]}"
    check_crawl(site, summary, pages, kills, where)
    assert server.starts == KILLS + 1
    text = server.log.decode()
    assert "Traceback" not in text, text
    assert f":{site.port}" not in text  # logs name no URL or host


@pytest.mark.slow
async def test_fleet_crawl_survives_kill_9_of_any_instance(tmp_path: Path) -> None:
    """Three instances on PostgreSQL; the crawl is posted to A. Each round starts A and B
    beside C and kills one of them mid-crawl (A, the one that admitted the crawl, first; then
    B; ...), the other going down at the round's end: C and the next round carry the crawl on,
    the limit exact, no stored page fetched again."""
    if not PG_DSN:
        pytest.skip(SKIP_REASON)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    keys_file = tmp_path / "keys.toml"
    _, key = add_key(keys_file, "alice")
    headers = {"Authorization": f"Bearer {key}"}
    kills: list[tuple[set[str], dict[str, int]]] = []
    async with open_test_schema(PG_DSN) as schema, trio.open_nursery() as nursery:
        site = await serve_crawl_site(nursery, 400, seconds=0.05)
        args = [
            *SERVE,
            f"--db={PG_DSN}",
            f"--pg-schema={schema}",
            "--pg-claim-timeout=1",
            "--pg-instance-timeout=1",
            "--pg-heartbeat=0.25",
            f"--keys={keys_file}",
        ]
        a, b, c = (Server(args, CLEAN_ENV) for _ in range(3))
        async with c.running() as (_, port_c):
            base_c = f"http://127.0.0.1:{port_c}"
            async with httpx.AsyncClient(base_url=base_c, headers=headers) as client_c:
                job_id = ""
                for kill in range(KILLS):
                    async with a.running() as (proc_a, port_a), b.running() as (proc_b, _):
                        base_a = f"http://127.0.0.1:{port_a}"
                        async with httpx.AsyncClient(base_url=base_a, headers=headers) as client:
                            if not job_id:
                                body = {"url": site.start, **CRAWL}
                                posted = await client.post("/v1/crawl", json=body)
                                assert posted.status_code == 202, posted.text
                                job_id = posted.json()["id"]
                            victim = proc_a if kill % 2 == 0 else proc_b
                            least = (kill + 1) * LIMIT // (KILLS + 2) + rng.randrange(3)
                            kills.append(
                                await kill_when_stored(victim, client, site, job_id, least)
                            )
                [summary] = await wait_ended_over_http(client_c, [job_id])
                pages = await stored_pages(client_c, site, job_id)
        nursery.cancel_scope.cancel()
    where = f"seed {seed}, stored at each kill {[len(s) for s, _ in kills]}"
    check_crawl(site, summary, pages, kills, where)
    for server in (a, b, c):
        text = server.log.decode()
        assert "Traceback" not in text, text
        assert f":{site.port}" not in text
