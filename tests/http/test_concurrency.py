"""The submit body's ``concurrency``: targets of one job in flight at once (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.support import wait_ended
from trio_batch import Caller, Config, HostBudget, Result, Target, open_engine
from trio_batch.http import create_app
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

from .support import Api, auth, make_keys, open_api

A = "https://a.example.test/"
B = "https://b.example.test/"


async def post(api: Api, body: object) -> tuple[int, dict[str, object]]:
    r = await api.client.post("/v1/batch", json=body, headers=auth())
    return r.status_code, r.json()


async def test_two_targets_of_one_job_run_at_once() -> None:
    """``concurrency: 2`` in the body: two targets of the job are fetched at once."""
    fetch = ScriptedFetch()
    gates = [fetch.hold(A), fetch.hold(B)]
    async with open_api(Config(ttl=3600, workers=2), fetch=fetch) as api:
        status, answer = await post(api, {"targets": [{"url": A}, {"url": B}], "concurrency": 2})
        await trio.testing.wait_all_tasks_blocked()
        in_flight = list(fetch.calls)
        for gate in gates:
            gate.set()
    assert 202 == status, answer
    assert [A, B] == in_flight


HOSTS = [f"https://h{i}.example.test/" for i in range(6)]


async def _in_flight_at_once(body: dict[str, object], **app_kwargs: Any) -> list[str]:
    """The targets of one submit of six hosts' pages that start before any ends (8 workers)."""
    fetch = ScriptedFetch()
    gates = [fetch.hold(url) for url in HOSTS]
    config = Config(ttl=3600, workers=8, max_workers=8)
    async with open_api(config, fetch=fetch, **app_kwargs) as api:
        status, answer = await post(api, {"targets": [{"url": u} for u in HOSTS], **body})
        assert 202 == status, answer
        await trio.testing.wait_all_tasks_blocked()
        in_flight = list(fetch.calls)
        for gate in gates:
            gate.set()
    return in_flight


async def test_without_it_a_job_takes_the_servers_default_of_four() -> None:
    """A submit that leaves concurrency out (the client's, MCP's) fetches 4 targets at once."""
    assert HOSTS[:4] == await _in_flight_at_once({})


async def test_the_servers_default_is_a_setting() -> None:
    """create_app(default_concurrency=) (serve --default-concurrency) sets what applies."""
    assert HOSTS[:2] == await _in_flight_at_once({}, default_concurrency=2)
    assert HOSTS[:1] == await _in_flight_at_once({}, default_concurrency=1)


async def test_a_submit_that_says_wins_over_the_default() -> None:
    """concurrency in the body beats the server's default, up or down."""
    assert HOSTS[:1] == await _in_flight_at_once({"concurrency": 1})
    assert HOSTS[:6] == await _in_flight_at_once({"concurrency": 6})


async def test_a_default_past_the_engines_most_is_refused_at_once() -> None:
    """create_app refuses a default_concurrency the engine's max_concurrency would refuse."""
    async with open_engine(MemoryStore(), ScriptedFetch(), Config(max_concurrency=2)) as engine:
        with pytest.raises(ValueError, match=r"^create_app default_concurrency must be from 1 "):
            create_app(engine, make_keys(), default_concurrency=3)
        create_app(engine, make_keys())  # None: 4, or the engine's most if less


async def test_another_concurrency_is_another_job() -> None:
    """The same targets with another ``concurrency`` are a new job, not the reused one."""
    async with open_api(Config(ttl=3600, jobs_per_caller=2)) as api:
        _, first = await post(api, {"targets": [{"url": A}]})
        status, again = await post(api, {"targets": [{"url": A}], "concurrency": 2})
    assert 202 == status
    assert first["id"] != again["id"]


@pytest.mark.parametrize("value", [0, 9, -1, "2", True, 1.5, None])
async def test_a_bad_concurrency_is_a_400_naming_the_limit(api: Api, value: object) -> None:
    """A ``concurrency`` outside 1 to the server's limit is a 400 naming the field, the limit and
    the flag."""
    status, answer = await post(api, {"targets": [{"url": A}], "concurrency": value})
    assert 400 == status
    assert "concurrency" == answer["field"]
    assert "from 1 to 8" in str(answer["error"])
    assert "--max-concurrency" in str(answer["hint"])


async def test_a_target_waiting_for_its_host_says_so_and_stays_pending() -> None:
    """Host budget 1: while a's target holds the host, b's pending target carries `waiting`;
    once it ran, no more."""
    fetch = ScriptedFetch()
    gate = fetch.hold(A)
    budget = HostBudget(concurrency=1)
    scope: dict[str, Any] = {"budget": budget, "scope": lambda t: "a.example.test:443"}
    async with open_api(
        Config(ttl=3600, workers=2, jobs_per_caller=2), fetch=fetch, engine_kwargs=scope
    ) as api:
        await post(api, {"targets": [{"url": A}]})
        _, second = await post(api, {"targets": [{"url": A + "2"}]})
        await trio.testing.wait_all_tasks_blocked()
        waiting = (await api.get(f"/v1/batch/{second['id']}", results="true")).json()
        one = (await api.get(f"/v1/batch/{second['id']}/0")).json()
        gate.set()
        await wait_ended(api.engine, str(second["id"]))
        after = (await api.get(f"/v1/batch/{second['id']}", results="true")).json()

    target = waiting["targets"][0]
    assert "pending" == target["status"]
    assert {"reason": "host_busy", "until": None} == target["waiting"]
    assert target["waiting"] == one["waiting"]
    assert "waiting" not in after["targets"][0]


async def test_a_refused_submit_waits_for_the_work_ahead(autojump_clock: object) -> None:
    """The caller's one serial live job has 9 targets of 10 s to start and one in flight (the pace
    known from the first one's 10 s): a second submit is refused with a Retry-After of the
    work ahead, about 100 s, not the 5 s setting."""
    done = trio.Event()
    ended = 0

    async def fetch(caller: Caller, target: Target) -> Result:
        nonlocal ended
        await trio.sleep(10)
        ended += 1
        if ended == 1:
            done.set()
        return Result("ok")

    async with open_api(Config(ttl=3600, workers=2), fetch=fetch) as api:  # type: ignore[arg-type]
        await post(api, {"targets": [{"url": f"{A}{i}"} for i in range(10)], "concurrency": 1})
        await done.wait()
        r = await api.client.post("/v1/batch", json={"targets": [{"url": B}]}, headers=auth())
    assert 429 == r.status_code
    assert 90 <= int(r.headers["retry-after"]) <= 100


async def test_robots_in_the_body_goes_to_every_target_that_does_not_say(api: Api) -> None:
    """The body's ``robots`` is every target's option, unless the target sets its own."""
    status, answer = await post(
        api,
        {
            "targets": [{"url": A}, {"url": B, "options": {"robots": False}}],
            "robots": True,
        },
    )
    job = (await api.get(f"/v1/batch/{answer['id']}", results="true")).json()
    assert 202 == status
    assert [{"robots": True}, {"robots": False}] == [t["options"] for t in job["targets"]]


@pytest.mark.parametrize("value", ["yes", 1, None])
async def test_a_bad_robots_is_a_400(api: Api, value: object) -> None:
    """A ``robots`` that is not a boolean is a 400 naming the field; null is the server's
    default."""
    status, answer = await post(api, {"targets": [{"url": A}], "robots": value})
    if value is None:  # null: the server's default
        assert 202 == status
        return
    assert 400 == status
    assert "robots" == answer["field"]
