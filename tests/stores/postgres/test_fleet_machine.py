"""A Hypothesis state machine: a fleet of 2-3 engines on one PostgreSQL schema, held to
MemoryStore's answers.

Every job submitted to the fleet (to any of its engines) is submitted too to one engine on a
MemoryStore, the reference, with the same targets and a fetch that answers alike: a target's
outcome is fixed by its URL (done, failed with a TargetError, or busy once and then done). The
rules submit (with a concurrency of 1 to 3), cancel, kill an engine (its claims are left to
expire, as after kill -9) or stop one (its claims given back, as after SIGTERM) and start
another in its place (with ``Config.resume`` or without: on a fleet it changes nothing), and
let the dead claims expire. At quiescence every job must end as the reference's did (status,
each target's state and result), a cancelled job may stop anywhere the rules allow, each target
is stored once (``targets_done`` counts the stored targets, each job ends once in the hooks)
and no target is fetched to the end more than twice.

Real clock throughout (the engines wait on worker threads, which Trio's autojump clock would
count as idle: python-trio/trio#456), so the Trio run lives in a thread of its own and keeps
time, renewals and claims going between rules; every wait is bounded.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import outcome
import pytest
import trio
from hypothesis import settings, strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    JobStatus,
    Result,
    RetryLater,
    Snapshot,
    Target,
    TargetError,
    TargetState,
    open_engine,
)
from trio_batch.stores import Limits, MemoryStore, NewJob, PostgresStore
from trio_batch.testing import ScriptedFetch

from ...support import Recorder, targets, wait_any_until
from ..support import wait_target
from .support import PG_DSN, open_test_schema

pytestmark = pytest.mark.slow

T = TypeVar("T")

FETCH_SECONDS = 0.02  # long enough for a kill or a cancel to find fetches in flight
CLAIM_TIMEOUT = 0.3
SETTLE_SECONDS = 20.0  # a bound on every wait, far above what a run needs
KINDS = ("ok", "fail", "busy")
CONFIG = Config(
    workers=2,
    jobs_per_caller=100,
    jobs_total=100,
    retry_wait=0.05,
)
TERMINAL = (JobStatus.DONE, JobStatus.FAILED, JobStatus.PARTIAL, JobStatus.CANCELLED)
STORED = (TargetState.DONE, TargetState.FAILED)
KINDS_OF_A_JOB = st.lists(st.sampled_from(KINDS), min_size=1, max_size=4)
CONCURRENCY = st.integers(1, 3)


@dataclass
class Held:
    """An ``async with`` block a holder task of :class:`TrioThread` keeps open."""

    leave: trio.Event = dataclasses.field(default_factory=trio.Event)
    gone: trio.Event = dataclasses.field(default_factory=trio.Event)
    left: outcome.Outcome[None] | None = None


class TrioThread:
    """One Trio run in a thread of its own for the life of one Hypothesis example.

    Unlike the guest run of ``tests.support.TrioGuestDriver``, which moves only while a rule
    calls into it, this run keeps going between rules: on a real clock, claims are renewed and
    expire, and fetches end, whatever Hypothesis does meanwhile. Rules call in with
    ``trio.from_thread.run``; each ``async with`` is held open by a task of its own, since a
    nursery must be exited by the task that entered it.
    """

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._done: outcome.Outcome[None] | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._held: list[Held] = []
        self._thread = threading.Thread(target=self._run, name="fleet-machine", daemon=True)
        self._thread.start()
        self._ready.wait(SETTLE_SECONDS)
        self._check()

    def _run(self) -> None:
        self._done = outcome.capture(trio.run, self._main)
        self._ready.set()

    async def _main(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _check(self) -> None:
        if self._done is not None:
            self._done.unwrap()
            raise RuntimeError("the trio run ended unexpectedly")

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the Trio run and return its result (or raise its exception)."""
        self._check()
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def enter(self, manager: AbstractAsyncContextManager[T]) -> tuple[T, Held]:
        """Enter ``manager`` in a holder task; return its value and what :meth:`exit` takes."""
        held = Held()

        async def holder(task_status: trio.TaskStatus[T]) -> None:
            entered = False

            async def inside() -> None:
                nonlocal entered
                async with manager as value:
                    entered = True
                    task_status.started(value)
                    await held.leave.wait()

            left = await outcome.acapture(inside)
            if not entered:  # raise it to the caller of enter()
                left.unwrap()
            held.left = left
            held.gone.set()

        async def start() -> T:
            assert self._nursery is not None
            value: T = await self._nursery.start(holder)
            return value

        value = self.call(start)
        self._held.append(held)
        return value, held

    def exit(self, *helds: Held) -> None:
        """Leave the ``async with`` blocks of ``helds`` together, and wait until they are left.

        An exception from an exit is raised here, not into the run.
        """

        async def leave_together() -> None:
            for held in helds:
                held.leave.set()
            for held in helds:
                await held.gone.wait()

        for held in helds:
            self._held.remove(held)
        self.call(leave_together)
        for held in helds:
            assert held.left is not None
            held.left.unwrap()

    def close(self) -> None:
        """Leave every block still held, newest first, then end the run."""
        try:
            while self._held:
                self.exit(self._held[-1])
        finally:
            if self._done is None and self._token is not None:
                assert self._stop is not None
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            self._thread.join(SETTLE_SECONDS)
            self._check_ended()

    def _check_ended(self) -> None:
        assert self._done is not None, "the trio run did not end"
        self._done.unwrap()


class PlannedFetch:
    """A fetch whose outcome is fixed by the target's URL, with a log of every call.

    ``.../ok/i`` returns a Result, ``.../fail/i`` raises TargetError, ``.../busy/i`` raises
    RetryLater the first time it runs to the end (on any engine sharing this fetch) and then
    returns a Result. A fetch cut by its engine's close (a kill) is logged ``cut``.
    """

    def __init__(self) -> None:
        self.log: list[tuple[str, str, str]] = []  # (engine, url, start|cut|busy|end)
        self._busy_seen: set[str] = set()

    def for_engine(self, name: str) -> Callable[[Caller, Target], Awaitable[Result]]:
        async def fetch(caller: Caller, target: Target) -> Result:
            url = target.url
            self.log.append((name, url, "start"))
            try:
                await trio.sleep(FETCH_SECONDS)
            except trio.Cancelled:
                self.log.append((name, url, "cut"))
                raise

            kind = url.split("/")[-2]
            if kind == "busy" and url not in self._busy_seen:
                self._busy_seen.add(url)
                self.log.append((name, url, "busy"))
                raise RetryLater(after=0.0)
            self.log.append((name, url, "end"))
            if kind == "fail":
                raise TargetError(f"{url.split('/')[2]} failed", hint="it always does")
            return Result(f"content of {url}", {"kind": kind})

        return fetch

    def count(self, url: str, event: str) -> int:
        return sum(u == url and e == event for _, u, e in self.log)

    def in_flight(self, url: str) -> bool:
        return self.count(url, "start") > sum(
            self.count(url, event) for event in ("cut", "busy", "end")
        )


@dataclass
class Instance:
    """One engine of the fleet on its own PostgresStore instance of the shared schema."""

    name: str
    store: PostgresStore
    engine: BatchEngine
    recorder: Recorder
    held: Held


@asynccontextmanager
async def open_instance(
    dsn: str, schema: str, fetch: PlannedFetch, name: str, rec: Recorder, resume: bool
) -> AsyncIterator[tuple[PostgresStore, BatchEngine]]:
    config = dataclasses.replace(CONFIG, hooks=rec.hooks(), resume=resume)
    async with (
        PostgresStore.open(dsn, schema=schema, claim_timeout=CLAIM_TIMEOUT, pool_size=2) as store,
        open_engine(store, fetch.for_engine(name), config) as engine,
    ):
        yield store, engine


def ended(snap: Snapshot | None, fetch: PlannedFetch) -> bool:
    """Whether the job has ended and no fetch of its targets is still running."""
    if snap is None or snap.job.status not in TERMINAL:
        return False
    return not any(fetch.in_flight(t.url) for t in snap.targets)


def target_answer(t: Any) -> tuple[TargetState, Result | None, str, str]:
    """What a caller reads of a target, less ``meta.waited``: a trace of busy answers that a
    fleet keeps only while the instance holding the target lives (docs/spec.md, issue 39's
    amendment), and whose seconds are measured on each run's real clock. :func:`waited_trace`
    checks what a fleet may say of it."""
    result = t.result
    if result is not None and "waited" in result.meta:
        meta = {k: v for k, v in result.meta.items() if k != "waited"}
        result = dataclasses.replace(result, meta=meta)
    return (t.status, result, t.error, t.hint)


def waited_trace(fleet: Any, reference: Any) -> bool:
    """A fleet never reports a wait the reference did not have (it may lose one to a kill)."""
    said = fleet.result is not None and "waited" in fleet.result.meta
    had = reference.result is not None and "waited" in reference.result.meta
    return had or not said


class FleetMachine(RuleBasedStateMachine):
    """The fleet against the reference; the checks run at quiescence (``settle``, and after
    the last rule when no rule failed)."""

    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.dsn = dsn = PG_DSN
        self.trio = TrioThread()
        self.broken = False
        self.fetch, self.reference_fetch = PlannedFetch(), PlannedFetch()
        self.recorders: list[Recorder] = []
        self.instances: list[Instance] = []
        self.dead: list[str] = []  # instance ids of the engines killed
        self.replaced = 0  # engines killed or stopped
        self.twins: dict[str, str] = {}  # fleet job id -> the reference's job id
        self.cancelled: set[str] = set()
        self.submits = 0
        try:  # Hypothesis calls no teardown when this fails
            self.schema, _ = self.trio.enter(open_test_schema(dsn))
            self.reference, _ = self.trio.enter(
                open_engine(MemoryStore(), self.reference_fetch.for_engine("reference"), CONFIG)
            )
            for _ in range(2):
                self._start_instance()
        except BaseException:
            self.trio.close()
            raise

    # -- plumbing -------------------------------------------------------------------------

    def _start_instance(self, resume: bool = False) -> None:
        name = f"e{len(self.recorders)}"
        rec = Recorder()
        self.recorders.append(rec)
        (store, engine), held = self.trio.enter(
            open_instance(self.dsn, self.schema, self.fetch, name, rec, resume)
        )
        self.instances.append(Instance(name, store, engine, rec, held))

    def _step(self, fn: Callable[[], T]) -> T:
        """Run one rule's body; a failure marks the example broken (no final check then)."""
        self.broken = True
        value = fn()
        self.broken = False
        return value

    async def _count(self, where: str, job_id: str = "") -> int:
        """How many targets of the schema match ``where`` (its parameters: ``dead``, the ids
        of the killed instances, and ``id``, a job's)."""
        import psycopg
        from psycopg import sql

        query = sql.SQL("SELECT count(*) FROM {}.targets WHERE " + where).format(
            sql.Identifier(self.schema)
        )

        def count() -> int:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                row = conn.execute(query, {"dead": self.dead, "id": job_id}).fetchone()
                return 0 if row is None else int(row[0])

        return await trio.to_thread.run_sync(count)

    async def _live_claims_held(self) -> int:
        """How many targets a running engine holds a claim on (claimed, not yet stored)."""
        return await self._count("claim IS NOT NULL AND NOT (claim_instance = ANY(%(dead)s))")

    async def _claims_detail(self) -> list[tuple[object, ...]]:
        """Each claimed target: job, index, the instance holding it, expired or not."""
        import psycopg
        from psycopg import sql

        query = sql.SQL(
            "SELECT job_id, idx, claim_instance, claim_until < clock_timestamp() FROM {}.targets "
            "WHERE claim IS NOT NULL"
        ).format(sql.Identifier(self.schema))

        def read() -> list[tuple[object, ...]]:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                return list(conn.execute(query).fetchall())

        return await trio.to_thread.run_sync(read)

    async def _dead_claims_held(self) -> int:
        """How many claims of killed instances have not expired yet (PostgreSQL's clock)."""
        return await self._count(
            "claim IS NOT NULL AND claim_instance = ANY(%(dead)s) "
            "AND claim_until > clock_timestamp()"
        )

    # -- rules ----------------------------------------------------------------------------

    @initialize(target=jobs, kinds=KINDS_OF_A_JOB, via=st.integers(0, 2), wide=CONCURRENCY)
    def first_job(self, kinds: list[str], via: int, wide: int) -> str:
        """Every example has a job (Hypothesis may leave the submit rule out of one)."""
        return self._submit(kinds, via, wide)

    @rule(target=jobs, kinds=KINDS_OF_A_JOB, via=st.integers(0, 2), wide=CONCURRENCY)
    def submit(self, kinds: list[str], via: int, wide: int) -> str:
        return self._submit(kinds, via, wide)

    def _submit(self, kinds: list[str], via: int, wide: int) -> str:
        """Submit the job of ``kinds`` to the fleet through engine ``via``, and its twin to the
        reference, both with concurrency ``wide``."""
        self.submits += 1
        urls = [f"https://j{self.submits}.example.test/{kind}/{i}" for i, kind in enumerate(kinds)]
        engine = self.instances[via % len(self.instances)].engine

        async def go() -> tuple[str, str]:
            caller = Caller(f"c{self.submits % 3}")
            job = [Target(u) for u in urls]
            sub = await engine.submit(caller, "fleet", job, concurrency=wide)
            twin = await self.reference.submit(caller, "fleet", job, concurrency=wide)
            assert not (sub.reused or twin.reused)
            return sub.id, twin.id

        job_id, twin_id = self._step(lambda: self.trio.call(go))
        self.twins[job_id] = twin_id
        return job_id

    @rule(job_id=jobs, via=st.integers(0, 2))
    def cancel(self, job_id: str, via: int) -> None:
        engine = self.instances[via % len(self.instances)].engine

        async def go() -> bool:
            return await engine.cancel(job_id)

        cancelled = self._step(lambda: self.trio.call(go))
        if job_id in self.cancelled:
            assert not cancelled  # already terminal
        elif cancelled:
            self.cancelled.add(job_id)

    @rule(
        victim=st.integers(0, 2),
        graceful=st.booleans(),
        mid_fetch=st.booleans(),
        resume=st.booleans(),
    )
    def replace_engine(self, victim: int, graceful: bool, mid_fetch: bool, resume: bool) -> None:
        """Kill an engine (kill -9: its claims are left to expire) or stop it (SIGTERM: its
        claims are given back), and start another in its place.

        ``mid_fetch`` first waits (0.2 s at most) for the engine to have a fetch in flight,
        the case that matters; an engine that gets no turn meanwhile goes all the same.
        """
        instance = self.instances.pop(victim % len(self.instances))
        rec = instance.recorder
        self.replaced += 1

        async def stop() -> None:
            if mid_fetch:
                with trio.move_on_after(0.2):
                    await rec.wait_until(lambda: rec.inflights[-1:] not in ([], [0]))
            if not graceful:
                self.dead.append(instance.store.instance_id)
                instance.store._claims.clear()  # nothing renews or gives back its claims

        def go() -> None:
            self.trio.call(stop)
            self.trio.exit(instance.held)
            self._start_instance(resume)

        self._step(go)

    @precondition(lambda self: len(self.instances) < 3)
    @rule()
    def add_engine(self) -> None:
        self._step(self._start_instance)

    @precondition(lambda self: bool(self.dead))
    @rule()
    def let_claims_expire(self) -> None:
        async def go() -> None:
            with trio.fail_after(SETTLE_SECONDS):
                while True:
                    if not await self._dead_claims_held():
                        break
                    await trio.sleep(0.05)

        self._step(lambda: self.trio.call(go))

    @rule()
    def settle(self) -> None:
        self._step(self._settle_and_check)

    # -- the checks -----------------------------------------------------------------------

    def _settle_and_check(self) -> None:
        fleet, reference = self.trio.call(self._quiescent)
        for job_id, snap in fleet.items():
            expected = reference[self.twins[job_id]]
            if job_id in self.cancelled:
                self._check_cancelled(snap, expected)
            else:
                assert (snap.job.status, [target_answer(t) for t in snap.targets]) == (
                    expected.job.status,
                    [target_answer(t) for t in expected.targets],
                ), job_id
                pairs = zip(snap.targets, expected.targets, strict=True)
                assert all(waited_trace(f, r) for f, r in pairs), job_id
            stored = sum(t.status in STORED for t in snap.targets)
            assert stored == snap.job.targets_done, job_id

        # Each job's end is heard once; an engine killed or stopped right after the store took
        # a job's last outcome (a queued write commits) is gone before its hook runs.
        heard = self.trio.call(self._heard_ends, len(fleet))
        assert heard == len(fleet) if not self.replaced else heard <= len(fleet), (
            heard,
            len(fleet),
            self.replaced,
            [
                [e for e in rec.jobs if e not in ("created", "reused", "retried")]
                for rec in self.recorders
            ],
        )
        ends = Counter(url for _, url, event in list(self.fetch.log) if event == "end")
        assert all(n <= 2 for n in ends.values()), ends

    async def _heard_ends(self, jobs: int) -> int:
        """How many job ends the engines' hooks heard, once every one of ``jobs`` was heard
        (bounded) if no engine was replaced.

        A job reads as ended as soon as its last outcome (or its cancel) commits; the engine
        that wrote it calls its hook when its thread's answer is back, which may come after a
        read of the job by another task: counting at once raced that answer.
        """

        def heard() -> int:
            return sum(rec.terminal() for rec in self.recorders)

        with trio.move_on_after(SETTLE_SECONDS):
            await wait_any_until(self.recorders, lambda: bool(self.replaced) or heard() >= jobs)
        return heard()

    def _check_cancelled(self, snap: Snapshot, expected: Snapshot) -> None:
        """A cancelled job stopped at a target boundary: each target it stored is as the
        reference stored it (with a concurrency above 1, or a busy target given back, what was
        stored need not be a prefix); any other target is pending, or running if a kill cut
        its fetch."""
        assert JobStatus.CANCELLED == snap.job.status
        states = [t.status for t in snap.targets]
        for got, want in zip(snap.targets, expected.targets, strict=True):
            if got.status in STORED:
                assert target_answer(got) == target_answer(want), snap.job.id
            else:
                assert got.status is TargetState.PENDING or (
                    got.status is TargetState.RUNNING and self._claimed_by_the_dead(snap.job.id)
                ), (snap.job.id, states)

    def _claimed_by_the_dead(self, job_id: str) -> bool:
        """Whether the job's last claim was a killed engine's: its target stays ``running``
        until a heartbeat past the claim's deadline gives it back (see
        ``test_a_dead_claim_of_a_cancelled_job_gives_its_target_back``)."""

        async def count() -> int:
            return await self._count(
                "job_id = %(id)s AND claim IS NOT NULL AND claim_instance = ANY(%(dead)s)",
                job_id,
            )

        return self.trio.call(count) > 0

    async def _quiescent(self) -> tuple[dict[str, Snapshot], dict[str, Snapshot]]:
        """Wait (bounded) until every job of the fleet and of the reference has ended and
        nothing is in flight, then return their snapshots.

        On the fleet a target is in flight from its claim until its outcome is stored or its
        claim given back, not only while the fetch runs: a cancelled job's last claimed target
        is fetched and stored after the job ended. Claims of killed engines stay until they
        expire, and the checks allow for them.
        """
        engine = self.instances[0].engine
        with trio.move_on_after(SETTLE_SECONDS) as waited:
            while True:
                # Claims first: a snapshot taken after none was held shows every outcome.
                claimed = await self._live_claims_held()
                fleet = {job_id: await engine.status(job_id) for job_id in self.twins}
                reference = {
                    twin: await self.reference.status(twin) for twin in self.twins.values()
                }
                if (
                    not claimed
                    and all(ended(s, self.fetch) for s in fleet.values())
                    and all(ended(s, self.reference_fetch) for s in reference.values())
                ):
                    break
                await trio.sleep(0.05)
        if waited.cancelled_caught:  # say what did not settle
            raise AssertionError(
                f"not quiescent after {SETTLE_SECONDS} s: {claimed} live claims; fleet "
                + repr(
                    {
                        k: (s.job.status, [t.status for t in s.targets])
                        for k, s in fleet.items()
                        if s is not None and not ended(s, self.fetch)
                    }
                )
                + "; reference "
                + repr(
                    {
                        k: (s.job.status, [t.status for t in s.targets])
                        for k, s in reference.items()
                        if s is not None and not ended(s, self.reference_fetch)
                    }
                )
                + "; stores' claims "
                + repr(
                    [(i.name, i.store.instance_id, len(i.store._claims)) for i in self.instances]
                )
                + "; claims "
                + repr(await self._claims_detail())
                + "; fetch log "
                + repr(self.fetch.log[-8:])
                + "; engines "
                + repr(
                    [
                        (
                            i.name,
                            {
                                j.id[:6]: (
                                    j.pending,
                                    j.in_flight,
                                    j.queued,
                                    j.cancelled,
                                    sorted(j.claims),
                                )
                                for j in i.engine._live.values()
                            },
                        )
                        for i in self.instances
                    ]
                )
            )
        return (
            {k: v for k, v in fleet.items() if v is not None},
            {k: v for k, v in reference.items() if v is not None},
        )

    def teardown(self) -> None:
        try:
            if not self.broken:
                self._settle_and_check()
        finally:
            try:
                self.trio.exit(*(instance.held for instance in self.instances))
            finally:
                self.trio.close()


def test_a_fleet_answers_as_memory_store(pg_dsn: str) -> None:  # pg_dsn: skip without a DSN
    """Several engines on one schema, killed and replaced at random, end every job as one
    engine on MemoryStore does, each target stored once."""
    run_state_machine_as_test(
        FleetMachine,
        settings=settings(max_examples=10, stateful_step_count=15, deadline=None),
    )


async def test_a_dead_claim_of_a_cancelled_job_gives_its_target_back(
    pg_dsn: str, pg_schema: str
) -> None:
    """The machine's minimal case: an instance claims a turn and dies (kill -9), the job is
    cancelled on another instance, the claim expires: the target goes back to pending."""
    async with PostgresStore.open(pg_dsn, schema=pg_schema, claim_timeout=0.3) as first:
        job = NewJob("f" * 32, "alice", "fleet", "k", targets("f", 2), 1.0)
        await first.admit(job, Limits(3600, 32, 4, 8))
        await first.claim_turns(1, 2.0)
        first._claims.clear()  # no renewals from here on: the instance "died"

        async with (
            PostgresStore.open(
                pg_dsn, schema=pg_schema, claim_timeout=0.3, instance_timeout=1.5
            ) as second,
            open_engine(second, ScriptedFetch(), Config()) as engine,
        ):
            assert await engine.cancel(job.id)
            await wait_target(engine, job.id, 0, TargetState.PENDING)  # once the claim expired
            snap = await engine.status(job.id)

    assert snap is not None
    assert JobStatus.CANCELLED == snap.job.status
    assert [TargetState.PENDING, TargetState.PENDING] == [t.status for t in snap.targets]
