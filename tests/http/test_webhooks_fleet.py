"""Webhooks in a fleet: two instances' dispatchers on one PostgreSQL schema (issue 22).

Each job's outbox is claimed by one dispatcher at a time, so the receiver gets every event once,
a job's events in order, although both dispatchers read the same outboxes. The receiver holds
each request until both dispatchers have read the store again since it arrived: each had the
chance to send that event too. Real clock (the engines wait on worker threads and PostgreSQL's
claims run on its own clock); every wait is on an Event signalled by a read or an advance.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import pytest
import trio

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema
from trio_batch import BatchEngine, Caller, Config, Target, Webhook, open_engine
from trio_batch.http import DeliveryPolicy, hash_key, open_deliveries
from trio_batch.stores import PostgresStore, ServiceStore
from trio_batch.stores._protocol import HookDue
from trio_batch.testing import ScriptedFetch

from .support import ALICE_KEY, LOOPBACK, Receiver, webhook_keys

pytest.importorskip("psycopg")

pytestmark = pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)

POLICY = DeliveryPolicy(first_wait=0.05, max_wait=0.2, jitter=0.0, poll=0.05, min_gap=0.005)
"""Quick polls: a dispatcher reads the store again within 50 ms, as the receiver's gate waits."""

JOBS = 6
TARGETS = 3


class Board:
    """What the dispatchers did, shared by the test's waits: each change signals them."""

    def __init__(self) -> None:
        self._changed = trio.Event()

    def signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, checking it after each change."""
        while not condition():
            await self._changed.wait()


class Watched:
    """A store as one dispatcher sees it: counts its reads of the due webhooks, and the
    outboxes it closed (end events advanced), signalling the board at each."""

    def __init__(self, store: ServiceStore, board: Board) -> None:
        self._store = store
        self._board = board
        self.reads = 0
        self.closed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def hooks_due(self, *args: Any, **kwargs: Any) -> list[HookDue]:
        try:
            return await self._store.hooks_due(*args, **kwargs)
        finally:
            self.reads += 1
            self._board.signal()

    async def hook_advance(self, due: HookDue, **kwargs: Any) -> bool:
        applied = await self._store.hook_advance(due, **kwargs)
        if applied and kwargs.get("close"):
            self.closed += 1
            self._board.signal()
        return applied


@asynccontextmanager
async def gated_receiver(board: Board, watched: list[Watched]) -> AsyncIterator[Receiver]:
    """A receiver on 127.0.0.1 that reads each request only once every dispatcher has read
    the store since the connection came (so each could have sent the same event)."""
    receiver = Receiver()

    async def handle(stream: trio.SocketStream) -> None:
        marks = [w.reads for w in watched]
        await board.wait_until(
            lambda: all(w.reads > m for w, m in zip(watched, marks, strict=True))
        )
        await receiver.handle(stream)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        receiver.port = listeners[0].socket.getsockname()[1]
        yield receiver
        nursery.cancel_scope.cancel()


async def test_two_dispatchers_send_each_event_once_in_order() -> None:
    """Two instances deliver one schema's webhooks: every event once, each job's in order."""
    board = Board()
    watched: list[Watched] = []
    engines: list[BatchEngine] = []
    # Under a claim's length (timeout + claim_slack, 20 s): a claim held but not sent fails it.
    with trio.fail_after(15):
        async with (
            open_test_schema(PG_DSN) as schema,
            gated_receiver(board, watched) as receiver,
            AsyncExitStack() as stack,
        ):
            for _ in range(2):
                store = await stack.enter_async_context(PostgresStore.open(PG_DSN, schema=schema))
                engine = await stack.enter_async_context(
                    open_engine(store, ScriptedFetch(), Config(ttl=3600, jobs_per_caller=JOBS))
                )
                watched.append(Watched(store, board))
                engines.append(engine)
            dispatchers = [
                await stack.enter_async_context(
                    open_deliveries(
                        cast("ServiceStore", w), e, webhook_keys(), allow=LOOPBACK, policy=POLICY
                    )
                )
                for w, e in zip(watched, engines, strict=True)
            ]
            alice = Caller("alice", "lab", hash_key(ALICE_KEY))
            hook = Webhook(receiver.url(), ("target", "end"))
            job_ids = [
                (
                    await engines[0].submit(
                        alice,
                        "fleet",
                        [Target(f"https://example.org/{n}/{i}") for i in range(TARGETS)],
                        webhook=hook,
                    )
                ).id
                for n in range(JOBS)
            ]
            await board.wait_until(lambda: sum(w.closed for w in watched) == JOBS)
            got = [d.headers["webhook-id"] for d in receiver.got]
            attempts = sum(d.attempts for d in dispatchers)

    expected = {j: [f"{j}.t{i}" for i in range(TARGETS)] + [f"{j}.end"] for j in job_ids}
    assert len(got) == len(set(got)) == JOBS * (TARGETS + 1) == attempts
    assert expected == {j: [m for m in got if m.startswith(f"{j}.")] for j in job_ids}
