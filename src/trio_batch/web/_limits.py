"""Per-caller limits: a ``trio.CapacityLimiter`` for each caller, kept only while it is used.

The fetcher (fetch slots) and the shaper (worker processes) both give each caller a share of a
pool, so that one agent cannot hold every slot while the others wait. A dict of limiters keyed
by caller name would grow with every caller ever seen, and the names come from API keys and
clients, so :class:`PerCaller` drops a caller's limiter as soon as no task holds or waits for
it, and makes a fresh one on the caller's next call. A dropped limiter has no tokens lent out,
so nothing is lost: the share is the same however often it is remade.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import final

import trio


@final
class PerCaller:
    """One ``trio.CapacityLimiter`` of ``tokens`` tokens per caller, pruned when idle.

    Take the caller's limiter with ``with per_caller.limiter(name) as limiter:`` and acquire
    it inside that block (with ``async with limiter`` or ``acquire``/``release``): when the
    block ends, the limiter is dropped if no task holds a token or waits for one.
    """

    def __init__(self, tokens: int) -> None:
        self._tokens = tokens
        self._limiters: dict[str, trio.CapacityLimiter] = {}

    @contextlib.contextmanager
    def limiter(self, caller: str) -> Iterator[trio.CapacityLimiter]:
        """The limiter of ``caller`` for the block, made if the caller has none now."""
        limiter = self._limiters.get(caller)
        if limiter is None:
            limiter = self._limiters[caller] = trio.CapacityLimiter(self._tokens)

        try:
            yield limiter
        finally:
            stats = limiter.statistics()
            if not stats.borrowed_tokens and not stats.tasks_waiting:
                self._limiters.pop(caller, None)

    @property
    def callers(self) -> int:
        """Callers with a limiter now: those that hold a token or wait for one."""
        return len(self._limiters)

    @property
    def waiting(self) -> int:
        """Tasks waiting for a token of their caller's limiter, over all callers."""
        return sum(lim.statistics().tasks_waiting for lim in self._limiters.values())
