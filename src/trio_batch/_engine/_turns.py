"""Where an engine's workers get their turns: the one decision an engine makes about its store.

An engine over a single-process store (memory, SQLite) keeps its own rotation of the jobs it
admitted (:class:`~trio_batch._engine._local_turns.LocalTurns`); an engine over a fleet store
(PostgreSQL) takes turns the whole fleet shares, claimed from the database
(:class:`~trio_batch._engine._fleet_turns.FleetTurns`). :func:`~trio_batch.open_engine` picks
one, once, as Trio picks its I/O manager, and ``BatchEngine`` never asks which it has: it admits,
reads, runs its workers and stores outcomes the same way over both.

:class:`Turns` is that small interface; :class:`EngineParts` is what an engine lends its source
of turns (the store, the settings, the live jobs, the hooks), so neither reaches into the other.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from .._config import Config
from .._hooks import SafeHooks
from .._model import Caller, CallerClass, Target
from ..stores._protocol import NewJob, Store
from ._ahead import ClaimAhead
from ._live import LiveJob, LiveJobs
from ._rotation import Rotation, Turn


@dataclass(frozen=True, slots=True)
class EngineParts:
    """What an engine shares with its source of turns."""

    store: Store
    config: Config
    log: logging.Logger
    wall: Callable[[], float]
    """The wall clock (Unix seconds), for what is stored."""
    hooks: SafeHooks
    live: LiveJobs
    """The live jobs this engine runs: its own (local), or those it holds claims of (fleet)."""
    store_error: Callable[[str, str, Exception], None]
    """A failed store call: ``(operation, job id or "", error)``; logged, the engine goes on."""
    changed: Callable[[str], None]
    """A job's followers should look again (a wait began, say)."""
    requeue: Callable[[LiveJob], None]
    """Put a job back in the rotation if it has a target to start and room (the engine's rule)."""
    unfinished: Callable[[LiveJob], Awaitable[None]]
    """Fail a live job that holds no target yet did not end (its last outcome was lost)."""
    pace: ClaimAhead
    """The fetches' running pace (and how far a fleet claims ahead of its workers)."""
    workers: int
    """The engine's worker tasks."""
    storing: Callable[[], bool]
    """Whether an outcome this engine fetched is on its way to the store (not acknowledged)."""

    def waited(self, live: LiveJob, reason: str, new: bool) -> None:
        """The rotation passed ``live`` over: counted; a new wait also wakes its followers
        (the events stream's ``waiting``)."""
        if (hook := self.hooks.waited) is not None:
            hook(reason)
        if new:
            self.changed(live.id)


class Turns(Protocol):
    """A source of turns: what the engine's workers run, and what happens around a turn.

    Every method that writes to the store is bounded and shielded where the engine's close
    needs it to land, as the engine's own bookkeeping is.
    """

    retrying: int
    """Busy targets waiting out their wait before they are tried again."""

    rotation: Rotation
    """The round robin the workers take turns from (a fleet's claimed turns go through it
    too, so its budgets and its order apply to them)."""

    def scopes(self, targets: Sequence[Target]) -> tuple[str | None, ...]:
        """Each target's host scope, stored with its job where the claims keep budgets."""
        ...

    async def admitted(
        self,
        job: NewJob,
        caller: Caller,
        caller_class: CallerClass,
        *,
        has_webhook: bool,
        concurrency: int,
        closing: bool,
    ) -> None:
        """A job was stored: run it here (local), or leave it to the fleet's claims.

        Never a checkpoint on its way to returning: the job is stored, and the submit that
        stored it must return its id whatever cancel arrives now.

        Raises:
            trio.ClosedResourceError: the engine began closing meanwhile (``closing``), and
                the job was failed ``interrupted`` so that no cap stays taken.
        """
        ...

    async def open(self) -> None:
        """As the engine opens, before :meth:`run`: what to do with the live jobs in the store."""
        ...

    def take(self) -> Awaitable[Turn]:
        """The next turn for a worker: from the rotation, waiting while there is none.

        A plain method returning the rotation's own awaitable, not a coroutine of its own: a
        worker takes a turn a target, and each coroutine layer is its cost again.
        """
        ...

    async def started(self, live: LiveJob, idx: int) -> bool:
        """Mark target ``idx`` running; False if its job is no longer live (start nothing)."""
        ...

    async def busy(self, live: LiveJob, idx: int, wait: float) -> None:
        """Target ``idx`` came back busy: try it again after ``wait`` seconds (0: when its
        host's backoff lets it), counting as in flight until then."""
        ...

    async def refill(self, live: LiveJob) -> None:
        """A crawl's held frontier ran low: read on from the store (local), or nothing (a
        fleet claims its targets one by one)."""
        ...

    def emptied(self, live: LiveJob) -> bool:
        """``live`` holds no target any more yet did not end: True if that means its last
        outcome was lost (the engine then fails it), False when it only left this engine."""
        ...

    def work_ahead(self, caller: str | None, fetch_seconds: float) -> float | None:
        """Seconds until a live job (of ``caller``, or any) may end, or None: no estimate."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The source's own tasks (timers, claims, adoption), until cancelled; started once
        every job it brings in at opening is in the rotation."""
        ...

    async def close(self) -> None:
        """The engine closes: its live jobs end (``interrupted``), stay for the next engine
        (``Config.resume``), or go back to the fleet. Bounded and shielded."""
        ...
