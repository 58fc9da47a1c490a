"""A hint speaks to whoever reads it: an API caller cannot pass a flag or build a WebFetcher."""

from __future__ import annotations

import pytest

from .support import Api, auth


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
