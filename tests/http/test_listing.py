"""SPEC §7's ``GET /v1/batch``: the caller's jobs, newest first, in pages."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batch import Config
from trio_batch.http._listing import decode_cursor, encode_cursor

from .support import ALICE_KEY, BOB_KEY, Api, open_api

A, B = "https://a.example.test/", "https://b.example.test/"


async def make_jobs(api: Api, n: int, *, key: str = ALICE_KEY, step: float = 1.0) -> list[str]:
    """``n`` finished jobs, one a ``step`` seconds of wall time apart; oldest first."""
    ids = []
    for i in range(n):
        r = await api.submit(f"https://t{i}.example.test/", key=key)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
        await trio.testing.wait_all_tasks_blocked()
        api.wall.advance(step)
    return ids


def many() -> Config:
    return Config(ttl=10**9, jobs_per_caller=100, jobs_total=100)


class TestListing:
    async def test_newest_first_with_summaries(self) -> None:
        """The caller's jobs come newest first, each as the summary GET /v1/batch/{id} gives."""
        async with open_api(many()) as api:
            ids = await make_jobs(api, 3)
            r = await api.get("/v1/batch")
            one = (await api.get(f"/v1/batch/{ids[2]}")).json()

        body = r.json()
        assert 200 == r.status_code
        assert ids[::-1] == [j["id"] for j in body["jobs"]]
        assert body["next"] is None
        first = dict(body["jobs"][0])
        assert {k: v for k, v in one.items() if k != "expires_at"} == {
            k: v for k, v in first.items() if k != "expires_at"
        }

    async def test_pages_follow_the_cursor_without_gaps_or_repeats(self) -> None:
        """limit pages; next leads to the following page; the last page's next is null."""
        async with open_api(many()) as api:
            ids = await make_jobs(api, 7)
            seen: list[str] = []
            pages = 0
            params: dict[str, str] = {"limit": "3"}
            while True:
                body = (await api.get("/v1/batch", **params)).json()
                pages += 1
                seen += [j["id"] for j in body["jobs"]]
                if body["next"] is None:
                    break
                params = {"limit": "3", "before": body["next"]}

        assert 3 == pages
        assert ids[::-1] == seen

    async def test_jobs_created_at_the_same_second_page_by_id(self) -> None:
        """Ties in created_at are ordered by id, so paging never skips or repeats one."""
        async with open_api(many()) as api:
            ids = await make_jobs(api, 5, step=0.0)
            first = (await api.get("/v1/batch", limit=2)).json()
            rest = (await api.get("/v1/batch", limit=10, before=first["next"])).json()

        listed = [j["id"] for j in first["jobs"] + rest["jobs"]]
        assert sorted(ids, reverse=True) == listed

    async def test_status_filters_live_and_lists(self) -> None:
        """status=live is queued and running; a list like done,cancelled keeps those."""
        async with open_api(many()) as api:
            done = await make_jobs(api, 2)
            gate = api.fetch.hold(B)
            running = (await api.submit(B)).json()["id"]
            cancelled = (await api.submit(A, B)).json()["id"]
            await api.client.delete(
                f"/v1/batch/{cancelled}", headers={"Authorization": f"Bearer {ALICE_KEY}"}
            )
            await trio.testing.wait_all_tasks_blocked()
            live = (await api.get("/v1/batch", status="live")).json()
            done_or_cancelled = (await api.get("/v1/batch", status="done,cancelled")).json()
            gate.set()

        assert [running] == [j["id"] for j in live["jobs"]]
        assert [cancelled, *done[::-1]] == [j["id"] for j in done_or_cancelled["jobs"]]

    async def test_another_callers_jobs_are_not_listed(self) -> None:
        """Each caller lists only its own jobs."""
        async with open_api(many()) as api:
            mine = await make_jobs(api, 2)
            theirs = await make_jobs(api, 1, key=BOB_KEY)
            alice = (await api.get("/v1/batch")).json()
            bob = (await api.get("/v1/batch", key=BOB_KEY)).json()

        assert mine[::-1] == [j["id"] for j in alice["jobs"]]
        assert theirs == [j["id"] for j in bob["jobs"]]

    async def test_an_empty_listing(self, api: Api) -> None:
        """No jobs: an empty page, next null."""
        r = await api.get("/v1/batch")

        assert {"jobs": [], "next": None} == r.json()

    @pytest.mark.parametrize(
        ("params", "field"),
        [({"limit": "0"}, "limit"), ({"limit": "501"}, "limit"), ({"limit": "x"}, "limit"),
         ({"status": "sleeping"}, "status"), ({"before": "!!"}, "before"),
         ({"before": encode_cursor(1.0, "a")[:-2] + "zz"}, "before")],
    )  # fmt: skip
    async def test_bad_query_is_400_naming_it(
        self, api: Api, params: dict[str, str], field: str
    ) -> None:
        """A bad parameter is a 400 with error, hint and the field."""
        r = await api.get("/v1/batch", **params)

        assert 400 == r.status_code
        assert field == r.json()["field"]
        assert r.json()["error"] and r.json()["hint"]

    async def test_needs_a_key(self, api: Api) -> None:
        """No key, no listing."""
        r = await api.client.get("/v1/batch")

        assert 401 == r.status_code


class TestCursor:
    def test_round_trips(self) -> None:
        """A cursor decodes to the (created_at, id) it was made from."""
        assert (1800000000.25, "abc") == decode_cursor(encode_cursor(1800000000.25, "abc"))
