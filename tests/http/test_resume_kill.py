"""kill -9 at random moments of a batch, restart with --resume: every job ends, nothing lost.

The real ``trio-batch serve`` runs in a child process against a local site; the test kills it
with SIGKILL at 20 random points (each a random delay after the server listens again), starts
it again with ``--resume`` each time, then lets it finish. Every target must end ``done`` with
its own page (no result lost), each job's count must equal its targets (none stored twice),
and the caller's caps must be free at the end. Runs on SQLite and on PostgreSQL (where a killed
instance's claims expire after ``--pg-claim-timeout`` and the next instance takes the turns).
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import httpx
import pytest
import trio

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema
from tests.support import CLEAN_ENV
from trio_batch.http import add_key

from .support import Server, open_page_site, wait_ended_over_http

KILLS = int(os.environ.get("TRIO_BATCH_KILL_POINTS", "20"))
JOBS = 3
TARGETS = 20
PAGES = [j * 100 + i for j in range(JOBS) for i in range(TARGETS)]
"""The site's page numbers: job j's target i is page j * 100 + i."""


async def kill_and_resume(db_args: list[str], tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    keys_file = tmp_path / "keys.toml"
    _, key = add_key(keys_file, "alice")
    async with open_page_site(PAGES) as site:
        server = Server(
            [
                "--port=0",
                *db_args,
                f"--keys={keys_file}",
                "--allow-net=127.0.0.0/8",
                "--workers=2",
                f"--jobs-per-caller={JOBS}",
                "--resume",
                "--no-access-log",
            ],
            CLEAN_ENV,
        )
        headers = {"Authorization": f"Bearer {key}"}
        job_ids: list[str] = []
        kill_points: list[float] = []
        live_at_kill: list[int] = []  # live jobs just before each kill
        for kill in range(KILLS + 1):
            async with server.running() as (proc, port):
                base = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base, headers=headers) as client:
                    if not job_ids:
                        for j in range(JOBS):
                            body = {
                                "targets": [
                                    {"url": f"http://127.0.0.1:{site.port}/page/{j * 100 + i}"}
                                    for i in range(TARGETS)
                                ]
                            }
                            sub = await client.post("/v1/batch", json=body)
                            assert sub.status_code == 202, sub.text
                            job_ids.append(sub.json()["id"])
                    if kill < KILLS:
                        delay = rng.uniform(0.05, 0.5)
                        kill_points.append(delay)
                        await trio.sleep(delay)
                        live = await client.get("/v1/batch", params={"status": "live"})
                        proc.send_signal(signal.SIGKILL)
                        live_at_kill.append(len(live.json()["jobs"]))
                        continue
                    summaries = await wait_ended_over_http(client, job_ids)
                    results = [
                        (await client.get(f"/v1/batch/{i}", params={"results": 1})).json()
                        for i in job_ids
                    ]
                    fresh = [
                        await client.post(
                            "/v1/batch", json={"targets": [{"url": f"https://x{n}.test/"}]}
                        )
                        for n in range(JOBS)
                    ]

    text = server.log.decode()
    hits = site.hits
    where = (
        f"seed {seed}, kill points {[round(p, 3) for p in kill_points]}, live jobs at each "
        f"{live_at_kill}, restarts that resumed jobs {text.count('resumed')}"
    )
    assert [s["status"] for s in summaries] == ["done"] * JOBS, where
    for j, result in enumerate(results):
        assert result["targets_total"] == result["counts"]["done"] == TARGETS, where
        contents = [t["result"]["content"].split("\n")[0].strip() for t in result["targets"]]
        assert contents == [f"Page {j * 100 + i}" for i in range(TARGETS)], where
    assert set(hits) == {f"/page/{j * 100 + i}" for j in range(JOBS) for i in range(TARGETS)}
    assert [r.status_code for r in fresh] == [202] * JOBS, [r.text for r in fresh]
    assert server.starts == KILLS + 1
    assert len(live_at_kill) == KILLS, where
    assert all(live_at_kill), where  # every kill landed mid-batch
    assert "Traceback" not in text, text
    assert f"127.0.0.1:{site.port}" not in text


@pytest.mark.slow
async def test_sqlite_kill_9_and_resume(tmp_path: Path) -> None:
    """A server on SQLite killed with SIGKILL mid-job resumes it on restart; no target lost."""
    seed = random.randrange(2**32)
    await kill_and_resume([f"--db={tmp_path / 'jobs.sqlite'}"], tmp_path, seed)


@pytest.mark.slow
async def test_postgres_kill_9_and_resume(tmp_path: Path) -> None:
    """The same on PostgreSQL: a SIGKILLed server's turns are taken by the next one."""
    if not PG_DSN:
        pytest.skip(SKIP_REASON)
    seed = random.randrange(2**32)
    async with open_test_schema(PG_DSN) as schema:
        await kill_and_resume(
            [
                f"--db={PG_DSN}",
                f"--pg-schema={schema}",
                "--pg-instance-timeout=1",
                "--pg-heartbeat=0.25",
                "--pg-claim-timeout=1",
            ],
            tmp_path,
            seed,
        )
