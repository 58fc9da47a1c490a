"""SPEC §7's streams: ``GET /v1/batch/{id}/results`` (NDJSON) and ``/events`` (SSE)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from trio_batch import Config, HostBudget, RetryLater, TargetError, TargetStatus
from trio_batch.http._stream import CHUNK
from trio_batch.stores import MemoryStore

from .support import ALICE_KEY, BOB_KEY, Api, auth, open_api, open_stream

A, B, C = "https://a.example.test/", "https://b.example.test/", "https://c.example.test/"


def lines(body: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in body.decode().splitlines()]


def events(body: bytes) -> list[tuple[str, str, object]]:
    """``(id, event, data)`` of each event of an SSE body; comments are skipped."""
    found = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and ":" != line[0])
        if fields:
            found.append((fields.get("id", ""), fields["event"], json.loads(fields["data"])))
    return found


async def submitted(api: Api, *urls: str, key: str = ALICE_KEY) -> str:
    r = await api.submit(*urls, key=key)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


class TestResults:
    async def test_every_target_in_input_order_as_ndjson(self, api: Api) -> None:
        """A finished job answers one line per target, in input order, with the target fields."""
        api.fetch.script(B, TargetError("gone", hint="try later", status=404))
        job = await submitted(api, A, B, C)
        await trio.testing.wait_all_tasks_blocked()

        r = await api.get(f"/v1/batch/{job}/results")

        assert 200 == r.status_code
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert [
            {
                "idx": 0,
                "url": A,
                "status": "done",
                "error": "",
                "hint": "",
                "result": {"content": f"content of {A}", "meta": {}},
            },
            {"idx": 1, "url": B, "status": "failed", "error": "gone", "hint": "try later",
             "result": None},
            {"idx": 2, "url": C, "status": "done", "error": "", "hint": "",
             "result": {"content": f"content of {C}", "meta": {}}},
        ] == lines(r.content)  # fmt: skip

    async def test_state_filters_and_after_starts_after_an_index(self, api: Api) -> None:
        """``state`` keeps the targets in those states; ``after`` skips up to that index."""
        api.fetch.script(B, TargetError("gone"))
        job = await submitted(api, A, B, C)
        await trio.testing.wait_all_tasks_blocked()

        failed = await api.get(f"/v1/batch/{job}/results", state="failed")
        done = await api.get(f"/v1/batch/{job}/results", state="done")
        after = await api.get(f"/v1/batch/{job}/results", after=0)
        both = await api.get(f"/v1/batch/{job}/results", after=0, state="done")

        assert [1] == [x["idx"] for x in lines(failed.content)]
        assert [0, 2] == [x["idx"] for x in lines(done.content)]
        assert [1, 2] == [x["idx"] for x in lines(after.content)]
        assert [2] == [x["idx"] for x in lines(both.content)]

    async def test_a_job_bigger_than_one_chunk_streams_whole(self) -> None:
        """Targets are read in chunks; every one of a job of several chunks is written once."""
        n = CHUNK * 2 + 5
        async with open_api(Config(ttl=3600, targets_per_job=n)) as api:
            urls = [f"https://t{i}.example.test/" for i in range(n)]
            job = await submitted(api, *urls)
            await trio.testing.wait_all_tasks_blocked()

            r = await api.get(f"/v1/batch/{job}/results")
            later = await api.get(f"/v1/batch/{job}/results", after=CHUNK)

        assert list(range(n)) == [x["idx"] for x in lines(r.content)]
        assert list(range(CHUNK + 1, n)) == [x["idx"] for x in lines(later.content)]

    async def test_follow_writes_each_target_as_it_ends_and_ends_at_terminal(
        self, api: Api
    ) -> None:
        """follow=1 writes a line once its target is stored, in order, and ends with the job."""
        gate = api.fetch.hold(B)
        job = await submitted(api, A, B, C)
        async with open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1) as s:
            await s.read_until(b"\n")
            await trio.testing.wait_all_tasks_blocked()
            early = lines(s.body)
            open_before = not s.complete
            gate.set()
            await s.read_all()

        assert 200 == s.status
        assert [0] == [x["idx"] for x in early]
        assert open_before
        assert s.complete
        assert [0, 1, 2] == [x["idx"] for x in lines(s.body)]

    async def test_follow_with_state_and_after(self, api: Api) -> None:
        """A follower of failed targets after index 0 gets exactly those, then the end."""
        api.fetch.script(C, TargetError("gone"))
        gate = api.fetch.hold(B)
        job = await submitted(api, A, B, C)
        async with open_stream(
            api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1, state="failed", after=0
        ) as s:
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
            await s.read_all()

        assert s.complete
        assert [2] == [x["idx"] for x in lines(s.body)]

    async def test_follow_of_a_cancelled_job_ends(self, api: Api) -> None:
        """Cancelling a followed job ends the answer after the targets that were stored."""
        gate = api.fetch.hold(B)
        job = await submitted(api, A, B, C)
        async with open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1) as s:
            await s.read_until(b"\n")
            r = await api.client.delete(f"/v1/batch/{job}", headers=auth())
            gate.set()
            await s.read_all()

        assert 200 == r.status_code
        assert s.complete
        assert [0] == [x["idx"] for x in lines(s.body)][:1]

    @pytest.mark.parametrize("path", ["results", "events"])
    async def test_another_callers_job_is_404_like_an_unknown_one(
        self, api: Api, path: str
    ) -> None:
        """Bob cannot read Alice's job: the answer is the unknown id's, byte for byte."""
        job = await submitted(api, A)

        theirs = await api.get(f"/v1/batch/{job}/{path}", key=BOB_KEY)
        unknown = await api.get(f"/v1/batch/{'0' * 32}/{path}")

        assert 404 == theirs.status_code == unknown.status_code
        assert theirs.content == unknown.content
        assert {"error", "hint"} <= set(theirs.json())

    @pytest.mark.parametrize(
        ("params", "field"),
        [({"after": "-1"}, "after"), ({"after": "x"}, "after"), ({"state": "bogus"}, "state"),
         ({"follow": "2"}, "follow")],
    )  # fmt: skip
    async def test_bad_query_is_400_naming_it(
        self, api: Api, params: dict[str, str], field: str
    ) -> None:
        """A bad parameter is a 400 with error, hint and the field, before anything streams."""
        job = await submitted(api, A)

        r = await api.get(f"/v1/batch/{job}/results", **params)

        assert 400 == r.status_code
        assert field == r.json()["field"]
        assert r.json()["error"] and r.json()["hint"]

    async def test_head_answers_the_headers_at_once(self, api: Api) -> None:
        """HEAD of a followed stream of a live job answers without waiting for the job."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A)

        r = await api.client.head(f"/v1/batch/{job}/results?follow=1", headers=auth())
        gate.set()

        assert 200 == r.status_code
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert b"" == r.content

    async def test_without_a_key_is_401(self, api: Api) -> None:
        """The streams need a key like every job route."""
        job = await submitted(api, A)

        r = await api.client.get(f"/v1/batch/{job}/results")

        assert 401 == r.status_code

    async def test_a_dropped_follower_frees_its_watch_at_once(self, api: Api) -> None:
        """A client that hangs up ends the stream's task and frees its watcher."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A, B)
        async with open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1) as s:
            await trio.testing.wait_all_tasks_blocked()
            watching = api.engine.watchers
            s.hang_up()
            await s.read_all()
        after = api.engine.watchers
        gate.set()

        assert 1 == watching
        assert 0 == after
        assert not s.complete

    async def test_a_store_failure_mid_stream_breaks_the_body(
        self, api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """After the 200, a failing store stops the body without its end, never short-but-whole;
        the log names the error's type, never a URL, the message or the key."""
        job = await submitted(api, A)
        await trio.testing.wait_all_tasks_blocked()

        async def broken(*args: object, **kwargs: object) -> object:
            raise OSError(f"disk gone while reading {A}")

        monkeypatch.setattr(api.engine, "targets", broken)
        with caplog.at_level("DEBUG", logger="trio_batch"):
            async with open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY) as s:
                await s.read_all()
        logged = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)

        assert 200 == s.status
        assert s.closed
        assert not s.complete
        assert "OSError" in logged
        assert "example.test" not in logged
        assert "disk gone" not in logged
        assert ALICE_KEY not in logged

    async def test_server_shutdown_breaks_a_follow_but_ends_events_properly(self, api: Api) -> None:
        """When the server stops, a followed NDJSON body is cut (incomplete), an SSE one ends."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A)
        stopping = getattr(api.app, "stopping")  # noqa: B009 - set by serve() at shutdown
        async with (
            open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1) as ndjson,
            open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as sse,
        ):
            await trio.testing.wait_all_tasks_blocked()
            stopping.set()
            await ndjson.read_all()
            await sse.read_all()
        gate.set()

        assert not ndjson.complete
        assert sse.complete


class TestEvents:
    async def test_a_finished_job_answers_its_events_and_end_at_once(self, api: Api) -> None:
        """A terminal job: one target event per finished target in order, then end (its summary)."""
        api.fetch.script(B, TargetError("gone"))
        job = await submitted(api, A, B, C)
        await trio.testing.wait_all_tasks_blocked()

        r = await api.get(f"/v1/batch/{job}/events")
        got = events(r.content)
        summary = (await api.get(f"/v1/batch/{job}")).json()

        assert r.headers["content-type"].startswith("text/event-stream")
        assert [
            ("0", "target", {"idx": 0, "url": A, "status": "done", "error": "", "hint": ""}),
            ("1", "target", {"idx": 1, "url": B, "status": "failed", "error": "gone", "hint": ""}),
            ("2", "target", {"idx": 2, "url": C, "status": "done", "error": "", "hint": ""}),
        ] == got[:3]
        end_id, end, data = got[3]
        assert ("end", "end") == (end_id, end)
        assert isinstance(data, dict)
        assert summary == data

    async def test_live_events_arrive_as_targets_end(self, api: Api) -> None:
        """Each target's event is written when it is stored; end follows the last one."""
        gate = api.fetch.hold(B)
        job = await submitted(api, A, B)
        async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
            await s.read_until(b"\n\n")
            await trio.testing.wait_all_tasks_blocked()
            early = events(s.body)
            gate.set()
            await s.read_all()

        assert [
            ("0", "target", {"idx": 0, "url": A, "status": "done", "error": "", "hint": ""})
        ] == early
        assert ["0", "1", "end"] == [e[0] for e in events(s.body)]
        assert s.complete

    async def test_last_event_id_resumes_after_it(self, api: Api) -> None:
        """Last-Event-ID: N resumes after target N; ``end`` (a reconnect after the end) is a
        204 with no body, which stops a browser's EventSource from reconnecting."""
        job = await submitted(api, A, B, C)
        await trio.testing.wait_all_tasks_blocked()

        after_0 = await api.client.get(
            f"/v1/batch/{job}/events", headers={**auth(), "Last-Event-ID": "0"}
        )
        after_end = await api.client.get(
            f"/v1/batch/{job}/events", headers={**auth(), "Last-Event-ID": "end"}
        )

        assert ["1", "2", "end"] == [e[0] for e in events(after_0.content)]
        assert (204, b"") == (after_end.status_code, after_end.content)

    async def test_a_bad_last_event_id_is_400(self, api: Api) -> None:
        """An id this stream never sends is a 400 naming the header."""
        job = await submitted(api, A)

        r = await api.client.get(
            f"/v1/batch/{job}/events", headers={**auth(), "Last-Event-ID": "x1"}
        )

        assert 400 == r.status_code
        assert "Last-Event-ID" == r.json()["field"]
        assert r.json()["hint"]

    async def test_a_quiet_stream_writes_a_comment_every_15_seconds(
        self, api: Api, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Nothing happens for a while: a comment line keeps proxies from closing the stream."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A)
        async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
            t0 = trio.current_time()
            await s.read_until(b": keep-alive\n\n")
            first = trio.current_time() - t0
            await s.read_until(b": keep-alive\n\n: keep-alive\n\n")
            second = trio.current_time() - t0
            gate.set()
            await s.read_all()

        assert 15 == pytest.approx(first)
        assert 30 == pytest.approx(second)
        assert ["0", "end"] == [e[0] for e in events(s.body)]

    async def test_cancelling_ends_the_stream_with_the_cancelled_summary(self, api: Api) -> None:
        """A cancelled job's stream ends with end, status cancelled."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A, B)
        async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
            await trio.testing.wait_all_tasks_blocked()
            await api.client.delete(f"/v1/batch/{job}", headers=auth())
            await s.read_all()
            gate.set()

        end = events(s.body)[-1]
        assert ("end", "end") == end[:2]
        assert isinstance(end[2], dict)
        assert "cancelled" == end[2]["status"]

    async def test_a_dropped_client_frees_its_watch(self, api: Api) -> None:
        """Hanging up an events stream frees its watcher at once."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A)
        async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
            await trio.testing.wait_all_tasks_blocked()
            watching = api.engine.watchers
        await trio.testing.wait_all_tasks_blocked()
        gate.set()

        assert 1 == watching
        assert 0 == api.engine.watchers
        assert not s.complete

    async def test_many_followers_share_one_watch_entry(self, api: Api) -> None:
        """50 followers of one job all see every event; each has its watcher, freed at the end."""
        gate = api.fetch.hold(A)
        job = await submitted(api, A, B)
        bodies: list[bytes] = []

        async def follower() -> None:
            async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
                bodies.append(await s.read_all())

        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(follower)
            await trio.testing.wait_all_tasks_blocked()
            watching = api.engine.watchers
            gate.set()

        assert 50 == watching
        assert 0 == api.engine.watchers
        assert all(["0", "1", "end"] == [e[0] for e in events(b)] for b in bodies)

    async def test_followers_at_the_same_place_share_the_store_reads(self) -> None:
        """50 followers of one job: the targets are read once a change, not once a follower."""
        store = MemoryStore()
        reads = 0
        read_targets = store.read_targets

        async def counted(*args: Any, **kwargs: Any) -> list[TargetStatus]:
            nonlocal reads
            reads += 1
            return await read_targets(*args, **kwargs)

        store.read_targets = counted  # type: ignore[method-assign]
        async with open_api(store=store) as api:
            gates = [api.fetch.hold(url) for url in (A, B, C)]
            job = await submitted(api, A, B, C)
            bodies: list[bytes] = []

            async def follower() -> None:
                async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
                    bodies.append(await s.read_all())

            async with trio.open_nursery() as nursery:
                for _ in range(50):
                    nursery.start_soon(follower)
                await trio.testing.wait_all_tasks_blocked()
                before = reads
                for gate in gates:
                    gate.set()
                    await trio.testing.wait_all_tasks_blocked()

        assert all(["0", "1", "2", "end"] == [e[0] for e in events(b)] for b in bodies)
        assert reads - before <= 3


class TestConcurrentJobs:
    async def test_a_later_target_ending_first_waits_for_the_earlier_one(self) -> None:
        """concurrency 2: B ends before A; the followers (NDJSON and SSE) still read A, then B,
        then C, none skipped (before, B's index moved the follower past A)."""
        async with open_api(Config(ttl=3600, workers=2)) as api:
            gate_a, gate_b = api.fetch.hold(A), api.fetch.hold(B)
            r = await api.client.post(
                "/v1/batch",
                json={"targets": [{"url": A}, {"url": B}, {"url": C}], "concurrency": 2},
                headers=auth(),
            )
            job = r.json()["id"]
            async with (
                open_stream(api.app, f"/v1/batch/{job}/results", key=ALICE_KEY, follow=1) as ndjson,
                open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as sse,
            ):
                await trio.testing.wait_all_tasks_blocked()
                gate_b.set()
                await trio.testing.wait_all_tasks_blocked()
                nothing_yet = (lines(ndjson.body), events(sse.body))
                gate_a.set()
                await ndjson.read_all()
                await sse.read_all()

        assert ([], []) == nothing_yet
        assert [0, 1, 2] == [x["idx"] for x in lines(ndjson.body)]
        assert ["0", "1", "2", "end"] == [e[0] for e in events(sse.body)]

    async def test_a_target_waiting_for_its_host_is_an_event(self) -> None:
        """Host budget 1: B's job waits while A holds the host: its follower gets a `waiting`
        event (no id, so a resume skips nothing), then its target, then the end."""
        budget = HostBudget(concurrency=1)
        scope = {"budget": budget, "scope": lambda t: "one-host:443"}
        async with open_api(
            Config(ttl=3600, workers=2, jobs_per_caller=2), engine_kwargs=scope
        ) as api:
            gate = api.fetch.hold(A)
            await submitted(api, A)
            job = await submitted(api, B)
            async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as sse:
                await sse.read_until(b"\n\n")
                early = sse.body
                gate.set()
                await sse.read_all()

        assert [("", "waiting", {"idx": 0, "reason": "host_busy", "until": None})] == events(early)
        assert [("", "waiting"), ("0", "target"), ("end", "end")] == [
            (e[0], e[1]) for e in events(sse.body)
        ]

    async def test_each_new_wait_for_the_host_is_an_event(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A target answered busy three times (Retry-After: 2) waits three times for its
        host: three `waiting` events (one each, not one for all), then its target and the end;
        its result's meta says it waited 3 tries and 6 s."""
        budget = HostBudget(concurrency=1)
        scope = {"budget": budget, "scope": lambda t: "one-host:443"}
        async with open_api(Config(ttl=3600), engine_kwargs=scope) as api:
            api.fetch.script(A, *[RetryLater("429", after=2.0) for _ in range(3)])
            job = await submitted(api, A)
            async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as sse:
                await sse.read_all()
            target = (await api.get(f"/v1/batch/{job}/0")).json()

        seen = events(sse.body)
        assert [("", "waiting")] * 3 + [("0", "target"), ("end", "end")] == [
            (e[0], e[1]) for e in seen
        ]
        assert (
            [{"idx": 0, "reason": "backoff"}] * 3
            == [
                {k: v for k, v in e[2].items() if k in ("idx", "reason")}  # type: ignore[attr-defined]
                for e in seen[:3]
            ]
        )
        assert {"tries": 3, "seconds": 6.0} == target["result"]["meta"]["waited"]
