"""Fixtures for the HTTP API tests; the builders they use are in ``support.py``.

The app runs its ASGI lifespan, as under a server (hypercorn sends it; httpx's ASGI transport
does not, so ``support.lifespan`` plays the server's part).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

pytest.importorskip("starlette")
pytest.importorskip("hypercorn")
pytest.importorskip("prometheus_client")

import trio.testing

from .support import Api, open_api


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    """An app over an engine on a MemoryStore, with a client talking to it in-process."""
    async with open_api() as a:
        yield a


@pytest.fixture
def io_clock() -> trio.testing.MockClock:
    """A mock clock for tests with sockets or threads: it jumps once all has been idle 50 ms.

    ``autojump_clock`` jumps as soon as every task waits, and a task waiting for a socket or a
    thread is waiting: the clock would jump past a timeout while the answer is on its way. This
    one waits 50 ms of real time first, far longer than a loopback answer takes.
    """
    return trio.testing.MockClock(autojump_threshold=0.05)
