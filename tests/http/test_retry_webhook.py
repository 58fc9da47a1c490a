"""A retry's own webhook (SPEC §7): the body of ``POST .../retry`` may name where its events go.

A real receiver on 127.0.0.1 and the ``io_clock``, as in ``test_webhooks``.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from tests.support import wait_ended
from trio_batch import Caller, TargetError, Webhook, open_engine
from trio_batch.client import open_client
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

from .support import ALICE_KEY, BOB_KEY, Service, auth, open_service

Clock = trio.testing.MockClock

BAD = "https://example.org/1"


async def ended_with_a_failure(svc: Service, **webhook: Any) -> str:
    """Submit two targets (the second fails) with ``webhook``; the id once its end is delivered."""
    svc.fetch.script(BAD, TargetError("gone", hint="h", status=404))
    job_id = str((await svc.submit(2, **webhook)).json()["id"])
    await svc.receiver.wait_for(1)
    return job_id


async def test_the_client_retries_with_a_webhook_of_its_own(io_clock: Clock) -> None:
    """The retry job's end reaches the URL given with the retry, signed, under its own id."""
    async with open_service() as svc:
        old = await ended_with_a_failure(svc, url=svc.receiver.url(path="/old"))
        async with open_client("http://api.test", ALICE_KEY, transport=svc.transport) as client:
            new = await client.retry(old, webhook={"url": svc.receiver.url(path="/new")})
        got = await svc.receiver.wait_for(2)

    assert [("/old", f"{old}.end"), ("/new", f"{new.id}.end")] == [
        (d.path, d.headers["webhook-id"]) for d in got
    ]
    assert ("done", {"pending": 0, "running": 0, "done": 1, "failed": 0}) == (  # 404 only once
        got[1].json["data"]["status"],
        got[1].json["data"]["counts"],
    )


async def test_a_retry_without_a_body_has_no_webhook(io_clock: Clock) -> None:
    """The old job's webhook is not carried over: nothing is left to deliver for the retry."""
    store = MemoryStore()
    async with open_service(store) as svc:
        old = await ended_with_a_failure(svc)
        r = await svc.client.post(f"/v1/batch/{old}/retry", headers=auth())
        new = r.json()["id"]
        await wait_ended(svc.engine, new)
        snap = await svc.engine.status(new)
        due = await store.hooks_due(float("inf"), 10)

    assert 202 == r.status_code
    assert snap is not None and not snap.job.status.live
    assert [] == due
    assert [f"{old}.end"] == [d.headers["webhook-id"] for d in svc.receiver.got]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ("end", "body"),
        ({"targets": []}, "targets"),
        ({"webhook": "https://x.org/"}, "webhook"),
        ({"webhook": {"url": 7}}, "webhook.url"),
        ({"webhook": {"url": "http://10.0.0.1/"}}, "webhook.url"),
        ({"webhook": {"url": "https://x.org/", "events": ["start"]}}, "webhook.events"),
    ],
)
async def test_a_malformed_retry_body_is_400_naming_its_field(
    body: object, field: str, io_clock: Clock
) -> None:
    """A retry body that is not an object, or a malformed webhook: 400 naming it, no new job."""
    async with open_service() as svc:
        old = await ended_with_a_failure(svc)
        r = await svc.client.post(f"/v1/batch/{old}/retry", json=body, headers=auth())
        jobs = (await svc.client.get("/v1/batch", headers=auth())).json()["jobs"]

    assert (400, field) == (r.status_code, r.json()["field"])
    assert r.json()["hint"]
    assert [old] == [j["id"] for j in jobs]  # nothing was admitted


async def test_a_caller_without_a_secret_cannot_give_a_retry_a_webhook(io_clock: Clock) -> None:
    """A retry's webhook needs the caller's secret, as a submit's does: 400 naming webhook."""
    async with open_service() as svc:
        svc.fetch.script(BAD, TargetError("gone"))
        old = (
            await svc.client.post(
                "/v1/batch", json={"targets": [{"url": BAD}]}, headers=auth(BOB_KEY)
            )
        ).json()["id"]
        body = {"webhook": {"url": svc.receiver.url()}}
        await wait_ended(svc.engine, old)
        r = await svc.client.post(f"/v1/batch/{old}/retry", json=body, headers=auth(BOB_KEY))

    assert (400, "webhook") == (r.status_code, r.json()["field"])


async def test_the_engine_checks_the_webhooks_type() -> None:
    """BatchEngine.retry takes a trio_batch.Webhook only; an unknown job is None whatever it is."""
    async with open_engine(MemoryStore(), ScriptedFetch()) as engine:
        with pytest.raises(TypeError, match=r"trio_batch\.Webhook"):
            await engine.retry(Caller("a"), "fleet", "0" * 32, webhook="https://x.org/")  # type: ignore[arg-type]
        assert None is await engine.retry(
            Caller("a"), "fleet", "0" * 32, webhook=Webhook("https://x.org/")
        )
