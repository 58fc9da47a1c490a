"""A stalled response cache costs a fetch at most CACHE_WAIT per store call, never the store's
own timeout: a read that does not answer is a miss, a write that does not finish is left to
the store, and nothing is half written (audit: /v1/fetch took 60 s with web_cache locked)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from tests.web.support import CALLER, URL, StalledCache, stalled_fetcher
from trio_batch import Target
from trio_batch.web import WebFetcher
from trio_batch.web._fetch import _cache
from trio_batch.web._fetch._cache import CACHE_WAIT, MAX_LEFT_BEHIND


async def timed_fetch(fetch: WebFetcher) -> tuple[str, bool, float]:
    start = trio.current_time()
    result = await fetch(CALLER, Target(URL))
    return result.content, bool(result.meta["cached"]), trio.current_time() - start


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The response cache's own warnings, in order; and no warning of the web room (the cache's
    or another part's) shows where the caller went or the entry's key.

    Only the cache's records are returned: the fetcher's other parts log on the same logger, and
    a shaping worker that a loaded machine is slow to stop says so too, which is no business of
    the cache's.
    """
    warnings = [
        r for r in caplog.records if r.name == "trio_batch.web" and r.levelno >= logging.WARNING
    ]
    for record in warnings:
        message = record.getMessage()
        assert "site.example" not in message and "s3cret" not in message and "web:" not in message
    return [r.getMessage() for r in warnings if r.pathname == _cache.__file__]


class TestStalledRead:
    async def test_a_read_that_does_not_answer_is_a_miss(
        self, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """After CACHE_WAIT the fetch goes to the site; the read is cancelled; one warning."""
        cache = StalledCache(read=True)
        async with stalled_fetcher(cache) as fetch:
            content, cached, elapsed = await timed_fetch(fetch)
            await trio.testing.wait_all_tasks_blocked()

        assert (content, cached) == ("fresh", False)
        assert elapsed == pytest.approx(CACHE_WAIT)
        assert cache.ended == ["read cancelled", "write"]
        assert cache_warnings(caplog) == [
            f"web response cache read took over {CACHE_WAIT:g} s: served as a miss"
        ]


class TestStalledWrite:
    async def test_a_write_that_does_not_finish_is_left_to_the_store(
        self, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The fetch answers after CACHE_WAIT; the queued write lands whole once the store
        answers, and the next fetch is served from it."""
        cache = StalledCache(write=True)
        async with stalled_fetcher(cache) as fetch:
            content, cached, elapsed = await timed_fetch(fetch)
            assert cache.entries == {}
            assert cache.write_gate is not None
            cache.write_gate.set()
            await trio.testing.wait_all_tasks_blocked()
            again = await timed_fetch(fetch)

        assert (content, cached) == ("fresh", False)
        assert elapsed == pytest.approx(CACHE_WAIT)
        assert again == ("fresh", True, 0.0)
        assert cache.ended == ["read", "write", "read"]
        assert cache_warnings(caplog) == [
            f"web response cache write took over {CACHE_WAIT:g} s: left to the store, "
            "not waited for"
        ]

    async def test_a_cancellable_write_is_cancelled_and_stores_nothing(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A store whose write can still be cancelled drops it: no entry, nothing half done."""
        cache = StalledCache(write=True, shielded=False)
        async with stalled_fetcher(cache) as fetch:
            content, _, elapsed = await timed_fetch(fetch)
            await trio.testing.wait_all_tasks_blocked()

        assert content == "fresh"
        assert elapsed == pytest.approx(CACHE_WAIT)
        assert cache.ended == ["read", "write cancelled"]
        assert cache.entries == {}

    async def test_left_behind_writes_are_bounded(
        self, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Past MAX_LEFT_BEHIND unfinished writes, the next fetch skips the write at once."""
        cache = StalledCache(write=True)
        async with stalled_fetcher(cache) as fetch:
            waits = [(await timed_fetch(fetch))[2] for _ in range(MAX_LEFT_BEHIND + 2)]
            assert cache.write_gate is not None
            cache.write_gate.set()

        expected = [CACHE_WAIT] * MAX_LEFT_BEHIND + [0.0, 0.0]
        assert expected == pytest.approx(waits)
        assert cache_warnings(caplog)[-1] == (
            f"web response cache write skipped: {MAX_LEFT_BEHIND} earlier ones are still "
            "waiting for the store"
        )


class TestBothStalled:
    async def test_a_fetch_costs_at_most_twice_the_wait(
        self, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With reads and writes both stuck (a locked table), the fetch still answers in about
        2 * CACHE_WAIT, with one warning for each."""
        cache = StalledCache(read=True, write=True)
        async with stalled_fetcher(cache) as fetch:
            content, cached, elapsed = await timed_fetch(fetch)
            assert cache.read_gate is not None and cache.write_gate is not None
            cache.read_gate.set()
            cache.write_gate.set()

        assert (content, cached) == ("fresh", False)
        assert elapsed == pytest.approx(2 * CACHE_WAIT)
        assert len(cache_warnings(caplog)) == 2


class TestCancellation:
    async def test_a_cancelled_fetch_cancels_its_read_at_once(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Cancelling the fetch while it waits for the cache ends both, right then."""
        cache = StalledCache(read=True)
        async with stalled_fetcher(cache) as fetch:
            with trio.move_on_after(CACHE_WAIT / 4) as scope:
                await fetch(CALLER, Target(URL))
            await trio.testing.wait_all_tasks_blocked()
            ended_at = trio.current_time()

        assert scope.cancelled_caught
        assert ended_at == pytest.approx(CACHE_WAIT / 4)
        assert cache.ended == ["read cancelled"]

    async def test_closing_the_fetcher_cancels_what_was_left_behind(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A write left behind that the store can still cancel ends with the fetcher."""
        cache = StalledCache(write=True, shielded=False)
        fetch = stalled_fetcher(cache)
        async with fetch:
            await timed_fetch(fetch)
            assert cache.ended == ["read"]  # the write is still waiting
        await trio.testing.wait_all_tasks_blocked()

        assert cache.ended == ["read", "write cancelled"]
