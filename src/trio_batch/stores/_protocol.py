"""The store protocols: the few operations each user of a store needs, each atomic.

:class:`Store` is what the engine and the reads need. Two smaller protocols are apart, so that
a user asks only for what it uses: :class:`ResponseCache` (the web fetcher's response cache,
``web/_fetch/_cache``) and :class:`WebhookOutbox` (the webhook dispatcher's delivery state,
``http/_deliveries``). :class:`ServiceStore` is all three: what ``trio-batch serve`` runs on.

Every backend (``MemoryStore``, ``SQLiteStore``, ``PostgresStore``) implements all three and runs
the same contract suite (``tests/stores/test_store_contract.py``). Times are unix seconds from
the engine's wall clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeGuard, final

from .._crawl import CrawlInfo, Found
from .._model import (
    Job,
    JobStatus,
    Snapshot,
    Submitted,
    Target,
    TargetState,
    TargetStatus,
    Webhook,
)


@final
@dataclass(frozen=True, slots=True)
class NewJob:
    """A job to admit: its id, who asked, the idempotency key and the targets."""

    id: str
    caller: str
    caller_class: str
    key: str
    targets: Sequence[Target]
    now: float
    workspace: str = ""
    retry_of: str = ""
    """The job this one retries (SPEC §7), or empty."""
    webhook: str = ""
    """The job's ``Webhook`` as JSON (``Webhook.to_json``), or empty for none."""
    scopes: Sequence[str | None] = ()
    """Each target's scope (its host and port) for a fleet's budgets, or empty: no budget."""
    concurrency: int = 1
    """Targets of the job that may be fetched at once (``BatchEngine.submit``): kept with the
    job, for a fleet's claims and for an engine that resumes it."""
    crawl: str = ""
    """A crawl's ``CrawlSpec`` as JSON (``CrawlSpec.to_json``), or empty for a batch. A crawl's
    targets are its seeds, and grow as its pages' outcomes admit what they found."""
    seeds: Sequence[Found] = ()
    """A crawl's seeds, one per target in order (their keys and depths); empty for a batch."""
    skipped: Mapping[str, int] = field(default_factory=dict)
    """What was skipped of a crawl's seeds (its sitemaps' pages), by reason: its first counts."""


@final
@dataclass(frozen=True, slots=True)
class ResumedJob:
    """A live job taken over from an engine that is gone (``Store.resume``): what it needs to run.

    ``targets`` are the job's targets still to run, by index (a target that was running is
    pending again and is fetched again; with ``concurrency`` above 1 or host budgets, stored
    targets need not be a prefix). For a crawl they are the first of its frontier (a window:
    the engine reads on with :meth:`Store.crawl_frontier`) and ``depths`` their depths.
    """

    id: str
    caller: str
    workspace: str
    caller_class: str
    targets: Mapping[int, Target]
    created_at: float
    webhook: str = ""
    """The job's ``Webhook`` as JSON, or empty."""
    concurrency: int = 1
    """Targets of the job that may be fetched at once, as admitted."""
    crawl: str = ""
    """The crawl's spec as JSON, or empty for a batch."""
    depths: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """A crawl's targets' depths and parents (by index)."""
    done: int = 0
    """A crawl's pages stored ``done`` so far (its limit counts them)."""


@final
@dataclass(frozen=True, slots=True)
class Limits:
    """What admission checks, from ``Config``."""

    ttl: float
    targets_per_job: int
    jobs_per_caller: int
    jobs_total: int


@final
@dataclass(slots=True)
class Outcome:
    """How one target ended: ``done`` with the result's JSON, or ``failed`` with error/hint.

    A value: nothing changes one once made (``dataclasses.replace`` makes another). It is not
    declared frozen because one is built for every target and a frozen dataclass sets each of
    its ten fields through ``object.__setattr__``: 1.35 us against 0.45 us a build, ~3 % of a
    noop drain in memory.
    """

    state: TargetState
    result_json: str | None = None
    error: str = ""
    hint: str = ""
    claim: str = ""
    """The token of the claim the target was fetched under (a :class:`FleetStore`'s turn).

    A fleet store stores the outcome only while that claim is still the target's, so an
    instance whose claim expired and was taken over never stores a target twice. Empty on
    stores with an in-memory rotation, which ignore it.
    """
    found: Sequence[Found] = ()
    """A crawl page's links to admit, each once per job by its key, as long as the crawl's
    frontier has room; the rest are counted skipped (``duplicate``, ``limit``)."""
    keys: Sequence[str] = ()
    """Other keys of this page (its final URL after redirects, its ``rel=canonical``): a page
    one of whose keys another target of the crawl already has is a duplicate, removed from the
    job and counted skipped (``duplicate``), not stored."""
    skipped: Mapping[str, int] = field(default_factory=dict)
    """What the page's links were skipped for, counted by reason (``_crawl.SKIP_REASONS``)."""
    dropped: str = ""
    """A crawl page the engine drops after its fetch, by the reason it counts as skipped
    (``scope``: a redirect took it off the crawl's scope): removed from its job, not stored."""
    crawl: bool = False
    """The outcome of a crawl's page: the store keeps the crawl's books with it (its keys, what
    it found, its pages done, its limit)."""

    @property
    def size(self) -> int:
        """Stored result bytes: what ``Config.max_bytes`` and the ``target`` hook count."""
        return 0 if self.result_json is None else len(self.result_json.encode())


FinishItem = tuple[str, int, Outcome]
"""One outcome to store: ``(job_id, idx, outcome)``."""


@final
@dataclass(frozen=True, slots=True)
class Stored:
    """What storing a target did to its job."""

    terminal: JobStatus | None
    """The job's new terminal status if this write finished it, else None."""
    evicted: int = 0
    """Finished jobs evicted for the byte cap."""
    found: int = 0
    """A crawl's targets this outcome admitted."""
    removed: bool = False
    """A crawl page removed from its job, not stored: another's (one of its keys is), or
    dropped by the engine (``Outcome.dropped``); counted skipped."""


@final
@dataclass(frozen=True, slots=True)
class JobSummary:
    """A job and how many of its targets are in each state, read in one consistent view."""

    job: Job
    pending: int
    running: int
    done: int
    failed: int


JobCursor = tuple[float, str]
"""Where a page of :meth:`Store.list_jobs` ends: the last job's ``(created_at, id)``."""

MAX_READ = 1000
"""Most jobs or targets one listing or target read may ask for (``limit``)."""


@final
@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A cached response of the web fetcher: body, its metadata as JSON, and when it expires."""

    body: bytes
    meta_json: str
    stored_at: float
    expires_at: float


def wants_target_events(webhook: str) -> bool:
    """Whether a stored webhook (``Webhook.to_json``, or empty for none) asks for ``target``
    events, read from its decoded ``events`` list."""
    hook = Webhook.from_json(webhook)
    return hook is not None and "target" in hook.events


@final
@dataclass(frozen=True, slots=True)
class HookDue:
    """A job with a webhook event due: what it takes to build and send that event."""

    job_id: str
    caller: str
    webhook: str
    """The job's ``Webhook`` as JSON (``Webhook.from_json`` reads it)."""
    status: JobStatus
    targets_done: int
    targets_total: int
    cursor: int
    """Target events handled so far."""
    attempts: int
    """Failed attempts of the current event."""
    since: float
    """Unix time of the current event's first attempt (0 before it)."""
    next_at: float
    claim: str = ""
    """The token of this reader's claim on the job's outbox (``hooks_due(claim_for=...)`` on
    a store shared by several instances), or empty when none was taken."""

    @property
    def wants_targets(self) -> bool:
        """Whether the webhook asks for an event per target (else only for the end event)."""
        return wants_target_events(self.webhook)

    @property
    def target(self) -> int | None:
        """The index of the target whose event is next, or None when the end event is next."""
        if self.wants_targets and self.cursor < self.targets_done:
            return self.cursor
        return None


class Store(Protocol):
    """What an engine needs from a store, and the reads of its jobs. Each method is atomic.

    Used by the engine (``open_engine``), and through it by the HTTP API and the CLI. The web
    cache and the webhook outbox are protocols of their own (:class:`ResponseCache`,
    :class:`WebhookOutbox`): a backend for the engine alone need not implement them.

    A store may be shared by several engines only where its docs say so (PostgreSQL).

    Cancellation, for every method: each is a checkpoint (cancel point and schedule point).
    If a method raises :class:`trio.Cancelled`, it had no effect: a cancel that is already
    pending when it is called is raised before anything is written. A write that has begun is
    not cancellable: it completes, and the method returns its result, so the engine always
    knows what was stored (Trio's ``MemorySendChannel.send`` works the same way). Reads may be
    cancelled at any point. After the store is closed every method raises
    :class:`trio.ClosedResourceError`.
    """

    async def admit(self, job: NewJob, limits: Limits) -> Submitted:
        """Reuse, check caps and insert, atomically (SPEC §3.1).

        Returns ``Submitted(id, True)`` for a reusable job of the same caller and key (no caps
        checked), else inserts ``job`` queued with its targets pending and returns
        ``Submitted(job.id, False)``. Then sweeps finished jobs whose lease is older than
        ``limits.ttl``. A repeat with the same key returns the first job.

        Raises:
            TooManyTargets, CallerBusy, Busy: nothing was written.
        """
        ...

    async def recover(self, now: float) -> list[str]:
        """Fail (``interrupted``) the live jobs whose engine is gone; return their ids.

        A single-process store treats every live job as orphaned: it is called when an
        engine opens. A repeat finds nothing more to do.
        """
        ...

    async def resume(self, now: float, *, opening: bool = True) -> list[ResumedJob]:
        """Take over the live jobs whose engine is gone, instead of failing them (SPEC §7).

        Their running targets go back to pending; the jobs stay live and are returned oldest
        first, now this engine's. ``opening``: an engine is opening (as for :meth:`recover`):
        a single-process store treats every live job as orphaned. Later calls
        (``opening=False``, now and then while the engine runs) return the live jobs of the
        instances of a shared store (PostgreSQL) that are gone since; a single-process store
        returns none. Once an engine calls this, a shared store no longer fails a gone
        instance's jobs by itself.
        """
        ...

    async def start_target(self, job_id: str, idx: int, now: float) -> bool:
        """Mark target ``idx`` running (its ``started_at`` is ``now``) and a queued job running.

        Returns False, writing nothing, when the job is no longer live (cancelled, interrupted
        or gone): the engine then starts nothing more for it. A target that has its outcome
        keeps it (the engine never starts one; the mark does nothing to it). A store may return
        before the mark is committed (SQLite does), but the mark is then committed no later than
        the next write, and always before this target's outcome; a store may also drop the mark
        when the same transaction stores the target's outcome, since no reader could have seen
        it.
        """
        ...

    async def release_target(self, job_id: str, idx: int, now: float) -> None:
        """Put a running target back to pending (it was only busy). A repeat does nothing."""
        ...

    async def finish_target(
        self, job_id: str, idx: int, outcome: Outcome, now: float, max_bytes: int
    ) -> Stored:
        """Store a target's outcome; finish the job when it was the last; evict for bytes.

        The target's ``finished_at`` is ``now`` (and its ``started_at`` its running mark's time,
        also when the mark was dropped). A cancelled job keeps its status. When the job becomes
        terminal its lease moves to ``now``. Then the finished jobs with the oldest lease are
        evicted while the stored result bytes exceed ``max_bytes``; live jobs never are.
        Storing the same target twice does not count it twice.

        The one-item form of :meth:`finish_targets`, for tests and simple callers.
        """
        ...

    async def finish_targets(
        self, items: Sequence[FinishItem], now: float, max_bytes: int
    ) -> list[Stored | Exception]:
        """Store many outcomes at once (the engine's write path); one result per item, in order.

        Each item is stored as :meth:`finish_target` would store it, and the items are applied
        in order (a store may commit them in one transaction). An item that cannot be stored
        gets its exception in its place and the others still land. Evictions may be reported on
        any item of the call; their sum is what was evicted.
        """
        ...

    async def cancel(self, job_id: str, now: float) -> Job | None:
        """Cancel a live job; return it as it was before, or None (unknown or terminal)."""
        ...

    async def interrupt(self, job_ids: Sequence[str], now: float) -> list[str]:
        """Fail the live ones of ``job_ids`` with error ``interrupted``; return those ids.

        Their running targets go back to pending.
        """
        ...

    async def snapshot(self, job_id: str) -> Snapshot | None:
        """The job and its targets in input order, or None. Writes nothing."""
        ...

    async def touch(self, job_id: str, now: float) -> bool:
        """Move the job's lease to ``now``; False for an unknown job."""
        ...

    async def read_job(self, job_id: str) -> Job | None:
        """The job alone, without its targets, or None. Writes nothing; costs one row.

        A follower of a job reads this at each change to see whether anything moved
        (``status``, ``targets_done``) before it reads targets.
        """
        ...

    async def job_summary(self, job_id: str) -> JobSummary | None:
        """The job and its targets counted by state, or None. Writes nothing.

        Costs one indexed read whatever the job's size (no result is read).
        """
        ...

    async def list_jobs(
        self,
        caller: str,
        statuses: Sequence[JobStatus] | None,
        limit: int,
        before: JobCursor | None,
    ) -> list[JobSummary]:
        """The caller's jobs, newest first: at most ``limit`` (1 to :data:`MAX_READ`).

        Newest first means by ``created_at`` descending, then ``id`` descending. Only jobs in
        ``statuses`` (all when None); only jobs that sort after ``before``, the
        ``(created_at, id)`` of the last job of the previous page, when it is given. Writes
        nothing. A store keeps an index on ``(caller, created_at, id)`` so that a page costs
        ``limit`` rows, not a scan of the caller's jobs.
        """
        ...

    async def read_targets(
        self,
        job_id: str,
        after: int,
        limit: int,
        states: Sequence[TargetState] | None,
        *,
        results: bool = True,
    ) -> list[TargetStatus]:
        """Up to ``limit`` (1 to :data:`MAX_READ`) targets with ``idx > after``, in input order.

        Only targets in ``states`` (all when None); ``results=False`` leaves every ``result``
        None without reading it. An unknown job has no targets. Writes nothing. With this a
        reader walks a job of any size in bounded chunks.
        """
        ...

    async def crawl_frontier(
        self, job_id: str, after: int, limit: int
    ) -> list[tuple[int, Target, int, int]]:
        """Up to ``limit`` of a crawl's pending targets with ``idx > after``, in index order:
        ``(idx, target, depth, parent)`` (``parent``: the index of the page that found it, -1
        for a seed). What an engine reads its crawl's frontier on with, a window
        at a time. An unknown job, or a batch, has none. Writes nothing."""
        ...

    async def crawl_info(self, job_id: str) -> CrawlInfo | None:
        """A crawl's bounds, pages done and skipped counts; None for an unknown job or a batch.
        Writes nothing."""
        ...


class ResponseCache(Protocol):
    """Where the web fetcher keeps its response cache (SPEC §6): ``web/_fetch/_cache`` uses it.

    Cancellation as for :class:`Store`: a write that has begun completes. ``WebFetcher`` runs
    each call in a task of its own and stops waiting after a second, so a stalled store costs
    a fetch a miss, not a wait.
    """

    async def cache_get(self, key: str) -> CacheEntry | None:
        """The cached entry under ``key``, expired or not (``recover`` serves stale copies)."""
        ...

    async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
        """Store ``entry`` under ``key`` (replacing any), then drop the entries stored longest
        ago while the cache's bytes exceed ``max_bytes``. A repeat replaces the entry."""
        ...


class WebhookOutbox(Protocol):
    """The webhook delivery state kept on each job's row (SPEC §7; ``stores/_outbox``).

    The service's webhook dispatcher (``http/_deliveries``) uses it. Cancellation as for
    :class:`Store`: a compare-and-set that has begun completes and returns its answer.
    """

    async def hooks_due(
        self, now: float, limit: int, *, claim_for: float | None = None
    ) -> list[HookDue]:
        """Jobs with a webhook event to send now, soonest ``next_at`` first (SPEC §7).

        At most ``limit``. Only jobs whose webhook delivery is open, whose ``next_at`` is not
        after ``now`` and that have an event due (``stores/_outbox``): a live job whose next
        target has not ended is not returned. Without ``claim_for`` it writes nothing.

        With ``claim_for`` (seconds), a store that several instances share (PostgreSQL) claims
        the outboxes it returns for that long, on the database's clock, and leaves out those
        claimed by anyone and not expired: one dispatcher of the fleet sends a job's event at a
        time. :meth:`hook_advance` with the returned :class:`HookDue` releases the claim. A
        single-process store ignores ``claim_for`` (its one dispatcher needs no claim).
        """
        ...

    async def hook_advance(
        self,
        due: HookDue,
        *,
        cursor: int,
        attempts: int,
        since: float,
        next_at: float,
        close: bool = False,
    ) -> bool:
        """Move the job's delivery state from what ``due`` read to these values.

        A compare-and-set: applied only while the delivery is open with ``due.cursor`` and
        ``due.attempts`` (and, for a claimed ``due``, while ``due.claim`` is still the
        outbox's claim, which it releases; an unclaimed ``due`` applies only while no claim
        is live); returns whether it was. ``close`` ends the delivery (the end event is
        handled): nothing more is delivered, and the job may be swept or evicted again. A
        repeat returns False. Advancing to ``due``'s own values releases a claim alone.
        """
        ...


@final
@dataclass(frozen=True, slots=True)
class Claim:
    """A target claimed from the fleet's rotation, held by one instance until its outcome is
    stored (or the claim is given back, or expires).

    From :meth:`FleetStore.claim_turns`: one target of a job, marked running, and what the
    engine needs to run it without reading the job. A job may hold up to its ``concurrency``
    claims across the fleet at once.
    """

    job_id: str
    idx: int
    token: str
    """The claim's token: the outcome is stored with it (``Outcome.claim``)."""
    target: Target
    caller: str
    workspace: str
    created_at: float
    has_webhook: bool
    busy_since: float | None
    """Wall-clock time the target first came back busy, for ``Config.retry_for``; or None."""
    taken_over: bool
    """The target's previous claim had expired: it is fetched again (at least once)."""
    caller_class: str = "fleet"
    """The job's caller class (``fleet`` or ``restricted``), for the queue-wait metrics."""
    concurrency: int = 1
    """Targets of the job that may be claimed at once across the fleet, as admitted."""
    scope: str | None = None
    """The target's scope (its host and port), as the job was admitted; None: no budget."""
    scope_wait: float = 0.0
    """Seconds the fleet's backoff of the scope still runs (<= 0: none)."""
    scope_blocked_for: float | None = None
    """Seconds the scope has been pushed back without a success since (None: it is well).
    The engine gives both to its ``HostBudget`` (``hold``) before the target starts."""
    crawl: str = ""
    """The crawl's spec as JSON when the target is a crawl's page, else empty."""
    depth: int = 0
    """A crawl page's depth."""
    parent: int = -1
    """The index of the crawl page that found this one (-1: a seed)."""


@final
@dataclass(frozen=True, slots=True)
class HostRules:
    """The budget per scope that a fleet's claims keep: a ``HostBudget``'s settings.

    A claim takes a target only while its scope has fewer than ``concurrency`` targets under
    claim in the whole fleet, ``interval`` (or the scope's ``Crawl-delay``) has passed since
    the scope's last claim, and no backoff holds the scope; a scope pushed back for
    ``block_limit`` seconds is claimed again so that its targets fail with a hint.
    """

    concurrency: int
    interval: float
    block_limit: float


@final
@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """Turns an engine wants claimed with a group of its outcomes (``ClaimRider.ask``): the
    arguments of :meth:`FleetStore.claim_turns`."""

    n: int
    now: float
    rules: HostRules | None
    spaced: int


class ClaimRider(Protocol):
    """Who takes the claims that ride with a store's outcomes (``FleetStore.ride_claims``).

    A worker that stores an outcome and finds no turn waiting would otherwise wait for a claim
    of its own: a second round trip after the outcome's. The store asks the rider before it
    sends a group of outcomes, and sends the claim in the same round trip and transaction.
    """

    def ask(self) -> ClaimAsk | None:
        """Called as a group of outcomes is about to be sent: the claim to send with it, or
        None. Not a checkpoint."""
        ...

    def answered(self, claims: list[Claim] | None) -> None:
        """The claim asked for committed with the outcomes (``claims``, maybe fewer than
        asked), or did not run (None). Called once per claim asked, before the outcomes'
        writers learn their fate. Not a checkpoint."""
        ...


@final
@dataclass(frozen=True, slots=True)
class HostReport:
    """What one instance learned of a scope, for the fleet (``FleetStore.report_scopes``).

    ``kind`` is ``backoff`` (``seconds``: the wait), ``recovered`` or ``paced`` (``seconds``:
    the site's ``Crawl-delay``); ``ago`` is how many seconds ago the request that brought the
    news started, so a rate-limit event already counted by the fleet is not counted again.
    """

    scope: str
    kind: str
    seconds: float
    ago: float


class FleetStore(Store, Protocol):
    """A store whose rotation belongs to a fleet of engines (``PostgresStore``).

    An engine over such a store takes its turns from the store instead of its own channel:
    any instance's free worker claims the next turn of one round robin over every live job,
    whoever admitted it. A claim has a deadline on the database's clock that the store renews
    while its holder lives; the claim of an instance that died expires and its target is
    claimed again by another. Live jobs belong to the fleet: an engine that closes releases
    its claims and leaves its jobs live for the others (and for the next engine to open).
    """

    fleet: bool
    """True: the engine uses the claims below rather than its in-memory rotation."""

    async def claim_turns(
        self, n: int, now: float, rules: HostRules | None = None, *, spaced: int | None = None
    ) -> list[Claim]:
        """Claim up to ``n`` targets: the first of the live jobs whose last turn is oldest,
        round by round across jobs, each job holding at most its ``concurrency`` claims.

        Each claimed target is marked running. With ``rules``, a job's next target is its first
        whose scope has room fleet-wide (a job whose targets' scopes are all at their budget is
        passed over, keeping its turn), and a scope that spaces its starts is taken only among
        the first ``spaced`` turns (those for workers idle now, so that it starts at once: the
        spacing holds between starts). Returns fewer (or none) when fewer are ready.
        Cancellation: if this raises :class:`trio.Cancelled`, nothing was claimed.
        """
        ...

    async def lease_scope(
        self, scope: str, rules: HostRules
    ) -> tuple[str | None, float | None, float | None]:
        """Take a slot of ``scope``'s fleet-wide budget for a request outside the rotation
        (``POST /v1/fetch``, a redirect to another host, robots.txt): its token; or None, in
        how many seconds the scope's clock ends (None: when a slot frees), and how long the
        scope has been pushed back (None: it is well). Held until :meth:`release_leases`, or
        for ``claim_timeout`` after its holder died."""
        ...

    async def release_leases(self, tokens: Sequence[str]) -> None:
        """Give back leases of :meth:`lease_scope`."""
        ...

    async def report_scopes(self, reports: Sequence[HostReport]) -> None:
        """Make what an instance learned of its scopes the fleet's (backoffs, recoveries,
        ``Crawl-delay``). Cancellation: if this raises :class:`trio.Cancelled`, the reports
        may or may not be stored."""
        ...

    async def release_claim(self, claim: Claim, now: float, busy_since: float | None) -> None:
        """Give the claim back: the target pending again, its job at the end of the rotation.

        After a busy target's wait, or for a target a cancelled job will not start;
        ``busy_since`` (wall clock) is kept for the next claimer. Does nothing if the claim is
        no longer the target's. Cancellation: if this raises :class:`trio.Cancelled`, the
        claim is still held.
        """
        ...

    async def release_claims(self, now: float) -> None:
        """Give back every claim of this store's instance (the engine closes): their targets
        pending again, the jobs keeping their place. Cancellation: as :meth:`release_claim`.
        """
        ...

    def ride_claims(self, rider: ClaimRider | None) -> None:
        """Send claims with groups of outcomes, for ``rider`` (None: no more): each claim is
        renewed and given back as one of :meth:`claim_turns` is."""
        ...

    async def wait_for_turns(self) -> None:
        """Return when a turn may have become free: a job admitted, an outcome stored, a claim
        released, anywhere in the fleet. Notifications can be lost (a dropped connection), so
        the engine bounds the wait (``trio.move_on_after``) and claims again: a slow poll.
        Cancellation: safe; it has no effect.
        """
        ...


def is_fleet(store: Store) -> TypeGuard[FleetStore]:
    """Whether ``store`` runs its rotation for a fleet (:class:`FleetStore`)."""
    return bool(getattr(store, "fleet", False))


class ServiceStore(Store, ResponseCache, WebhookOutbox, Protocol):
    """All three protocols: what the service (``trio-batch serve``) runs on.

    The engine, the web fetcher's cache and the webhook dispatcher share one store there. Every
    backend of this package (``MemoryStore``, ``SQLiteStore``, ``PostgresStore``) is one.
    """
