"""The output of ``trio-batch run``: one JSON line per input target, in input order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import final

from .._model import JSONValue, Snapshot, Target, TargetState, TargetStatus
from ._output import cli_hint, dump_line, target_line


@final
@dataclass(slots=True)
class Job:
    """A slice of the input submitted as one job."""

    idxs: list[int]
    """Input index of each of its targets, ascending."""
    targets: list[Target]
    id: str = ""
    reused: bool = False
    """The engine gave back an earlier identical job instead of making a new one."""
    finished: bool = False
    place: dict[int, int] = field(default_factory=dict)
    """Input index -> position in the job."""

    def add(self, idx: int, target: Target) -> None:
        self.place[idx] = len(self.targets)
        self.idxs.append(idx)
        self.targets.append(target)


ReadStored = Callable[[str, int], Awaitable[Sequence[TargetStatus]]]
"""``read_stored(job_id, after)``: a page of the job's targets after position ``after``."""

Item = dict[str, JSONValue] | Job
"""What an input index holds: its ready line (a refused target), or the job holding it."""


@final
class LineWriter:
    """Writes one line per input index, in input order, once it and every earlier one are stored.

    Refused targets (ready lines) may sit between the targets of a job: the writer walks every
    index, so each gets its line whatever holds it. A live job's stored targets are read a page
    at a time after the last one written, so a line waits for its own target and the ones
    before it, never for the rest of its job. ``done`` and ``failed`` count the lines written,
    which is what the exit status and the summary report.
    """

    def __init__(self, out: Callable[[str], None], items: list[Item]) -> None:
        self._out = out
        self._items = items
        self._snapshots: dict[int, dict[int, TargetStatus] | None] = {}  # id(job) -> targets
        self._stored: dict[int, dict[int, TargetStatus]] = {}  # id(job) -> its stored targets
        self.next = 0
        self.done = 0
        self.failed = 0
        self.skipped = 0
        """Indexes passed without a line (only after an interrupt: targets that never ran)."""

    @property
    def complete(self) -> bool:
        return self.next >= len(self._items)

    def _emit(self, line: dict[str, JSONValue]) -> None:
        if line["status"] == TargetState.DONE:
            self.done += 1
        else:
            self.failed += 1
        self._out(dump_line(line))

    async def flush(
        self,
        read: Callable[[str], Awaitable[Snapshot | None]],
        *,
        partial: bool = False,
        read_stored: ReadStored | None = None,
    ) -> None:
        """Write every line that is ready, in input order.

        A finished job's lines are ready. With ``read_stored(job_id, after)`` (the targets of a
        live job after position ``after``, in order), so is each stored target of a live job
        whose earlier lines are written. With ``partial`` (after an interrupt), write the
        finished targets of every submitted job and skip the rest.
        """
        read_live: set[int] = set()  # the live jobs read in this flush: one page each
        while self.next < len(self._items):
            idx = self.next
            item = self._items[idx]
            if isinstance(item, dict):
                self._emit(item)
            elif not item.finished and not partial:
                if read_stored is None or not item.id or id(item) in read_live:
                    return
                read_live.add(id(item))
                if not await self._write_stored(item, read_stored):
                    return
                continue
            else:
                await self._write_finished(idx, item, read, partial=partial)
            self.next = idx + 1

    async def _write_stored(self, job: Job, read_stored: ReadStored) -> bool:
        """Write the lines of ``job``'s stored targets from ``self.next``; False if none was."""
        stored = self._stored.setdefault(id(job), {})
        position = job.place[self.next]
        if position not in stored:
            for read in await read_stored(job.id, position - 1):
                if read.status in (TargetState.DONE, TargetState.FAILED):
                    stored[read.idx] = read
        written = False
        while self.next < len(self._items):
            item = self._items[self.next]
            if isinstance(item, dict):
                self._emit(item)
            elif item is not job or (target := stored.pop(job.place[self.next], None)) is None:
                break
            else:
                self._emit(self._line(self.next, target))
                written = True
                if self.next == job.idxs[-1]:
                    self._stored.pop(id(job), None)
            self.next += 1
        return written

    async def _write_finished(
        self,
        idx: int,
        job: Job,
        read: Callable[[str], Awaitable[Snapshot | None]],
        *,
        partial: bool,
    ) -> None:
        """Write the line of ``idx`` of the finished (or, with ``partial``, stopped) ``job``."""
        targets = await self._targets(job, read)
        target = None if targets is None else targets.get(job.place[idx])
        if target is not None and target.status in (TargetState.DONE, TargetState.FAILED):
            self._emit(self._line(idx, target))
        elif partial:
            self.skipped += 1
        else:
            self._emit(_lost_line(idx, job.targets[job.place[idx]]))
        if idx == job.idxs[-1]:
            self._snapshots.pop(id(job), None)
            self._stored.pop(id(job), None)

    @staticmethod
    def _line(idx: int, target: TargetStatus) -> dict[str, JSONValue]:
        return result_line(idx, target)

    async def _targets(
        self, job: Job, read: Callable[[str], Awaitable[Snapshot | None]]
    ) -> dict[int, TargetStatus] | None:
        key = id(job)
        if key not in self._snapshots:
            snap = await read(job.id) if job.id else None
            self._snapshots[key] = None if snap is None else {t.idx: t for t in snap.targets}
        return self._snapshots[key]


def result_line(idx: int, target: TargetStatus) -> dict[str, JSONValue]:
    """A stored target's line as ``run`` and ``crawl`` write it, the hint in the command line's
    words."""
    line = target_line(idx, target)
    line["hint"] = cli_hint(target.url, target.error, target.hint)
    return line


ReadAfter = Callable[[str, int], Awaitable[Sequence[TargetStatus]]]
"""``read(job_id, after)``: a page of the job's targets after index ``after``, in index order."""


@final
class StoredLines:
    """Writes one line per finished target of one growing job (a crawl), in index order, as soon
    as it and every target before it are stored.

    The job's targets are read a page at a time after the last one written, so memory does not
    grow with the job. A target that is not finished holds back the lines after it until it is;
    a removed target (a crawl's duplicate) leaves no line. ``done`` and ``failed`` count the
    lines written.
    """

    def __init__(self, out: Callable[[str], None], job_id: str) -> None:
        self._out = out
        self.job_id = job_id
        self.after = -1
        """The index of the last target written."""
        self.done = 0
        self.failed = 0

    async def flush(self, read: ReadAfter) -> None:
        """Write every line that is ready."""
        while True:
            page = await read(self.job_id, self.after)
            for target in page:
                if target.status not in (TargetState.DONE, TargetState.FAILED):
                    return
                if target.status == TargetState.DONE:
                    self.done += 1
                else:
                    self.failed += 1
                self._out(dump_line(result_line(target.idx, target)))
                self.after = target.idx
            if not page:
                return


def _lost_line(idx: int, target: Target) -> dict[str, JSONValue]:
    """The line of a target whose finished job no longer has it (it cannot happen in a run)."""
    return {
        "idx": idx,
        "url": target.url,
        "status": "failed",
        "error": "the job's result is no longer in the database",
        "hint": "run the same input again with the same --db",
        "result": None,
    }
