"""Budgets per host: the site is protected by a budget, not by slowness.

One word for one concept: the types say *host* (``HostBudget``, ``HostSlot``, ``HostRules``...);
the key a budget is kept under is the host's *scope*, the host and port a connection goes to
(``Checked.scope`` in the web fetcher), a string and a column, never a second concept.

A :class:`HostBudget` is shared by every caller and worker of an engine, and by every request
the web fetcher makes. The engine's rotation asks it whether a job's next target may start now
(:meth:`HostBudget.try_start`); when it may not, the rotation passes the job over and keeps its
place, so no worker waits on a busy host while other work is ready. Requests outside the
rotation (``/v1/fetch``, robots.txt) wait for a slot with :meth:`HostBudget.acquire`.

A scope has three clocks of its own: its slots (``concurrency`` in flight), its spacing
(``interval`` between two starts, or the site's ``Crawl-delay`` if longer) and its backoff (after
a 429 or 503, ``Retry-After`` or an exponential backoff, once per rate-limit event: a response
that was already in flight when the scope was pushed back does not push it again; after the
wait, one request probes the site until one succeeds). A scope that
stays pushed back past ``block_limit`` seconds is *blocked*: its targets fail with a hint
instead of hanging their jobs. A scope with nothing in flight, no backoff and no spacing left
is forgotten, so memory follows the hosts in use, not the hosts ever seen.

All times are Trio's clock (:func:`trio.current_time`), so tests run on the mock clock.

On a fleet (``PostgresStore``) each instance keeps a budget like this one and the database keeps
the fleet's: the engine reports what this budget learns (:meth:`HostBudget.add_observer`: a
backoff begun, a scope well again, a ``Crawl-delay``) and brings what the fleet learned back in
(:meth:`HostBudget.hold`), so a site's 429 seen by one instance holds back all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol, final

import trio

from ._errors import Error
from ._util import backoff

WaitReason = Literal["host_busy", "backoff", "crawl_delay"]

DEFAULT_BLOCK_LIMIT = 300.0
"""``HostBudget``'s ``block_limit`` by default, and the limit a fetcher without a budget
applies to an unreachable robots.txt."""

# Backoff after a 429/503 without Retry-After: 1 s, 2 s, 4 s ... (jittered) up to max_backoff.
_FIRST_BACKOFF = 1.0
# Idle scopes are looked for once every this many new scopes (and when each slot is released).
_SWEEP_EVERY = 256


CURRENT_SLOT: ContextVar[HostSlot | None] = ContextVar("trio_batch_host_slot", default=None)
"""The slot the engine holds for the target being fetched in this task (None outside).

The web fetcher reads it: a request to that scope runs in the engine's slot; a request to any
other scope (a redirect to another host, robots.txt of another site) takes a slot of its own.
"""


@final
@dataclass(frozen=True, slots=True)
class HostNews:
    """What a budget learned of a scope, for the rest of a fleet (:meth:`HostBudget.add_observer`).

    ``kind`` is ``backoff`` (a rate-limit event counted: ``seconds`` is the wait), ``recovered``
    (a request started after the backoff succeeded) or ``paced`` (``seconds`` is the site's
    ``Crawl-delay``); ``started_at`` (Trio's clock) is when the request that brought it started,
    so the fleet counts a rate-limit event once, as one budget does.
    """

    scope: str
    kind: Literal["backoff", "recovered", "paced"]
    seconds: float
    started_at: float


@final
@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a scope cannot start now, and until when: ``deadline`` is on Trio's clock, as a
    :class:`trio.CancelScope`'s is (None: until a slot frees). :class:`WaitingTarget`, what a
    job's status shows, says the same in Unix seconds as ``until``.

    ``blocked_for`` is how long the scope has been pushed back without a success in between
    (0 unless ``reason`` is ``backoff``); past the budget's ``block_limit`` it is ``blocked``.
    """

    reason: WaitReason
    deadline: float | None
    blocked_for: float = 0.0
    blocked: bool = False


class HostGate(Protocol):
    """A fleet's budget per scope, taken beside a :class:`HostBudget`'s own slot by requests
    outside the rotation (:meth:`HostBudget.acquire`); the engine over a fleet store sets it."""

    async def enter(self, scope: str) -> object:
        """Wait for a slot of ``scope`` in the fleet; return its lease.

        Raises:
            HostBlocked: the scope stayed pushed back past the block limit.
        """
        ...

    def leave(self, lease: object) -> None:
        """Give ``lease`` back (without waiting)."""
        ...


@final
class HostSlot:
    """One request's place in a scope's budget; :meth:`release` it when the response is in.

    ``waited`` is the seconds :meth:`HostBudget.acquire` waited for it on this budget (0 when
    it was free at once, or came from ``try_start``): what a fetch reports as its wait.
    """

    __slots__ = ("_budget", "_lease", "_released", "scope", "started_at", "waited")

    def __init__(self, budget: HostBudget, scope: str, started_at: float) -> None:
        self._budget = budget
        self._released = False
        self._lease: tuple[HostGate, object] | None = None  # a fleet's slot beside this one
        self.scope = scope
        self.started_at = started_at
        self.waited = 0.0

    def release(self, *, rate_limited: bool = False, retry_after: float | None = None) -> None:
        """Give the slot back; ``rate_limited`` (a 429 or 503) pushes the scope back.

        ``retry_after`` is the site's ``Retry-After`` in seconds (capped at the budget's
        ``max_backoff``); without it the backoff doubles at each event. A second release does
        nothing.
        """
        if self._released:
            return
        self._released = True
        self._budget._release(self, rate_limited, retry_after)
        if self._lease is not None:
            gate, lease = self._lease
            gate.leave(lease)


class _Scope:
    __slots__ = (
        "backoff_at",
        "blocked_since",
        "blocked_until",
        "crawl_delay",
        "events",
        "in_flight",
        "last_start",
        "next_start",
    )

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_start = -math.inf
        self.next_start = -math.inf  # spacing: the earliest next start
        self.blocked_until = -math.inf  # backoff: pushed back until
        self.backoff_at = -math.inf  # when the last rate-limit event was counted
        self.blocked_since: float | None = None  # first event since the last success
        self.events = 0  # rate-limit events since the last success
        self.crawl_delay = 0.0


@final
class HostBudget:
    """How much each scope (a host and port) may take, shared by every caller and worker.

    Args:
        concurrency: requests of one scope in flight at once.
        interval: least seconds between two starts on one scope (a site's ``Crawl-delay``,
            given with :meth:`set_crawl_delay`, raises it for that scope).
        block_limit: seconds a scope may stay pushed back by 429/503 answers before its
            targets fail (``Waiting.blocked``).
        max_backoff: the longest one backoff may be; a longer ``Retry-After`` is capped
            (:attr:`capped_retry_after` counts how often).

    Raises:
        ValueError: a setting is out of range; the message names it.
    """

    def __init__(
        self,
        *,
        concurrency: int = 2,
        interval: float = 0.0,
        block_limit: float = DEFAULT_BLOCK_LIMIT,
        max_backoff: float = 120.0,
    ) -> None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1 (got {concurrency!r})")
        for name, value in (("interval", interval), ("block_limit", block_limit)):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0 (got {value!r})")
        if not math.isfinite(max_backoff) or max_backoff <= 0:
            raise ValueError(f"max_backoff must be a finite number > 0 (got {max_backoff!r})")
        self.concurrency = concurrency
        self.interval = interval
        self.block_limit = block_limit
        self.max_backoff = max_backoff
        self._scopes: dict[str, _Scope] = {}
        self._created = 0
        self._listeners: list[Callable[[str], None]] = []
        self._observers: list[Callable[[HostNews], None]] = []
        self._gate: HostGate | None = None
        self._changed = trio.Event()
        self.capped_retry_after = 0
        """How many ``Retry-After`` answers asked for more than ``max_backoff`` (and got it)."""
        self.backoffs = 0
        """Rate-limit events counted (one per event, not one per response)."""

    def __repr__(self) -> str:
        return (
            f"HostBudget(concurrency={self.concurrency}, interval={self.interval:g}, "
            f"block_limit={self.block_limit:g}, max_backoff={self.max_backoff:g})"
        )

    @property
    def scopes(self) -> int:
        """Scopes remembered now: those in flight, pushed back or spacing their starts."""
        self._forget_idle(trio.current_time())
        return len(self._scopes)

    def try_start(self, scope: str) -> HostSlot | Waiting:
        """A slot of ``scope`` if one may start now, or why not and until when.

        Never waits. The rotation calls it for a job's next target and passes the job over on
        :class:`Waiting`; it hears when to look again through :meth:`add_listener`.
        """
        now = trio.current_time()
        state = self._scope(scope, now)
        waiting = self._waiting(state, now)
        if waiting is not None:
            return waiting
        state.in_flight += 1
        state.last_start = now
        state.next_start = now + max(self.interval, state.crawl_delay)
        return HostSlot(self, scope, now)

    async def acquire(self, scope: str) -> HostSlot:
        """Wait for a slot of ``scope`` (for requests outside the engine's rotation).

        With a gate (a fleet's budget, :meth:`set_gate`) the fleet's slot is taken first and
        this budget's after it: a request never holds a slot here while it waits for the
        fleet, where a claimed target (the fleet's slot already) may wait for this one.

        Raises:
            HostBlocked: the scope stayed pushed back past ``block_limit``.
        """
        gate = self._gate
        lease = None if gate is None else await gate.enter(scope)
        try:
            slot = await self._acquire_here(scope)
        except BaseException:
            if gate is not None:
                gate.leave(lease)
            raise
        if gate is not None:
            slot._lease = (gate, lease)
        return slot

    async def _acquire_here(self, scope: str) -> HostSlot:
        await trio.lowlevel.checkpoint_if_cancelled()
        began: float | None = None  # set when the slot is not free at once
        while True:
            got = self.try_start(scope)
            if isinstance(got, HostSlot):
                await trio.lowlevel.cancel_shielded_checkpoint()  # a slot taken is returned
                got.waited = 0.0 if began is None else trio.current_time() - began
                return got
            began = trio.current_time() if began is None else began
            if got.blocked:
                raise HostBlocked(got.blocked_for)
            changed = self._changed
            with trio.move_on_at(math.inf if got.deadline is None else got.deadline):
                await changed.wait()

    def set_gate(self, gate: HostGate | None) -> None:
        """Make :meth:`acquire` also take a slot of ``gate`` (a fleet's budget), or stop."""
        self._gate = gate

    def set_crawl_delay(self, scope: str, seconds: float) -> None:
        """Space the starts of ``scope`` by at least ``seconds`` (a site's ``Crawl-delay``).

        The fetcher sets it each time it reads the site's robots.txt verdict (cached), so a
        scope forgotten while idle gets it back with its next request; the start already made
        is spaced from too.
        """
        now = trio.current_time()
        state = self._scope(scope, now)
        seconds = max(0.0, seconds)
        if seconds != state.crawl_delay:
            self._tell(HostNews(scope, "paced", seconds, now))
        state.crawl_delay = seconds
        state.next_start = max(state.next_start, state.last_start + state.crawl_delay)

    def hold(self, scope: str, wait: float, blocked_for: float | None) -> None:
        """Take in what the fleet knows of ``scope`` (the engine, from a claim of its turn).

        ``wait`` is how long the fleet's backoff of the scope still runs (<= 0: it has ended);
        ``blocked_for`` how long the scope has been pushed back without a success (None: it
        is well). A scope still unwell then probes with one request, and its success is
        reported (``recovered``) as if this budget had seen the 429 itself. Observers hear
        nothing of it: it is the fleet's news already.
        """
        if blocked_for is None:
            return
        now = trio.current_time()
        state = self._scope(scope, now)
        if wait > 0 and now + wait > state.blocked_until:
            state.blocked_until = now + wait
            state.backoff_at = max(state.backoff_at, now)
        since = now - max(0.0, blocked_for)
        if state.blocked_since is None or since < state.blocked_since:
            state.blocked_since = since
        state.events = max(state.events, 1)

    def add_observer(self, observer: Callable[[HostNews], None]) -> None:
        """Call ``observer`` with each :class:`HostNews` (the engine over a fleet store)."""
        self._observers.append(observer)

    def _tell(self, news: HostNews) -> None:
        for observer in self._observers:
            observer(news)

    def _scope(self, scope: str, now: float) -> _Scope:
        state = self._scopes.get(scope)
        if state is None:
            self._created += 1
            if self._created % _SWEEP_EVERY == 0:
                self._forget_idle(now)
            state = self._scopes[scope] = _Scope()
        return state

    def waiting(self, scope: str) -> Waiting | None:
        """Why ``scope`` cannot start now, or None if it can (nothing is taken)."""
        state = self._scopes.get(scope)
        return None if state is None else self._waiting(state, trio.current_time())

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(scope)`` whenever a slot of ``scope`` is given back."""
        self._listeners.append(listener)

    def _waiting(self, state: _Scope, now: float) -> Waiting | None:
        if state.blocked_until > now:
            assert state.blocked_since is not None
            blocked_for = now - state.blocked_since
            return Waiting(
                "backoff", state.blocked_until, blocked_for, blocked_for >= self.block_limit
            )
        # After a rate-limit event one request probes the site until one succeeds.
        concurrency = self.concurrency if state.blocked_since is None else 1
        if state.in_flight >= concurrency:
            return Waiting("host_busy", None)
        if state.next_start > now:
            reason: WaitReason = "crawl_delay" if state.crawl_delay > self.interval else "host_busy"
            return Waiting(reason, state.next_start)
        return None

    def _release(self, slot: HostSlot, rate_limited: bool, retry_after: float | None) -> None:
        now = trio.current_time()
        state = self._scopes.get(slot.scope)
        if state is None:  # never: a scope with a slot out is not forgotten
            return
        state.in_flight -= 1
        if rate_limited:
            self._push_back(slot.scope, state, slot.started_at, now, retry_after)
        elif state.blocked_until <= now and slot.started_at > state.backoff_at:
            if state.blocked_since is not None:
                self._tell(HostNews(slot.scope, "recovered", 0.0, slot.started_at))
            state.events = 0  # a success after the backoff: the scope is well again
            state.blocked_since = None
        self._changed.set()
        self._changed = trio.Event()
        for listener in self._listeners:
            listener(slot.scope)
        if self._is_idle(state, now):
            del self._scopes[slot.scope]

    def _push_back(
        self, scope: str, state: _Scope, started_at: float, now: float, retry_after: float | None
    ) -> None:
        """Count one rate-limit event; responses already in flight when it began add nothing."""
        if started_at <= state.backoff_at:
            return
        state.events += 1
        self.backoffs += 1
        if retry_after is not None:
            wait = max(0.0, retry_after)
            if wait > self.max_backoff:
                self.capped_retry_after += 1
                wait = self.max_backoff
        else:
            wait = backoff(state.events, _FIRST_BACKOFF, self.max_backoff, jitter=0.2)
        state.backoff_at = now
        state.blocked_until = max(state.blocked_until, now + wait)
        if state.blocked_since is None:
            state.blocked_since = now
        self._tell(HostNews(scope, "backoff", wait, started_at))

    def _forget_idle(self, now: float) -> None:
        for scope in [scope for scope, s in self._scopes.items() if self._is_idle(s, now)]:
            del self._scopes[scope]

    @staticmethod
    def _is_idle(s: _Scope, now: float) -> bool:
        """Nothing in flight, not pushed back, nothing to space: forgetting it changes nothing."""
        return (
            s.in_flight == 0
            and s.blocked_since is None
            and s.blocked_until <= now
            and s.next_start <= now
        )


@final
class HostBlocked(Error):
    """A scope stayed pushed back (429/503 answers) longer than the budget's ``block_limit``."""

    def __init__(self, blocked_for: float) -> None:
        super().__init__(
            f"the site kept answering 429/503 for {blocked_for:.0f} s (the host's block limit)"
        )
        self.blocked_for = blocked_for
        self.hint = "the site asked us to slow down; try these targets again later"
