"""The streams on every store, with the real clock (SQLite and PostgreSQL read in threads).

And on PostgreSQL, a follower served by one instance sees the outcomes another instance stores
(a bounded poll: once a second), the case the engine's own wake-ups cannot cover.
"""

from __future__ import annotations

import json
import time

import pytest
import trio

from tests.stores.postgres.support import PG_DSN, open_test_schema
from tests.support import slack
from trio_batch import Caller, Config, Target, open_engine
from trio_batch.http import create_app
from trio_batch.stores import Store
from trio_batch.testing import ScriptedFetch

from .support import ALICE_KEY, lifespan, make_keys, open_api, open_stream

A, B = "https://a.example.test/", "https://b.example.test/"


class TestEveryStore:
    async def test_follow_and_events_end_at_terminal(self, store: Store) -> None:
        """A followed NDJSON body and an events stream both see each target, then the end."""
        fetch = ScriptedFetch()
        gate = fetch.hold(B)
        async with open_api(store=store, fetch=fetch) as api:
            job = (await api.submit(A, B)).json()["id"]
            with trio.fail_after(10):
                async with (
                    open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1) as nd,
                    open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as sse,
                ):
                    await nd.read_until(b"\n")
                    await sse.read_until(b"\n\n")
                    gate.set()
                    await nd.read_all()
                    await sse.read_all()
            listed = (await api.get("/v1/batch")).json()

        assert nd.complete and sse.complete
        assert [0, 1] == [json.loads(x)["idx"] for x in nd.body.splitlines()]
        assert sse.body.count(b"event: target") == 2
        assert b"event: end" in sse.body
        assert [job] == [j["id"] for j in listed["jobs"]]


@pytest.mark.skipif(not PG_DSN, reason="set TRIO_BATCH_TEST_PG for the PostgreSQL tests")
class TestAnotherInstance:
    async def test_a_follower_sees_another_instances_outcomes_within_a_second(self) -> None:
        """Instance 1 runs the job; a follower on instance 2 gets each event within ~1 s."""
        from trio_batch.stores import PostgresStore

        fetch = ScriptedFetch()
        gate = fetch.hold(B)
        async with (
            open_test_schema(PG_DSN) as schema,
            PostgresStore.open(PG_DSN, schema=schema) as one,
            PostgresStore.open(PG_DSN, schema=schema) as two,
            open_engine(one, fetch) as runner,
            open_engine(two, ScriptedFetch(), Config()) as reader,
        ):
            app = create_app(reader, make_keys(), access_log_enabled=False)
            sub = await runner.submit(Caller("alice"), "fleet", [Target(A), Target(B)])
            begun = time.monotonic()  # a read of the job on instance 2: the store's round trip
            await reader.targets(sub.id, after=-1, limit=16)
            read = time.monotonic() - begun
            async with (
                lifespan(app),
                open_stream(app, f"/v1/batch/{sub.id}/events", key=ALICE_KEY) as s,
            ):
                with trio.fail_after(10):
                    await s.read_until(b"id: 0\n")
                    gate.set()
                    released = time.monotonic()
                    await s.read_until(b"id: 1\n")
                    lag = time.monotonic() - released
                    await s.read_all()

        assert s.complete
        assert lag < 1.0 + slack(0.5, read)  # one poll of 1 s, then the reads it makes
