"""Signals for the commands: the first asks for a graceful stop, a second stops at once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import trio

_log = logging.getLogger("trio_batch.cli")


async def watch_signals(
    signals: AsyncIterator[int], stop: Callable[[int], None], stop_now: trio.CancelScope
) -> None:
    """Call ``stop(signum)`` on the first signal and cancel ``stop_now`` on the second.

    ``signals`` comes from :func:`trio.open_signal_receiver`, opened by the caller before it
    starts work, so a signal that arrives during start-up is not lost.
    """
    stopping = False
    async for signum in signals:
        if stopping:
            _log.warning("second signal: stopping now")
            stop_now.cancel()
            return
        stopping = True
        stop(signum)
