"""Credentials on a PostgreSQL fleet: sealed with the fleet's key, sent by whichever instance
fetches (issue 35).

Three instances (each a store, a web fetcher, an engine with its webhook dispatcher, and the
app) share one schema and one secrets key. A job with an ``Authorization`` header is submitted
to the first, which then stops, so the others fetch its targets: without the key they would fail
410. A local site records every request's headers. Real clock (PostgreSQL's claims run on worker
threads); every wait is on the job's end event or on the receiver. The same again with three
``trio-batch serve --secrets-key-file`` processes (slow).
"""

from __future__ import annotations

import functools
import logging
import secrets
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client import generate_latest

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema
from tests.support import CLEAN_ENV, LocalSite, Reply, serve_site
from tests.web.support import TEXT
from trio_batch import Caller, Config, Result, Target, open_engine
from trio_batch._headers import SECRETS
from trio_batch._sealing import add_key, read_key_file
from trio_batch.http import KeyRing, add_key as add_api_key, create_app, open_deliveries
from trio_batch.metrics import PrometheusMetrics
from trio_batch.web import WebFetcher, precheck

from .support import FAST, LOOPBACK, Server, auth, lifespan, open_receiver, webhook_keys

pytest.importorskip("psycopg")
pytest.importorskip("cryptography")
pytestmark = pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)

TARGETS = 6
VALUE = secrets.token_hex(12)
"""The credential's secret part: what must be nowhere but in the site's requests."""
TOKEN = f"Bearer fleet-{VALUE}"


@asynccontextmanager
async def instance(
    schema: str, number: int, keys: KeyRing, fetched_by: list[int]
) -> AsyncIterator[tuple[httpx.AsyncClient, PrometheusMetrics]]:
    """One instance of the fleet: its client (alice's key) and its metrics."""
    from trio_batch.stores import PostgresStore

    metrics = PrometheusMetrics()
    async with (
        PostgresStore.open(PG_DSN, schema=schema) as store,
        WebFetcher(store=store, allow=LOOPBACK) as web,
    ):

        async def fetch(caller: Caller, target: Target) -> Result:
            fetched_by.append(number)
            return await web(caller, target)

        config = Config(ttl=3600, hooks=metrics.hooks())
        async with (
            open_engine(store, fetch, config) as engine,
            open_deliveries(store, engine, keys, allow=LOOPBACK, metrics=metrics, policy=FAST),
        ):
            app = create_app(
                engine,
                keys,
                fetch=web,
                precheck=functools.partial(precheck, allow=LOOPBACK),
                metrics=metrics,
            )
            transport = httpx.ASGITransport(app=app)
            async with (
                lifespan(app),
                httpx.AsyncClient(
                    transport=transport, base_url="http://api.test", headers=auth()
                ) as client,
            ):
                yield client, metrics


def database_text(schema: str) -> str:
    """Every row of every table of ``schema``, as text (what a dump of it would hold)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        rows = [
            str(row[0])
            for table in tables
            for row in conn.execute(
                sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            )
        ]
    assert "jobs" in tables
    return "\n".join(rows)


async def report_site(nursery: trio.Nursery) -> tuple[LocalSite, list[dict[str, object]]]:
    """A site of ``TARGETS`` reports on 127.0.0.1, and a job's targets for them, each with the
    Authorization header."""
    site = await serve_site(nursery, "127.0.0.1")
    targets: list[dict[str, object]] = []
    for i in range(TARGETS):
        site.route(f"/report/{i}", Reply(body=f"report {i}".encode(), headers=TEXT))
        headers = {"Authorization": TOKEN}
        targets.append({"url": site.url(f"/report/{i}"), "options": {"headers": headers}})
    return site, targets


async def ended(client: httpx.AsyncClient, job_id: str) -> str:
    """The job's events stream, read until its end event: all of it."""
    text = ""
    async with client.stream("GET", f"/v1/batch/{job_id}/events") as events:
        async for line in events.aiter_lines():
            text += line + "\n"
            if line.startswith("event: end"):
                return text
    raise AssertionError(f"the events stream closed before the end:\n{text}")


async def test_any_instance_sends_the_credential_and_none_stores_it(
    tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """A job with an Authorization header submitted to instance 1 of 3, which then stops:
    every target ends done, fetched by the others with the header on every request; the value
    is in no answer, stream, webhook, metric, log record or row of the database."""
    caplog.set_level(logging.DEBUG)
    site, targets = await report_site(nursery)
    add_key(str(tmp_path / "secrets.key"))
    keys = webhook_keys()
    fetched_by: list[int] = []

    with SECRETS.keyed(read_key_file(str(tmp_path / "secrets.key"))):
        async with (
            open_test_schema(PG_DSN) as schema,
            open_receiver() as receiver,
            instance(schema, 2, keys, fetched_by) as (second, second_metrics),
            instance(schema, 3, keys, fetched_by) as (_, third_metrics),
        ):
            webhook = {"url": receiver.url(), "events": ["target", "end"]}
            body = {"targets": targets, "webhook": webhook}
            async with instance(schema, 1, keys, fetched_by) as (first, first_metrics):
                submitted = await first.post("/v1/batch", json=body)
                assert 202 == submitted.status_code, submitted.text
                job_id = submitted.json()["id"]
                again = await first.post("/v1/batch", json=body)  # the same text: reused
            events = await ended(second, job_id)
            job = await second.get(f"/v1/batch/{job_id}", params={"results": 1})
            stream = await second.get(f"/v1/batch/{job_id}/results")
            deliveries = await receiver.wait_for(TARGETS + 1)
            metrics = (await second.get("/metrics")).text + "".join(
                generate_latest(m.registry).decode()
                for m in (first_metrics, second_metrics, third_metrics)
            )
            stored = await trio.to_thread.run_sync(database_text, schema)

    assert again.json()["id"] == job_id
    assert ["done"] * TARGETS == [t["status"] for t in job.json()["targets"]]
    assert {f"/report/{i}" for i in range(TARGETS)} == set(site.paths())
    assert all(TOKEN == seen.headers.get("authorization") for seen in site.seen)
    assert set(fetched_by) - {1}, fetched_by  # the other instances fetched
    assert 0 == len(SECRETS)  # nothing waited in memory: every fetch opened the stored value
    assert "<sealed " in stored
    shown = [events, job.text, stream.text, metrics, stored]
    shown += [d.body.decode() for d in deliveries]
    shown += [f"{r.getMessage()} {r.args!r}" for r in caplog.records]
    assert [] == [text[:200] for text in shown if VALUE in text]
    assert '"Authorization":"<secret>"' in job.text.replace(" ", "")


@pytest.mark.slow
async def test_three_serve_processes_with_one_key_file(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """`trio-batch serve --secrets-key-file` x3 on one schema: a job submitted to the first,
    stopped at once (SIGTERM), ends done with the header on every request; no process's log
    (at DEBUG) nor the database holds the value."""
    site, targets = await report_site(nursery)
    _, key = add_api_key(tmp_path / "keys.toml", "alice")
    add_key(str(tmp_path / "secrets.key"))

    async with open_test_schema(PG_DSN) as schema:
        args = [
            "--port=0",
            f"--db={PG_DSN}",
            f"--pg-schema={schema}",
            f"--keys={tmp_path / 'keys.toml'}",
            f"--secrets-key-file={tmp_path / 'secrets.key'}",
            "--allow-net=127.0.0.0/8",
            "--log-level=debug",
        ]
        first, second, third = (Server(args, CLEAN_ENV) for _ in range(3))
        async with second.running() as (_, port), third.running():
            async with first.running() as (proc, first_port):
                async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{first_port}",
                    headers={"Authorization": f"Bearer {key}"},
                ) as client:
                    submitted = await client.post("/v1/batch", json={"targets": targets})
                assert 202 == submitted.status_code, submitted.text
                proc.send_signal(signal.SIGTERM)
                await proc.wait()
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
            ) as client:
                job_id = submitted.json()["id"]
                await ended(client, job_id)
                job = await client.get(f"/v1/batch/{job_id}", params={"results": 1})
        stored = await trio.to_thread.run_sync(database_text, schema)

    logs = [server.log.decode() for server in (first, second, third)]
    assert ["done"] * TARGETS == [t["status"] for t in job.json()["targets"]]
    assert {f"/report/{i}" for i in range(TARGETS)} == set(site.paths())
    assert all(TOKEN == seen.headers.get("authorization") for seen in site.seen)
    assert "<sealed " in stored
    assert "credentials are stored sealed (AES-SIV)" in logs[0]
    assert [] == [text[:200] for text in [job.text, stored, *logs] if VALUE in text]
    assert "Traceback" not in "".join(logs)
