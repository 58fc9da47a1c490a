"""Each target of the API carries the store's times: when its last run began, when it was stored."""

from __future__ import annotations

import trio.testing

from trio_batch import TargetError

from .support import Api

A = "https://a.example.test/"
B = "https://b.example.test/"


class TestTargetTimes:
    async def test_results_and_one_target_show_start_and_finish(self, api: Api) -> None:
        """``?results=1`` and ``/{idx}`` give ``started_at`` and ``finished_at`` (Unix seconds,
        the engine's wall clock): both once stored, the start while running, null if pending."""
        api.fetch.script(B, TargetError("not found", status=404))
        gate = api.fetch.hold(A)
        t0 = api.wall.now
        job_id = (await api.submit(B, A, B)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        running = (await api.get(f"/v1/batch/{job_id}/1")).json()
        pending = (await api.get(f"/v1/batch/{job_id}/2")).json()
        api.wall.advance(5)
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        body = (await api.get(f"/v1/batch/{job_id}", results="1")).json()

        assert [(t["status"], t["started_at"], t["finished_at"]) for t in body["targets"]] == [
            ("failed", t0, t0),
            ("done", t0, t0 + 5),
            ("done", t0 + 5, t0 + 5),
        ]
        assert [(t["status"], t["started_at"], t["finished_at"]) for t in (running, pending)] == [
            ("running", t0, None),
            ("pending", None, None),
        ]
