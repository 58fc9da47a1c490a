"""Webhook deliveries (SPEC §7): what a receiver gets, signed, in order, retried, guarded.

These tests run a real receiver on 127.0.0.1 on the ``io_clock`` (a mock clock that jumps only
after 50 ms of real idleness, so an answer on its way over the socket is not jumped past). They
wait for the receiver's requests and for the outcomes the dispatcher records (``Outbox``), never
for a time; the retry waits are short and without jitter (``FAST``).
"""

from __future__ import annotations

import logging
import os
from typing import cast

import pytest
import trio
import trio.testing

from tests.support import wait_ended
from trio_batch import Caller, JobStatus, Target, TargetError, Webhook, open_engine
from trio_batch.http import DeliveryPolicy, hash_key, open_deliveries
from trio_batch.metrics import PrometheusMetrics
from trio_batch.stores import MemoryStore, ServiceStore, SQLiteStore
from trio_batch.testing import ScriptedFetch

from .support import (
    ALICE_KEY,
    BOB_KEY,
    FAST,
    LOOPBACK,
    SECRET,
    Outbox,
    auth,
    delivery_count,
    docs_verifier,
    open_receiver,
    open_service,
    webhook_keys,
)

Clock = trio.testing.MockClock


class TestDeliveries:
    async def test_the_end_event_is_signed_for_the_documented_verifier(
        self, io_clock: Clock
    ) -> None:
        """One POST of batch.end with the job's summary, signed with the caller's secret."""
        verify = docs_verifier()
        async with open_service() as svc:
            r = await svc.submit(2)
            job_id = r.json()["id"]
            (got,) = await svc.receiver.wait_for(1)
            await svc.outbox.wait_recorded(1)
            summary = (await svc.client.get(f"/v1/batch/{job_id}", headers=auth())).json()

        assert 202 == r.status_code
        assert "/hook" == got.path
        assert verify(SECRET, got.headers, got.body)
        assert f"{job_id}.end" == got.headers["webhook-id"]
        assert "application/json" == got.headers["content-type"]
        assert {"type": "batch.end", "job_id": job_id} == {
            k: v for k, v in got.json.items() if k != "data"
        }
        data = got.json["data"]
        assert ("done", {"pending": 0, "running": 0, "done": 2, "failed": 0}) == (
            data["status"],
            data["counts"],
        )
        assert {k: summary[k] for k in ("id", "status", "counts", "links")} == {
            k: data[k] for k in ("id", "status", "counts", "links")
        }
        assert 1 == svc.count("delivered")

    async def test_target_events_come_in_order_then_the_end(self, io_clock: Clock) -> None:
        """events: target and end: one batch.target a target, by index, then batch.end."""
        async with open_service() as svc:
            svc.fetch.script("https://example.org/1", TargetError("gone", hint="h", status=404))
            r = await svc.submit(3, events=["target", "end"])
            job_id = r.json()["id"]
            got = await svc.receiver.wait_for(4)

        assert [
            (
                "batch.target",
                {
                    "idx": 0,
                    "url": "https://example.org/0",
                    "status": "done",
                    "error": "",
                    "hint": "",
                },
            ),
            (
                "batch.target",
                {
                    "idx": 1,
                    "url": "https://example.org/1",
                    "status": "failed",
                    "error": "gone",
                    "hint": "h",
                },
            ),
            (
                "batch.target",
                {
                    "idx": 2,
                    "url": "https://example.org/2",
                    "status": "done",
                    "error": "",
                    "hint": "",
                },
            ),
        ] == [(d.json["type"], d.json["data"]) for d in got[:3]]
        assert "batch.end" == got[3].json["type"]
        assert "partial" == got[3].json["data"]["status"]
        assert [f"{job_id}.t0", f"{job_id}.t1", f"{job_id}.t2", f"{job_id}.end"] == [
            d.headers["webhook-id"] for d in got
        ]

    async def test_a_failing_receiver_gets_the_same_id_until_it_answers_2xx(
        self, io_clock: Clock
    ) -> None:
        """500, 500, then 200: three attempts of one message, each signed anew."""
        verify = docs_verifier()
        async with open_service() as svc:
            svc.receiver.statuses.extend([500, 500, 200])
            r = await svc.submit(1)
            got = await svc.receiver.wait_for(3)
            await svc.outbox.wait_recorded(3)

        assert 3 == len(got)
        assert {f"{r.json()['id']}.end"} == {d.headers["webhook-id"] for d in got}
        assert all(verify(SECRET, d.headers, d.body) for d in got)
        assert (2, 1, 0) == (svc.count("retried"), svc.count("delivered"), svc.count("given_up"))

    async def test_an_event_is_given_up_after_its_time(self, io_clock: Clock) -> None:
        """A receiver that never answers 2xx is tried until give_up_after, then left alone.

        The later events of the job get one attempt each: the hour runs across them.
        """
        policy = DeliveryPolicy(
            first_wait=0.05, max_wait=0.05, jitter=0.0, poll=0.1, give_up_after=0.3
        )
        async with open_receiver() as receiver:
            receiver.statuses.extend([503] * 1000)
            store = MemoryStore()
            outbox = Outbox(store)
            metrics = PrometheusMetrics()
            async with open_engine(store, ScriptedFetch()) as engine:
                await engine.submit(
                    Caller("alice", "lab", hash_key(ALICE_KEY)),
                    "fleet",
                    [_target(), _target()],
                    webhook=Webhook(receiver.url(), ("target", "end")),
                )
                async with open_deliveries(
                    cast("ServiceStore", outbox),
                    engine,
                    webhook_keys(),
                    allow=LOOPBACK,
                    metrics=metrics,
                    policy=policy,
                ):
                    await outbox.wait_until(lambda: delivery_count(metrics, "given_up") == 3)
                    ids = [d.headers["webhook-id"] for d in receiver.got]
                    await trio.sleep(1.0)  # on the mock clock: past every retry wait

        first = ids.count(ids[0])
        assert first >= 3
        assert first + 2 == len(ids)
        assert (ids[0][-3:], ids[-2][-3:], ids[-1][-4:]) == (".t0", ".t1", ".end")
        assert len(ids) == len(receiver.got)
        assert [] == await store.hooks_due(float("inf"), 10)


def _target() -> Target:
    return Target("https://example.org/x")


class TestRefused:
    @pytest.mark.parametrize(
        "host", ["127.0.0.2", "10.0.0.1", "169.254.169.254", "[::1]", "0x7f000002"]
    )
    async def test_a_private_address_is_refused_at_submit(self, host: str, io_clock: Clock) -> None:
        """The webhook URL gets a target's pre-check: 400 naming webhook.url, no job."""
        async with open_service() as svc:
            r = await svc.submit(1, url=svc.receiver.url(host))
            listed = (await svc.client.get("/v1/batch", headers=auth())).json()

        assert (400, "webhook.url") == (r.status_code, r.json()["field"])
        assert r.json()["error"].startswith("webhook.url: ")
        assert [] == listed["jobs"]
        assert [] == svc.receiver.got

    async def test_a_name_that_resolves_to_a_refused_address_is_never_contacted(
        self, caplog: pytest.LogCaptureFixture, io_clock: Clock
    ) -> None:
        """The guard refuses at connect time; the event is retried, the receiver never hit."""
        _log_everything(caplog)

        async def resolver(host: str, port: int) -> list[str]:
            return ["127.0.0.1"]  # the receiver's address, which this dispatcher refuses

        async with open_service(allow=(), resolver=resolver) as svc:
            r = await svc.submit(1, url=svc.receiver.url("hooks.example.org"))
            await svc.outbox.wait_until(lambda: svc.count("retried") >= 2)

        assert 202 == r.status_code
        assert [] == svc.receiver.got
        _assert_no_address_logged(caplog, "hooks.example.org", "127.0.0.1", f":{svc.receiver.port}")

    async def test_no_log_record_holds_the_url_or_host(
        self, caplog: pytest.LogCaptureFixture, io_clock: Clock
    ) -> None:
        """Deliveries, retries and give-ups log the job id, event, attempt and status only."""
        _log_everything(caplog)
        async with open_service() as svc:
            svc.receiver.statuses.extend([500, 404])
            await svc.submit(2, events=["target", "end"], url=svc.receiver.url(path="/p/secret"))
            await svc.receiver.wait_for(5)

        messages = [r.getMessage() for r in caplog.records if r.name.startswith("trio_batch")]
        assert any("trying again later" in m for m in messages)
        _assert_no_address_logged(caplog, "127.0.0.1", "/p/secret", f":{svc.receiver.port}")


def _log_everything(caplog: pytest.LogCaptureFixture) -> None:
    """INFO from every library (httpx logs each request's URL there), DEBUG from trio_batch.

    (httpcore's DEBUG traces name hosts, for target fetches too: keep httpcore above DEBUG.)
    """
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="trio_batch")


def _assert_no_address_logged(caplog: pytest.LogCaptureFixture, *needles: str) -> None:
    for record in caplog.records:
        text = record.getMessage() + " " + " ".join(map(str, record.__dict__.values()))
        for needle in needles:
            assert needle not in text, (record.name, record.getMessage())


class TestSubmit:
    async def test_a_caller_without_a_secret_gets_400_naming_webhook(self, io_clock: Clock) -> None:
        """A webhook from a caller with no secret cannot be signed: 400 naming webhook."""
        async with open_service() as svc:
            r = await svc.submit(1, key=BOB_KEY)

        assert (400, "webhook") == (r.status_code, r.json()["field"])
        assert "trio-batch keys secret bob --keys" in r.json()["hint"]

    @pytest.mark.parametrize(
        ("webhook", "field"),
        [
            ("https://x.org/", "webhook"),
            ({"events": ["end"]}, "webhook.url"),
            ({"url": 7}, "webhook.url"),
            ({"url": "ftp://x.org/"}, "webhook.url"),
            ({"url": "https://x.org/", "events": []}, "webhook.events"),
            ({"url": "https://x.org/", "events": ["start"]}, "webhook.events"),
            ({"url": "https://x.org/", "events": "end"}, "webhook.events"),
            ({"url": "https://x.org/", "secret": "x"}, "webhook.secret"),
        ],
    )
    async def test_a_malformed_webhook_is_400_naming_its_field(
        self, webhook: object, field: str, io_clock: Clock
    ) -> None:
        """Each malformed part of webhook is a 400 whose field names it, with a hint."""
        async with open_service() as svc:
            r = await svc.client.post(
                "/v1/batch",
                json={"targets": [{"url": "https://example.org/"}], "webhook": webhook},
                headers=auth(),
            )

        assert (400, field) == (r.status_code, r.json()["field"])
        assert r.json()["hint"]


async def test_every_store_delivers_in_order(store: ServiceStore, io_clock: Clock) -> None:
    """Target events then the end, on MemoryStore, SQLite and (when set up) PostgreSQL."""
    async with open_service(store) as svc:
        r = await svc.submit(3, events=["target", "end"])
        got = await svc.receiver.wait_for(4)
        await svc.outbox.wait_recorded(4)

    job_id = r.json()["id"]
    assert [f"{job_id}.t0", f"{job_id}.t1", f"{job_id}.t2", f"{job_id}.end"] == [
        d.headers["webhook-id"] for d in got
    ]
    assert [] == await store.hooks_due(float("inf"), 10)


async def test_deliveries_left_in_the_store_are_sent_after_a_restart(
    tmp_path: os.PathLike[str], io_clock: Clock
) -> None:
    """A job finished while nothing delivered; the next service's dispatcher delivers it."""
    path = os.path.join(tmp_path, "jobs.sqlite")
    async with open_receiver() as receiver:
        async with SQLiteStore.open(path) as store, open_engine(store, ScriptedFetch()) as engine:
            sub = await engine.submit(
                Caller("alice", "lab", hash_key(ALICE_KEY)),
                "fleet",
                [_target(), _target()],
                webhook=Webhook(receiver.url(), ("target", "end")),
            )
            await wait_ended(engine, sub.id)
            snap = await engine.status(sub.id)
        assert snap is not None
        assert JobStatus.DONE == snap.job.status
        async with (
            SQLiteStore.open(path) as store,
            open_engine(store, ScriptedFetch()) as engine,
            open_deliveries(store, engine, webhook_keys(), allow=LOOPBACK, policy=FAST),
        ):
            got = await receiver.wait_for(3)

    assert [f"{sub.id}.t0", f"{sub.id}.t1", f"{sub.id}.end"] == [
        d.headers["webhook-id"] for d in got
    ]


async def test_the_python_client_submits_a_webhook(io_clock: Clock) -> None:
    """``client.submit(targets, webhook=...)`` reaches the route: the receiver gets the end."""
    from trio_batch.client import open_client

    async with (
        open_service() as svc,
        open_client("http://api.test", ALICE_KEY, transport=svc.transport) as client,
    ):
        sub = await client.submit(
            ["https://example.org/a"],
            webhook={"url": svc.receiver.url(), "events": ["target", "end"]},
        )
        got = await svc.receiver.wait_for(2)

    assert [f"{sub.id}.t0", f"{sub.id}.end"] == [d.headers["webhook-id"] for d in got]


async def test_jobs_without_a_webhook_never_wake_the_deliveries(io_clock: Clock) -> None:
    """A busy engine whose jobs have no webhook costs the dispatcher no store read."""
    quiet = DeliveryPolicy(poll=3600.0, min_gap=0.0)
    async with open_service(policy=quiet) as svc:
        await trio.testing.wait_all_tasks_blocked()  # its first look at the store is done
        before = svc.reads()
        for i in range(5):
            body = {"targets": [{"url": f"https://example.org/{i}/{j}"} for j in range(3)]}
            job = (await svc.client.post("/v1/batch", json=body, headers=auth())).json()["id"]
            await wait_ended(svc.engine, job)
        quiet_reads = svc.reads() - before
        hooked = await svc.submit(1)
        await svc.receiver.wait_for(1)

    assert 0 == quiet_reads
    assert 202 == hooked.status_code
