"""What a retry runs again (SPEC §7, amended): the targets of a finished job that did not end
``done``.

SPEC §7 says a retry holds "exactly the targets that ended failed". A job that ended before its
targets ran (interrupted by a restart without ``--resume``, cancelled, past ``job_seconds``)
leaves them ``pending`` (or ``running``, if the process died mid-fetch), and a user who retries
it wants them run too: so they are part of the retry, in input order with the failed ones
(docs/spec.md, "Amendments").
"""

from __future__ import annotations

from .._errors import NotRetryable
from .._model import Target, TargetState
from ..stores._protocol import MAX_READ, Store

RETRIED_STATES = (TargetState.PENDING, TargetState.RUNNING, TargetState.FAILED)
"""The states a retry runs again: failed, and unfinished (a finished job's unfinished targets)."""


async def failed_targets(store: Store, caller: str, job_id: str) -> list[Target] | None:
    """The targets of ``caller``'s job ``job_id`` to run again, in input order; None if it has
    none.

    Those are the targets that ended ``failed`` and, of a job that ended before they ran
    (interrupted, cancelled), the unfinished ones (``pending``, ``running``). None means the job
    is unknown or another caller's. Reads in chunks of :data:`MAX_READ`.

    Raises:
        NotRetryable: the job is still live, or no target of it failed or was left unfinished.
    """
    job = await store.read_job(job_id)
    if job is None or job.caller != caller:
        return None
    if job.status.live:
        raise NotRetryable(
            f"job {job_id} is still {job.status.value}: wait for it to end (or cancel it), "
            "then retry its failed targets"
        )

    targets: list[Target] = []
    after = -1
    while True:
        page = await store.read_targets(
            job_id, after, MAX_READ, list(RETRIED_STATES), results=False
        )
        targets.extend(Target(t.url, t.options) for t in page)
        if len(page) < MAX_READ:
            break
        after = page[-1].idx

    if not targets:
        raise NotRetryable(
            f"job {job_id} ended {job.status.value} with no failed target and none unfinished: "
            "nothing to retry"
        )
    return targets
