"""POST /v1/batch/{id}/retry (SPEC §7): the failed targets again, as a linked job."""

from __future__ import annotations

import trio
import trio.testing

from tests.support import wait_ended
from trio_batch import Config, TargetError, TargetState

from .support import BOB_KEY, Api, auth, open_api

OK = "https://ok.example.test/"
BAD = "https://bad.example.test/"
BAD2 = "https://bad.example.test/2"


async def retry(api: Api, job_id: str, key: str | None = None) -> tuple[int, dict[str, object]]:
    headers = auth(key) if key else auth()
    response = await api.client.post(f"/v1/batch/{job_id}/retry", headers=headers)
    return response.status_code, response.json()


async def test_retry_makes_a_linked_job_of_the_failed_targets(api: Api) -> None:
    """A retry is a new job of exactly the failed targets, in order, naming the old job."""
    api.fetch.script(BAD, TargetError("upstream failed", hint="later"))
    api.fetch.script(BAD2, TargetError("upstream failed", hint="later"))
    submitted = await api.client.post(
        "/v1/batch",
        json={
            "targets": [
                {"url": BAD2, "options": {"mode": "text"}},
                {"url": OK},
                {"url": BAD},
            ]
        },
        headers=auth(),
    )
    old = submitted.json()["id"]
    await wait_ended(api.engine, old)

    status, body = await retry(api, old)
    again_status, again = await retry(api, old)
    assert isinstance(body["id"], str)
    new = await api.get(f"/v1/batch/{body['id']}", results=1)

    assert 202 == status
    assert (200, body["id"], True) == (again_status, again["id"], again["reused"])
    assert old == body["retry_of"] == again["retry_of"]
    assert 2 == body["targets_total"]
    targets = new.json()["targets"]
    assert [BAD2, BAD] == [t["url"] for t in targets]
    links = body["links"]
    assert isinstance(links, dict)
    assert str(links["self"]).endswith(str(body["id"]))


async def test_a_live_job_or_one_without_failures_is_409(api: Api) -> None:
    """A running job, or a finished one with no failed target, cannot be retried: 409."""
    gate = api.fetch.hold(OK)
    job = (await api.submit(OK)).json()["id"]

    live_status, live = await retry(api, job)
    gate.set()
    await wait_ended(api.engine, job)
    done_status, done = await retry(api, job)

    assert (409, "running") == (live_status, live["status"])
    assert "only a finished job" in str(live["error"]) and "events" in str(live["hint"])
    assert (409, "done") == (done_status, done["status"])
    assert "no failed target" in str(done["error"]) and done["hint"]


async def test_another_callers_job_or_an_unknown_one_is_404(api: Api) -> None:
    """Another caller's job is as unknown as an id that never existed: 404 for both."""
    api.fetch.script(BAD, TargetError("upstream failed"))
    job = (await api.submit(BAD)).json()["id"]
    await wait_ended(api.engine, job)

    other, _ = await retry(api, job, key=BOB_KEY)
    unknown, _ = await retry(api, "0" * 32)

    assert (404, 404) == (other, unknown)


async def test_a_retry_is_capped_like_a_submit() -> None:
    """A retry counts against the caller's live jobs: 429 with Retry-After when full."""
    async with open_api(Config(ttl=3600, jobs_per_caller=1)) as api:
        api.fetch.script(BAD, TargetError("upstream failed"))
        job = (await api.submit(BAD)).json()["id"]
        await wait_ended(api.engine, job)
        gate = api.fetch.hold(OK)
        await api.submit(OK)

        status, body = await retry(api, job)
        response = await api.client.post(f"/v1/batch/{job}/retry", headers=auth())
        gate.set()

    assert 429 == status and body["hint"]
    assert response.headers["Retry-After"]


async def test_a_cancelled_job_retries_its_unfinished_targets(api: Api) -> None:
    """Amending SPEC §7: a cancelled job's targets that never ran are in its retry with the
    failed ones, in input order; the 409 of a job with nothing left names its results."""
    api.fetch.script(BAD, TargetError("upstream failed", hint="later"))
    gate = api.fetch.hold(OK)
    job = (await api.submit(BAD, OK, OK + "2", OK + "3")).json()["id"]
    while OK not in api.fetch.calls:
        await trio.testing.wait_all_tasks_blocked()
    cancelled = await api.client.delete(f"/v1/batch/{job}", headers=auth())
    gate.set()
    while OK in [t.url for t in await api.engine.targets(job, states=[TargetState.RUNNING])]:
        await trio.testing.wait_all_tasks_blocked()

    status, body = await retry(api, job)
    assert isinstance(body["id"], str)
    await wait_ended(api.engine, body["id"])
    new = await api.get(f"/v1/batch/{body['id']}", results=1)
    nothing_status, nothing = await retry(api, body["id"])

    assert (200, "cancelled") == (cancelled.status_code, cancelled.json()["status"])
    assert (202, 3) == (status, body["targets_total"])
    assert [BAD, OK + "2", OK + "3"] == [t["url"] for t in new.json()["targets"]]
    assert (409, "done") == (nothing_status, nothing["status"])
    assert "/results" in str(nothing["hint"])
