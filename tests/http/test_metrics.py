"""The Prometheus adapter: engine hooks and request metrics, with low-cardinality labels."""

from __future__ import annotations

import trio
import trio.testing

from tests.support import wait_ended
from trio_batch import (
    Caller,
    Config,
    HostBudget,
    HostSlot,
    Result,
    RetryLater,
    Target,
    TargetError,
    open_engine,
)
from trio_batch.metrics import PrometheusMetrics, target_status
from trio_batch.stores import MemoryStore


def _value(metrics: PrometheusMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


class TestPrometheusMetrics:
    def test_hooks_update_every_engine_metric(self) -> None:
        """Each engine hook lands in its metric: jobs, targets, seconds, gauges, retries."""
        m = PrometheusMetrics()
        hooks = m.hooks()
        assert hooks.job is not None
        assert hooks.target is not None
        assert hooks.job_seconds is not None
        assert hooks.depth is not None
        assert hooks.inflight is not None
        assert hooks.retry is not None
        assert hooks.evicted is not None
        assert hooks.claimed is not None
        assert hooks.turn is not None
        hooks.job("created")
        hooks.job("done")
        hooks.target(None, 0.5, 120)
        hooks.target(TargetError("gone", status=404), 0.1, 0)
        hooks.job_seconds(3.0)
        hooks.depth(4)
        hooks.inflight(2)
        hooks.retry(2.0)
        hooks.evicted(3)
        hooks.claimed(5, 2)
        hooks.turn("restricted", 0.02)

        assert _value(m, "trio_batch_jobs_total", event="created") == 1
        assert _value(m, "trio_batch_jobs_total", event="done") == 1
        assert _value(m, "trio_batch_targets_total", result="done", status="200") == 1
        assert _value(m, "trio_batch_targets_total", result="failed", status="404") == 1
        assert _value(m, "trio_batch_result_bytes_total") == 120
        assert _value(m, "trio_batch_job_seconds_count") == 1
        assert _value(m, "trio_batch_live_jobs") == 4
        assert _value(m, "trio_batch_targets_in_flight") == 2
        assert _value(m, "trio_batch_busy_retries_total") == 1
        assert _value(m, "trio_batch_evicted_jobs_total") == 3
        assert _value(m, "trio_batch_claims_total", kind="new") == 3
        assert _value(m, "trio_batch_claims_total", kind="taken_over") == 2
        assert _value(m, "trio_batch_queue_wait_seconds_count", caller_class="restricted") == 1
        assert _value(m, "trio_batch_queue_wait_seconds_count", caller_class="fleet") == 0

    def test_target_status_is_what_a_single_fetch_would_get(self) -> None:
        """200 done, TargetError.status, 503 for a target that stayed busy, 500 otherwise."""
        busy = ValueError("wrapped")
        busy.__cause__ = RetryLater()

        assert [target_status(e) for e in (None, TargetError("x", status=413), busy)] == [
            200,
            413,
            503,
        ]
        assert target_status(KeyError("x")) == 500

    def test_two_instances_do_not_collide(self) -> None:
        """Each instance has its own registry, so several apps in a process are fine."""
        a, b = PrometheusMetrics(), PrometheusMetrics()
        a.observe_request("GET", "/healthz", 200, 0.01)

        assert (
            _value(
                a, "trio_batch_http_requests_total", method="GET", route="/healthz", status="200"
            )
            == 1
        )
        assert (
            _value(
                b, "trio_batch_http_requests_total", method="GET", route="/healthz", status="200"
            )
            == 0
        )


class TestPolitenessMetrics:
    async def test_host_waits_and_backoffs_are_counted_without_a_host_label(
        self, autojump_clock: object
    ) -> None:
        """A job passed over for a busy host counts a wait by reason; a 429 event counts a
        backoff (once per event) and a capped Retry-After; no sample names a host."""
        m = PrometheusMetrics()
        budget = HostBudget(concurrency=1, max_backoff=10.0)
        m.watch_budget(budget)
        gate = trio.Event()

        async def fetch(caller: Caller, target: Target) -> Result:
            await gate.wait()
            return Result("ok")

        config = Config(workers=2, max_workers=2, jobs_per_caller=2, hooks=m.hooks())
        async with open_engine(
            MemoryStore(), fetch, config, budget=budget, scope=lambda t: "one-host"
        ) as engine:
            await engine.submit(Caller("a"), "fleet", [Target("https://h.test/1")])
            await engine.submit(Caller("a"), "fleet", [Target("https://h.test/2")])
            await trio.testing.wait_all_tasks_blocked()
            waits = _value(m, "trio_batch_host_waits_total", reason="host_busy")
            gate.set()
        slot = budget.try_start("second-host")
        assert isinstance(slot, HostSlot)
        slot.release(rate_limited=True, retry_after=3600.0)
        text = m.render()[0].decode()

        assert waits >= 1
        assert 1 == _value(m, "trio_batch_host_backoffs_total")
        assert 1 == _value(m, "trio_batch_host_retry_after_capped_total")
        assert "h.test" not in text
        assert "one-host" not in text
        assert "second-host" not in text


class TestQueueWaitMetrics:
    async def test_queue_waits_are_observed_per_caller_class(self, autojump_clock: object) -> None:
        """One worker, fetches of 1 s: a fleet job of two targets and a restricted job of one.
        Each turn is one observation under its caller class, with the seconds the job waited
        for it: fleet 0 s then 1 s (behind the restricted job), restricted 1 s; no sample names
        a caller."""
        m = PrometheusMetrics()

        async def fetch(caller: Caller, target: Target) -> Result:
            await trio.sleep(1.0)
            return Result("ok")

        config = Config(workers=1, hooks=m.hooks())
        async with open_engine(MemoryStore(), fetch, config) as engine:
            fleet = await engine.submit(
                Caller("alice"), "fleet", [Target("https://a.test/0"), Target("https://a.test/1")]
            )
            restricted = await engine.submit(
                Caller("bob"), "restricted", [Target("https://b.test/0")]
            )
            await wait_ended(engine, fleet.id, restricted.id)
        text = m.render()[0].decode()

        def wait(stat: str, caller_class: str, **labels: str) -> float:
            name = f"trio_batch_queue_wait_seconds_{stat}"
            return _value(m, name, caller_class=caller_class, **labels)

        assert (2, 1.0) == (wait("count", "fleet"), wait("sum", "fleet"))
        assert (1, 1.0) == (wait("count", "restricted"), wait("sum", "restricted"))
        assert 1 == wait("bucket", "fleet", le="0.001")  # its first turn, at once
        assert 0 == wait("bucket", "restricted", le="0.5")
        assert 1 == wait("bucket", "restricted", le="1.0")
        assert "alice" not in text and "bob" not in text
