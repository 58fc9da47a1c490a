"""Prometheus metrics for a :class:`~trio_batch.BatchEngine` and the HTTP API.

::

    metrics = PrometheusMetrics()
    async with open_engine(store, fetch, Config(hooks=metrics.hooks())) as engine:
        ...
    body, content_type = metrics.render()

``prometheus_client`` is imported when a :class:`PrometheusMetrics` is built, not when this
module is imported; it comes with ``pip install 'trio-batch[metrics]'`` (or ``[server]``).

Metric names start with ``trio_batch_``. Labels are low-cardinality and never carry a URL, a key,
a caller or a job id:

==============================================  =========  ==================================
name                                            type       labels
==============================================  =========  ==================================
``trio_batch_jobs_total``                       counter    ``event``: created reused
                                                           retried (also created) resumed
                                                           done partial failed cancelled
``trio_batch_targets_total``                    counter    ``result`` (done, failed),
                                                           ``status`` (HTTP status a single
                                                           fetch would get; 200 when done)
``trio_batch_target_seconds``                   histogram
``trio_batch_result_bytes_total``               counter
``trio_batch_job_seconds``                      histogram  (submit to terminal)
``trio_batch_live_jobs``                        gauge
``trio_batch_targets_in_flight``                gauge
``trio_batch_busy_retries_total``               counter
``trio_batch_evicted_jobs_total``               counter
``trio_batch_claims_total``                     counter    ``kind``: new, taken_over (a claim
                                                           of a gone instance expired: its
                                                           target is fetched again)
``trio_batch_queue_wait_seconds``               histogram  ``caller_class``: fleet,
                                                           restricted (a job's wait for a
                                                           worker to take its turn)
``trio_batch_webhook_deliveries_total``         counter    ``outcome``: delivered retried
                                                           given_up
``trio_batch_http_requests_total``              counter    ``method``, ``route``, ``status``
``trio_batch_http_request_seconds``             histogram  ``method``, ``route``, ``status``
==============================================  =========  ==================================

``route`` is the route template (``/v1/batch/{id}``), never the path that was asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ._budget import HostBudget
from ._config import Hooks
from ._errors import TargetError, find_retry_later

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

__all__ = ["PrometheusMetrics", "target_status"]

_JOB_EVENTS = (
    "created",
    "reused",
    "retried",
    "resumed",
    "done",
    "partial",
    "failed",
    "cancelled",
)
_DELIVERY_OUTCOMES = ("delivered", "retried", "given_up")
_WAIT_REASONS = ("host_busy", "backoff", "crawl_delay")
_CALLER_CLASSES = ("fleet", "restricted")
# Seconds: from a cached page (ms) to a slow batch (an hour).
_JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
_TARGET_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf"))
# Seconds a job waits for its turn: an idle engine takes it at once (under a millisecond); a
# queue of long jobs, or a host in backoff, makes it minutes.
_QUEUE_WAIT_BUCKETS = (
    0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf"),
)  # fmt: skip
_REQUEST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30, float("inf"))


def target_status(error: BaseException | None) -> int:
    """The HTTP status a single fetch would have got for this target outcome.

    200 when done; ``TargetError.status`` for a target error; 503 for a target that stayed busy
    (a ``RetryLater`` in the chain); 500 for any other exception.
    """
    if error is None:
        return 200
    if isinstance(error, TargetError):
        return error.status
    if find_retry_later(error) is not None:
        return 503
    return 500


@final
class PrometheusMetrics:
    """Prometheus collectors for the engine's hooks and the API's requests.

    Each instance registers into its own ``registry`` (a fresh ``CollectorRegistry`` by
    default), so several engines or apps in one process never collide.

    Raises:
        ImportError: ``prometheus_client`` is not installed (the message says what to install).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "trio_batch.metrics needs prometheus_client: pip install 'trio-batch[metrics]'"
            ) from exc
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.jobs = Counter("trio_batch_jobs", "Job events", ["event"], registry=r)
        for event in _JOB_EVENTS:
            self.jobs.labels(event=event)
        self.targets = Counter(
            "trio_batch_targets",
            "Stored targets by result and by the HTTP status a single fetch would get",
            ["result", "status"],
            registry=r,
        )
        self.target_seconds = Histogram(
            "trio_batch_target_seconds", "Seconds one target's fetch took", registry=r,
            buckets=_TARGET_BUCKETS,
        )  # fmt: skip
        self.result_bytes = Counter(
            "trio_batch_result_bytes", "Bytes of stored result JSON", registry=r
        )
        self.job_seconds = Histogram(
            "trio_batch_job_seconds", "Seconds from submit to a terminal status", registry=r,
            buckets=_JOB_BUCKETS,
        )  # fmt: skip
        self.live_jobs = Gauge("trio_batch_live_jobs", "Queued or running jobs", registry=r)
        self.inflight = Gauge(
            "trio_batch_targets_in_flight", "Targets being fetched now", registry=r
        )
        self.retries = Counter(
            "trio_batch_busy_retries", "Busy targets put back to be tried again", registry=r
        )
        self.deliveries = Counter(
            "trio_batch_webhook_deliveries",
            "Webhook delivery attempts by outcome (retried: failed, tried again later)",
            ["outcome"],
            registry=r,
        )
        for outcome in _DELIVERY_OUTCOMES:
            self.deliveries.labels(outcome=outcome)
        self.claims = Counter(
            "trio_batch_claims",
            "Turns of a fleet's rotation this instance claimed, by kind (taken_over: the claim "
            "of a gone instance had expired and its target is fetched again)",
            ["kind"],
            registry=r,
        )
        self.evictions = Counter(
            "trio_batch_evicted_jobs", "Finished jobs evicted for the byte cap", registry=r
        )
        self.host_waits = Counter(
            "trio_batch_host_waits",
            "Jobs passed over because their next target's host was at its budget, by reason "
            "(host_busy, backoff, crawl_delay); no label names a host",
            ["reason"],
            registry=r,
        )
        for reason in _WAIT_REASONS:
            self.host_waits.labels(reason=reason)
        self.queue_wait = Histogram(
            "trio_batch_queue_wait_seconds",
            "Seconds a job waited in the rotation for a worker to take its turn (waits for its "
            "host included), by caller class (fleet, restricted)",
            ["caller_class"],
            registry=r,
            buckets=_QUEUE_WAIT_BUCKETS,
        )
        for caller_class in _CALLER_CLASSES:
            self.queue_wait.labels(caller_class=caller_class)
        self.requests = Counter(
            "trio_batch_http_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "trio_batch_http_request_seconds",
            "Seconds to answer an HTTP request, by method, route template and status",
            ["method", "route", "status"],
            registry=r,
            buckets=_REQUEST_BUCKETS,
        )

    def hooks(self) -> Hooks:
        """Engine hooks that update these metrics; pass them as ``Config(hooks=...)``."""
        return Hooks(
            job=self._job,
            target=self._target,
            job_seconds=self.job_seconds.observe,
            depth=self.live_jobs.set,
            inflight=self.inflight.set,
            retry=self._retry,
            evicted=self.evictions.inc,
            claimed=self._claimed,
            waited=self._waited,
            turn=self._turn,
        )

    def watch_budget(self, budget: HostBudget) -> None:
        """Export ``budget``'s counts: rate-limit events (429/503 answers that pushed a host
        back, once per event) and ``Retry-After`` answers capped. Call once per budget."""
        self.registry.register(_BudgetCollector(budget))

    def observe_delivery(self, outcome: str) -> None:
        """Count one webhook delivery attempt: ``delivered``, ``retried`` or ``given_up``."""
        self.deliveries.labels(outcome=outcome if outcome in _DELIVERY_OUTCOMES else "other").inc()

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one HTTP request. ``route`` must be a route template, never a raw path."""
        labels = {"method": method, "route": route, "status": str(status)}
        self.requests.labels(**labels).inc()
        self.request_seconds.labels(**labels).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The metrics in Prometheus text format, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def _job(self, event: str) -> None:
        self.jobs.labels(event=event if event in _JOB_EVENTS else "other").inc()

    def _target(self, error: BaseException | None, seconds: float, size: int) -> None:
        result = "done" if error is None else "failed"
        self.targets.labels(result=result, status=str(target_status(error))).inc()
        self.target_seconds.observe(seconds)
        if size:
            self.result_bytes.inc(size)

    def _claimed(self, turns: int, taken_over: int) -> None:
        if turns > taken_over:
            self.claims.labels(kind="new").inc(turns - taken_over)
        if taken_over:
            self.claims.labels(kind="taken_over").inc(taken_over)

    def _waited(self, reason: str) -> None:
        self.host_waits.labels(reason=reason if reason in _WAIT_REASONS else "other").inc()

    def _turn(self, caller_class: str, seconds: float) -> None:
        known = caller_class if caller_class in _CALLER_CLASSES else "other"
        self.queue_wait.labels(caller_class=known).observe(seconds)

    def _retry(self, wait: float) -> None:
        self.retries.inc()


@final
class _BudgetCollector:
    """A host budget's counts, read at each scrape (the budget counts; nothing is copied)."""

    def __init__(self, budget: HostBudget) -> None:
        self._budget = budget

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily(
            "trio_batch_host_backoffs",
            "Rate-limit events (429/503) that pushed a host back, once per event",
            value=self._budget.backoffs,
        )
        yield CounterMetricFamily(
            "trio_batch_host_retry_after_capped",
            "Retry-After answers longer than the budget's max_backoff (capped)",
            value=self._budget.capped_retry_after,
        )
