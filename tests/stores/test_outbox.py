"""The store contract for the webhook outbox (SPEC §7): the delivery state on the job row."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator

import pytest

from tests.stores.postgres.support import PG_DSN, SKIP_REASON, open_test_schema
from trio_batch import JobStatus, Result, TargetState, Webhook
from trio_batch.stores import Limits, Outcome, PostgresStore, ServiceStore
from trio_batch.stores._protocol import HookDue

from . import support

LIMITS = Limits(ttl=100.0, targets_per_job=4, jobs_per_caller=10, jobs_total=10)
SHORT_TTL = dataclasses.replace(LIMITS, ttl=1.0)
END = Webhook("https://hooks.test/in").to_json()
BOTH = Webhook("https://hooks.test/in", ("target", "end")).to_json()
DONE = Outcome(TargetState.DONE, result_json=Result("ok", {}).to_json())

new_job = functools.partial(support.new_job, webhook=END)


async def finish(
    store: ServiceStore, job_id: str, idx: int, now: float = 1000.0, size: int = 0
) -> None:
    assert await store.start_target(job_id, idx, now)
    outcome = DONE
    if size:
        outcome = Outcome(TargetState.DONE, result_json=Result("x" * size, {}).to_json())
    await store.finish_target(job_id, idx, outcome, now, 10**9)


async def due_ids(store: ServiceStore, now: float = 2000.0) -> list[tuple[str, int | None]]:
    return [(d.job_id, d.target) for d in await store.hooks_due(now, 100)]


async def advance(store: ServiceStore, due: HookDue, *, close: bool = False) -> bool:
    return await store.hook_advance(
        due, cursor=due.cursor + (0 if close else 1), attempts=0, since=0, next_at=0, close=close
    )


class TestDue:
    async def test_a_job_without_webhook_is_never_due(self, store: ServiceStore) -> None:
        """No webhook, no hook: a finished job has nothing to deliver."""
        await store.admit(new_job("j1", webhook=""), LIMITS)
        await finish(store, "j1", 0)
        await finish(store, "j1", 1)

        assert [] == await due_ids(store)

    async def test_end_only_is_due_once_the_job_is_terminal(self, store: ServiceStore) -> None:
        """A live job with an end-only webhook is not returned; a finished one is, with its row."""
        await store.admit(new_job("j1"), LIMITS)
        await finish(store, "j1", 0)
        live = await due_ids(store)
        await finish(store, "j1", 1, now=1001.0)
        (due,) = await store.hooks_due(2000.0, 10)

        assert [] == live
        assert HookDue("j1", "alice", END, JobStatus.DONE, 2, 2, 0, 0, 0.0, 0.0) == due
        assert due.target is None

    async def test_target_events_in_order_then_end(self, store: ServiceStore) -> None:
        """Each ended target is due in turn; a handled one is not returned again; then the end."""
        await store.admit(new_job("j1", webhook=BOTH), LIMITS)
        seen: list[list[tuple[str, int | None]]] = [await due_ids(store)]
        await finish(store, "j1", 0)
        seen.append(await due_ids(store))
        (first,) = await store.hooks_due(2000.0, 10)
        assert await advance(store, first)
        seen.append(await due_ids(store))
        await finish(store, "j1", 1)
        (second,) = await store.hooks_due(2000.0, 10)
        assert await advance(store, second)
        seen.append(await due_ids(store))
        (end,) = await store.hooks_due(2000.0, 10)
        assert await advance(store, end, close=True)
        seen.append(await due_ids(store))

        assert [[], [("j1", 0)], [], [("j1", None)], []] == seen
        assert (JobStatus.DONE, JobStatus.DONE) == (second.status, end.status)
        assert (1, 2) == (second.target, end.cursor)

    async def test_a_url_that_says_target_asks_for_no_target_events(
        self, store: ServiceStore
    ) -> None:
        """Only the webhook's decoded events list asks for target events, never its URL."""
        webhook = Webhook('https://hooks.test/in?events="target"').to_json()
        await store.admit(new_job("j1", webhook=webhook), LIMITS)
        await finish(store, "j1", 0)

        assert [] == await due_ids(store)

    async def test_a_cancelled_job_ends_after_the_targets_it_stored(
        self, store: ServiceStore
    ) -> None:
        """Cancelled after one target: that target's event, then the end."""
        await store.admit(new_job("j1", webhook=BOTH, n=3), LIMITS)
        await finish(store, "j1", 0)
        await store.cancel("j1", 1001.0)
        (first,) = await store.hooks_due(2000.0, 10)
        assert await advance(store, first)
        (end,) = await store.hooks_due(2000.0, 10)

        assert (0, None, JobStatus.CANCELLED) == (first.target, end.target, end.status)

    async def test_next_at_defers_and_orders(self, store: ServiceStore) -> None:
        """A retry waits for its next_at; due jobs come soonest first, at most limit of them."""
        for job_id in ("a", "b", "c"):
            await store.admit(new_job(job_id, n=1), LIMITS)
            await finish(store, job_id, 0)
        (a, b, c) = sorted(await store.hooks_due(2000.0, 10), key=lambda d: d.job_id)
        assert await store.hook_advance(a, cursor=0, attempts=1, since=2000, next_at=2050)
        assert await store.hook_advance(c, cursor=0, attempts=1, since=2000, next_at=2010)

        assert [("b", None)] == await due_ids(store, 2005.0)
        assert ["b", "c"] == [d.job_id for d in await store.hooks_due(2020.0, 10)]
        assert ["b", "c"] == [d.job_id for d in await store.hooks_due(2100.0, 2)]
        (again,) = [d for d in await store.hooks_due(2100.0, 10) if d.job_id == "a"]
        assert (1, 2000.0, 2050.0) == (again.attempts, again.since, again.next_at)
        assert b.job_id == "b"


class TestAdvance:
    async def test_is_a_compare_and_set(self, store: ServiceStore) -> None:
        """Of two advances from the same read, one applies; a closed hook takes none."""
        await store.admit(new_job("j1", n=1), LIMITS)
        await finish(store, "j1", 0)
        (due,) = await store.hooks_due(2000.0, 10)

        first = await store.hook_advance(due, cursor=0, attempts=1, since=2000, next_at=2005)
        second = await store.hook_advance(due, cursor=0, attempts=1, since=2000, next_at=2005)
        (now,) = await store.hooks_due(2005.0, 10)
        closed = await advance(store, now, close=True)
        after = await advance(store, now, close=True)

        assert (True, False, True, False) == (first, second, closed, after)
        assert await store.hooks_due(9999.0, 10) == []

    async def test_an_unknown_job_is_not_advanced(self, store: ServiceStore) -> None:
        """An advance of a job the store does not hold applies to nothing."""
        ghost = HookDue("nope", "alice", END, JobStatus.DONE, 1, 1, 0, 0, 0.0, 0.0)

        assert not await advance(store, ghost, close=True)


class TestKeeping:
    async def test_sweep_keeps_a_job_whose_hook_is_open(self, store: ServiceStore) -> None:
        """Past its ttl, a finished job is kept until its webhook is handled, then swept."""
        await store.admit(new_job("j1", n=1), LIMITS)
        await finish(store, "j1", 0)
        await store.admit(new_job("later", webhook="", now=2000.0), SHORT_TTL)
        kept = await store.snapshot("j1")
        (due,) = await store.hooks_due(2000.0, 10)
        assert await advance(store, due, close=True)
        await store.admit(new_job("later2", webhook="", now=2000.0), SHORT_TTL)

        assert kept is not None
        assert await store.snapshot("j1") is None

    async def test_eviction_skips_a_job_whose_hook_is_open(self, store: ServiceStore) -> None:
        """The byte cap evicts an older finished job without a webhook, not one with open hook."""
        await store.admit(new_job("hooked", n=1), LIMITS)
        await finish(store, "hooked", 0, now=1000.0, size=500)
        await store.admit(new_job("plain", webhook="", n=1), LIMITS)
        await finish(store, "plain", 0, now=1001.0, size=500)
        await store.admit(new_job("new", webhook="", n=1), LIMITS)
        assert await store.start_target("new", 0, 1002.0)
        outcome = Outcome(TargetState.DONE, result_json=Result("x" * 500, {}).to_json())
        stored = await store.finish_target("new", 0, outcome, 1002.0, 1300)

        assert 1 == stored.evicted
        assert await store.snapshot("hooked") is not None
        assert await store.snapshot("plain") is None


class TestClaims:
    async def test_a_claimed_read_returns_what_a_plain_read_does(self, store: ServiceStore) -> None:
        """Every store answers a claiming read with the due jobs (a local one just ignores it)."""
        for job_id in ("a", "b"):
            await store.admit(new_job(job_id, n=1), LIMITS)
            await finish(store, job_id, 0)
        plain = await due_ids(store)
        claimed = await store.hooks_due(2000.0, 10, claim_for=30.0)
        advanced = [await advance(store, due, close=True) for due in claimed]

        assert sorted(plain) == sorted((d.job_id, d.target) for d in claimed)
        assert [True, True] == advanced
        assert [] == await due_ids(store)


@pytest.fixture
async def two_instances() -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two PostgreSQL instances on one schema: two dispatchers' views of the same outboxes."""
    if not PG_DSN:
        pytest.skip(SKIP_REASON)
    async with (
        open_test_schema(PG_DSN) as schema,
        PostgresStore.open(PG_DSN, schema=schema) as first,
        PostgresStore.open(PG_DSN, schema=schema) as second,
    ):
        yield first, second


class TestFleetClaims:
    async def test_a_claimed_outbox_is_skipped_by_another_instance_until_released(
        self, two_instances: tuple[PostgresStore, PostgresStore]
    ) -> None:
        """One instance at a time sends a job's events: the other reads it once it advanced."""
        first, second = two_instances
        await first.admit(new_job("j1", webhook=BOTH), LIMITS)
        await finish(first, "j1", 0)
        await finish(first, "j1", 1)
        (mine,) = await first.hooks_due(2000.0, 10, claim_for=30.0)
        while_held = await second.hooks_due(2000.0, 10, claim_for=30.0)
        advanced = await advance(first, mine)
        (theirs,) = await second.hooks_due(2000.0, 10, claim_for=30.0)
        held_again = await first.hooks_due(2000.0, 10, claim_for=30.0)

        assert [] == while_held
        assert advanced
        assert (0, 1) == (mine.target, theirs.target)
        assert "" != theirs.claim != mine.claim
        assert [] == held_again

    async def test_an_expired_claim_is_taken_over_and_its_holder_advances_nothing(
        self, two_instances: tuple[PostgresStore, PostgresStore]
    ) -> None:
        """A dispatcher that died mid-send loses the job at its deadline; the event goes again."""
        first, second = two_instances
        await first.admit(new_job("j1", n=1), LIMITS)
        await finish(first, "j1", 0)
        (dead,) = await first.hooks_due(2000.0, 10, claim_for=0.0)
        (again,) = await second.hooks_due(2000.0, 10, claim_for=30.0)
        late = await advance(first, dead, close=True)
        delivered = await advance(second, again, close=True)

        assert (None, None) == (dead.target, again.target)
        assert (False, True) == (late, delivered)
        assert [] == await due_ids(first)

    async def test_an_unclaimed_advance_waits_for_the_claim(
        self, two_instances: tuple[PostgresStore, PostgresStore]
    ) -> None:
        """A plain read's advance does not apply while another holds a live claim."""
        first, second = two_instances
        await first.admit(new_job("j1", n=1), LIMITS)
        await finish(first, "j1", 0)
        (plain,) = await second.hooks_due(2000.0, 10)
        (claimed,) = await first.hooks_due(2000.0, 10, claim_for=30.0)
        blocked = await advance(second, plain, close=True)
        released = await first.hook_advance(claimed, cursor=0, attempts=0, since=0.0, next_at=0.0)
        applied = await advance(second, plain, close=True)

        assert "" == plain.claim
        assert (False, True, True) == (blocked, released, applied)

    async def test_advancing_to_the_same_state_releases_the_claim_alone(
        self, two_instances: tuple[PostgresStore, PostgresStore]
    ) -> None:
        """A stopping dispatcher gives its claim back: the other instance takes the job at once."""
        first, second = two_instances
        await first.admit(new_job("j1", n=1), LIMITS)
        await finish(first, "j1", 0)
        (held,) = await first.hooks_due(2000.0, 10, claim_for=30.0)
        released = await first.hook_advance(
            held, cursor=held.cursor, attempts=held.attempts, since=held.since, next_at=held.next_at
        )
        (taken,) = await second.hooks_due(2000.0, 10, claim_for=30.0)

        assert released
        assert dataclasses.replace(held, claim=taken.claim) == taken
