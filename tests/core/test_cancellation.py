"""The engine's cancellation contract and its handling of exception groups.

A public async call is a checkpoint; a call that raises ``trio.Cancelled`` had no effect; one
whose write has begun completes and returns. Fetch functions that run nurseries raise
exception groups, and their ``RetryLater``/``TargetError`` keep their meaning inside them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    Result,
    RetryLater,
    Target,
    TargetError,
    open_engine,
)
from trio_batch.stores import MemoryStore, Store
from trio_batch.testing import ScriptedFetch

from ..support import ALICE, Recorder, WallClock, targets, wait_ended


@asynccontextmanager
async def engine_on(
    store: Store, fetch: object, recorder: Recorder | None = None
) -> AsyncIterator[BatchEngine]:
    hooks = recorder.hooks() if recorder is not None else Config().hooks
    async with open_engine(
        store,
        fetch,  # type: ignore[arg-type]
        Config(hooks=hooks, retry_wait=0.01, jobs_per_caller=1),
        wall_clock=WallClock(),
    ) as engine:
        yield engine


class TestCancelledCalls:
    """Under a cancel that is already pending, each call raises Cancelled and does nothing."""

    async def test_submit_stores_nothing_and_holds_no_cap(self, store: Store) -> None:
        """A cancelled submit leaves no job: the same request later is new, not reused."""
        fetch = ScriptedFetch()
        gate = fetch.hold(targets("a", 1)[0].url)
        async with engine_on(store, fetch) as engine:
            with trio.CancelScope() as scope:
                scope.cancel()
                await engine.submit(ALICE, "fleet", targets("a", 1))

            again = await engine.submit(ALICE, "fleet", targets("a", 1))
            gate.set()

        assert scope.cancelled_caught
        assert again.reused is False

    async def test_cancel_status_and_touch_have_no_effect(self, store: Store) -> None:
        """Cancelled cancel, status and touch raise Cancelled; the job runs on unchanged."""
        fetch = ScriptedFetch()
        gate = fetch.hold(targets("a", 1)[0].url)
        async with engine_on(store, fetch) as engine:
            sub = await engine.submit(ALICE, "fleet", targets("a", 1))
            for call in (engine.cancel, engine.status, engine.touch):
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await call(sub.id)
                assert scope.cancelled_caught
            before = await engine.status(sub.id)
            gate.set()

        assert before is not None
        assert before.job.status in ("queued", "running")

    async def test_every_public_call_checkpoints(self, store: Store) -> None:
        """submit (new and reused), cancel, status and touch are each a checkpoint."""
        async with engine_on(store, ScriptedFetch()) as engine:
            with trio.testing.assert_checkpoints():
                sub = await engine.submit(ALICE, "fleet", targets("a", 1))
            with trio.testing.assert_checkpoints():
                await engine.submit(ALICE, "fleet", targets("a", 1))
            with trio.testing.assert_checkpoints():
                await engine.status(sub.id)
            with trio.testing.assert_checkpoints():
                await engine.touch(sub.id)
            with trio.testing.assert_checkpoints():
                await engine.cancel(sub.id)
            with trio.testing.assert_checkpoints():
                await engine.cancel("unknown")

    @pytest.mark.parametrize("checkpoints", [0, 1, 2, 5])
    async def test_a_cancelled_submit_is_known_either_way(
        self, store: Store, checkpoints: int
    ) -> None:
        """Whenever the cancel lands, submit returns the job it stored or stored none."""
        submitted: list[str] = []
        fetch = ScriptedFetch()
        gate = fetch.hold(targets("a", 1)[0].url)
        async with engine_on(store, fetch) as engine:
            scope = trio.CancelScope()
            async with trio.open_nursery() as nursery:

                async def submit() -> None:
                    with scope:
                        submitted.append((await engine.submit(ALICE, "fleet", targets("a", 1))).id)

                nursery.start_soon(submit)
                for _ in range(checkpoints):
                    await trio.lowlevel.checkpoint()
                scope.cancel()
            again = await engine.submit(ALICE, "fleet", targets("a", 1))
            gate.set()

        if submitted:
            assert (submitted[0], True) == tuple(again)
        else:
            assert scope.cancelled_caught
            assert again.reused is False


async def raise_in_child(exc: BaseException) -> None:
    async def child() -> None:
        raise exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)


class TestExceptionGroups:
    """A fetch function that runs a nursery keeps RetryLater and TargetError semantics."""

    async def test_retry_later_from_a_child_task_is_retried(self, autojump_clock: object) -> None:
        """RetryLater raised in a nursery's child makes the target busy, then it succeeds."""
        attempts: list[int] = []

        async def fetch(caller: Caller, target: Target) -> Result:
            attempts.append(1)
            if len(attempts) == 1:
                await raise_in_child(RetryLater("slow down"))
            return Result("ok")

        async with engine_on(MemoryStore(), fetch) as engine:
            sub = await engine.submit(ALICE, "fleet", targets("a", 1))
            await wait_ended(engine, sub.id)
            snap = await engine.status(sub.id)

        assert snap is not None
        assert 2 == len(attempts)
        assert ("done", "ok") == (snap.job.status, snap.targets[0].result.content)  # type: ignore[union-attr]

    async def test_target_error_from_a_child_task_keeps_its_hint(
        self, autojump_clock: object
    ) -> None:
        """TargetError raised in a nursery's child fails the target with its message and hint;
        the target hook sees the TargetError itself."""

        async def fetch(caller: Caller, target: Target) -> Result:
            await raise_in_child(TargetError("gone", hint="check the URL", status=404))
            raise AssertionError("unreachable")

        recorder = Recorder()
        async with engine_on(MemoryStore(), fetch, recorder) as engine:
            sub = await engine.submit(ALICE, "fleet", targets("a", 1))
            await wait_ended(engine, sub.id)
            snap = await engine.status(sub.id)

        assert snap is not None
        assert ("gone", "check the URL") == (snap.targets[0].error, snap.targets[0].hint)
        error = recorder.targets[0][0]
        assert isinstance(error, TargetError)
        assert 404 == error.status

    async def test_a_group_with_any_other_error_is_an_internal_error(
        self, autojump_clock: object
    ) -> None:
        """RetryLater beside a plain bug is not busy: the target fails as an internal error."""

        async def fetch(caller: Caller, target: Target) -> Result:
            raise ExceptionGroup("two", [RetryLater(), ValueError("bug")])

        recorder = Recorder()
        async with engine_on(MemoryStore(), fetch, recorder) as engine:
            sub = await engine.submit(ALICE, "fleet", targets("a", 1))
            await wait_ended(engine, sub.id)
            snap = await engine.status(sub.id)

        assert snap is not None
        assert "internal error" == snap.targets[0].error
        assert [] == recorder.retries

    async def test_a_group_of_busy_members_waits_for_the_longest_after(
        self, autojump_clock: object
    ) -> None:
        """Every member busy: the target is retried after the largest ``after`` asked for."""
        calls: list[float] = []

        async def fetch(caller: Caller, target: Target) -> Result:
            calls.append(trio.current_time())
            if len(calls) == 1:
                raise ExceptionGroup("busy", [RetryLater(after=3.0), RetryLater(after=7.0)])
            return Result("ok")

        recorder = Recorder()
        async with engine_on(MemoryStore(), fetch, recorder) as engine:
            sub = await engine.submit(ALICE, "fleet", targets("a", 1))
            await wait_ended(engine, sub.id)

        assert [7.0] == recorder.retries
        assert calls[1] - calls[0] >= 7.0


class TestOpenEngineErrors:
    async def test_the_blocks_exception_keeps_its_cause(self) -> None:
        """An error raised in the block with ``raise X from Y`` comes out as X, cause Y."""
        with pytest.raises(ValueError, match=r"^outer$") as info:
            async with open_engine(MemoryStore(), ScriptedFetch()):
                raise ValueError("outer") from KeyError("inner")

        assert isinstance(info.value.__cause__, KeyError)
        assert not isinstance(info.value.__context__, BaseExceptionGroup)
