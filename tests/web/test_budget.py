"""Every request the fetcher makes takes its host's budget, whatever its door (real clock).

The engine's own slot is reused for a target's first request (no second slot, no deadlock at
a budget of one); ``fetch_one`` (``POST /v1/fetch``) and redirects to another host take their
own. Lower bounds only: a loaded machine can make things slower, never faster.
"""

from __future__ import annotations

import itertools

import httpx
import pytest
import trio

from tests.support import Reply, serve_site, wait_ended
from tests.web.support import CALLER, HTML, LOOPBACK, TEXT, mock_transport
from trio_batch import (
    Caller,
    Config,
    HostBudget,
    Result,
    RetryLater,
    Target,
    TargetState,
    open_engine,
)
from trio_batch.stores import MemoryStore
from trio_batch.web import WebFetcher


class Host:
    """A mock site that records its requests: start times and the most in flight at once."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds = seconds
        self.starts: list[float] = []
        self.in_flight = 0
        self.most = 0
        self.busy = 0  # answer this many requests 429 (Retry-After: 1) first

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.starts.append(trio.current_time())
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await trio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        if self.busy:
            self.busy -= 1
            return httpx.Response(429, headers=[("retry-after", "1")])
        return httpx.Response(200, text="ok", headers=TEXT)


async def test_fetch_one_calls_share_the_budget() -> None:
    """Concurrent ``fetch_one`` calls share the fetcher's budget: one at a time, ``interval``
    apart."""
    host = Host()
    budget = HostBudget(concurrency=1, interval=0.1)
    async with (
        WebFetcher(allow=LOOPBACK, transport=mock_transport(host.handle), budget=budget) as fetch,
        trio.open_nursery() as nursery,
    ):
        for i in range(4):
            nursery.start_soon(fetch.fetch_one, CALLER, Target(f"http://127.0.0.1:8/p{i}"))
    assert 1 == host.most
    assert all(b - a >= 0.1 - 0.005 for a, b in itertools.pairwise(host.starts))  # float


async def test_a_429_holds_back_the_requests_of_other_doors() -> None:
    """A 429 with Retry-After: 1 to one fetch_one: the next request to that host waits 1 s."""
    host = Host()
    host.busy = 1
    budget = HostBudget(concurrency=1)
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(host.handle), budget=budget
    ) as fetch:
        with pytest.raises(RetryLater) as busy:
            await fetch.fetch_one(CALLER, Target("http://127.0.0.1:8/a"))
        assert 1.0 == busy.value.after
        refused_at = trio.current_time()
        await fetch.fetch_one(CALLER, Target("http://127.0.0.1:8/b"))
    assert host.starts[1] >= refused_at + 1.0 - 0.05


async def test_a_fetch_that_waited_for_its_host_says_so_in_meta() -> None:
    """fetch_one behind a 429's Retry-After: 1 waits for the host, and meta.waited says how
    long (at least the 1 s); a fetch that did not wait has no waited."""
    host = Host()
    budget = HostBudget(concurrency=1)
    async with WebFetcher(
        allow=LOOPBACK, transport=mock_transport(host.handle), budget=budget
    ) as fetch:
        first = await fetch.fetch_one(CALLER, Target("http://127.0.0.1:8/a"))
        host.busy = 1
        with pytest.raises(RetryLater):
            await fetch.fetch_one(CALLER, Target("http://127.0.0.1:8/b"))
        behind = await fetch.fetch_one(CALLER, Target("http://127.0.0.1:8/c"))

    assert "waited" not in first.meta
    assert behind.meta["waited"]["seconds"] >= 1.0 - 0.05


async def test_a_target_that_came_back_busy_says_how_often_and_how_long() -> None:
    """Through the engine, a target answered 429 (Retry-After: 1) twice, then 200: its
    meta.waited has tries 2 and at least the 2 s its host asked for."""
    host = Host()
    host.busy = 2
    budget = HostBudget(concurrency=1)
    async with (
        WebFetcher(allow=LOOPBACK, transport=mock_transport(host.handle), budget=budget) as fetch,
        open_engine(MemoryStore(), fetch, Config(), budget=budget, scope=fetch.scope) as engine,
    ):
        sub = await engine.submit(CALLER, "fleet", [Target("http://127.0.0.1:8/a")])
        with trio.fail_after(20):
            await wait_ended(engine, sub.id)
        snap = await engine.status(sub.id)

    assert snap is not None and snap.targets[0].result is not None
    waited = snap.targets[0].result.meta["waited"]
    assert 2 == waited["tries"]
    assert waited["seconds"] >= 2.0 - 0.1


async def test_the_engine_slot_serves_the_target_without_a_second_one() -> None:
    """At a budget of one, the engine's slot is the fetcher's: jobs of three callers on one
    host all end done, one request at a time (a second acquire would wait for ever)."""
    host = Host()
    budget = HostBudget(concurrency=1)
    config = Config(workers=4, max_workers=4, jobs_total=4)
    async with (
        WebFetcher(allow=LOOPBACK, transport=mock_transport(host.handle), budget=budget) as fetch,
        open_engine(
            MemoryStore(),
            fetch,
            config,
            budget=budget,
            scope=fetch.scope,
        ) as engine,
    ):
        subs = [
            await engine.submit(
                Caller(f"c{i}"), "fleet", [Target(f"http://127.0.0.1:8/{i}/{j}") for j in range(3)]
            )
            for i in range(3)
        ]
        with trio.fail_after(20):
            await wait_ended(engine, *(sub.id for sub in subs))
        snaps = [await engine.status(sub.id) for sub in subs]
    assert 1 == host.most
    assert 9 == len(host.starts)
    for snap in snaps:
        assert snap is not None
        assert [TargetState.DONE] * 3 == [t.status for t in snap.targets]


async def test_a_page_being_shaped_holds_no_slot_of_its_host() -> None:
    """A target's slot goes back when its body is in, before it is shaped: at a budget of one,
    the next page's request starts while a long page is still being shaped into text, and the
    host still sees one request at a time."""
    host = Host()
    long_page = "<html><body>" + "<p>A paragraph of a long page.</p>" * 60_000 + "</body></html>"

    async def handle(request: httpx.Request) -> httpx.Response:
        answer = await host.handle(request)
        if request.url.path == "/long":
            return httpx.Response(200, text=long_page, headers=HTML)
        return answer

    ended: dict[str, float] = {}
    budget = HostBudget(concurrency=1)
    async with WebFetcher(allow=LOOPBACK, transport=mock_transport(handle), budget=budget) as web:

        async def fetch(caller: Caller, target: Target) -> Result:
            result = await web(caller, target)
            ended[target.url] = trio.current_time()
            return result

        async with open_engine(
            MemoryStore(), fetch, Config(workers=2), budget=budget, scope=web.scope
        ) as engine:
            subs = [
                await engine.submit(Caller(name), "fleet", [Target(f"http://127.0.0.1:8/{path}")])
                for name, path in (("a", "long"), ("b", "short"))
            ]
            with trio.fail_after(20):
                await wait_ended(engine, *(sub.id for sub in subs))

    assert 1 == host.most
    assert 2 == len(host.starts)
    assert host.starts[1] < ended["http://127.0.0.1:8/long"]  # while the long page was shaped


def test_the_scope_is_the_host_and_port_a_refused_url_has_none() -> None:
    """A target's scope is its host and port (the default port filled in); a refused URL has
    none."""
    fetch = WebFetcher(allow=LOOPBACK)
    assert "127.0.0.1:8" == fetch.scope(Target("http://127.0.0.1:8/x"))
    assert "example.com:443" == fetch.scope(Target("https://EXAMPLE.com/x"))
    assert fetch.scope(Target("ftp://example.com/")) is None


async def test_five_callers_on_a_real_socket_keep_the_spacing(nursery: trio.Nursery) -> None:
    """A site on a real socket, one request at a time and 0.2 s apart: five callers' jobs
    arrive spaced, all done, whatever the workers (real clock: lower bounds only)."""
    site = await serve_site(nursery)
    for i in range(2):
        site.route(f"/p{i}", Reply(body=b"page", headers=TEXT))
    budget = HostBudget(concurrency=1, interval=0.2)
    config = Config(workers=8, max_workers=8, jobs_per_caller=1, jobs_total=8)
    async with (
        WebFetcher(allow=LOOPBACK, budget=budget) as fetch,
        open_engine(MemoryStore(), fetch, config, budget=budget, scope=fetch.scope) as engine,
    ):
        subs = [
            await engine.submit(
                Caller(f"c{c}"), "fleet", [Target(site.url(f"/p{i}")) for i in range(2)]
            )
            for c in range(5)
        ]
        with trio.fail_after(30):
            await wait_ended(engine, *(s.id for s in subs))
        snaps = [await engine.status(s.id) for s in subs]
    arrivals = [seen.at for seen in site.seen]
    assert 10 == len(arrivals)
    # Starts are 0.2 s apart; an arrival may be late by the machine's scheduling, which can
    # bring it nearer the next one on a loaded machine, but never makes two come early: the
    # span holds nine spacings, and no two requests come in a burst.
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert arrivals[-1] - arrivals[0] >= 9 * 0.2 - 0.01
    assert min(gaps) >= 0.1, gaps
    assert all(s is not None and s.job.status.value == "done" for s in snaps)
