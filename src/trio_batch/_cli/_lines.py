"""The output of ``trio-batch run``: one JSON line per input target, in input order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import final

from .._model import JSONValue, Snapshot, Target, TargetState, TargetStatus
from ._output import allow_net_hint, dump_line, target_line


@final
@dataclass(slots=True)
class Job:
    """A slice of the input submitted as one job."""

    idxs: list[int]
    """Input index of each of its targets, ascending."""
    targets: list[Target]
    id: str = ""
    finished: bool = False
    place: dict[int, int] = field(default_factory=dict)
    """Input index -> position in the job."""

    def add(self, idx: int, target: Target) -> None:
        self.place[idx] = len(self.targets)
        self.idxs.append(idx)
        self.targets.append(target)


Item = dict[str, JSONValue] | Job
"""What an input index holds: its ready line (a refused target), or the job holding it."""


@final
class LineWriter:
    """Writes one line per input index, in input order, as the jobs holding them finish.

    Refused targets (ready lines) may sit between the targets of a job: the writer walks every
    index, so each gets its line whatever holds it. ``done`` and ``failed`` count the lines
    written, which is what the exit status and the summary report.
    """

    def __init__(self, out: Callable[[str], None], items: list[Item]) -> None:
        self._out = out
        self._items = items
        self._snapshots: dict[int, dict[int, TargetStatus] | None] = {}  # id(job) -> targets
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
        self, read: Callable[[str], Awaitable[Snapshot | None]], *, partial: bool = False
    ) -> None:
        """Write every line that is ready, in input order.

        A job's lines are ready when it has finished. With ``partial`` (after an interrupt),
        write the finished targets of every submitted job and skip the rest.
        """
        while self.next < len(self._items):
            idx = self.next
            item = self._items[idx]
            if isinstance(item, dict):
                self._emit(item)
            else:
                if not item.finished and not partial:
                    return
                targets = await self._targets(item, read)
                target = None if targets is None else targets.get(item.place[idx])
                if target is not None and target.status in (TargetState.DONE, TargetState.FAILED):
                    line = target_line(idx, target)
                    line["hint"] = allow_net_hint(target.url, target.error, target.hint)
                    self._emit(line)
                elif partial:
                    self.skipped += 1
                else:
                    self._emit(_lost_line(idx, item.targets[item.place[idx]]))
                if idx == item.idxs[-1]:
                    self._snapshots.pop(id(item), None)
            self.next = idx + 1

    async def _targets(
        self, job: Job, read: Callable[[str], Awaitable[Snapshot | None]]
    ) -> dict[int, TargetStatus] | None:
        key = id(job)
        if key not in self._snapshots:
            snap = await read(job.id) if job.id else None
            self._snapshots[key] = None if snap is None else {t.idx: t for t in snap.targets}
        return self._snapshots[key]


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
