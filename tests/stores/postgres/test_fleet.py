"""A fleet of engines on one PostgreSQL database: one rotation, whoever admitted the job.

Real clock throughout: the engines wait on worker threads, which Trio's autojump clock would
count as idle (python-trio/trio#456). Every wait is on a hook, an Event or a bounded poll of
the database; a claim that must expire is given a short ``claim_timeout``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import trio

from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    JobStatus,
    Result,
    RetryLater,
    Target,
    TargetState,
    open_engine,
)
from trio_batch.stores import Claim, ClaimAsk, ClaimRider, Outcome, PostgresStore
from trio_batch.testing import ScriptedFetch

from ...support import ALICE, BOB, Recorder, targets, url, wait_ended_polling
from ..support import wait_target

CAROL = Caller("carol")


@asynccontextmanager
async def fleet(
    dsn: str,
    schema: str,
    fetches: list[Any],
    recorders: list[Recorder],
    claims: ClaimLog | None = None,
    **config: Any,
) -> AsyncIterator[list[BatchEngine]]:
    """One engine per fetch, each on its own store instance of ``schema`` (watched by
    ``claims`` if given)."""
    async with AsyncExitStack() as stack:
        engines = []
        for fetch, rec in zip(fetches, recorders, strict=True):
            store = await stack.enter_async_context(PostgresStore.open(dsn, schema=schema))
            if claims is not None:
                claims.watch(store)
            engines.append(
                await stack.enter_async_context(
                    open_engine(store, fetch, Config(hooks=rec.hooks(), **config))
                )
            )
        yield engines


async def trio_any_inflight(recs: list[Recorder]) -> None:
    """Return once some engine of ``recs`` has a fetch in flight."""
    async with trio.open_nursery() as nursery:
        for rec in recs:

            async def wait(rec: Recorder = rec) -> None:
                await rec.wait_until(lambda: rec.inflights[-1:] == [1])
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)


class TurnLog:
    """A fetch for several engines that records, in one list, which job each turn served."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str]] = []  # (engine name, url)
        self.gate = trio.Event()

    def fetch(self, name: str) -> Any:
        async def fetch(caller: Caller, target: Target) -> Result:
            await self.gate.wait()
            self.turns.append((name, target.url))
            await trio.sleep(0.01)
            return Result("ok")

        return fetch


class ClaimLog:
    """The fleet's turns as its stores gave them, in one list across instances: each job's
    admission, each claim and each stored outcome, logged when the store's call returned.

    A turn is a claim, not a fetch: an instance slowed down between its claim and its fetch
    (a loaded machine) starts the fetch late, but the rotation gave the turn at the claim.
    A claim that rode with a group of outcomes committed after them, in their transaction: it
    is logged after the first group of outcomes stored once it was answered.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []  # ("admitted" | "claimed" | "stored", job id)
        self._rode: list[tuple[str, str]] = []  # ride claims answered, their outcomes not back

    def watch(self, store: PostgresStore) -> None:
        """Log ``store``'s claims and stored outcomes (before an engine opens on it)."""
        claim_turns, finish_targets, ride_claims = (
            store.claim_turns,
            store.finish_targets,
            store.ride_claims,
        )
        log = self

        class LoggedRider:
            def __init__(self, rider: ClaimRider) -> None:
                self.rider = rider

            def ask(self) -> ClaimAsk | None:
                return self.rider.ask()

            def answered(self, claims: list[Claim] | None) -> None:
                log._rode.extend(("claimed", claim.job_id) for claim in claims or ())
                self.rider.answered(claims)

        def ride(rider: ClaimRider | None) -> None:
            ride_claims(None if rider is None else LoggedRider(rider))

        async def claimed(*args: Any, **kwargs: Any) -> Any:
            got = await claim_turns(*args, **kwargs)
            self.events.extend(("claimed", claim.job_id) for claim in got)
            return got

        async def stored(items: Any, *args: Any, **kwargs: Any) -> Any:
            results = await finish_targets(items, *args, **kwargs)
            self.events.extend(("stored", job_id) for job_id, _, _ in items)
            self.events.extend(self._rode)
            self._rode.clear()
            return results

        store.claim_turns = claimed  # type: ignore[method-assign]
        store.finish_targets = stored  # type: ignore[method-assign]
        store.ride_claims = ride  # type: ignore[method-assign]

    def passed_over(self, sizes: dict[str, int]) -> list[tuple[str, str]]:
        """(waiting job, job served): each time a job got its third turn while another was
        waiting all along (live, no target claimed), so passed over twice. Jobs of
        concurrency 1 with ``sizes`` targets each.

        Twice, not once: two instances' claims commit in one order and may be logged in the
        other, and a claim statement may skip a job whose row another claim holds locked at
        that moment (``SKIP LOCKED``), so one turn may be seen out of place; a rotation that
        passes a ready job over again does not come from either.
        """
        claimed = dict.fromkeys(sizes, 0)
        in_flight = dict.fromkeys(sizes, 0)
        waiting_since: dict[str, int | None] = dict.fromkeys(sizes)
        claims_at: dict[str, list[int]] = {job: [] for job in sizes}
        found = []
        for at, (what, job) in enumerate(self.events):
            if what == "admitted":  # logged after the submit returned: maybe claimed already
                if claimed[job] == 0:
                    waiting_since[job] = at
            elif what == "claimed":
                earlier = claims_at[job][-2:-1]  # the claim before the last: two turns ago
                if earlier:
                    found += [
                        (other, job)
                        for other, since in waiting_since.items()
                        if other != job and since is not None and since < earlier[0]
                    ]
                claimed[job] += 1
                in_flight[job] += 1
                waiting_since[job] = None
                claims_at[job].append(at)
            else:
                in_flight[job] -= 1
                if in_flight[job] == 0 and claimed[job] < sizes[job]:
                    waiting_since[job] = at
        return found


class TestOneRotation:
    async def test_every_instance_works_the_jobs_one_admitted(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """Jobs submitted to A alone are fetched by A and B both, each target stored once."""
        log = TurnLog()
        recs = [Recorder(), Recorder()]
        async with fleet(
            pg_dsn, pg_schema, [log.fetch("a"), log.fetch("b")], recs, workers=1, jobs_per_caller=4
        ) as (a, b):
            subs = [await a.submit(ALICE, "fleet", targets(f"j{i}", 4)) for i in range(4)]
            log.gate.set()
            for sub in subs:
                assert [JobStatus.DONE] == await wait_ended_polling(a, sub.id)
            snaps = [await b.status(sub.id) for sub in subs]

        assert {"a", "b"} == {name for name, _ in log.turns}
        assert 16 == len(log.turns) == len({u for _, u in log.turns})
        for snap in snaps:
            assert snap is not None
            assert [TargetState.DONE] * 4 == [t.status for t in snap.targets]

    async def test_turns_alternate_across_jobs_fleet_wide(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """With more jobs than workers, a job ready for a turn (live, nothing in flight) is
        never passed over twice, whichever instance admitted it and whichever claims: the round
        robin is the fleet's (``ClaimLog.passed_over``)."""
        for _ in range(5):  # a race hides from one run
            async with open_schema_copy(pg_dsn) as schema:
                log, claims = TurnLog(), ClaimLog()
                recs = [Recorder(), Recorder()]
                async with fleet(
                    pg_dsn, schema, [log.fetch("a"), log.fetch("b")], recs, claims, workers=1
                ) as (a, b):
                    subs = []
                    for engine, caller, name in ((a, ALICE, "x"), (b, BOB, "y"), (a, CAROL, "z")):
                        subs.append(await engine.submit(caller, "fleet", targets(name, 5)))
                        claims.events.append(("admitted", subs[-1].id))
                    log.gate.set()
                    for sub in subs:
                        assert [JobStatus.DONE] == await wait_ended_polling(a, sub.id)

            assert [] == claims.passed_over({sub.id: 5 for sub in subs}), claims.events
            assert 15 == sum(what == "claimed" for what, _ in claims.events)


class TestClaimsRideWithOutcomes:
    async def test_an_outcome_carries_the_claim_of_its_jobs_next_target(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A store asked for a claim as it sends a group of outcomes runs it in the same
        round trip and transaction, after them: a serial job's next target, which only the
        outcome frees, is claimed with it; the claim is held as one of ``claim_turns``."""
        from trio_batch.stores import Limits, NewJob

        class Rider:
            def __init__(self) -> None:
                self.answers: list[list[Claim] | None] = []

            def ask(self) -> ClaimAsk | None:
                return ClaimAsk(2, 3.0, None, 2)

            def answered(self, claims: list[Claim] | None) -> None:
                self.answers.append(claims)

        rider = Rider()
        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            job = NewJob("r" * 32, "alice", "fleet", "k", targets("r", 3), 1.0)
            await store.admit(job, Limits(3600, 32, 4, 8))
            (first,) = await store.claim_turns(2, 2.0)  # serial: one target at a time
            store.ride_claims(rider)
            outcome = Outcome(TargetState.DONE, result_json='{"content": "r0"}', claim=first.token)
            await store.finish_targets([(job.id, 0, outcome)], 3.0, 10**9)
            store.ride_claims(None)
            (ridden,) = rider.answers
            assert ridden is not None
            (second,) = ridden
            late = Outcome(TargetState.DONE, result_json='{"content": "r1"}', claim=second.token)
            await store.finish_targets([(job.id, 1, late)], 4.0, 10**9)
            snap = await store.snapshot(job.id)

        assert (job.id, 1) == (second.job_id, second.idx)
        assert snap is not None
        assert ["done", "done", "pending"] == [t.status.value for t in snap.targets]


class TestClaimsCarryManyTurns:
    async def test_instant_fetches_are_claimed_many_turns_a_statement(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """With instant fetches an instance's pace is the turns a claim carries over its round
        trip: claiming again after every turn or two, one instance ran at ~8 turns a claim
        statement (W1 on PostgreSQL ~2,100 targets/s, where ~30 a statement run ~3,600)."""
        sizes: list[int] = []

        async def instant(caller: Caller, target: Target) -> Result:
            await trio.lowlevel.checkpoint()
            return Result("ok")

        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            claim_turns = store.claim_turns

            async def counted(*args: Any, **kwargs: Any) -> list[Claim]:
                claims = await claim_turns(*args, **kwargs)
                sizes.append(len(claims))
                return claims

            store.claim_turns = counted  # type: ignore[method-assign]
            config = Config(workers=2, jobs_per_caller=100, jobs_total=100)
            async with open_engine(store, instant, config) as engine:
                jobs = [
                    (await engine.submit(ALICE, "fleet", targets(f"j{i}", 10))).id
                    for i in range(100)
                ]
                ended = await wait_ended_polling(engine, *jobs)

        assert {JobStatus.DONE} == set(ended)
        claimed = [n for n in sizes if n]
        assert sum(claimed) / len(claimed) >= 12, sorted(claimed)


@asynccontextmanager
async def open_schema_copy(dsn: str) -> AsyncIterator[str]:
    """A fresh schema of its own for one repetition of a test."""
    from .support import open_test_schema

    async with open_test_schema(dsn) as schema:
        yield schema


class TestInstancesComeAndGo:
    async def test_closing_gives_the_turns_back_and_another_instance_finishes(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """An instance that stops (SIGTERM) gives its claims back at once: the job stays live,
        not interrupted, and the next instance runs its target again and finishes it."""
        held = ScriptedFetch()
        held.hold(url("a", 0))
        rec = Recorder()
        async with (
            PostgresStore.open(pg_dsn, schema=pg_schema) as store,
            open_engine(store, held, Config(hooks=rec.hooks())) as engine,
        ):
            sub = await engine.submit(ALICE, "fleet", targets("a", 2))
            await rec.wait_until(lambda: rec.inflights[-1:] == [1])

        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            job = await store.read_job(sub.id)
            assert job is not None
            assert JobStatus.RUNNING == job.status  # live, the fleet's: not interrupted
            again = ScriptedFetch()
            async with open_engine(store, again, Config()) as engine:
                assert [JobStatus.DONE] == await wait_ended_polling(engine, sub.id)

        assert [url("a", 0)] == held.calls
        assert [url("a", 0), url("a", 1)] == again.calls

    async def test_an_instance_cancelled_from_outside_gives_its_turns_back_too(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """An application that cancels the scope around its store and engine (a shutdown,
        not a crash) gives the claims back as a close does, not after the claim timeout."""
        import psycopg
        from psycopg import sql

        held = ScriptedFetch()
        held.hold(url("a", 0))
        rec = Recorder()
        with trio.CancelScope() as scope:
            async with (
                PostgresStore.open(pg_dsn, schema=pg_schema) as store,
                open_engine(store, held, Config(hooks=rec.hooks())) as engine,
            ):
                sub = await engine.submit(ALICE, "fleet", targets("a", 2))
                await rec.wait_until(lambda: rec.inflights[-1:] == [1])
                scope.cancel()
                await trio.sleep_forever()

        query = sql.SQL("SELECT claim, status FROM {}.jobs WHERE id = %s").format(
            sql.Identifier(pg_schema)
        )
        with psycopg.connect(pg_dsn) as conn:
            assert (None, "running") == conn.execute(query, (sub.id,)).fetchone()

    async def test_an_expired_claim_is_taken_over_and_the_late_outcome_is_not_stored(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A claim its instance no longer renews (kill -9) expires; another instance fetches
        the target again and stores it; the dead claim's outcome, arriving late, stores
        nothing (each target stored exactly once)."""
        async with PostgresStore.open(pg_dsn, schema=pg_schema, claim_timeout=0.3) as first:
            engine_less = first  # a store that claims and then goes silent, as after kill -9
            from trio_batch.stores import Limits, NewJob

            job = NewJob("d" * 32, "alice", "fleet", "k", targets("d", 1), 1.0)
            await engine_less.admit(job, Limits(3600, 32, 4, 8))
            (claim,) = await engine_less.claim_turns(1, 2.0)
            engine_less._claims.clear()  # no renewals from here on: the instance "died"

            fetch = ScriptedFetch()
            rec = Recorder()
            async with (
                PostgresStore.open(pg_dsn, schema=pg_schema, claim_timeout=0.3) as second,
                open_engine(second, fetch, Config(hooks=rec.hooks())) as engine,
            ):
                assert [JobStatus.DONE] == await wait_ended_polling(engine, job.id)

            late = Outcome(TargetState.FAILED, error="late", claim=claim.token)
            (stored,) = await first.finish_targets([(job.id, 0, late)], 9.0, 1 << 30)
            snap = await first.snapshot(job.id)

        assert not isinstance(stored, Exception)
        assert snap is not None
        assert [url("d", 0)] == fetch.calls
        assert (TargetState.DONE, "") == (snap.targets[0].status, snap.targets[0].error)
        assert 1 == snap.job.targets_done
        assert [(1, 1)] == rec.claims  # one turn, taken over: the metrics count a refetch

    async def test_opening_fails_nothing_the_fleet_owns(self, pg_dsn: str, pg_schema: str) -> None:
        """A job admitted with no engine running is run by the next engine to open, not failed."""
        from trio_batch.stores import Limits, NewJob

        async with PostgresStore.open(pg_dsn, schema=pg_schema) as store:
            job = NewJob("e" * 32, "alice", "fleet", "k", targets("e", 2), 1.0)
            await store.admit(job, Limits(3600, 32, 4, 8))
        fetch = ScriptedFetch()
        async with (
            PostgresStore.open(pg_dsn, schema=pg_schema) as store,
            open_engine(store, fetch, Config()) as engine,
        ):
            assert [JobStatus.DONE] == await wait_ended_polling(engine, job.id)

        assert [url("e", 0), url("e", 1)] == fetch.calls


class TestFleetRules:
    async def test_cancel_on_another_instance_stops_the_job_at_its_next_turn(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """B cancels a job A is fetching: A's target in flight is stored, nothing more starts."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        gate_a, gate_b = fetch_a.hold(url("c", 0)), fetch_b.hold(url("c", 0))
        recs = [Recorder(), Recorder()]
        async with fleet(pg_dsn, pg_schema, [fetch_a, fetch_b], recs, workers=1) as (a, b):
            sub = await a.submit(ALICE, "fleet", targets("c", 3))
            with trio.fail_after(30):
                await trio_any_inflight(recs)
            assert await b.cancel(sub.id)
            gate_a.set()
            gate_b.set()
            await wait_target(a, sub.id, 0, TargetState.DONE)  # the cancelled job's last fetch
            snap = await a.status(sub.id)
            assert snap is not None

        assert JobStatus.CANCELLED == snap.job.status
        assert [TargetState.DONE, TargetState.PENDING, TargetState.PENDING] == [
            t.status for t in snap.targets
        ]
        assert [url("c", 0)] == fetch_a.calls + fetch_b.calls
        assert 1 == (recs[0].jobs + recs[1].jobs).count("cancelled")

    async def test_a_busy_target_gives_its_turn_back_and_is_tried_again(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """A busy target's job waits out ``retry_wait`` holding its claim, then goes back to
        the end of the fleet's rotation; the next try (anywhere) stores it."""
        fetch = ScriptedFetch()
        fetch.script(url("b", 0), RetryLater(after=0.05))
        rec = Recorder()
        async with (
            PostgresStore.open(pg_dsn, schema=pg_schema) as store,
            open_engine(store, fetch, Config(hooks=rec.hooks(), retry_wait=0.05)) as engine,
        ):
            sub = await engine.submit(ALICE, "fleet", targets("b", 2))
            assert [JobStatus.DONE] == await wait_ended_polling(engine, sub.id)

        assert [url("b", 0), url("b", 0), url("b", 1)] == fetch.calls
        assert [0.05] == rec.retries

    async def test_caps_and_idempotency_hold_across_instances(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """The same request on two instances is one job; a caller's cap counts fleet-wide."""
        fetch_a, fetch_b = ScriptedFetch(), ScriptedFetch()
        for f in (fetch_a, fetch_b):
            f.hold(url("i", 0))
        recs = [Recorder(), Recorder()]
        async with fleet(pg_dsn, pg_schema, [fetch_a, fetch_b], recs, jobs_per_caller=1) as (a, b):
            first = await a.submit(ALICE, "fleet", targets("i", 1))
            again = await b.submit(ALICE, "fleet", targets("i", 1))
            from trio_batch import CallerBusy

            try:
                await b.submit(ALICE, "fleet", targets("other", 1))
            except CallerBusy:
                busy = True
            else:
                busy = False
            assert await a.cancel(first.id)

        assert (first.id, True) == (again.id, again.reused)
        assert busy
