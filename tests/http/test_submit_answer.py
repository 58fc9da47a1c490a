"""What the ``status`` of a submit's answer means, and docs/http.md's example of it.

The answer shows the job's status as it is stored when the answer is made: ``queued`` while
no worker has started a target of it, ``running`` once one has (a free worker often starts it
before the answer is written), and for a reused job (200) whatever it is now.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import trio
import trio.testing

from trio_batch import Config
from trio_batch.testing import ScriptedFetch

from .support import BOB_KEY, Api, open_api

A = "https://a.example.test/"
B = "https://b.example.test/"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "http.md"


async def _status_after(api: Api, job_id: str, *olds: str) -> str:
    """The job's status once it is none of ``olds`` (woken by the engine, not polled)."""
    with api.engine.watch(job_id) as watch:
        while (job := await api.engine.job(job_id)) is not None and job.status.value in olds:
            await watch.wait()
    assert job is not None
    return job.status.value


class TestSubmitAnswer:
    async def test_a_job_no_worker_has_started_answers_queued(self) -> None:
        """With the only worker busy on another job, a new job answers `queued`, then runs."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        async with open_api(Config(ttl=3600, workers=1), fetch=fetch) as api:
            first = await api.submit(A)
            second = await api.submit(B, key=BOB_KEY)
            job_id = second.json()["id"]
            stored = await api.engine.job(job_id)
            gate.set()
            later = await _status_after(api, job_id, "queued")

        assert 202 == first.status_code == second.status_code
        assert "queued" == second.json()["status"]
        assert stored is not None
        assert "queued" == stored.status.value
        assert later in ("running", "done")

    async def test_a_job_a_free_worker_has_taken_reads_running(self) -> None:
        """With a free worker a new job answers `queued` or `running` (whichever it is as the
        answer is made); once the worker has its target, it reads `running`."""
        fetch = ScriptedFetch()
        gate = fetch.hold(A)
        async with open_api(Config(ttl=3600, workers=2), fetch=fetch) as api:
            answer = await api.submit(A)
            await trio.testing.wait_all_tasks_blocked()  # the worker waits in A's fetch
            read = await api.get(f"/v1/batch/{answer.json()['id']}")
            gate.set()

        assert [A] == fetch.calls
        assert answer.json()["status"] in ("queued", "running")
        assert "running" == read.json()["status"]

    async def test_a_reused_job_answers_its_status_now(self, api: Api) -> None:
        """A repeat of a finished job answers 200 with the job as it is now: `done`."""
        first = await api.submit(A)
        ended = await _status_after(api, first.json()["id"], "queued", "running")

        again = await api.submit(A)

        assert "done" == ended
        assert (200, True, "done") == (
            again.status_code,
            again.json()["reused"],
            again.json()["status"],
        )


class TestTheDocs:
    async def test_the_quick_starts_answer_has_the_fields_and_a_status_it_explains(
        self, api: Api
    ) -> None:
        """docs/http.md's POST answer has a real answer's fields and links; its status is one
        the page explains (`queued` or `running`) next to it."""
        page = DOCS.read_text(encoding="utf-8")
        start = page.index('{"id":"5f0c...","reused":false')
        shown = json.loads(page[start : page.index("\n\n", start)].replace("\n", ""))
        real = (await api.submit(A)).json()

        assert set(real) == set(shown)
        assert set(real["links"]) == set(shown["links"])
        assert shown["status"] in ("queued", "running")
        assert re.search(r"`queued` while no worker has started", page)
