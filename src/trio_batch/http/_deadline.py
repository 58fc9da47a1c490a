"""Store calls under a deadline, so a stalled database answers 503 in time instead of hanging.

A request gives the store ``store_timeout`` seconds in all (one deadline for every store call
the request makes). A read still running at the deadline is cancelled, which stops its query.
A write cannot be treated the same way: once a store has queued a write it is not cancellable
(``docs/design.md``, "One idiom"), so cancelling the request would not end the wait. So each
store call runs in a task of its own, in a nursery that the app's ASGI lifespan owns, and the
request waits for that task only until the deadline. At the deadline the request answers 503
and the write finishes in the background, as the store decides: it lands or it fails, and a
repeat of the request is safe either way (a submit of the same targets gets the same job
back, a second cancel answers 409, a touch is a touch).

Writes that nobody waits for are bounded: at most :data:`MAX_PENDING_WRITES` at once, and a
background touch of a job that is already being touched is not started again. ``/healthz``
waits (within its own deadline) for the writes that have been pending longer than
``store_timeout``: if they do not finish, the write path is stuck. How each write ends is told
to :attr:`StoreCalls.health` (``_health``), so ``/healthz`` also sees writes that fail at once
(a full disk), and a background write that fails is logged once a spell, not once a request.

Without a lifespan (an app driven by ``httpx.ASGITransport``, or by a server that does not
send lifespan events) the calls run inline under the deadline: reads still end in time, but a
write the store has queued is waited for until the store answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar, TypeVarTuple, Unpack, cast, final

import outcome
import trio

from .._errors import SubmitError
from ._health import WriteHealth, outage_type

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

MAX_PENDING_WRITES = 256
"""Writes the API may have started and stopped waiting for, at once. A stall of a minute at
a few hundred requests a second would otherwise queue tens of thousands of writes that all
land, mostly as repeats, the moment the database comes back; past this bound a write answers
503 at once without being started."""


@final
class StoreTimeout(Exception):
    """The store did not answer within the request's deadline (or too many writes wait)."""

    def __init__(self, seconds: float, *, write: bool, backlog: bool = False) -> None:
        super().__init__(f"the database did not answer within {seconds:g} s")
        self.seconds = seconds
        self.write = write
        self.backlog = backlog


@dataclass(eq=False, slots=True)
class _Call:
    write: bool
    started: float
    key: Hashable | None = None
    waited: bool = True
    """False once the request stopped waiting (or never did): a failure is then logged."""
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    result: outcome.Outcome[object] | None = None
    """None until done, and after done if the call was cancelled."""


@final
class StoreCalls:
    """Runs the app's store calls under deadlines; see the module docstring."""

    def __init__(self, timeout: float, *, max_pending_writes: int = MAX_PENDING_WRITES) -> None:
        if not timeout > 0:
            raise ValueError(f"store_timeout must be > 0 (got {timeout!r})")
        self.timeout = timeout
        self._max_pending = max_pending_writes
        self._nursery: trio.Nursery | None = None
        self._writes: set[_Call] = set()
        self._keys: set[Hashable] = set()
        self.health = WriteHealth()
        """How the API's writes end lately: ``/healthz`` reads it."""

    @property
    def running_lifespan(self) -> bool:
        """Whether calls run in the background (the app's lifespan is open)."""
        return self._nursery is not None

    @property
    def pending_writes(self) -> int:
        """Writes started in the background and not finished yet."""
        return len(self._writes)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The lifespan of the app: store calls run in this block's nursery while it is open.

        On exit, calls still running are cancelled: a read stops, a write the store has queued
        finishes first (the store bounds how long).
        """
        if self._nursery is not None:
            raise RuntimeError("this app is already running: serve one app once at a time")
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel("the app's lifespan ended")

    def request(self) -> StoreBudget:
        """The store budget of one request: ``timeout`` seconds from now for all its calls."""
        return StoreBudget(self, trio.current_time() + self.timeout)

    async def wait_stale_writes(self, deadline: float) -> bool:
        """Wait until the writes pending for longer than ``timeout`` have finished.

        Returns:
            False if one of them is still pending at ``deadline``: the write path is stuck.
        """
        now = trio.current_time()
        stale = [c for c in self._writes if now - c.started >= self.timeout]
        with trio.move_on_at(deadline):
            for call in stale:
                await call.done.wait()
            return True
        return False

    async def call(self, fn: Callable[[], Awaitable[T]], *, deadline: float, write: bool) -> T:
        """``await fn()``, but answer :class:`StoreTimeout` at ``deadline`` at the latest."""
        nursery = self._nursery
        if nursery is None:
            with trio.move_on_at(deadline):
                try:
                    value = await fn()
                except Exception as exc:
                    self._ended(outcome.Error(exc), write=write)
                    raise
                self._ended(outcome.Value(value), write=write)
                return value
            raise StoreTimeout(self.timeout, write=write)
        if trio.current_time() >= deadline:  # the request's earlier calls used the budget up
            await trio.lowlevel.checkpoint()
            raise StoreTimeout(self.timeout, write=write)
        if write and len(self._writes) >= self._max_pending:
            await trio.lowlevel.checkpoint()
            raise StoreTimeout(self.timeout, write=True, backlog=True)
        call = _Call(write=write, started=trio.current_time())
        if write:
            self._writes.add(call)
        nursery.start_soon(self._run, call, fn)
        try:
            with trio.move_on_at(deadline):
                await call.done.wait()
        except BaseException:
            # The request itself was cancelled: so is the call (a queued write still lands).
            call.waited = False
            call.scope.cancel()
            raise
        if call.result is None:
            call.waited = False
            call.scope.cancel()  # a read stops; a write the store queued finishes on its own
            raise StoreTimeout(self.timeout, write=write)
        return cast("T", call.result.unwrap())

    def start_write(self, fn: Callable[[], Awaitable[object]], *, key: Hashable) -> bool:
        """Start a write nobody waits for, unless one with the same ``key`` is still pending.

        Returns:
            False when it was not started: no lifespan, the same write is pending, or too many
            writes are pending.
        """
        nursery = self._nursery
        if nursery is None or key in self._keys or len(self._writes) >= self._max_pending:
            return False
        call = _Call(write=True, started=trio.current_time(), key=key, waited=False)
        self._keys.add(key)
        self._writes.add(call)
        nursery.start_soon(self._run, call, fn)
        return True

    async def _run(self, call: _Call, fn: Callable[[], Awaitable[object]]) -> None:
        try:
            with call.scope:
                call.result = outcome.Value(await fn())
        except Exception as exc:
            call.result = outcome.Error(exc)
        finally:
            self._writes.discard(call)
            if call.key is not None:
                self._keys.discard(call.key)
            call.done.set()
        if call.result is not None:
            self._ended(call.result, write=call.write)
        if not call.waited and isinstance(call.result, outcome.Error):
            error = call.result.error
            if outage_type(error) is None and not isinstance(
                error, (SubmitError, trio.ClosedResourceError)
            ):
                kind = type(error).__name__
                self.health.throttle.warning(
                    "a store call nobody waited for failed with %s",
                    kind,
                    kind=f"background {kind}",
                    error_type=kind,
                )

    def _ended(self, result: outcome.Outcome[object], *, write: bool) -> None:
        """Tell :attr:`health` how a write ended: landed, or failed for the database's sake."""
        if not write:
            return
        if isinstance(result, outcome.Value):
            self.health.succeeded()
        elif isinstance(result, outcome.Error) and (kind := outage_type(result.error)):
            self.health.failed(kind)


@final
@dataclass(frozen=True, slots=True)
class StoreBudget:
    """One request's store calls, all under the same deadline."""

    calls: StoreCalls
    deadline: float

    async def read(self, fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
        """``await fn(*args)``, cancelled at the deadline (:class:`StoreTimeout`)."""
        return await self.calls.call(lambda: fn(*args), deadline=self.deadline, write=False)

    async def write(self, fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
        """``await fn(*args)``, waited for until the deadline (:class:`StoreTimeout`).

        A write the store has begun by then finishes in the background.
        """
        return await self.calls.call(lambda: fn(*args), deadline=self.deadline, write=True)

    async def write_soon(
        self, fn: Callable[[Unpack[Ts]], Awaitable[object]], *args: *Ts, key: Hashable
    ) -> None:
        """Start ``fn(*args)`` in the background and do not wait for it.

        Without a lifespan it runs inline under the deadline, and a timeout is ignored: the
        request does not depend on its outcome.
        """
        if self.calls.running_lifespan:
            # Not started when the same write is pending or too many are: skipping is harmless.
            self.calls.start_write(lambda: fn(*args), key=key)
            await trio.lowlevel.checkpoint()
            return
        with contextlib.suppress(StoreTimeout):
            await self.calls.call(lambda: fn(*args), deadline=self.deadline, write=True)
