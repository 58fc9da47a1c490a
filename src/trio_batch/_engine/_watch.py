"""Reading jobs in bounded pieces, and following one as it runs.

:class:`JobWatchers` is how a reader of a job (an NDJSON follower, an events stream) wakes on the
engine's own outcomes instead of polling the store: the engine calls :meth:`JobWatchers.changed`
when it has acknowledged an outcome of a job, and when a job settles, is cancelled or is
interrupted. A job nobody watches costs one dict lookup per change; a watched job holds one
:class:`trio.Event` shared by all its watchers, swapped for a fresh one at each change, so a change
wakes every watcher at once and nothing queues up: a slow watcher does not buffer changes, it
reads the store again when it wakes (a change is a hint, the store is the record). Leaving the
``with engine.watch(job_id)`` block frees the watcher at once, and the job's entry with its last
watcher.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import final

import trio

from ..stores._protocol import Store


class _Entry:
    __slots__ = ("event", "generation", "memo", "memo_since", "watchers")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.generation = 0
        self.watchers = 0
        self.memo: dict[Hashable, object] = {}
        self.memo_since = trio.current_time()


@final
class JobWatch:
    """One watcher of one job; from :meth:`~trio_batch.BatchEngine.watch`."""

    __slots__ = ("_entry", "_owner", "_poll", "_seen")

    def __init__(self, owner: JobWatchers, entry: _Entry, poll: float | None) -> None:
        self._owner = owner
        self._entry = entry
        self._seen = entry.generation
        self._poll = poll

    @property
    def memo(self) -> dict[Hashable, object]:
        """A dict that every watcher of this job shares, emptied at each change of the job.

        What one watcher read of the job since the last change is what the others would read,
        so they can share it (200 followers of a job then cost one read a change, not 200).
        On a store several engines share, a change may come without a notice: there the dict
        is also emptied once a poll interval has passed, so what it holds is never older than
        what a poll would read.
        """
        entry = self._entry
        if self._poll is not None and trio.current_time() - entry.memo_since >= self._poll:
            entry.memo = {}
            entry.memo_since = trio.current_time()
        return entry.memo

    async def wait(self) -> None:
        """Wait until the job may have changed since the watch opened or ``wait`` last returned.

        Returns at once if the engine reported a change of the job meanwhile, else at its next
        one. On a store several engines share (PostgreSQL) another engine's outcomes do not
        reach this one, so the wait also returns after the store's poll interval (one second):
        the caller reads the store again either way. Bound the wait with Trio's
        ``move_on_after`` (a stream writes its keep-alive then).

        Cancellation: safe to cancel; a change it did not return for is seen by the next wait.

        Raises:
            trio.ClosedResourceError: the engine closed (before or during the wait).
        """
        entry = self._entry
        if self._owner.closed:
            await trio.lowlevel.checkpoint()
            raise trio.ClosedResourceError("the BatchEngine closed")
        if entry.generation != self._seen:
            self._seen = entry.generation
            await trio.lowlevel.checkpoint()
            return
        if self._poll is None:
            await entry.event.wait()
        else:
            with trio.move_on_after(self._poll):
                await entry.event.wait()
        if self._owner.closed:
            raise trio.ClosedResourceError("the BatchEngine closed")
        self._seen = entry.generation


@final
class JobWatchers:
    """The engine's registry of watched jobs; see the module docstring."""

    def __init__(self, poll: float | None = None) -> None:
        self._jobs: dict[str, _Entry] = {}
        self._poll = poll
        self._count = 0
        # next_change's event: made only when someone waits for it.
        self._webhook_change: trio.Event | None = None
        self.closed = False

    @property
    def count(self) -> int:
        """Watchers open now, over all jobs."""
        return self._count

    @property
    def jobs(self) -> int:
        """Jobs with at least one watcher."""
        return len(self._jobs)

    def changed(self, job_id: str, *, has_webhook: bool = False) -> None:
        """The engine stored something of ``job_id``: wake its watchers. Never blocks.

        ``has_webhook``: the job has a webhook, so the change wakes :meth:`next_change` too.
        """
        if has_webhook and self._webhook_change is not None:
            self._webhook_change.set()
            self._webhook_change = None
        entry = self._jobs.get(job_id)
        if entry is not None:
            entry.generation += 1
            entry.memo = {}
            entry.memo_since = trio.current_time()
            event, entry.event = entry.event, trio.Event()
            event.set()

    def close(self) -> None:
        """Wake every watcher; their waits raise :class:`trio.ClosedResourceError`."""
        self.closed = True
        if self._webhook_change is not None:
            self._webhook_change.set()
        for entry in self._jobs.values():
            entry.event.set()

    def next_change(self) -> trio.Event:
        """An event set at the next change of a job with a webhook, or when the engine closes."""
        if self.closed:
            raise trio.ClosedResourceError("the BatchEngine closed")
        if self._webhook_change is None:
            self._webhook_change = trio.Event()
        return self._webhook_change

    @contextmanager
    def watch(self, job_id: str) -> Iterator[JobWatch]:
        if self.closed:
            raise trio.ClosedResourceError("the BatchEngine closed")
        entry = self._jobs.get(job_id)
        if entry is None:
            entry = self._jobs[job_id] = _Entry()
        entry.watchers += 1
        self._count += 1
        try:
            yield JobWatch(self, entry, self._poll)
        finally:
            self._count -= 1
            entry.watchers -= 1
            if not entry.watchers and self._jobs.get(job_id) is entry:
                del self._jobs[job_id]


SHARED_POLL_SECONDS = 1.0
"""How often a watcher of a job on a shared store (``Store.shared``) reads it again."""


def is_shared(store: Store) -> bool:
    """Whether other processes write to ``store`` too (``PostgresStore.shared``)."""
    return bool(getattr(store, "shared", False))


def watchers_for(store: Store) -> JobWatchers:
    """The registry an engine over ``store`` uses: polling once a second if it is shared."""
    return JobWatchers(SHARED_POLL_SECONDS if is_shared(store) else None)
