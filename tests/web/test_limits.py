"""The per-caller limiter that the fetcher's slots and the shaper's workers share."""

from __future__ import annotations

import trio
import trio.testing

from trio_batch.web._limits import PerCaller


class TestPerCaller:
    async def test_a_caller_has_one_limiter_while_it_is_used(self) -> None:
        """Two uses by one caller share its limiter (and its tokens); another caller has its own."""
        callers = PerCaller(2)

        with callers.limiter("alice") as first, callers.limiter("alice") as second:
            async with first:
                with callers.limiter("bob") as other:
                    assert (first is second, other is first) == (True, False)
                    assert 2 == callers.callers

        assert (2, 0) == (first.total_tokens, callers.callers)

    async def test_an_idle_caller_is_forgotten(self) -> None:
        """A limiter that no task holds or waits for is dropped, and made afresh next time."""
        callers = PerCaller(1)

        with callers.limiter("alice") as first:
            async with first:
                pass
        with callers.limiter("alice") as second:
            pass

        assert first is not second
        assert 0 == callers.callers

    async def test_a_waiting_task_keeps_its_callers_limiter(self) -> None:
        """While one task of a caller waits for a token, the holder's exit keeps the limiter,
        and ``waiting`` counts the waiter."""
        callers = PerCaller(1)
        release = trio.Event()
        seen: list[trio.CapacityLimiter] = []

        async def use() -> None:
            with callers.limiter("alice") as limiter:
                seen.append(limiter)
                async with limiter:
                    await release.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(use)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(use)
            await trio.testing.wait_all_tasks_blocked()
            waiting = callers.waiting
            release.set()

        assert (1, 0) == (waiting, callers.callers)
        assert seen[0] is seen[1]
