"""Two `trio-batch serve` processes on one PostgreSQL database, killed and stopped mid-batch.

Every job (of concurrency 4: several of its targets claimed at once) is submitted to A; B works the
same jobs (the fleet's rotation). B is killed with SIGKILL at random points and started again; A is
stopped once with SIGTERM and started again. Every target must end ``done`` with its own page (no
result lost), each job's count must equal its targets (none stored twice), a page is fetched again
only for a fetch a kill or a stop cut short (a kill or a stop happened between the two fetches: a
page cut short by two kills is fetched three times), and a stopped instance must leave no claim
behind. The claim timeout (3 s) leaves renewals (every second) room on a loaded machine: a
renewal late by a whole timeout would let another instance take a fetch no kill cut short.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import httpx
import psycopg
import pytest
import trio

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema
from tests.support import CLEAN_ENV, Seen
from trio_batch.http import add_key

from .support import Server, open_page_site, wait_ended_over_http

JOBS = 3
TARGETS = 20
PAGES = [j * 100 + i for j in range(JOBS) for i in range(TARGETS)]
"""The site's page numbers: job j's target i is page j * 100 + i."""
KILLS = int(os.environ.get("TRIO_BATCH_FLEET_KILLS", "3"))
SIGNAL_SLACK = 0.05
"""Seconds after a signal is sent during which a fetch the instance had already begun may
still reach the site: the process acts on the signal at its event loop's next turn (seen: a
request 0.3 ms after SIGTERM was sent, cut short by that stop and fetched again later)."""


def orphan_claims(schema: str) -> int:
    """Claims held by no registered instance (what a stopped instance left behind)."""
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.targets WHERE claim IS NOT NULL "
            f"AND claim_instance NOT IN (SELECT id FROM {schema}.instances)"
        ).fetchone()
    assert row is not None
    return int(row[0])


def repeats(seen: list[Seen]) -> list[tuple[str, float, float]]:
    """Each fetch of a page after its first: the path, when it was fetched before, and now."""
    last: dict[str, float] = {}
    found = []
    for request in seen:
        if request.path in last:
            found.append((request.path, last[request.path], request.at))
        last[request.path] = request.at
    return found


@pytest.mark.slow
async def test_a_fleet_loses_nothing_to_kill_9_and_sigterm(tmp_path: Path) -> None:
    """SIGKILL B at random points and SIGTERM A once: every job ends done, each target stored
    once, fetched again only where a fetch was cut short; A's claims are back the moment it
    has stopped."""
    if not PG_DSN:
        pytest.skip(SKIP_REASON)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    keys_file = tmp_path / "keys.toml"
    _, key = add_key(keys_file, "alice")
    headers = {"Authorization": f"Bearer {key}"}

    async with open_test_schema(PG_DSN) as schema, open_page_site(PAGES) as site:
        args = [
            "--port=0",
            f"--db={PG_DSN}",
            f"--pg-schema={schema}",
            "--pg-claim-timeout=3",
            f"--keys={keys_file}",
            "--allow-net=127.0.0.0/8",
            "--workers=2",
            f"--jobs-per-caller={JOBS}",
            "--no-access-log",
        ]
        a, b = Server(args, CLEAN_ENV), Server(args, CLEAN_ENV)
        job_ids: list[str] = []
        cuts: list[float] = []  # when each kill or stop happened (the site's clock)
        async with a.running() as (proc_a, port_a):
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port_a}", headers=headers
            ) as client:
                for j in range(JOBS):
                    urls = [
                        f"http://127.0.0.1:{site.port}/page/{j * 100 + i}" for i in range(TARGETS)
                    ]
                    sub = await client.post(
                        "/v1/batch",
                        json={"targets": [{"url": u} for u in urls], "concurrency": 4},
                    )
                    assert sub.status_code == 202, sub.text
                    job_ids.append(sub.json()["id"])
            for _ in range(KILLS):
                async with b.running() as (proc_b, _):
                    await trio.sleep(rng.uniform(0.2, 0.8))  # a random moment mid-batch
                    proc_b.send_signal(signal.SIGKILL)
                    cuts.append(trio.current_time())
            proc_a.send_signal(signal.SIGTERM)
            cuts.append(trio.current_time())
            with trio.fail_after(30):
                await proc_a.wait()
            left_behind = await trio.to_thread.run_sync(orphan_claims, schema)

        async with (
            b.running() as (_, port_b),
            a.running() as _,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port_b}", headers=headers) as client,
        ):
            summaries = await wait_ended_over_http(client, job_ids)
            results = [
                (await client.get(f"/v1/batch/{i}", params={"results": 1})).json() for i in job_ids
            ]

    hits = site.hits
    where = f"seed {seed}"
    assert 0 == left_behind, where
    assert [s["status"] for s in summaries] == ["done"] * JOBS, where
    for j, result in enumerate(results):
        assert result["targets_total"] == result["counts"]["done"] == TARGETS, where
        contents = [t["result"]["content"].split("\n")[0].strip() for t in result["targets"]]
        assert contents == [f"Page {j * 100 + i}" for i in range(TARGETS)], where
    assert set(hits) == {f"/page/{j * 100 + i}" for j in range(JOBS) for i in range(TARGETS)}
    # Each kill or stop fetches again at most the targets its 2 workers had in flight (a
    # target claimed ahead and not started is claimed again, not fetched twice).
    assert sum(n - 1 for n in hits.values()) <= (KILLS + 1) * 2, (where, hits.most_common(5))
    unexplained = [
        (path, earlier, later)
        for path, earlier, later in repeats(site.seen)
        if not any(earlier < cut + SIGNAL_SLACK and cut < later for cut in cuts)
    ]
    assert not unexplained, (where, cuts, unexplained)
    assert "Traceback" not in a.log.decode() + b.log.decode()
