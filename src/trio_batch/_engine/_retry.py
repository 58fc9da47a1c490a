"""What a retry runs again (SPEC §7): the targets of a finished job that ended ``failed``."""

from __future__ import annotations

from .._errors import NotRetryable
from .._model import Target, TargetState
from ..stores._protocol import MAX_READ, Store


async def failed_targets(store: Store, caller: str, job_id: str) -> list[Target] | None:
    """The failed targets of ``caller``'s job ``job_id``, in input order; None if it has none.

    None means the job is unknown or another caller's. Reads in chunks of :data:`MAX_READ`.

    Raises:
        NotRetryable: the job is still live, or no target of it failed.
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
            job_id, after, MAX_READ, [TargetState.FAILED], results=False
        )
        targets.extend(Target(t.url, t.options) for t in page)
        if len(page) < MAX_READ:
            break
        after = page[-1].idx
    if not targets:
        raise NotRetryable(
            f"job {job_id} ended {job.status.value} with no failed target: nothing to retry"
        )
    return targets
