"""When an idle claimer should claim again (``TurnWakeups``).

A fleet instance whose claim found fewer turns than it wanted sleeps until a turn may be free:
a notification of the schema's turns (a job admitted, an outcome stored, a claim given back,
anywhere in the fleet), heard by a thread of its own, or the end of the first scope held back
by its clock (spacing, a backoff), which no notification announces. The engine bounds the wait
as well (a slow poll covers a lost notification).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from typing import final

import trio

from . import _claims
from ._schema import Conn


@final
class TurnWakeups:
    """A store's wake-ups: the notifications it heard, and its last claim's scope clock."""

    def __init__(self) -> None:
        self._turns = trio.Event()  # set at a notification of the schema's turns
        self._woken = False  # a notification came since the last claim
        self._free_in: float | None = None  # the last claim's: when a scope's clock ends

    def start(
        self, connect: Callable[[], Conn], schema: str, stopping: threading.Event
    ) -> trio.Event:
        """Start the thread that hears the schema's notifications; its end sets the event."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()

        def wake() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._wake)

        def finished(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        trio.lowlevel.start_thread_soon(
            lambda: _claims.listen(connect, schema, wake, stopping), finished
        )
        return done

    def claiming(self) -> None:
        """A claim begins: what was notified before it, it sees."""
        self._woken = False

    def claimed(self, free_in: float | None) -> None:
        """A claim ended; the first scope its rules held back frees in ``free_in`` seconds."""
        self._free_in = free_in

    async def wait(self) -> None:
        """Return at a notification (at once if one came since the last claim began) or when
        the last claim's first held-back scope frees."""
        if self._woken:
            await trio.lowlevel.checkpoint()
            return
        free_in = self._free_in
        with trio.move_on_after(math.inf if free_in is None else max(0.0, free_in)):
            await self._turns.wait()

    def _wake(self) -> None:
        self._woken = True
        event, self._turns = self._turns, trio.Event()
        event.set()
