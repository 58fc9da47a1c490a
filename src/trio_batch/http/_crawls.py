"""Which jobs are crawls, for the ``crawl`` object of their answers (issue 38).

A job's answer carries ``crawl`` (``CrawlInfo``) when the job is a crawl. Whether a job is one
never changes, so the ids read as batches are remembered (:class:`KnownBatches`, bounded): a
listing of a caller's batches reads the store for each job once, not on every page.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Final, final

from .._crawl import CrawlInfo
from .._engine import BatchEngine
from ._deadline import StoreBudget

KNOWN_BATCHES: Final = 65_536
"""Batch ids remembered as such (32 hex characters each: a few MiB at most)."""


@final
class KnownBatches:
    """Job ids known not to be crawls, the most recent :data:`KNOWN_BATCHES` of them."""

    __slots__ = ("_ids", "_most")

    def __init__(self, most: int = KNOWN_BATCHES) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._most = most

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids

    def add(self, job_id: str) -> None:
        self._ids[job_id] = None
        self._ids.move_to_end(job_id)
        while len(self._ids) > self._most:
            self._ids.popitem(last=False)


async def crawl_infos(
    engine: BatchEngine, store: StoreBudget, batches: KnownBatches, job_ids: Iterable[str]
) -> dict[str, CrawlInfo]:
    """The crawl object of each job of ``job_ids`` that is a crawl, by id; one store read a
    job not known to be a batch, within ``store``'s deadline."""
    found: dict[str, CrawlInfo] = {}
    for job_id in job_ids:
        if job_id in batches:
            continue
        info = await store.read(engine.crawl_info, job_id)
        if info is None:
            batches.add(job_id)
        else:
            found[job_id] = info
    return found


async def crawl_info(
    engine: BatchEngine, store: StoreBudget, batches: KnownBatches, job_id: str
) -> CrawlInfo | None:
    """The crawl object of the job ``job_id``, or None for a batch (or a job gone)."""
    return (await crawl_infos(engine, store, batches, [job_id])).get(job_id)
