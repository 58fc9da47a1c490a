"""The batch API of SPEC §5, in-process through httpx's ASGI transport."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from trio_batch import Config, Options, Result, RetryLater, TargetError
from trio_batch.http import openapi_document
from trio_batch.http._errors import CODES
from trio_batch.testing import ScriptedFetch

from .support import ALICE_KEY, BOB_KEY, Api, auth, open_api

A = "https://a.example.test/"
B = "https://b.example.test/"
C = "https://c.example.test/"


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


class TestAuth:
    async def test_missing_key_is_401_with_a_bearer_challenge(self, api: Api) -> None:
        """A request without a key is refused with 401 and says how to authenticate."""
        r = await api.client.post("/v1/batch", json={"targets": [{"url": A}]})

        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert {"error", "hint"} <= set(r.json())

    @pytest.mark.parametrize("header", ["Bearer nope", "Basic " + ALICE_KEY, "Bearer", ALICE_KEY])
    async def test_unknown_or_malformed_key_is_401(self, api: Api, header: str) -> None:
        """Only 'Bearer <a known key>' gets in."""
        r = await api.client.get("/v1/batch/x", headers={"Authorization": header})

        assert r.status_code == 401

    async def test_health_and_metrics_need_no_key(self, api: Api) -> None:
        """Liveness and metrics are open, for probes and scrapers."""
        health = await api.client.get("/healthz")
        metrics = await api.client.get("/metrics")

        assert (health.status_code, health.json()["status"]) == (200, "ok")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")


class TestSubmit:
    async def test_new_batch_is_202_with_id_status_and_links(self, api: Api) -> None:
        """A new batch answers 202 with its id, status, size, expiry and links."""
        r = await api.submit(A, B)
        body = r.json()

        assert r.status_code == 202
        assert body["reused"] is False
        assert body["status"] in ("queued", "running", "done")
        assert body["targets_total"] == 2
        assert body["expires_at"] == pytest.approx(api.wall.now + 3600)
        assert f"/v1/batch/{body['id']}" == body["links"]["self"] == r.headers["location"]

    async def test_max_age_is_read_as_whole_seconds(self, api: Api) -> None:
        """options.max_age 0 and 60.0 (JSON Schema's integer) are taken, as the job's target
        options show: 0 and 60."""
        targets = [{"url": A, "options": {"max_age": 0}}, {"url": B, "options": {"max_age": 60.0}}]
        r = await api.client.post("/v1/batch", json={"targets": targets}, headers=auth())
        zero = (await api.get(f"/v1/batch/{r.json()['id']}/0")).json()
        sixty = (await api.get(f"/v1/batch/{r.json()['id']}/1")).json()

        assert 202 == r.status_code
        assert ({"max_age": 0}, {"max_age": 60}) == (zero["options"], sixty["options"])

    async def test_repeat_is_200_with_the_same_job(self, api: Api) -> None:
        """Submitting the same targets again reuses the job: 200, reused, same id."""
        first = await api.submit(A)
        again = await api.submit(A)

        assert (first.status_code, again.status_code) == (202, 200)
        assert first.json()["id"] == again.json()["id"]
        assert again.json()["reused"] is True

    async def test_body_over_256_kib_is_413(self, api: Api) -> None:
        """A body of 257 KiB is refused with 413 before it is parsed."""
        body = b'{"targets": [{"url": "' + b"a" * (257 * 1024) + b'"}]}'
        r = await api.client.post("/v1/batch", content=body, headers=auth())

        assert r.status_code == 413
        assert r.json()["field"] == "body"

    async def test_chunked_body_over_256_kib_is_413(self, api: Api) -> None:
        """The limit is counted while reading, so a body without Content-Length is caught too."""

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"targets": [{"url": "'
            for _ in range(257):
                yield b"a" * 1024
            yield b'"}]}'

        r = await api.client.post("/v1/batch", content=chunks(), headers=auth())

        assert "content-length" not in r.request.headers
        assert r.status_code == 413

    async def test_body_of_exactly_256_kib_is_read(self, api: Api) -> None:
        """The limit is inclusive: a 256 KiB body is parsed (and here refused for its URL)."""
        head, tail = b'{"targets": [{"url": "https://a.test/', b'"}]}'
        filler = b"a" * (256 * 1024 - len(head) - len(tail))
        r = await api.client.post("/v1/batch", content=head + filler + tail, headers=auth())

        assert (r.status_code, r.json()["field"]) == (400, "targets[0].url")

    @pytest.mark.parametrize(
        ("body", "field", "words"),
        [
            (b"{not json", "body", "not valid JSON"),
            (b"", "body", "not valid JSON"),
            (b"[1, 2]", "body", "JSON object"),
            (b'{"targets": [], "priority": 1}', "priority", "not a field"),
            (b'{"jobs": []}', "jobs", "not a field"),
            (b"{}", "targets", "missing"),
            (b'{"targets": {"url": "x"}}', "targets", "must be an array"),
            (b'{"targets": [5]}', "targets[0]", "must be a URL string or an object"),
            (b'{"targets": [""]}', "targets[0]", "empty string"),
            (b'{"targets": [{"url": 5}]}', "targets[0].url", "non-empty string"),
            (b'{"targets": [{"href": "x"}]}', "targets[0].href", "not a field"),
            (b'{"targets": [{"url": "https://a.test/", "options": []}]}', "targets[0].options", ""),
            (
                b'{"targets": [{"url": "https://a.test/"}, '
                b'{"url": "https://b.test/", "options": {"mode": 1}}]}',
                "targets[1].options.mode",
                "must be a string",
            ),
            (
                b'{"targets": [{"url": "https://a.test/", "options": {"recover": "yes"}}]}',
                "targets[0].options.recover",
                "true or false",
            ),
            (
                b'{"targets": [{"url": "https://a.test/", "options": {"colour": "red"}}]}',
                "targets[0].options.colour",
                "not an option",
            ),
            (
                b'{"targets": [{"url": "https://a.test/", "options": {"max_age": true}}]}',
                "targets[0].options.max_age",
                "must be a whole number or null",
            ),
            (
                b'{"targets": [{"url": "https://a.test/", "options": {"max_age": 1.5}}]}',
                "targets[0].options.max_age",
                "must be a whole number or null",
            ),
            (
                b'{"targets": [{"url": "https://a.test/", "options": {"max_age": -1}}]}',
                "targets[0].options",
                "max_age must be 0 or more seconds (got -1)",
            ),
            (b'{"targets": [{"url": NaN}]}', "body", "not valid JSON"),
            (b"[" * 100_000, "body", "not valid JSON"),
        ],
    )
    async def test_bad_input_is_400_naming_the_field(
        self, api: Api, body: bytes, field: str, words: str
    ) -> None:
        """Malformed JSON, unknown fields and wrong types are 400 with the field named, and
        a hint of what to send instead."""
        r = await api.client.post("/v1/batch", content=body, headers=auth())
        answer = r.json()

        assert r.status_code == 400
        assert field == answer["field"]
        assert words in answer["error"]
        assert answer["hint"]

    @pytest.mark.parametrize(
        "url",
        [
            "http://10.0.0.7/admin",
            "http://127.0.0.1:8080/",
            "http://[::1]/",
            "http://169.254.169.254/latest/meta-data",
            "ftp://a.example.test/file",
            "https://user:pw@a.example.test/",
            "https:///no-host",
            "https://a.example.test/" + "x" * 2048,
        ],
    )
    async def test_url_failing_the_precheck_is_400_naming_its_index(
        self, api: Api, url: str
    ) -> None:
        """A target URL that fails the pre-check is refused; the error names its index."""
        r = await api.submit(A, url)

        assert r.status_code == 400
        assert r.json()["field"] == "targets[1].url"
        assert r.json()["error"].startswith("targets[1].url: ")
        assert api.fetch.calls == []

    async def test_options_the_fetcher_refuses_are_400_naming_the_index(self) -> None:
        """The fetcher's option check runs at submit, and its refusal names the target."""

        def check(options: Options) -> None:
            if options.mode not in ("", "text"):
                raise TargetError(f"unknown mode {options.mode!r}", hint="use text", status=400)

        async with open_api(validate_options=check) as api:
            r = await api.client.post(
                "/v1/batch",
                json={"targets": [{"url": A}, {"url": B, "options": {"mode": "video"}}]},
                headers=auth(),
            )

        assert (r.status_code, r.json()["field"]) == (400, "targets[1].options")
        assert r.json()["hint"] == "use text"

    async def test_no_targets_is_400(self, api: Api) -> None:
        """An empty batch is refused with 400."""
        r = await api.client.post("/v1/batch", json={"targets": []}, headers=auth())

        assert (r.status_code, r.json()["field"]) == (400, "targets")

    async def test_too_many_targets_is_413(self) -> None:
        """More targets than targets_per_job is 413, saying the limit."""
        async with open_api(Config(targets_per_job=2)) as api:
            r = await api.submit(A, B, C)

        assert r.status_code == 413
        assert "2" in r.json()["hint"]

    async def test_caller_busy_is_429_with_retry_after(self) -> None:
        """A caller at its live-job cap gets 429 and Retry-After; others still get in."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        async with open_api(Config(jobs_per_caller=1), fetch=fetch, retry_after=7) as api:
            assert (await api.submit(A)).status_code == 202
            busy = await api.submit(B)
            other = await api.submit(B, key=BOB_KEY)
            gate.set()

        assert (busy.status_code, busy.headers["retry-after"]) == (429, "7")
        assert other.status_code == 202

    async def test_engine_busy_is_503_with_retry_after(self) -> None:
        """When the engine is at its live-job cap, everyone gets 503 and Retry-After."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        async with open_api(Config(jobs_total=1), fetch=fetch) as api:
            assert (await api.submit(A)).status_code == 202
            r = await api.submit(B, key=BOB_KEY)
            gate.set()

        assert (r.status_code, r.headers["retry-after"]) == (503, "5")

    async def test_closed_engine_is_503(self, api: Api) -> None:
        """After the engine closed (shutdown), requests get 503 rather than an error page."""
        await api.engine.aclose()
        r = await api.submit(A)

        assert r.status_code == 503
        assert "retry-after" in r.headers


class TestRead:
    async def test_other_callers_job_is_404_exactly_like_an_unknown_one(self, api: Api) -> None:
        """Bob cannot tell Alice's job from a job that does not exist."""
        job_id = (await api.submit(A)).json()["id"]
        theirs = await api.get(f"/v1/batch/{job_id}", key=BOB_KEY)
        unknown = await api.get("/v1/batch/0123456789abcdef0123456789abcdef", key=BOB_KEY)
        theirs_target = await api.get(f"/v1/batch/{job_id}/0", key=BOB_KEY)
        theirs_cancel = await api.client.delete(f"/v1/batch/{job_id}", headers=auth(BOB_KEY))

        assert 404 == theirs.status_code == unknown.status_code
        assert theirs.json() == unknown.json() == theirs_target.json() == theirs_cancel.json()
        assert 404 == theirs_target.status_code == theirs_cancel.status_code

    async def test_summary_counts_sum_to_the_total_at_every_stage(self) -> None:
        """pending + running + done + failed == targets_total, from queued to done."""
        fetch = ScriptedFetch()
        gate = fetch.hold(B)
        fetch.script(C, TargetError("gone", status=404))
        async with open_api(fetch=fetch) as api:
            job_id = (await api.submit(A, B, C)).json()["id"]
            seen = []
            await settle()
            seen.append((await api.get(f"/v1/batch/{job_id}")).json())
            gate.set()
            await settle()
            seen.append((await api.get(f"/v1/batch/{job_id}")).json())

        for summary in seen:
            assert summary["targets_total"] == sum(summary["counts"].values()) == 3
        assert seen[0]["counts"] == {"pending": 1, "running": 1, "done": 1, "failed": 0}
        assert (seen[0]["status"], seen[1]["status"]) == ("running", "partial")
        assert seen[1]["counts"] == {"pending": 0, "running": 0, "done": 2, "failed": 1}
        assert {
            "id",
            "status",
            "error",
            "targets_total",
            "counts",
            "created_at",
            "updated_at",
            "expires_at",
            "links",
        } == set(seen[1])

    async def test_results_lists_targets_in_input_order_with_results(self, api: Api) -> None:
        """results=1 adds every target, in order, with idx, url, status, error, hint, result."""
        api.fetch.script(B, Result("bee", {"status": 200}))
        api.fetch.script(C, TargetError("not found", hint="check the URL", status=404))
        job_id = (await api.submit(A, B, C)).json()["id"]
        await settle()
        body = (await api.get(f"/v1/batch/{job_id}", results="1")).json()

        assert [t["url"] for t in body["targets"]] == [A, B, C]
        assert [t["idx"] for t in body["targets"]] == [0, 1, 2]
        assert body["targets"][1]["result"] == {"content": "bee", "meta": {"status": 200}}
        assert (
            body["targets"][2]["status"],
            body["targets"][2]["error"],
            body["targets"][2]["hint"],
            body["targets"][2]["result"],
        ) == ("failed", "not found", "check the URL", None)
        assert (body["targets_matched"], body["next_offset"]) == (3, None)

    async def test_state_filter_and_paging(self, api: Api) -> None:
        """state= keeps only targets in that state; offset/limit page through them."""
        urls = [f"https://p.example.test/{i}" for i in range(7)]
        for u in urls[::2]:
            api.fetch.script(u, TargetError("nope", status=502))
        job_id = (await api.submit(*urls)).json()["id"]
        await settle()
        path = f"/v1/batch/{job_id}"
        failed = (await api.get(path, results="1", state="failed")).json()
        page1 = (await api.get(path, results="1", limit="3")).json()
        page2 = await api.get(path, results="1", offset=str(page1["next_offset"]), limit="3")
        page3 = (await api.get(path, results="1", offset="6", limit="3")).json()
        both = (await api.get(path, results="1", state="done,failed", limit="100")).json()

        assert [t["idx"] for t in failed["targets"]] == [0, 2, 4, 6]
        assert failed["targets_matched"] == 4
        assert ([t["idx"] for t in page1["targets"]], page1["next_offset"]) == ([0, 1, 2], 3)
        assert ([t["idx"] for t in page2.json()["targets"]], 6) == ([3, 4, 5], 6)
        assert ([t["idx"] for t in page3["targets"]], page3["next_offset"]) == ([6], None)
        assert len(both["targets"]) == 7
        assert sum(page1["counts"].values()) == 7

    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"results": "yes"}, "results"),
            ({"results": "1", "state": "finished"}, "state"),
            ({"results": "1", "offset": "-1"}, "offset"),
            ({"results": "1", "limit": "0"}, "limit"),
            ({"results": "1", "limit": "ten"}, "limit"),
        ],
    )
    async def test_bad_query_is_400_naming_it(
        self, api: Api, params: dict[str, str], field: str
    ) -> None:
        """A bad query parameter is 400 naming it."""
        job_id = (await api.submit(A)).json()["id"]
        r = await api.get(f"/v1/batch/{job_id}", **params)

        assert (400, field) == (r.status_code, r.json()["field"])

    async def test_one_target_with_its_result(self, api: Api) -> None:
        """GET /v1/batch/{id}/{idx} returns that target with its result; a bad idx is 404."""
        job_id = (await api.submit(A, B)).json()["id"]
        await settle()
        one = await api.get(f"/v1/batch/{job_id}/1")
        missing = await api.get(f"/v1/batch/{job_id}/2")

        assert one.status_code == 200
        assert (one.json()["idx"], one.json()["url"], one.json()["status"]) == (1, B, "done")
        assert f"content of {B}" == one.json()["result"]["content"]
        assert missing.status_code == 404

    async def test_owner_reads_move_the_expiry_and_others_do_not(self, api: Api) -> None:
        """An owner's read touches the job (expires_at moves); another caller's 404 does not."""
        job_id = (await api.submit(A)).json()["id"]
        await settle()
        first = (await api.get(f"/v1/batch/{job_id}")).json()["expires_at"]
        await settle()  # the touch is written in the background, after the answer
        api.wall.advance(600)
        await api.get(f"/v1/batch/{job_id}", key=BOB_KEY)
        snap = await api.engine.status(job_id)
        assert snap is not None
        lease_after_bob = snap.job.lease
        second = (await api.get(f"/v1/batch/{job_id}")).json()["expires_at"]
        await settle()
        snap = await api.engine.status(job_id)
        assert snap is not None

        assert second == pytest.approx(first + 600)
        assert lease_after_bob < snap.job.lease == pytest.approx(api.wall.now)


class TestCancel:
    async def test_cancel_is_200_with_summary_then_409_with_status(self) -> None:
        """DELETE cancels a live job (200, its summary); a second DELETE is 409 'cancelled'."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        async with open_api(fetch=fetch) as api:
            job_id = (await api.submit(A, B)).json()["id"]
            await settle()
            first = await api.client.delete(f"/v1/batch/{job_id}", headers=auth())
            again = await api.client.delete(f"/v1/batch/{job_id}", headers=auth())
            gate.set()
            await settle()
            after = (await api.get(f"/v1/batch/{job_id}")).json()

        assert (first.status_code, first.json()["status"]) == (200, "cancelled")
        assert first.json()["targets_total"] == sum(first.json()["counts"].values())
        assert (again.status_code, again.json()["status"]) == (409, "cancelled")
        assert (
            after["status"],
            after["counts"],
        ) == ("cancelled", {"pending": 1, "running": 0, "done": 1, "failed": 0})

    async def test_cancelling_a_finished_job_is_409_with_its_status(self, api: Api) -> None:
        """A done job cannot be cancelled: 409 says it is done."""
        job_id = (await api.submit(A)).json()["id"]
        await settle()
        r = await api.client.delete(f"/v1/batch/{job_id}", headers=auth())

        assert (r.status_code, r.json()["status"]) == (409, "done")


class TestFetchOne:
    async def test_single_fetch_answers_with_the_result(self, api: Api) -> None:
        """POST /v1/fetch runs the fetcher at once and answers with its result."""
        api.fetch.script(A, Result("hello", {"status": 200}))
        r = await api.client.post(
            "/v1/fetch", json={"url": A, "options": {"mode": "text"}}, headers=auth()
        )

        assert r.status_code == 200
        assert r.json() == {"url": A, "result": {"content": "hello", "meta": {"status": 200}}}
        assert api.fetch.callers[-1].name == "alice"

    async def test_a_failed_fetch_answers_with_its_status_and_hint(self, api: Api) -> None:
        """A TargetError comes back with its own status, error and hint."""
        api.fetch.script(A, TargetError("the page is 14 MB", hint="ask for pages=1-5", status=413))
        r = await api.client.post("/v1/fetch", json={"url": A}, headers=auth())

        assert r.status_code == 413
        assert r.json() == {
            "error": "the page is 14 MB",
            "hint": "ask for pages=1-5",
            "code": "fetch_failed",
        }

    async def test_errors_from_a_fetchers_nursery_keep_their_meaning(self, api: Api) -> None:
        """A TargetError or RetryLater inside an exception group answers as itself."""
        api.fetch.script(
            A,
            ExceptionGroup("one", [TargetError("gone", hint="check the URL", status=404)]),
            ExceptionGroup("busy", [RetryLater(after=4.5)]),
        )
        gone = await api.client.post("/v1/fetch", json={"url": A}, headers=auth())
        busy = await api.client.post("/v1/fetch", json={"url": A}, headers=auth())

        assert (404, {"error": "gone", "hint": "check the URL", "code": "fetch_failed"}) == (
            gone.status_code,
            gone.json(),
        )
        assert (503, "5") == (busy.status_code, busy.headers["retry-after"])

    async def test_a_busy_fetch_is_503_with_retry_after(self, api: Api) -> None:
        """A full pool or a rate-limited target is 503 with the wait it asked for."""
        api.fetch.script(A, RetryLater(after=12.2))
        r = await api.client.post("/v1/fetch", json={"url": A}, headers=auth())

        assert (r.status_code, r.headers["retry-after"]) == (503, "13")

    async def test_single_fetch_is_prechecked(self, api: Api) -> None:
        """The pre-check applies to a single fetch too; nothing is fetched."""
        r = await api.client.post("/v1/fetch", json={"url": "http://10.1.2.3/"}, headers=auth())

        assert (r.status_code, r.json()["field"]) == (400, "body.url")
        assert api.fetch.calls == []

    async def test_no_fetch_route_without_a_fetcher(self) -> None:
        """An app made without a fetcher has no /v1/fetch, and its document says so."""
        async with open_api(with_fetch=False) as api:
            r = await api.client.post("/v1/fetch", json={"url": A}, headers=auth())
            doc = (await api.client.get("/openapi.json")).json()

        assert r.status_code == 404
        assert "/v1/fetch" not in doc["paths"]


class TestObservability:
    async def test_access_log_has_route_status_caller_but_no_url_query_or_key(
        self, api: Api, caplog: pytest.LogCaptureFixture
    ) -> None:
        """One line per request: method, route template, status, duration, caller; no secrets."""
        caplog.set_level(logging.INFO, logger="trio_batch.http.access")
        job_id = (await api.submit(A)).json()["id"]
        await api.get(f"/v1/batch/{job_id}", results="1", state="done")
        await api.client.get("/v1/batch/x", headers={"Authorization": "Bearer secret-guess"})
        lines = [r.getMessage() for r in caplog.records if r.name == "trio_batch.http.access"]

        assert len(lines) == 3
        assert lines[0].startswith("POST /v1/batch 202 ")
        assert lines[0].endswith(" alice")
        assert lines[1].startswith("GET /v1/batch/{id} 200 ")
        assert lines[2].startswith("GET /v1/batch/{id} 401 ")
        assert lines[2].endswith(" -")
        text = "\n".join(lines)
        for secret in (job_id, "a.example.test", "results", "secret-guess", ALICE_KEY):
            assert secret not in text

    async def test_metrics_count_requests_by_template_and_engine_events(self, api: Api) -> None:
        """/metrics has requests by route template and the engine's job and target counts."""
        api.fetch.script(B, TargetError("gone", status=404))
        job_id = (await api.submit(A, B)).json()["id"]
        await settle()
        await api.get(f"/v1/batch/{job_id}")
        text = (await api.client.get("/metrics")).text

        assert (
            'trio_batch_http_requests_total{method="GET",route="/v1/batch/{id}",status="200"} 1.0'
            in text
        )
        assert 'trio_batch_jobs_total{event="created"} 1.0' in text
        assert 'trio_batch_jobs_total{event="partial"} 1.0' in text
        assert 'trio_batch_targets_total{result="failed",status="404"} 1.0' in text
        assert 'trio_batch_targets_total{result="done",status="200"} 1.0' in text
        assert job_id not in text
        assert "example.test" not in text

    async def test_unknown_routes_are_json_404_and_405(self, api: Api) -> None:
        """Routing errors are JSON too, with Allow on 405."""
        missing = await api.client.get("/v2/nothing")
        wrong = await api.client.put("/v1/batch", headers=auth())

        assert (missing.status_code, missing.json()["error"]) == (404, "no such route")
        assert wrong.status_code == 405
        assert "POST" in wrong.headers["allow"]


class TestOpenAPI:
    async def test_every_status_the_app_answered_is_documented(self) -> None:
        """Each (method, route, status) seen across the error paths is in /openapi.json."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        fetch.script(C, TargetError("gone", status=404))
        async with open_api(
            Config(jobs_per_caller=1, jobs_total=2, targets_per_job=3), fetch=fetch
        ) as api:
            c = api.client
            doc = (await c.get("/openapi.json")).json()
            job = (await api.submit(A, B)).json()["id"]
            await api.submit(A, B)  # 200 reused
            await api.submit(C)  # 429
            await api.submit(C, key=BOB_KEY)  # 202
            await api.submit("https://d.example.test/", key=BOB_KEY)  # 429 (bob busy)
            await c.post("/v1/batch", content=b"{", headers=auth())  # 400
            await c.post("/v1/batch", content=b"x" * 300_000, headers=auth())  # 413
            await api.submit(A, B, C, "https://d.test/", key=BOB_KEY)  # 413 too many
            await c.post("/v1/batch", json={})  # 401
            await api.get(f"/v1/batch/{job}")
            await api.get(f"/v1/batch/{job}", results="2")
            await api.get(f"/v1/batch/{job}", key=BOB_KEY)
            await api.get(f"/v1/batch/{job}/0")
            await api.get(f"/v1/batch/{job}/9")
            await c.get(f"/v1/batch/{job}")
            await c.get(f"/v1/batch/{job}/0")
            await c.delete(f"/v1/batch/{job}", headers=auth())
            await c.delete(f"/v1/batch/{job}", headers=auth())
            await c.delete(f"/v1/batch/{job}")
            await c.delete(f"/v1/batch/{job}", headers=auth(BOB_KEY))
            await c.post("/v1/fetch", json={"url": B}, headers=auth())
            await c.post("/v1/fetch", json={"url": C}, headers=auth())
            await c.post("/v1/fetch", json={"url": "ftp://x"}, headers=auth())
            await c.post("/v1/fetch", json={"url": B})
            await c.post("/v1/fetch", content=b"x" * 300_000, headers=auth())
            await c.get("/healthz")
            await c.get("/metrics")
            gate.set()
            await settle()
            await api.engine.aclose()
            await api.submit(A)  # 503 shutting down
            seen = {
                (x.labels["method"], x.labels["route"], x.labels["status"])
                for metric in api.metrics.requests.collect()
                for x in metric.samples
                if x.name.endswith("_total")
            }

        doc_paths = doc["paths"]
        undocumented = []
        for method, route, status in seen:
            if route in ("/openapi.json", "unmatched"):
                continue
            responses = doc_paths[route][method.lower()]["responses"]
            if status not in responses and f"{status[0]}XX" not in responses:
                undocumented.append((method, route, status))

        assert undocumented == []
        assert {s for _, _, s in seen} >= {
            "200",
            "202",
            "400",
            "401",
            "404",
            "409",
            "413",
            "429",
            "503",
        }

    def test_the_document_is_valid_json_with_every_route(self) -> None:
        """The document round-trips as JSON and lists every route, /v1/fetch included."""
        doc = json.loads(
            json.dumps(openapi_document(with_fetch=True, max_body=1024, retry_after=5))
        )

        assert {
            "/v1/batch",
            "/v1/crawl",
            "/v1/batch/{id}",
            "/v1/batch/{id}/{idx}",
            "/v1/batch/{id}/results",
            "/v1/batch/{id}/events",
            "/v1/batch/{id}/retry",
            "/v1/fetch",
            "/v1/me",
            "/healthz",
            "/metrics",
            "/ui",
        } == set(doc["paths"])

    def test_the_document_describes_max_age_and_the_default_concurrency(self) -> None:
        """Options.max_age is whole seconds from 0 or null; a batch's concurrency defaults to 4."""
        doc = json.loads(
            json.dumps(openapi_document(with_fetch=True, max_body=1024, retry_after=5))
        )
        schemas = doc["components"]["schemas"]
        max_age = schemas["Options"]["properties"]["max_age"]
        concurrency = schemas["BatchIn"]["properties"]["concurrency"]

        assert (["integer", "null"], 0) == (max_age["type"], max_age["minimum"])
        assert 4 == concurrency["default"]

    @pytest.mark.parametrize("with_fetch", [True, False])
    def test_the_document_passes_openapi_spec_validator(self, with_fetch: bool) -> None:
        """The document is valid OpenAPI 3.1 (a link parameter once was the literal 0)."""
        validator = pytest.importorskip("openapi_spec_validator")

        validator.validate(
            openapi_document(with_fetch=with_fetch, max_body=256 * 1024, retry_after=5)
        )


class TestErrorCodes:
    def test_the_docs_list_every_code_with_its_status(self) -> None:
        """docs/http.md's table of codes is CODES, row for row, so a program can rely on it."""
        docs = (Path(__file__).parents[2] / "docs" / "http.md").read_text()
        rows = re.findall(r"^\| `([a-z_]+)` \| (\d+|the fetch's) \|", docs, flags=re.MULTILINE)

        assert [(code, str(status or "the fetch's")) for code, (status, _) in CODES.items()] == rows

    async def test_each_refusal_says_its_code(self) -> None:
        """The code tells apart what one status can mean; every error answer carries one."""
        async with open_api(Config(jobs_per_caller=1, jobs_total=4)) as api:
            done = (await api.submit(B)).json()["id"]
            await settle()
            gate = api.fetch.hold(A)
            live = (await api.submit(A)).json()["id"]
            answers = {
                "bad_request": await api.client.post("/v1/batch", content=b"{", headers=auth()),
                "no_targets": await api.client.post(
                    "/v1/batch", json={"targets": []}, headers=auth()
                ),
                "unauthorized": await api.client.get(f"/v1/batch/{live}"),
                "not_found": await api.get("/v1/batch/nope"),
                "method_not_allowed": await api.client.put("/healthz"),
                "not_cancellable": await api.client.delete(f"/v1/batch/{done}", headers=auth()),
                "not_retryable": await api.client.post(f"/v1/batch/{live}/retry", headers=auth()),
                "caller_busy": await api.submit(C),
            }
            gate.set()

        assert {code: code for code in answers} == {
            code: answer.json()["code"] for code, answer in answers.items()
        }
        assert [CODES[code][0] for code in answers] == [a.status_code for a in answers.values()]
