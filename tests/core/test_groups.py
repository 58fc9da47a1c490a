"""The finisher's pipeline: groups that grow with the load, acknowledged in arrival order."""

from __future__ import annotations

import math
from collections.abc import Sequence

import trio
import trio.testing

from trio_batch._engine._groups import drain_in_groups


class Pipeline:
    """drain_in_groups over a channel of ints, with a gate per group to end its processing."""

    def __init__(self) -> None:
        self.send, self.recv = trio.open_memory_channel[int](math.inf)
        self.groups: list[list[int]] = []
        self.gates: list[trio.Event] = []
        self.acknowledged: list[int] = []

    async def process(self, group: list[int]) -> Sequence[str]:
        self.groups.append(group)
        gate = trio.Event()
        self.gates.append(gate)
        await gate.wait()
        return [f"stored {n}" for n in group]

    async def acknowledge(self, group: list[int], results: Sequence[str]) -> None:
        assert list(results) == [f"stored {n}" for n in group]
        self.acknowledged.extend(group)

    async def run(self, *, max_group: int = 512, in_flight: int = 2) -> None:
        await drain_in_groups(
            self.recv, self.process, self.acknowledge, max_group=max_group, in_flight=in_flight
        )


async def test_acknowledges_in_arrival_order_when_processing_ends_out_of_order() -> None:
    """Group 2 finishing first waits for group 1: acknowledgements follow arrival order."""
    p = Pipeline()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(p.run)
        p.send.send_nowait(1)
        await trio.testing.wait_all_tasks_blocked()
        p.send.send_nowait(2)
        p.send.send_nowait(3)
        await trio.testing.wait_all_tasks_blocked()
        assert [[1], [2, 3]] == p.groups  # the second group formed while the first was stored

        p.gates[1].set()
        await trio.testing.wait_all_tasks_blocked()
        assert [] == p.acknowledged

        p.gates[0].set()
        await trio.testing.wait_all_tasks_blocked()
        assert [1, 2, 3] == p.acknowledged
        p.send.close()


async def test_at_most_in_flight_groups_and_what_waits_joins_one_group() -> None:
    """With both slots busy, later items wait and then go as one group of at most max_group."""
    p = Pipeline()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: p.run(max_group=3))
        for n in (1, 2):
            p.send.send_nowait(n)
            await trio.testing.wait_all_tasks_blocked()
        for n in range(3, 8):
            p.send.send_nowait(n)
        await trio.testing.wait_all_tasks_blocked()
        assert [[1], [2]] == p.groups

        p.gates[0].set()
        await trio.testing.wait_all_tasks_blocked()
        assert [[1], [2], [3, 4, 5]] == p.groups
        p.send.close()
        for gate in p.gates[1:]:
            gate.set()
        await trio.testing.wait_all_tasks_blocked()
        p.gates[3].set()

    assert [[1], [2], [3, 4, 5], [6, 7]] == p.groups
    assert list(range(1, 8)) == p.acknowledged


async def test_returns_once_the_channel_ends_and_every_group_is_acknowledged() -> None:
    """Closing the channel drains what was sent; nothing is dropped."""
    p = Pipeline()
    for n in range(5):
        p.send.send_nowait(n)
    p.send.close()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(p.run)
        await trio.testing.wait_all_tasks_blocked()
        for gate in p.gates:
            gate.set()

    assert [[0, 1, 2, 3, 4]] == p.groups
    assert [0, 1, 2, 3, 4] == p.acknowledged
