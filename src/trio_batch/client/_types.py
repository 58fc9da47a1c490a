"""The shapes of the API's answers, as the client hands them over: typed dicts and one event.

Each is the JSON the server sends, word for word (docs/http.md and ``/openapi.json`` describe
the same fields), typed so that an editor and mypy know them; nothing here converts or checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict, final


class Counts(TypedDict):
    """A job's targets by state; they sum to ``targets_total``."""

    pending: int
    running: int
    done: int
    failed: int


class Links(TypedDict):
    """Where to read a job: summary, results (JSON), results (NDJSON stream), events."""

    self: str
    results: str
    stream: str
    events: str


class CrawlProgress(TypedDict):
    """A crawl's progress, the ``crawl`` of its job's answers (docs/crawl.md).

    ``limit`` and ``max_depth`` are the crawl's; ``done`` the pages stored done so far;
    ``skipped`` the URLs it found and did not fetch, counted by reason (``depth``, ``scope``,
    ``pattern``, ``robots``, ``trap``, ``limit``, ``duplicate``).
    """

    limit: int
    max_depth: int
    done: int
    skipped: dict[str, int]


class BatchSummary(TypedDict):
    """A job's summary, as ``GET /v1/batch/{id}`` answers it (times are unix seconds).

    ``crawl`` is there when the job is a crawl (:meth:`BatchClient.crawl`), and only then.
    """

    id: str
    status: str
    error: str
    targets_total: int
    counts: Counts
    created_at: float
    updated_at: float
    expires_at: float
    links: Links
    crawl: NotRequired[CrawlProgress]


class ResultBody(TypedDict):
    """A finished target's result: its content, and the rest of the fetcher's envelope."""

    content: str
    meta: dict[str, object]


class TargetLine(TypedDict):
    """One target, as a line of ``GET /v1/batch/{id}/results``."""

    idx: int
    url: str
    status: str
    error: str
    hint: str
    result: ResultBody | None


class TargetEvent(TypedDict):
    """The data of a ``target`` event (and of a ``batch.target`` webhook): a target ended.

    Enough to act on a failure without another request; the content is in the results.
    """

    idx: int
    url: str
    status: str
    error: str
    hint: str


class WaitingEvent(TypedDict):
    """The data of a ``waiting`` event: the job's next target waits for its host's budget.

    ``idx`` is the target's index; ``reason`` is ``"host_busy"``, ``"backoff"`` or
    ``"crawl_delay"``; ``until`` the Unix time the wait ends, or None when it ends with another
    request to the host (docs/politeness.md). Waiting is not failing: the target's own
    ``target`` event follows when it ends.
    """

    idx: int
    reason: str
    until: float | None


class SiteMap(TypedDict):
    """A site's URLs, as ``POST /v1/map`` answers them (see :meth:`BatchClient.map`)."""

    urls: list[str]
    complete: bool
    """False when a bound ended the map early or a source could not be read."""
    notes: list[str]
    """What was cut or skipped, in words."""


@final
@dataclass(frozen=True, slots=True)
class BatchEvent:
    """One event of ``GET /v1/batch/{id}/events``.

    ``target``: ``data`` is a :class:`TargetEvent` (``{"idx", "url", "status", "error",
    "hint"}``, never the content); ``waiting``: ``data`` is a :class:`WaitingEvent` and ``id``
    is ``""`` (the stream gives it none); ``end``: ``data`` is the job's summary.
    """

    id: str
    event: Literal["target", "waiting", "end"]
    data: dict[str, object]
