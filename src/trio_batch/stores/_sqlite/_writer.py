"""The writer thread: it owns the write connection and commits queued writes in groups.

Every write is a small function queued to the thread, which takes everything queued (up to
``MAX_BATCH``), runs it in one transaction, commits once, and wakes all the waiting Trio tasks
with one ``run_sync_soon``. Only if one write raises is the group rolled back and replayed write
by write, each in a savepoint of its own, so the failing one gets its error and the others land.

Running marks (``start_target``) wait on the Trio side for the next write, and go to the thread
just before it, all in one ``executemany``; if no write comes within ``MARK_DELAY``, the idle
thread asks for them. A mark whose target's outcome that next write stores is not sent at all:
no reader could have seen it, so the write applies what the mark would have done, its start time
included (see :data:`Finish`). In the steady state of a busy engine, that is nearly every mark.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import outcome
import trio

T = TypeVar("T")

_log = logging.getLogger("trio_batch")

MAX_BATCH = 512
# How long running marks may wait on the Trio side for a write to carry them while the thread
# is idle: what a reader in another process may lag behind a fetch that has begun.
MARK_DELAY = 0.05

Mark = tuple[str, int, float]
"""A running mark: ``(job_id, idx, now)``."""

Key = tuple[str, int]
"""A target: ``(job_id, idx)``."""

Finish = Callable[[sqlite3.Connection, Mapping[Key, float], bool], T]
"""A write that stores outcomes: ``finish(conn, marked, isolate)``. ``marked`` holds the targets
whose running mark was folded into this write rather than written, each with its mark's ``now``:
it applies what those marks would have done (the target's start time included). ``isolate`` is
set on the replay after a failed group: each outcome then goes in a savepoint of its own, so that
only a failing one gets its exception."""

NO_KEYS: frozenset[Key] = frozenset()
NO_MARKS: Mapping[Key, float] = MappingProxyType({})


@dataclass(slots=True)
class Write(Generic[T]):
    fn: Callable[[sqlite3.Connection], T] | None
    task: trio.lowlevel.Task
    finish: Finish[T] | None = None
    """A write that stores outcomes runs this instead of ``fn``."""
    keys: Set[Key] = NO_KEYS
    """The targets whose outcome ``finish`` stores."""
    marked: Mapping[Key, float] = field(default_factory=lambda: NO_MARKS)  # shared, never changed
    """The targets whose running mark ``finish`` applies, with the mark's time."""
    folded: int = 0
    """How many marks were folded into it (a target may have been marked twice)."""
    independent: bool = False
    """It touches no live job's targets (an admission): marks may be folded past it."""
    result: outcome.Outcome[T] | None = None

    def __call__(self, conn: sqlite3.Connection, isolate: bool) -> T:
        if self.finish is not None:
            return self.finish(conn, self.marked, isolate)
        assert self.fn is not None
        return self.fn(conn)


_Item = Write[Any] | list[Mark]


class _Tick:
    """Tells the idle thread that marks are held on the Trio side: time them."""


_TICK = _Tick()


class Writer:
    """The thread that owns the write connection and commits in groups."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        run_marks: Callable[[sqlite3.Connection, list[Mark]], None],
        committed: Callable[[], None] = lambda: None,
    ) -> None:
        self._conn = conn
        self._run_marks = run_marks
        self._committed = committed  # told after each commit, in this thread
        self._queue: queue.SimpleQueue[_Item | _Tick | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="trio-batch-sqlite", daemon=True)
        self._token: trio.lowlevel.TrioToken | None = None
        self.commits = 0
        self.writes = 0
        self.marks_written = 0  # marks written as such (the others were folded into a write)
        # Only the Trio thread touches these:
        self._held: list[Mark] = []  # marks waiting for the next write
        self._queued = 0  # items queued to the thread and not yet woken
        self.posted = 0  # marks not yet committed

    def start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then end the thread (blocking; call from a thread)."""
        self._queue.put(None)
        self._thread.join()

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, independent: bool = False) -> T:
        """Queue ``fn`` and return its result once committed.

        ``independent``: ``fn`` touches no live job's targets (see :attr:`Write.independent`).
        A cancel already pending raises before anything is queued (no effect); once queued,
        the write is not cancellable: the caller learns its fate only after its commit.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self.send_marks()
        task = trio.lowlevel.current_task()
        return await self._wait(Write(fn, task, independent=independent))

    async def run_finish(self, finish: Finish[T], keys: Set[Key]) -> T:
        """:meth:`run` for a write that stores the outcomes of the targets ``keys``.

        The marks held for those targets are folded into it (see :data:`Finish`).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        marked: Mapping[Key, float] = NO_MARKS
        folded = 0
        if held := self._held:
            marked = {(m[0], m[1]): m[2] for m in held if (m[0], m[1]) in keys}  # the last wins
            if marked:
                self._held = [m for m in held if (m[0], m[1]) not in marked]
                folded = len(held) - len(self._held)
            self.send_marks()
        task = trio.lowlevel.current_task()
        return await self._wait(Write(None, task, finish, keys, marked, folded))

    async def _wait(self, item: Write[T]) -> T:
        self._queued += 1
        self._queue.put(item)
        # reschedule() hands us the write's outcome, already unwrapped.
        result: T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        return result

    def post_mark(self, job_id: str, idx: int, now: float) -> None:
        """Hold a running mark for the next write (see the module docstring).

        It commits before any write queued later, and within about ``MARK_DELAY`` anyway.
        """
        self.posted += 1
        held = self._held
        held.append((job_id, idx, now))
        if len(held) == 1 and not self._queued:
            self._queue.put(_TICK)  # the thread may be asleep with nothing to time

    def _send_if_idle(self) -> None:
        if not self._queued:
            self.send_marks()

    def send_marks(self) -> None:
        """Queue the marks held so far (before any write queued after this call)."""
        if self._held:
            self._queued += 1
            self._queue.put(self._held)
            self._held = []

    async def flush(self) -> None:
        """Return once every mark or write posted so far is committed (read-your-writes)."""
        if self.posted:
            await self.run(nothing)

    def _loop(self) -> None:
        assert self._token is not None  # start() set it
        stop = False
        while not stop:
            try:
                # Reading _held from this thread is a racy peek; _TICK covers the race.
                first = self._queue.get(timeout=MARK_DELAY if self._held else None)
            except queue.Empty:
                self._token.run_sync_soon(self._send_if_idle)
                continue
            if first is None:
                break
            batch = [] if isinstance(first, _Tick) else [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                if not isinstance(item, _Tick):
                    batch.append(item)
            if batch:
                self._commit(batch)
                self._token.run_sync_soon(self._wake, batch)

    def _commit(self, batch: list[_Item]) -> None:
        """Run the batch in one transaction; isolate a failing write only when one fails."""
        conn = self._conn
        fold(batch)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for item in batch:
                    if isinstance(item, Write):
                        item.result = outcome.Value(item(conn, False))
                    elif item:
                        self._run_marks(conn, item)
            except Exception:
                # Rare: undo everything, then run each write in a savepoint of its own so the
                # failing one gets its error and the others still land.
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                for item in batch:
                    self._isolated(item)
            conn.execute("COMMIT")
            self.commits += 1
            self._committed()
            for item in batch:
                if isinstance(item, Write):
                    self.writes += 1
                else:
                    self.marks_written += len(item)
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            for item in batch:
                if isinstance(item, Write):
                    item.result = outcome.Error(exc)

    def _isolated(self, item: _Item) -> None:
        conn = self._conn
        if not item:
            return
        conn.execute("SAVEPOINT w")
        try:
            if isinstance(item, Write):
                item.result = outcome.Value(item(conn, True))
            else:
                self._run_marks(conn, item)
        except Exception as exc:
            conn.execute("ROLLBACK TO w")
            if isinstance(item, Write):
                item.result = outcome.Error(exc)
            else:  # a mark only tells readers that a fetch began: log it, lose nothing else
                error = type(exc).__name__
                _log.warning("store write failed with %s", error, extra={"error_type": error})
        conn.execute("RELEASE w")

    def _wake(self, batch: list[_Item]) -> None:
        """In the Trio thread, after a commit: hand each waiting task its write's outcome."""
        self._queued -= len(batch)
        for item in batch:
            if isinstance(item, Write):
                self.posted -= item.folded
                assert item.result is not None
                trio.lowlevel.reschedule(item.task, item.result)
            else:
                self.posted -= len(item)


def fold(batch: list[_Item]) -> None:
    """Fold the marks of ``batch`` into a later write of it that stores their outcome.

    A mark sent ahead of another write (an admission, or a group that is not its own) may meet
    its outcome later in the same transaction. It is then folded into that write as if it had
    been held for it, provided every write in between is independent of it: an admission, or a
    group that stores nothing of the mark's job. Anything else keeps the marks before it.
    """
    open_marks: dict[Key, list[Mark]] = {}  # mark -> the list it is in
    for item in batch:
        if not isinstance(item, Write):
            for mark in item:
                open_marks[mark[0], mark[1]] = item
            continue
        if not open_marks or item.independent:
            continue
        if item.finish is None:
            open_marks.clear()
            continue
        if found := open_marks.keys() & item.keys:
            times = dict(item.marked)  # a mark held for the write is later than one sent ahead
            for key in found:
                marks = open_marks.pop(key)
                before = len(marks)
                times.setdefault(key, [m[2] for m in marks if (m[0], m[1]) == key][-1])
                marks[:] = [m for m in marks if (m[0], m[1]) != key]
                item.folded += before - len(marks)
            item.marked = times
        jobs = {key[0] for key in item.keys}
        for key in [key for key in open_marks if key[0] in jobs]:
            del open_marks[key]


def nothing(conn: sqlite3.Connection) -> None:
    pass
