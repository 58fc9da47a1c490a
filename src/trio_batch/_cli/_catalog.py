"""The jobs of a local store as the command line shows them, and naming a job by an id prefix.

``trio-batch jobs`` and ``timeline`` list every caller's jobs of a SQLite file, and their job
arguments may be the first characters of an id. The store reads the file read-only
(:meth:`SQLiteStore.list_all_jobs`, :meth:`SQLiteStore.find_job_ids`), so these work while a
``run`` or ``serve`` writes it; here they become rows and one-line messages.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import final

from .._errors import StoreError
from ..stores import JobSummary, SQLiteStore
from ._output import UsageError
from ._store_messages import folder_message, read_message

__all__ = ["JobRow", "find_ids", "iso", "list_jobs", "resolve_id"]

_MAX_CANDIDATES = 5  # ids named in an "ambiguous prefix" message


def iso(epoch: float) -> str:
    """``epoch`` seconds as an ISO 8601 UTC time, to the millisecond; "" for 0."""
    if not epoch:
        return ""
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@final
@dataclass(frozen=True, slots=True)
class JobRow:
    """One job of a store, with its targets counted by state."""

    id: str
    caller: str
    status: str
    error: str
    targets_total: int
    counts: dict[str, int]
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, summary: JobSummary) -> JobRow:
        """The row of a job the store read."""
        job = summary.job
        counts = {
            "pending": summary.pending,
            "running": summary.running,
            "done": summary.done,
            "failed": summary.failed,
        }
        return cls(
            id=job.id,
            caller=job.caller,
            status=job.status.value,
            error=job.error,
            targets_total=job.targets_total,
            counts=counts,
            created_at=job.created_at,
            updated_at=job.updated_at,
        )


def _check_file(db: str) -> None:
    if os.path.isdir(db):
        raise UsageError(folder_message(db))
    if not os.path.isfile(db):
        raise UsageError(f"{db} does not exist; pass the store with --db")


async def list_jobs(db: str, ids: list[str] | None = None) -> list[JobRow]:
    """The jobs of the SQLite store ``db`` (only ``ids`` when given), oldest first.

    Raises:
        UsageError: ``db`` is missing or not a trio-batch database.
    """
    _check_file(db)
    try:
        summaries = await SQLiteStore.list_all_jobs(db, ids)
    except StoreError as exc:
        raise UsageError(read_message(db, exc)) from None
    return [JobRow.of(summary) for summary in summaries]


async def find_ids(db: str, prefix: str) -> list[str]:
    """Up to six ids of ``db`` that start with ``prefix``, in order."""
    _check_file(db)
    try:
        return await SQLiteStore.find_job_ids(db, prefix, _MAX_CANDIDATES + 1)
    except StoreError as exc:
        raise UsageError(read_message(db, exc)) from None


async def resolve_id(db: str, prefix: str) -> str | None:
    """The one job id of ``db`` that starts with ``prefix``; None when there is none.

    Raises:
        UsageError: several ids start with ``prefix`` (the message counts and names them and
            asks for more characters), or ``db`` cannot be read.
    """
    prefix = prefix.strip().lower()
    if not prefix:
        raise UsageError("the job id is empty; pass an id, or its first characters")

    found = await find_ids(db, prefix)
    if len(found) > 1:
        count = f"{len(found)}" if len(found) <= _MAX_CANDIDATES else f"more than {_MAX_CANDIDATES}"
        names = ", ".join(found[:_MAX_CANDIDATES])
        raise UsageError(
            f"{prefix} is the start of {count} job ids ({names}); give more characters"
        )
    return found[0] if found else None
