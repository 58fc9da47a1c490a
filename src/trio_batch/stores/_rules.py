"""The rules every store applies, written once: caps, terminal status, and the row format.

``MemoryStore`` applies them to Python objects; the SQL stores apply them in their
transactions and decode rows with the helpers here, so the backends cannot drift apart.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from .._crawl import CRAWL_WINDOW as CRAWL_WINDOW
from .._errors import Busy, CallerBusy, TooManyTargets
from .._model import (
    LIVE_STATUSES,
    Job,
    JobStatus,
    Options,
    Result,
    Target,
    TargetState,
    TargetStatus,
)
from .._util import plural
from ._protocol import Limits, ResumedJob

LIVE_SQL = "(" + ", ".join(f"'{s.value}'" for s in LIVE_STATUSES) + ")"
"""The live statuses as an SQL list, for ``status IN {LIVE_SQL}``."""

Row = Sequence[Any]
"""A row of a SQL driver: its cells have no static type."""

JOB_COLUMNS = (
    "id, caller, status, error, targets_total, targets_done, created_at, updated_at, lease, "
    "retry_of"
)
"""The columns :func:`job_from_row` decodes, in its order."""


def check_caps(n_targets: int, caller_live: int, total_live: int, limits: Limits) -> None:
    """Raise the first cap a new job would break (SPEC §3.1 order)."""
    if n_targets > limits.targets_per_job:
        raise TooManyTargets(
            f"the job has {n_targets} targets; the limit is {limits.targets_per_job} a job: "
            "split it into smaller jobs"
        )
    if caller_live >= limits.jobs_per_caller:
        raise CallerBusy(
            f"this caller already has {caller_live} live job{plural(caller_live)} (the limit is "
            f"{limits.jobs_per_caller}): wait for one to finish, or cancel one"
        )
    if total_live >= limits.jobs_total:
        raise Busy(
            f"the engine already runs {total_live} live job{plural(total_live)} (the limit is "
            f"{limits.jobs_total}): try again shortly"
        )


def terminal_status(states: Sequence[TargetState]) -> JobStatus:
    """``done`` if every target is done, ``failed`` if every one failed, else ``partial``."""
    if set(states) == {TargetState.DONE}:
        return JobStatus.DONE
    if set(states) == {TargetState.FAILED}:
        return JobStatus.FAILED
    return JobStatus.PARTIAL


def options_json(options: Options) -> str:
    """The stored form of a target's options: compact JSON, decoded by :func:`target_from_row`.

    Encoded once per distinct options: most targets of a job share one ``Options`` object
    (often the default), so the last one is remembered by identity, and others by value.
    """
    global _last_options
    last = _last_options
    if last[0] is options:
        return last[1]
    text = _encode_options(options)
    _last_options = (options, text)  # one assignment of a pair: safe across threads
    return text


@functools.lru_cache(maxsize=1024)
def _encode_options(options: Options) -> str:
    return json.dumps(options.to_json(), separators=(",", ":"))


_last_options: tuple[Options | None, str] = (None, "")


def job_from_row(row: Row) -> Job:
    """Decode the :data:`JOB_COLUMNS` of a SQL store."""
    return Job(
        id=str(row[0]),
        caller=str(row[1]),
        status=JobStatus(row[2]),
        error=str(row[3]),
        targets_total=int(row[4]),
        targets_done=int(row[5]),
        created_at=float(row[6]),
        updated_at=float(row[7]),
        lease=float(row[8]),
        retry_of=str(row[9]),
    )


def stored_target(url: str, options: str) -> Target:
    """The :class:`Target` a SQL store holds as ``url`` and its options JSON."""
    return Target(url, _options_from_json(options))


RESUME_JOB_COLUMNS = "id, caller, workspace, caller_class, created_at, webhook, concurrency"
"""The job columns :func:`resumed_job` reads, in its order."""


def resumed_job(
    row: Row, targets: Sequence[Row], crawl: tuple[str, int] | None = None
) -> ResumedJob:
    """A :class:`ResumedJob` from :data:`RESUME_JOB_COLUMNS` and its pending targets' ``idx,
    url, options JSON, depth, parent`` rows in index order (running ones already put back to
    pending; a crawl's first :data:`CRAWL_WINDOW` only), with a crawl's spec JSON and pages
    done."""
    return ResumedJob(
        id=str(row[0]),
        caller=str(row[1]),
        workspace=str(row[2]),
        caller_class=str(row[3]),
        targets={int(t[0]): Target(str(t[1]), _options_from_json(str(t[2]))) for t in targets},
        created_at=float(row[4]),
        webhook=str(row[5]),
        concurrency=int(row[6]),
        crawl="" if crawl is None else crawl[0],
        depths={int(t[0]): (int(t[3]), int(t[4])) for t in targets} if crawl else {},
        done=0 if crawl is None else crawl[1],
    )


PENDING_TARGETS_SQL = (
    "SELECT idx, url, options, depth, parent FROM targets WHERE job_id = ? "
    "AND status = 'pending' ORDER BY idx LIMIT ?"
)
"""A resumed job's pending targets (``?`` placeholders: the job, at most how many)."""


TARGET_COLUMNS = "idx, url, status, result, error, hint, options, started_at, finished_at"
"""The target columns :func:`target_from_row` decodes, in its order (``result`` may be NULL)."""


def target_times(
    status: TargetState, started: float | None, finished: float | None
) -> tuple[float | None, float | None]:
    """The times a target shows: a start unless pending, a finish only once done or failed.

    A store need not clear them when a target goes back to pending (a release, an interrupt),
    nor the finish when a running mark re-opens a stored target: they are hidden here.
    """
    if status is TargetState.PENDING:
        return None, None
    if status is TargetState.RUNNING:
        return started, None
    return started, finished


def target_from_row(row: Row) -> TargetStatus:
    """Decode the :data:`TARGET_COLUMNS` of a SQL store."""
    idx, url, status, result, error, hint, options, started, finished = row
    state = TargetState(status)
    started_at, finished_at = target_times(
        state,
        None if started is None else float(started),
        None if finished is None else float(finished),
    )
    return TargetStatus(
        idx=int(idx),
        url=str(url),
        status=state,
        result=None if result is None else Result.from_json(str(result)),
        error=str(error),
        hint=str(hint),
        options=_options_from_json(str(options)),
        started_at=started_at,
        finished_at=finished_at,
    )


@functools.lru_cache(maxsize=1024)
def _options_from_json(text: str) -> Options:
    # Options are frozen and most targets share a few option sets (often none): decode each
    # distinct JSON text once, not once per target per read. lru_cache is thread-safe.
    return Options.from_json(json.loads(text))
