"""A fetched outcome survives a store that cannot take it for a while (SPEC §3, the write path).

The store here is a ``MemoryStore`` whose ``finish_targets`` is made to fail: with an outage
(:class:`StoreError`, what a timeout or a lost connection raises), or by refusing one value.
The engine's waits between tries are Trio sleeps, so the autojump clock runs them at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from trio_batch import (
    CallerBusy,
    Config,
    JobStatus,
    Result,
    StoreError,
    TargetState,
    open_engine,
)
from trio_batch.stores import FinishItem, MemoryStore, Stored
from trio_batch.testing import ScriptedFetch

from ..support import ALICE, Recorder, targets, url, wait_ended


class Flaky:
    """A ``MemoryStore`` (``.store``) whose ``finish_targets`` fails while ``down`` and refuses
    any outcome whose text holds ``poison``."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self._inner = self.store.finish_targets
        self.store.finish_targets = self.finish_targets  # type: ignore[method-assign]
        self.down = False
        self.calls = 0
        self.refused: list[tuple[str, int]] = []
        self._waiting: list[tuple[int, trio.Event]] = []

    async def called(self, n: int) -> None:
        """Return once ``finish_targets`` has been called ``n`` times."""
        if self.calls < n:
            event = trio.Event()
            self._waiting.append((n, event))
            await event.wait()

    async def finish_targets(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        self.calls += 1
        for n, event in self._waiting:
            if self.calls >= n:
                event.set()
        if self.down:
            await trio.lowlevel.checkpoint()
            raise StoreError("PostgreSQL did not answer within 30 s")
        kept = [i for i, (_, _, o) in enumerate(items) if "poison" not in (o.result_json or "")]
        stored = await self._inner([items[i] for i in kept], now, max_bytes)
        results: list[Stored | Exception] = [ValueError("refused")] * len(items)
        for i, result in zip(kept, stored, strict=True):
            results[i] = result
        self.refused += [(items[i][0], items[i][1]) for i in range(len(items)) if i not in kept]
        return results


async def test_an_outage_delays_the_outcome_and_loses_nothing(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """While the store is down the job stays live (its cap held); once it is back, all lands."""
    store = Flaky()
    rec = Recorder()
    config = Config(ttl=3600, jobs_per_caller=1, hooks=rec.hooks())
    async with open_engine(store.store, ScriptedFetch(), config) as engine:
        store.down = True
        sub = await engine.submit(ALICE, "fleet", targets("a", 3))
        await store.called(4)  # the first try and three more
        live = engine.statistics().live_jobs
        with pytest.raises(CallerBusy):
            await engine.submit(ALICE, "fleet", targets("b", 1))
        store.down = False
        with trio.fail_after(60):
            await wait_ended(engine, sub.id)
        snap = await engine.status(sub.id)

    assert 1 == live
    assert snap is not None
    assert JobStatus.DONE == snap.job.status
    assert [url("a", i) for i in range(3)] == [t.url for t in snap.targets]
    assert all(t.result is not None for t in snap.targets)
    assert ["created", "done"] == rec.jobs
    waits = [r for r in caplog.records if getattr(r, "op", "") == "finish_targets"]
    assert waits and all(r.levelno == logging.WARNING for r in waits)
    assert all("StoreError" in r.getMessage() for r in waits)


async def test_an_outcome_the_store_refuses_is_stored_as_a_failure(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The job still ends: the refused target is failed, naming why; the others are done."""
    store = Flaky()
    fetch = ScriptedFetch()
    fetch.script(url("a", 1), Result("poison"))
    async with open_engine(store.store, fetch, Config(ttl=3600)) as engine:
        sub = await engine.submit(ALICE, "fleet", targets("a", 3))
        with trio.fail_after(60):
            await wait_ended(engine, sub.id)
        snap = await engine.status(sub.id)

    assert snap is not None
    assert JobStatus.PARTIAL == snap.job.status
    assert [TargetState.DONE, TargetState.FAILED, TargetState.DONE] == [
        t.status for t in snap.targets
    ]
    failed = snap.targets[1]
    assert "could not be stored" in failed.error and "ValueError" in failed.error
    assert failed.hint
    assert [(sub.id, 1)] == store.refused


async def test_an_outage_that_outlasts_the_engine_does_not_hold_its_close(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Closing stops the tries: the close ends, and the job ends interrupted (its cap freed)."""
    store = Flaky()
    async with open_engine(store.store, ScriptedFetch(), Config()) as engine:
        store.down = True
        sub = await engine.submit(ALICE, "fleet", targets("a", 2))
        await store.called(3)
        closing = trio.current_time()
    closed = trio.current_time() - closing
    snap = await store.store.snapshot(sub.id)

    assert closed < 1.0  # virtual seconds: no retry wait is sat out
    assert snap is not None
    assert (JobStatus.FAILED, "interrupted") == (snap.job.status, snap.job.error)
