"""How the tools wait and what they cost: a wait follows the job's events and answers as it
ends, a batch asks for concurrency, and ``/mcp`` keeps one pool of connections for its lifetime.

In-process (the SDK's in-process client over an app of ``create_app`` on a scripted fetch
function) on Trio's autojump clock where a wait is measured, so a time is the virtual clock's,
never the machine's; ``/mcp`` on a free port of this process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
import trio
import trio.testing

from tests.mcp.support import KEY, call, in_process, mcp_client, open_endpoint
from trio_batch import Config
from trio_batch.testing import ScriptedFetch

CAP = 48 * 1024
RUNS = 100.0
"""Seconds (virtual) a held job runs before the test lets it end."""


def url(i: int, host: str = "a") -> str:
    return f"https://{host}.example/{i}"


def summary_reads(requests: list[str], job_id: object) -> int:
    return requests.count(f"GET /v1/batch/{job_id}")


async def test_a_wait_answers_as_the_job_ends_without_polling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """batch_status with wait answers the moment the job ends, reading its summary once."""
    fetch = ScriptedFetch()
    gate = fetch.hold(url(0))
    requests: list[str] = []
    released = 0.0

    async def release_later() -> None:
        nonlocal released
        await trio.sleep(RUNS)
        released = trio.current_time()
        gate.set()

    async with in_process(fetch, cap=CAP, requests=requests) as client:
        failed, job = await call(client, "batch_submit", {"targets": [url(0)]})
        assert not failed
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_later)
            failed, status = await call(client, "batch_status", {"id": job["id"], "wait": 300})
            answered = trio.current_time()

    assert not failed
    assert "done" == status["status"]
    assert 0.0 == answered - released
    assert 1 == summary_reads(requests, job["id"])
    assert 1 == requests.count(f"GET /v1/batch/{job['id']}/events")


async def test_a_wait_shorter_than_the_job_answers_it_still_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A wait that ends first answers the job as it is then, after exactly those seconds."""
    fetch = ScriptedFetch()
    gate = fetch.hold(url(0))
    requests: list[str] = []
    async with in_process(fetch, cap=CAP, requests=requests) as client:
        failed, job = await call(client, "batch_submit", {"targets": [url(0), url(1)]})
        assert not failed
        asked = trio.current_time()
        failed, status = await call(client, "batch_status", {"id": job["id"], "wait": 10})
        answered = trio.current_time()
        gate.set()

    assert not failed
    assert "running" == status["status"]
    assert "batch_status with wait" in str(status["next"])
    assert 10.0 == answered - asked
    assert 2 == summary_reads(requests, job["id"])


async def wait_with_progress(
    fetch: ScriptedFetch,
    submit: dict[str, object],
    progress: Callable[[float, float | None, str | None], Awaitable[None]],
) -> dict[str, object]:
    """The job of ``submit`` (batch_submit's arguments), waited for by batch_status."""
    config = Config(workers=4, max_workers=4, targets_per_job=50)
    async with in_process(fetch, cap=CAP, config=config) as client:
        failed, job = await call(client, "batch_submit", submit)
        assert not failed
        with trio.fail_after(60):
            failed, status = await call(
                client, "batch_status", {"id": job["id"], "wait": 120}, progress_callback=progress
            )
    assert not failed
    return status


async def test_waiting_reports_progress_as_targets_end() -> None:
    """batch_status with wait reports each count of ended targets, the last one the total."""
    fetch = ScriptedFetch()
    gates = [fetch.hold(url(i)) for i in range(3)]
    seen: list[tuple[float, float | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total))
        if int(done) < len(gates):
            gates[int(done)].set()  # let the next target end once this count was reported

    status = await wait_with_progress(fetch, {"targets": [url(i) for i in range(3)]}, progress)

    assert "done" == status["status"]
    assert [(0.0, 3.0), (1.0, 3.0), (2.0, 3.0), (3.0, 3.0)] == seen


async def test_progress_with_concurrency_never_goes_back() -> None:
    """Targets ending out of order: the progress reported only grows, and ends at the total."""
    fetch = ScriptedFetch()
    first = fetch.hold(url(0, "a"))
    seen: list[tuple[float, float | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total))
        if done == 0:
            first.set()  # the first target ends last: its three neighbours ended meanwhile

    targets = [url(i, host) for i, host in enumerate("abcd")]
    status = await wait_with_progress(fetch, {"targets": targets, "concurrency": 4}, progress)

    assert "done" == status["status"]
    assert (4.0, 4.0) == seen[-1]
    assert sorted(seen) == seen
    assert len(set(seen)) == len(seen)


async def test_batch_submit_asks_for_concurrency() -> None:
    """batch_submit with concurrency 4 fetches four pages of four sites at once."""
    fetch = ScriptedFetch()
    targets = [url(i, host) for i, host in enumerate("abcd")]
    gates = [fetch.hold(target) for target in targets]
    config = Config(workers=4, max_workers=4, targets_per_job=50)
    async with in_process(fetch, cap=CAP, config=config) as client:
        failed, _ = await call(client, "batch_submit", {"targets": targets, "concurrency": 4})
        await trio.testing.wait_all_tasks_blocked()
        running = fetch.running
        for gate in gates:
            gate.set()
        refused, too_many = await call(
            client, "batch_submit", {"targets": [url(9)], "concurrency": 99}
        )

    assert not failed
    assert 4 == running
    assert refused
    assert ("bad_request", "concurrency") == (too_many["code"], too_many["field"])
    assert "8" in str(too_many["hint"])


async def test_the_endpoint_keeps_one_pool_for_its_lifetime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tool calls over /mcp open no httpx client: the endpoint's one pool serves every key."""
    opened: list[httpx.AsyncClient] = []
    init = httpx.AsyncClient.__init__

    def counting(self: httpx.AsyncClient, *args: object, **kwargs: object) -> None:
        opened.append(self)
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    fetch = ScriptedFetch()
    async with open_endpoint(fetch) as endpoint, mcp_client(endpoint, KEY) as client:
        await client.list_tools()
        monkeypatch.setattr(httpx.AsyncClient, "__init__", counting)
        failed, job = await call(client, "batch_submit", {"targets": [url(0)], "wait": 60})
        answers = [await call(client, "batch_status", {"id": job["id"]}) for _ in range(5)]
        unknown = await call(client, "batch_status", {"id": "0" * 32})
        await client.list_tools()

    assert not failed
    assert "done" == job["status"]
    assert [(False, "done")] * 5 == [(f, answer["status"]) for f, answer in answers]
    assert (True, "not_found") == (unknown[0], unknown[1]["code"])
    assert [] == opened
