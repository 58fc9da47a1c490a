"""A fleet's budget per scope for requests outside the rotation (``FleetGate``).

A job's target takes its host's slot through the claim of its turn; a request outside the
rotation (``POST /v1/fetch``, a redirect to another host, robots.txt, a site map's sitemaps)
takes it through :meth:`HostBudget.acquire`. On a fleet that is not enough: each instance's
budget counts only its own requests. So the engine over a fleet store gives its budget this
gate (``HostBudget.set_gate``): ``acquire`` then also takes a *lease* of the scope in the
database, counted beside the claims under the same rules, and gives it back when the slot is
released (in a batch, by a task of the engine's nursery).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import trio

from .._budget import HostBlocked
from ..stores._protocol import FleetStore, HostRules

# How often a request waiting for a slot the fleet's claims hold asks again.
_POLL = 0.1


@final
class FleetGate:
    """:class:`~trio_batch._budget.HostGate` over a fleet store's leases."""

    def __init__(
        self, store: FleetStore, rules: HostRules, failed: Callable[[Exception], None]
    ) -> None:
        self._store = store
        self._rules = rules
        self._failed = failed  # a store error: logged; the request goes on under its own budget
        self._leaving: list[str] = []
        self._left = trio.Event()

    async def enter(self, scope: str) -> object:
        """Wait for a lease of ``scope``: its token (None when the store failed).

        Raises:
            HostBlocked: the scope stayed pushed back past the block limit.
        """
        while True:
            try:
                token, free_in, blocked_for = await self._store.lease_scope(scope, self._rules)
            except Exception as exc:
                self._failed(exc)
                return None
            if token is not None:
                return token
            if blocked_for is not None and blocked_for >= self._rules.block_limit:
                raise HostBlocked(blocked_for)
            await trio.sleep(_POLL if free_in is None else min(max(free_in, 0.01), _POLL * 10))

    def leave(self, lease: object) -> None:
        """Give ``lease`` back soon (the slot is released in synchronous code)."""
        if isinstance(lease, str):
            self._leaving.append(lease)
            self._left.set()

    async def run(self) -> None:
        """Give the leases back in batches as they are left (a task of the engine)."""
        while True:
            await self._left.wait()
            self._left = trio.Event()
            tokens, self._leaving = self._leaving, []
            try:
                await self._store.release_leases(tokens)
            except Exception as exc:  # they expire after claim_timeout
                self._failed(exc)
