"""``GET /v1/me``: who a key is (issue 24), for the /ui and for scripts."""

from __future__ import annotations

from .support import BOB_KEY, Api


class TestMe:
    async def test_a_key_learns_its_caller(self, api: Api) -> None:
        """The answer names the caller, its workspace and class, and never the key."""
        alice = await api.get("/v1/me")
        bob = await api.get("/v1/me", key=BOB_KEY)

        assert (200, {"name": "alice", "workspace": "lab", "class": "fleet"}) == (
            alice.status_code,
            alice.json(),
        )
        assert {"name": "bob", "workspace": "", "class": "restricted"} == bob.json()
        assert "tb_" not in alice.text

    async def test_no_key_is_401(self, api: Api) -> None:
        """Without a key the route answers 401, like every route of a caller."""
        r = await api.client.get("/v1/me")

        assert 401 == r.status_code
