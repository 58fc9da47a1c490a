"""A hint speaks to whoever reads it: an API caller cannot pass a flag or build a WebFetcher."""

from __future__ import annotations

import pytest
import trio

from trio_batch import Config
from trio_batch.testing import ScriptedFetch

from .support import BOB_KEY, Api, auth, open_api


@pytest.mark.parametrize("url", ["http://10.1.2.3/", "http://127.0.0.1:8080/", "http://[::1]/"])
async def test_a_refused_private_address_asks_the_operator(api: Api, url: str) -> None:
    """At submit and on /v1/fetch, the remedy is the operator's, named without Python or flags."""
    batch = await api.client.post("/v1/batch", json={"targets": [{"url": url}]}, headers=auth())
    single = await api.client.post("/v1/fetch", json={"url": url}, headers=auth())

    for r in (batch, single):
        assert r.status_code == 400
        hint = r.json()["hint"]
        assert "operator" in hint
        assert "allow this network" in hint
        assert "WebFetcher" not in hint and "--allow-net" not in hint


def _held(fetch: ScriptedFetch, n: int) -> tuple[list[str], list[trio.Event]]:
    """``n`` URLs whose fetches wait on their gates, so a batch of each stays live."""
    urls = [f"https://held.example.test/{i}" for i in range(n)]
    return urls, [fetch.hold(url) for url in urls]


@pytest.mark.parametrize(("limit", "words"), [(1, "1 live batch"), (2, "2 live batches")])
async def test_a_caller_at_its_cap_is_told_the_limit_and_the_flag(limit: int, words: str) -> None:
    """The 429 says how many live batches a key may have and which serve flag raises it."""
    fetch = ScriptedFetch()
    urls, gates = _held(fetch, limit)
    async with open_api(Config(jobs_per_caller=limit, jobs_total=8), fetch=fetch) as api:
        for url in urls:
            assert (await api.submit(url)).status_code == 202
        busy = await api.submit("https://another.example.test/")
        for gate in gates:
            gate.set()

    assert 429 == busy.status_code
    assert f"you already have the {words} a key may have at once" == busy.json()["error"]
    assert busy.json()["hint"] == (
        "wait for one to finish (poll it), or cancel one, then submit again; the server's "
        "operator can raise the limit with trio-batch serve --jobs-per-caller N"
    )


async def test_a_full_server_is_told_the_limit_and_the_flag() -> None:
    """The 503 of a full server says how many live batches it may have and the flag."""
    fetch = ScriptedFetch()
    urls, gates = _held(fetch, 1)
    async with open_api(Config(jobs_per_caller=1, jobs_total=1), fetch=fetch) as api:
        assert (await api.submit(*urls)).status_code == 202
        busy = await api.submit("https://another.example.test/", key=BOB_KEY)
        gates[0].set()

    assert 503 == busy.status_code
    assert "the server already has the 1 live batch it may have at once" == busy.json()["error"]
    assert busy.json()["hint"].endswith("trio-batch serve --jobs-total N")
