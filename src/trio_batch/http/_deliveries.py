"""Webhook deliveries (SPEC §7): one task that sends what the store says is due.

The job row is the outbox (``stores/_outbox``): the store says which jobs have an event due now,
and the dispatcher sends it, then advances the job's cursor with a compare-and-set. One delivery
per job is in flight at a time, so a job's events arrive in order (targets by index, then
``end``); deliveries of different jobs run concurrently, at most ``concurrency`` at once.

It wakes when the engine reports a change of a job with a webhook
(``BatchEngine.next_webhook_change``; a busy engine whose jobs have none never wakes it), when a
retry falls due, and at least every ``poll`` seconds (which also finds the jobs of other
PostgreSQL instances, and deliveries left over from before a restart). It writes nothing on the
engine's path and never raises into it: a store error is logged and tried again at the next
poll. Logs carry the job id, the event, the attempt and the status code; never the URL or host.

Any 2xx is delivered. Anything else (another status, a timeout, a refusal by the guard) is tried
again after ``first_wait`` seconds, doubling up to ``max_wait`` (each wait shortened at random by
up to ``jitter`` of itself), until ``give_up_after`` seconds have passed since the event's first
attempt; then the event is given up and the next one goes.
The clock of a run of failures goes on across the events it gives up (until one is delivered),
so a receiver that is down gets one attempt of each later event, not another hour of each.

On a store several instances share (PostgreSQL), each read claims the outboxes it returns for
one attempt (``timeout + claim_slack`` on the database's clock; ``stores/_outbox``), so the
fleet's dispatchers send a job's events one at a time and in order, none twice while both
live. It reads only as many as it can start (a claimed job it does not start would wait for
the deadline). A dispatcher that stops mid-delivery releases its claims; one that dies loses
them at their deadline, and another instance sends the event again (at least once).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import final

import httpx
import trio

from .._engine import BatchEngine
from .._errors import TargetError
from .._model import Webhook
from .._util import backoff
from ..metrics import PrometheusMetrics
from ..stores import ServiceStore
from ..stores._protocol import HookDue
from ..web import AddressRefused, Network, Resolver, guarded_transport, precheck
from . import _answers as answers
from ._keys import KeyRing
from ._stream import target_event
from ._webhooks import signed_headers

_log = logging.getLogger("trio_batch.http.webhooks")


@final
@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How webhook deliveries are sent and retried; the defaults are SPEC §7's."""

    timeout: float = 10.0
    """Seconds one attempt may take (connect, send, answer's headers)."""
    first_wait: float = 5.0
    """Seconds before the first retry; each retry waits twice the last, up to ``max_wait``."""
    max_wait: float = 600.0
    jitter: float = 0.25
    """Share of each wait (0 to 1) taken off at random: when one receiver fails many jobs'
    deliveries at once (it restarts), their retries then reach it spread out, not together."""
    give_up_after: float = 3600.0
    """Seconds after an event's first attempt past which a failed attempt gives it up."""
    concurrency: int = 8
    """Deliveries in flight at once (one per job)."""
    poll: float = 5.0
    """Longest sleep: the store is asked again at least this often."""
    min_gap: float = 0.05
    """Shortest time between two reads of the store: engine changes in between coalesce."""
    claim_slack: float = 10.0
    """Seconds a claim on a job's outbox (PostgreSQL) outlasts ``timeout``: the reads before
    the send and the write after it. A dispatcher that dies holds the job this long at most."""

    @property
    def claim_for(self) -> float:
        """Seconds one claim on a job's outbox lasts: one attempt, ``timeout + claim_slack``."""
        return self.timeout + self.claim_slack

    def __post_init__(self) -> None:
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"DeliveryPolicy.jitter must be from 0 to 1 (got {self.jitter})")

    def wait(self, attempts: int) -> float:
        """Seconds before the next attempt, after ``attempts`` failed ones (the house backoff)."""
        return backoff(attempts, self.first_wait, self.max_wait, jitter=self.jitter)


@contextlib.asynccontextmanager
async def open_deliveries(
    store: ServiceStore,
    engine: BatchEngine,
    keys: KeyRing,
    *,
    allow: Sequence[Network] = (),
    resolver: Resolver | None = None,
    metrics: PrometheusMetrics | None = None,
    policy: DeliveryPolicy | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> AsyncIterator[Dispatcher]:
    """Deliver webhooks of the jobs in ``store`` while the block runs; stop when it exits.

    ``allow`` and ``resolver`` are the guard's, as for the web fetcher. A delivery cut short by
    the exit is not recorded, so it is sent again by the next dispatcher (at least once).
    """
    dispatcher = Dispatcher(
        store, engine, keys, allow, resolver, metrics, policy or DeliveryPolicy(), wall_clock
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        try:
            yield dispatcher
        finally:
            nursery.cancel_scope.cancel("the webhook dispatcher stopped")


@final
class Dispatcher:
    """The delivery loop; see the module docstring. Made by :func:`open_deliveries`."""

    def __init__(
        self,
        store: ServiceStore,
        engine: BatchEngine,
        keys: KeyRing,
        allow: Sequence[Network],
        resolver: Resolver | None,
        metrics: PrometheusMetrics | None,
        policy: DeliveryPolicy,
        wall_clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._engine = engine
        self._secrets = {r.name: r.webhook_secret for r in keys if r.webhook_secret}
        self._allow = tuple(allow)
        self._resolver = resolver
        self._metrics = metrics
        self._policy = policy
        self._clock = wall_clock
        self._ttl = engine.config.ttl
        self._wake = trio.Event()
        self._inflight: set[str] = set()
        self._released: dict[str, int] = {}  # job id -> the read under way when it was freed
        self._reads = 0
        self._soonest = float("inf")  # the earliest retry this dispatcher scheduled
        self._later: dict[str, float] = {}  # job id -> not before (after a store error)
        self._claims = bool(getattr(store, "shared", False))  # other instances deliver too
        self.attempts = 0
        """Delivery attempts made (for tests and debugging)."""

    @property
    def reads(self) -> int:
        """Reads of the store's due webhooks so far (for tests and debugging)."""
        return self._reads

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver until cancelled."""
        transport = guarded_transport(
            allow=self._allow, resolver=self._resolver, max_connections=self._policy.concurrency
        )
        async with transport, trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_engine)
            task_status.started()
            while True:
                self._wake = trio.Event()
                await trio.sleep(self._policy.min_gap)
                await self._start_due(nursery, transport)
                now = self._clock()
                sleep = min(self._policy.poll, max(self._soonest - now, 0.0))
                with trio.move_on_after(sleep):
                    await self._wake.wait()
                if self._soonest <= self._clock():
                    self._soonest = float("inf")

    async def _follow_engine(self) -> None:
        while True:
            try:
                change = self._engine.next_webhook_change()
            except trio.ClosedResourceError:
                return  # polling alone from now on
            await change.wait()
            self._wake.set()

    async def _start_due(self, nursery: trio.Nursery, transport: httpx.AsyncBaseTransport) -> None:
        free = self._policy.concurrency - len(self._inflight)
        if free <= 0:
            await trio.lowlevel.checkpoint()
            return
        self._reads += 1
        read = self._reads
        now = self._clock()
        # A claimed job is this dispatcher's until its deadline: claim only what can start.
        # Unclaimed reads also return the jobs in flight here, skipped below.
        limit = free if self._claims else self._policy.concurrency * 4
        try:
            due = await self._read_due(now, limit)
        except Exception as exc:
            _log.warning(
                "could not read the webhooks due: %s",
                type(exc).__name__,
                extra={"op": "hooks_due", "error_type": type(exc).__name__},
            )
            return
        for entry in due:
            job_id = entry.job_id
            if job_id in self._inflight or free <= 0:
                if entry.claim:  # its delivery is ending (claim released already): give it back
                    nursery.start_soon(self._release, entry)
                continue
            if not entry.claim and (  # a claimed entry was read after its last release: fresh
                self._released.get(job_id, -1) >= read  # freed while this read ran
                or self._later.get(job_id, 0.0) > now
            ):
                continue
            free -= 1
            self._later.pop(job_id, None)
            self._inflight.add(job_id)
            nursery.start_soon(self._deliver, transport, entry)
        self._released = {j: r for j, r in self._released.items() if r >= read}

    async def _read_due(self, now: float, limit: int) -> list[HookDue]:
        """The store's due webhooks, claimed on a shared store: claims a stop cut short are
        given back, not held to their deadline (the store's call is bounded on its own)."""
        claim_for = self._policy.claim_for
        if not self._claims:
            return await self._store.hooks_due(now, limit, claim_for=claim_for)

        with trio.CancelScope(shield=True):
            due = await self._store.hooks_due(now, limit, claim_for=claim_for)
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled:
            with trio.move_on_after(5, shield=True):
                for entry in due:
                    await self._release(entry)
            raise
        return due

    async def _deliver(self, transport: httpx.AsyncBaseTransport, due: HookDue) -> None:
        try:
            await self._deliver_one(transport, due)
        except trio.Cancelled:
            if due.claim:  # stopping: another instance may send it at once, not at the deadline
                with trio.move_on_after(5, shield=True):
                    await self._release(due)
            raise
        except Exception as exc:  # a bug or a store error: log it, try again at the next poll
            _log.warning(
                "webhook delivery of job %s failed: %s",
                due.job_id,
                type(exc).__name__,
                extra={"job_id": due.job_id, "error_type": type(exc).__name__},
            )
            self._later[due.job_id] = self._clock() + self._policy.poll
        finally:
            self._inflight.discard(due.job_id)
            self._released[due.job_id] = self._reads
            self._wake.set()

    async def _deliver_one(self, transport: httpx.AsyncBaseTransport, due: HookDue) -> None:
        idx = due.target
        event = "end" if idx is None else "target"
        secret = self._secrets.get(due.caller)
        webhook = Webhook.from_json(due.webhook)
        if secret is None or webhook is None:
            _log.warning(
                "job %s: its caller has no webhook secret now; its webhook is given up",
                due.job_id,
                extra={"job_id": due.job_id, "event": event},
            )
            await self._advance(due, "given_up", close=True)
            return
        data = await self._data(due, idx)
        if data is None:  # the job or the target is gone
            await self._advance(due, "given_up", close=True)
            return
        body = json.dumps(
            {"type": f"batch.{event}", "job_id": due.job_id, "data": data},
            separators=(",", ":"),
        ).encode()
        msg_id = f"{due.job_id}.end" if idx is None else f"{due.job_id}.t{idx}"
        status = await self._send(transport, webhook.url, secret, msg_id, body)
        self.attempts += 1
        attempt = due.attempts + 1
        extra = {"job_id": due.job_id, "event": event, "attempt": attempt, "status": status}
        if status is not None and 200 <= status < 300:
            _log.debug("job %s: %s event delivered", due.job_id, event, extra=extra)
            await self._advance(due, "delivered", close=idx is None)
            return
        now = self._clock()
        # A run of failures counts from its first attempt, across the events it gives up: a
        # receiver that is down costs one attempt per later event, not an hour each.
        since = due.since or now
        if now - since >= self._policy.give_up_after:
            _log.warning(
                "job %s: %s event given up after %d attempts (last status %s)",
                due.job_id,
                event,
                attempt,
                status or "none",
                extra=extra,
            )
            await self._advance(due, "given_up", close=idx is None, since=since)
            return
        next_at = now + self._policy.wait(attempt)
        _log.info(
            "job %s: %s event not delivered (attempt %d, status %s); trying again later",
            due.job_id,
            event,
            attempt,
            status or "none",
            extra=extra,
        )
        if await self._store.hook_advance(
            due, cursor=due.cursor, attempts=attempt, since=since, next_at=next_at
        ):
            self._count("retried")
            self._soonest = min(self._soonest, next_at)

    async def _data(self, due: HookDue, idx: int | None) -> dict[str, object] | None:
        if idx is None:
            summary = await self._store.job_summary(due.job_id)
            if summary is None:
                return None
            crawl = await self._store.crawl_info(due.job_id)
            return dict(answers.summary_of(summary, self._ttl, crawl=crawl))
        found = await self._store.read_targets(due.job_id, idx - 1, 1, None, results=False)
        if not found or found[0].idx != idx:
            return None
        return dict(target_event(found[0]))

    async def _send(
        self,
        transport: httpx.AsyncBaseTransport,
        url: str,
        secret: str,
        msg_id: str,
        body: bytes,
    ) -> int | None:
        """POST one attempt; its status code, or None when it got no answer (or was refused)."""
        try:
            precheck(url, allow=self._allow)
        except TargetError:
            return None
        headers = signed_headers(secret, msg_id, int(self._clock()), body)
        request = httpx.Request("POST", url, content=body, headers=headers)
        # Sent through the transport itself: httpx's client would log the URL at INFO.
        with trio.move_on_after(self._policy.timeout):
            try:
                response = await transport.handle_async_request(request)
            except (httpx.HTTPError, AddressRefused, OSError):
                return None
            with contextlib.suppress(httpx.HTTPError, OSError):
                await response.aclose()  # the answer's body is not read
            return response.status_code
        return None

    async def _advance(
        self, due: HookDue, outcome: str, *, close: bool, since: float = 0.0
    ) -> None:
        """The current event is handled (delivered or given up): on to the next."""
        cursor = due.cursor if close else due.cursor + 1
        if await self._store.hook_advance(
            due, cursor=cursor, attempts=0, since=since, next_at=0.0, close=close
        ):
            self._count(outcome)

    async def _release(self, due: HookDue) -> None:
        """Give the claim on ``due``'s outbox back, its delivery state unchanged, and read
        again: the job may be due (another instance's dispatcher may take it first)."""
        with contextlib.suppress(Exception):  # unreleased, it expires at its deadline
            await self._store.hook_advance(
                due, cursor=due.cursor, attempts=due.attempts, since=due.since, next_at=due.next_at
            )
        self._wake.set()

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_delivery(outcome)
