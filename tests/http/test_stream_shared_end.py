"""The followers of one job share its last read: the summary of an events stream's ``end``."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trio_batch.stores import JobSummary, MemoryStore

from .support import ALICE_KEY, open_api, open_stream

A, B = "https://a.example.test/", "https://b.example.test/"


class TestEventsEnd:
    async def test_followers_read_the_last_summary_once_between_them(self) -> None:
        """50 event streams of one job end with one summary read between them, not one read a
        stream. (Two at most: the store is a step ahead of the engine's change notices, so the
        stream that reads the job first may see it ended, read its summary and end before the
        notice of the last outcome comes and starts the others' shared read afresh.)"""
        store = MemoryStore()
        reads = 0
        job_summary = store.job_summary

        async def counted(*args: Any, **kwargs: Any) -> JobSummary | None:
            nonlocal reads
            reads += 1
            return await job_summary(*args, **kwargs)

        store.job_summary = counted  # type: ignore[method-assign]
        async with open_api(store=store) as api:
            gate = api.fetch.hold(A)
            r = await api.submit(A, B)
            job = r.json()["id"]
            ends: list[bool] = []

            async def follower() -> None:
                async with open_stream(api.app, f"/v1/batch/{job}/events", key=ALICE_KEY) as s:
                    body = await s.read_all()
                    ends.append(s.complete and b"event: end\n" in body)

            async with trio.open_nursery() as nursery:
                for _ in range(50):
                    nursery.start_soon(follower)
                with trio.fail_after(10):  # every stream follows the job before it ends
                    while api.engine.watchers < 50:
                        await trio.testing.wait_all_tasks_blocked(cushion=0.01)
                before = reads
                gate.set()

        assert [True] * 50 == ends
        assert 1 <= reads - before <= 2
