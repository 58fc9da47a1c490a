"""The pool that the fetcher's slots and the shaper's workers are lent from: idle never, fair
under contention (issue 28)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batch.web._guard._limits import FairPool


async def _hold(pool: FairPool, caller: str, release: trio.Event, log: list[str]) -> None:
    async with pool.slot(caller):
        log.append(caller)
        await release.wait()


class TestWorkConserving:
    async def test_a_caller_alone_takes_every_slot_at_once(self, autojump_clock: object) -> None:
        """No one else waits, so one caller gets the whole pool without waiting."""
        pool = FairPool(3)

        for _ in range(3):
            with trio.move_on_after(1) as scope:
                await pool.acquire("alice")
            assert not scope.cancelled_caught

        assert (3, 0, 3) == (pool.held("alice"), pool.statistics().waiting, pool.size)

    async def test_the_next_free_slot_goes_to_the_caller_that_holds_none(self) -> None:
        """Alice holds every slot and queued a third job first; bob, who holds none, gets
        the first slot that comes back: he waits for one job at most."""
        pool = FairPool(2)
        log: list[str] = []
        done = [trio.Event() for _ in range(4)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_hold, pool, "alice", done[0], log)
            nursery.start_soon(_hold, pool, "alice", done[1], log)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(_hold, pool, "alice", done[2], log)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(_hold, pool, "bob", done[3], log)
            await trio.testing.wait_all_tasks_blocked()
            waiting = pool.statistics().waiting

            done[0].set()  # one of alice's jobs ends
            await trio.testing.wait_all_tasks_blocked()
            after_first = list(log)
            for event in done:
                event.set()

        assert 2 == waiting
        assert ["alice", "alice", "bob"] == after_first
        assert ["alice", "alice", "bob", "alice"] == log

    async def test_shares_even_out_under_contention(self) -> None:
        """Two callers with more jobs than slots end up holding half the pool each, however
        the first one had filled it."""
        pool = FairPool(4)
        log: list[str] = []
        gates = {name: [trio.Event() for _ in range(6)] for name in ("alice", "bob")}
        held: list[trio.Event] = []

        async def alice(gate: trio.Event) -> None:
            async with pool.slot("alice"):
                held.append(gate)
                await gate.wait()

        async with trio.open_nursery() as nursery:
            for gate in gates["alice"]:
                nursery.start_soon(alice, gate)
            await trio.testing.wait_all_tasks_blocked()
            for gate in gates["bob"]:
                nursery.start_soon(_hold, pool, "bob", gate, log)
            await trio.testing.wait_all_tasks_blocked()
            before = (pool.held("alice"), pool.held("bob"))
            for gate in held[:2]:  # two of alice's jobs end
                gate.set()
            await trio.testing.wait_all_tasks_blocked()
            after = (pool.held("alice"), pool.held("bob"))
            for gate in gates["alice"] + gates["bob"]:
                gate.set()

        assert ((4, 0), (2, 2)) == (before, after)
        assert 0 == pool.statistics().callers


class TestCancellation:
    async def test_a_cancelled_request_leaves_the_queue(self, autojump_clock: object) -> None:
        """A request given up while waiting takes no slot, and the next one is served."""
        pool = FairPool(1)
        await pool.acquire("alice")
        with trio.move_on_after(1) as scope:
            await pool.acquire("bob")
        waiting = pool.statistics().waiting
        pool.release("alice")
        await pool.acquire("carol")

        assert scope.cancelled_caught
        assert (0, 0, 1) == (waiting, pool.held("bob"), pool.held("carol"))

    async def test_an_idle_caller_is_forgotten(self) -> None:
        """A caller that holds and waits for nothing leaves no state behind."""
        pool = FairPool(1)
        async with pool.slot("alice"):
            callers = pool.statistics().callers

        assert (1, 0) == (callers, pool.statistics().callers)

    async def test_an_acquire_in_a_cancelled_scope_takes_nothing(self) -> None:
        """acquire is a checkpoint: cancelled before it starts, it takes no slot."""
        pool = FairPool(1)
        with trio.CancelScope() as scope:
            scope.cancel()
            await pool.acquire("alice")

        assert 0 == pool.held("alice")


class TestCap:
    async def test_a_capped_caller_waits_while_others_take_free_slots(
        self, autojump_clock: object
    ) -> None:
        """With a cap of 1, alice's second request waits although a slot is free, and bob
        takes that slot at once."""
        pool = FairPool(2, cap=1)
        await pool.acquire("alice")
        with trio.move_on_after(1) as capped:
            await pool.acquire("alice")
        await pool.acquire("bob")

        assert capped.cancelled_caught
        assert (1, 1) == (pool.held("alice"), pool.held("bob"))

    async def test_releasing_what_is_not_held_is_an_error(self) -> None:
        """A release without an acquire is a bug, said at once."""
        pool = FairPool(1)

        with pytest.raises(RuntimeError, match=r"^release of a slot the caller does not hold"):
            pool.release("alice")

    def test_a_pool_needs_a_slot(self) -> None:
        """An empty pool is refused, naming the size."""
        with pytest.raises(ValueError, match=r"^a pool needs at least one slot \(got 0\)$"):
            FairPool(0)
