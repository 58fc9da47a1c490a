"""The fetcher's network behaviour: busy, limits, errors and hints, meta, cache, lifetime."""

from __future__ import annotations

import email.utils
import ssl
import typing

import httpx
import pytest
import trio

import trio_batch.web._extract._isolate
from tests.support import LocalSite, Reply, WallClock, redirect
from tests.web.support import (
    ARTICLE_HTML,
    CALLER,
    HTML,
    LOOPBACK,
    PUBLIC_IP,
    SITE,
    TEXT,
    FakeDNS,
    Handler,
    SlowBody,
)
from trio_batch import Caller, Options, Result, RetryLater, Target, TargetError
from trio_batch.stores import CacheEntry, MemoryStore, ResponseCache
from trio_batch.web import WebFetcher
from trio_batch.web._extract._shape import Body


def mock_fetcher(handler: Handler, **settings: object) -> WebFetcher:
    """A fetcher whose requests a handler answers in-process (fake DNS for the guard)."""
    dns = FakeDNS({"site.example": [[PUBLIC_IP]], "other.example": [[PUBLIC_IP]]})
    return WebFetcher(
        resolver=dns,
        transport=httpx.MockTransport(handler),
        **settings,  # type: ignore[arg-type]
    )


def text_handler(text: str = "hello", status: int = 200, **headers: str) -> Handler:
    """A handler answering ``text`` with ``status`` and extra headers (``_`` for ``-``)."""
    extra = {name.replace("_", "-"): value for name, value in headers.items()}

    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        return httpx.Response(status, text=text, headers={"content-type": "text/plain", **extra})

    return handler


class TestBusy:
    async def test_429_raises_retry_later_with_retry_after(self, server: LocalSite) -> None:
        """A 429 is only busy: RetryLater carries the site's Retry-After."""
        server.route("/", Reply(429, b"slow down", [("retry-after", "7"), *TEXT]))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(RetryLater) as info:
                await fetch(CALLER, Target(server.url("/")))

        assert info.value.after == 7.0
        assert "429 Too Many Requests" in str(info.value)

    async def test_503_with_an_http_date(self) -> None:
        """A Retry-After date is turned into seconds from the wall clock."""
        clock = WallClock(1_800_000_000.0)
        when = email.utils.formatdate(clock.now + 42, usegmt=True)
        async with mock_fetcher(text_handler("", 503, retry_after=when), wall_clock=clock) as fetch:
            with pytest.raises(RetryLater) as info:
                await fetch(CALLER, Target(f"{SITE}/"))

        assert info.value.after == 42.0

    async def test_retry_after_is_capped(self) -> None:
        """A huge Retry-After is honoured only up to max_retry_after."""
        handler = text_handler("", 429, retry_after="86400")
        async with mock_fetcher(handler, max_retry_after=60.0) as fetch:
            with pytest.raises(RetryLater) as info:
                await fetch(CALLER, Target(f"{SITE}/"))

        assert info.value.after == 60.0

    async def test_429_without_retry_after(self) -> None:
        """Without Retry-After the engine's own retry wait applies."""
        async with mock_fetcher(text_handler("", 429)) as fetch:
            with pytest.raises(RetryLater) as info:
                await fetch(CALLER, Target(f"{SITE}/"))

        assert info.value.after is None

    async def test_full_pool_raises_retry_later(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """With every pool slot busy for slot_wait, the next fetch is only busy."""
        gate, started = trio.Event(), trio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            started.set()
            await gate.wait()
            return httpx.Response(200, text="done", headers={"content-type": "text/plain"})

        results: list[Result] = []
        async with (
            mock_fetcher(handler, pool_size=1, slot_wait=2.0) as fetch,
            trio.open_nursery() as nursery,
        ):

            async def first() -> None:
                results.append(await fetch(Caller("a"), Target(f"{SITE}/a")))

            nursery.start_soon(first)
            await started.wait()
            stats = fetch.statistics()
            t0 = trio.current_time()
            with pytest.raises(RetryLater, match=r"^the fetch pool is all in use"):
                await fetch(Caller("b"), Target(f"{SITE}/b"))
            waited = trio.current_time() - t0
            gate.set()

        assert pytest.approx(waited) == 2.0
        assert (stats.in_flight, stats.pool_size) == (1, 1)
        assert [r.content for r in results] == ["done"]

    async def test_per_caller_limit(self, autojump_clock: trio.testing.MockClock) -> None:
        """One caller cannot take more than per_caller slots; others still get theirs."""
        gate = trio.Event()
        started = 0

        async def handler(request: httpx.Request) -> httpx.Response:
            nonlocal started
            started += 1
            await gate.wait()
            return httpx.Response(200, text="ok", headers={"content-type": "text/plain"})

        async with (
            mock_fetcher(handler, per_caller=1, pool_size=4) as fetch,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(fetch, Caller("a"), Target(f"{SITE}/1"))
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(RetryLater, match=r"^this caller's fetch slots"):
                await fetch(Caller("a"), Target(f"{SITE}/2"))
            nursery.start_soon(fetch, Caller("b"), Target(f"{SITE}/3"))
            await trio.testing.wait_all_tasks_blocked()
            in_flight = fetch.statistics().in_flight
            gate.set()

        assert 2 == in_flight == started

    async def test_a_caller_alone_uses_the_whole_pool(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Without per_caller, one caller's fetches fill every slot while no one else waits
        (a fixed share left slots idle); a second caller waiting for a slot gets the first one
        that comes back, before the first caller's own waiting fetch."""
        gates = {f"/{i}": trio.Event() for i in range(5)}
        order: list[str] = []

        async def handler(request: httpx.Request) -> httpx.Response:
            order.append(request.url.path)
            await gates.setdefault(request.url.path, trio.Event()).wait()
            return httpx.Response(200, text="ok", headers={"content-type": "text/plain"})

        async with (
            mock_fetcher(handler, pool_size=3, slot_wait=60.0, shape_warm=False) as fetch,
            trio.open_nursery() as nursery,
        ):
            for i in range(4):
                nursery.start_soon(fetch, Caller("a"), Target(f"{SITE}/{i}"))
                await trio.testing.wait_all_tasks_blocked()
            alone = fetch.statistics()
            nursery.start_soon(fetch, Caller("b"), Target(f"{SITE}/b"))
            await trio.testing.wait_all_tasks_blocked()
            gates[order[0]].set()
            await trio.testing.wait_all_tasks_blocked()
            after_one = order[3:]
            for gate in gates.values():
                gate.set()
            gates["/b"].set()

        assert (3, 1, 3) == (alone.in_flight, alone.waiting, alone.pool_size)
        assert ["/b"] == after_one


class TestLimits:
    async def test_declared_size_over_the_cap(self, server: LocalSite) -> None:
        """A body whose Content-Length is over max_bytes fails before it is read."""
        server.route("/big", Reply(body=b"x" * (2 * 2**20), headers=TEXT))
        async with WebFetcher(allow=LOOPBACK, max_bytes=2**20) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/big")))

        assert info.value.status == 413
        assert info.value.msg == "the page is 2 MB; the limit is 1 MB"
        assert info.value.hint

    async def test_streamed_size_is_counted(self, server: LocalSite) -> None:
        """A chunked body is cut off as soon as it passes max_bytes."""
        server.route("/stream", Reply(chunks=[b"y" * 65536] * 40, headers=TEXT))
        async with WebFetcher(allow=LOOPBACK, max_bytes=2**20) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/stream")))

        assert info.value.status == 413
        assert info.value.msg == "the page is larger than the limit of 1 MB"

    async def test_large_pdf_hint(self) -> None:
        """A PDF over the cap says why pages= cannot help."""
        handler = text_handler("x" * 5000, content_type="application/pdf")
        async with mock_fetcher(handler, max_bytes=1000) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/r.pdf", Options(pages="1")))

        assert info.value.msg.startswith("the PDF is 4.9 KB; the limit is 1000 bytes")
        assert "pages=" in info.value.hint

    async def test_slow_body_times_out(self, autojump_clock: trio.testing.MockClock) -> None:
        """The per-fetch deadline covers the body: a slow body is a 504 with a hint."""

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.lowlevel.checkpoint()
            return httpx.Response(
                200, headers={"content-type": "text/plain"}, stream=SlowBody([b"a"] * 10, 3.0)
            )

        async with mock_fetcher(handler, timeout=10.0) as fetch:
            t0 = trio.current_time()
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/slow"))

        assert pytest.approx(trio.current_time() - t0) == 10.0
        assert info.value.status == 504
        assert info.value.msg == "the site did not answer within 10 s"
        assert "try again later" in info.value.hint

    async def test_stalled_server_times_out(self, server: LocalSite) -> None:
        """Against a real socket, a server that stops sending is cut off at the deadline."""
        server.route("/stall", Reply(chunks=[b"partial"], stall=True, headers=TEXT))
        async with WebFetcher(allow=LOOPBACK, timeout=0.3) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/stall")))

        assert info.value.status == 504

    async def test_redirects_are_followed_up_to_the_limit(self, server: LocalSite) -> None:
        """Redirects are followed (and counted in meta) up to max_redirects."""
        server.route("/old", redirect("/new?session=abc", 301))
        server.route("/new", Reply(body=b"moved here", headers=TEXT))
        server.route("/loop", redirect("/loop"))
        async with WebFetcher(allow=LOOPBACK, max_redirects=2) as fetch:
            result = await fetch(CALLER, Target(server.url("/old")))
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/loop")))

        assert result.content == "moved here"
        assert result.meta["redirects"] == 1
        assert server.url("/new?session=REDACTED") == result.meta["url"]
        assert info.value.msg == "the site redirected more than 2 times"
        assert server.hits["/loop"] == 3


class TestErrors:
    @pytest.mark.parametrize(
        ("status", "expected_status", "msg", "hint"),
        [
            (404, 404, "the site answered 404 Not Found", "does not exist"),
            (403, 403, "the site answered 403 Forbidden", "login"),
            (410, 410, "the site answered 410 Gone", "does not exist"),
            (500, 502, "the site failed with 500 Internal Server Error", "try again later"),
            (502, 502, "the site failed with 502 Bad Gateway", "try again later"),
        ],
    )
    async def test_http_errors_have_status_and_hint(
        self, server: LocalSite, status: int, expected_status: int, msg: str, hint: str
    ) -> None:
        """4xx keep their status, 5xx become 502; each with a hint."""
        server.route("/x", Reply(status, b"error page", TEXT))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/x")))

        assert expected_status == info.value.status
        assert msg == info.value.msg
        assert hint in info.value.hint

    async def test_connection_refused(self) -> None:
        """Nothing listening on the port: a refused-connection error naming the port."""
        sock = trio.socket.socket()
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"http://127.0.0.1:{port}/"))

        assert f"the site refused the connection on port {port}" == info.value.msg
        assert "check the URL's host and port" in info.value.hint

    async def test_unknown_host(self) -> None:
        """A name that does not resolve says so."""
        async with WebFetcher(resolver=FakeDNS()) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target("https://no-such-host.example/"))

        assert (info.value.status, info.value.msg) == (502, "the host name does not resolve")
        assert "spelling" in info.value.hint

    async def test_tls_verification_failure(self) -> None:
        """A certificate that does not verify is a TLS error with a hint."""

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.lowlevel.checkpoint()
            cause = ssl.SSLCertVerificationError("certificate verify failed")
            raise httpx.ConnectError("handshake failed") from cause

        async with mock_fetcher(handler) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target("https://site.example/"))

        assert info.value.msg == "the site's TLS certificate could not be verified"
        assert "never skips verification" in info.value.hint

    async def test_truncated_response(self) -> None:
        """A broken exchange is a 502 with a hint, never the exception's text."""

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.lowlevel.checkpoint()
            raise httpx.RemoteProtocolError("peer closed connection at http://site.example/")

        async with mock_fetcher(handler) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/"))

        assert info.value.msg == "the site sent a malformed or truncated response"
        assert "site.example" not in info.value.msg


SHELL = b'<div id="app">Loading...</div><script src="/app.js"></script>'
"""A single-page app's shell: its content comes from the script."""


class TestMeta:
    async def test_meta_describes_the_fetch(self, server: LocalSite) -> None:
        """meta has the final URL (redacted), status, type, bytes, elapsed and redirects."""
        server.route("/page", Reply(body=ARTICLE_HTML, headers=HTML))
        async with WebFetcher(allow=LOOPBACK, user_agent="test-agent/1") as fetch:
            result = await fetch(CALLER, Target(server.url("/page?api_key=s3cr3t&q=1")))

        meta = result.meta
        assert server.url("/page?api_key=REDACTED&q=1") == meta["url"]
        assert (200, "text/html", len(ARTICLE_HTML)) == (
            meta["status"],
            meta["content_type"],
            meta["bytes"],
        )
        assert 0 <= meta["elapsed"] < 10
        assert (meta["redirects"], meta["cached"]) == (0, False)
        assert server.header("user-agent") == ["test-agent/1"]

    @pytest.mark.parametrize(
        ("page", "options", "hinted"),
        [
            (SHELL, Options(), True),
            (b"<div>Loading...</div><SCRIPT>boot()</SCRIPT>", Options(mode="markdown"), True),
            (SHELL, Options(grep="x"), False),
            (SHELL, Options(mode="raw"), False),
            (SHELL, Options(formats=("links", "metadata")), False),
            (SHELL, Options(formats=("links", "markdown")), True),
            (b"<p>Short and plain, no scripts.</p>", Options(), False),
            (b"<p>" + b"A real article. " * 40 + b"</p><script>track()</script>", Options(), False),
        ],
    )  # fmt: skip
    async def test_a_tiny_page_with_scripts_hints_at_render(
        self, page: bytes, options: Options, hinted: bool
    ) -> None:
        """An HTML page whose text is tiny and that has scripts (a single-page app's shell)
        says in meta.hint to try render; a page of text, one without scripts, or content
        narrowed on purpose (grep) or raw says nothing."""

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.lowlevel.checkpoint()
            body = b"<html><head><title>App</title></head><body>" + page + b"</body></html>"
            return httpx.Response(200, content=body, headers={"content-type": "text/html"})

        async with mock_fetcher(handler) as fetch:
            result = await fetch(CALLER, Target(f"{SITE}/", options))

        assert hinted == ("try render: true" in str(result.meta.get("hint", "")))

    async def test_cookies_are_never_kept(self, server: LocalSite) -> None:
        """A site's cookies are not sent back, so callers never share a session."""
        server.route("/set", Reply(body=b"x", headers=[("set-cookie", "sid=1; Path=/"), *TEXT]))
        server.route("/check", Reply(body=b"y", headers=TEXT))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(Caller("a"), Target(server.url("/set")))
            await fetch(Caller("b"), Target(server.url("/check")))

        assert server.header("cookie") == ["", ""]


class TestCache:
    async def test_repeat_is_served_from_the_cache(
        self, server: LocalSite, store: ResponseCache
    ) -> None:
        """A second fetch of the same URL and options comes from the store's cache."""
        server.route("/page", Reply(body=b"cached text", headers=TEXT))
        async with WebFetcher(allow=LOOPBACK, store=store) as fetch:
            first = await fetch(Caller("a"), Target(server.url("/page")))
            second = await fetch(Caller("b"), Target(server.url("/page")))
            other_options = await fetch(
                Caller("a"), Target(server.url("/page"), Options(grep="zzz"))
            )

        assert first.content == second.content
        assert (first.meta["cached"], second.meta["cached"]) == (False, True)
        assert other_options.content == ""
        assert server.hits["/page"] == 2

    async def test_ttl_expires_entries(self) -> None:
        """After cache_ttl the page is fetched again."""
        clock, hits = WallClock(), []

        async def handler(request: httpx.Request) -> httpx.Response:
            hits.append(1)
            await trio.lowlevel.checkpoint()
            return httpx.Response(200, text=f"v{len(hits)}", headers={"content-type": "text/plain"})

        async with mock_fetcher(
            handler, store=MemoryStore(), cache_ttl=60.0, wall_clock=clock
        ) as fetch:
            a = await fetch(CALLER, Target(f"{SITE}/"))
            clock.advance(30)
            b = await fetch(CALLER, Target(f"{SITE}/"))
            clock.advance(31)
            c = await fetch(CALLER, Target(f"{SITE}/"))

        assert [a.content, b.content, c.content] == ["v1", "v1", "v2"]
        assert b.meta["age"] == 30.0

    async def test_max_age_bounds_the_copy_a_target_takes(self) -> None:
        """max_age: 0 always fetches and refreshes the entry that others read; max_age N takes
        a copy younger than N seconds only; without it the cache life decides."""
        clock, hits = WallClock(), []

        async def handler(request: httpx.Request) -> httpx.Response:
            hits.append(1)
            await trio.lowlevel.checkpoint()
            return httpx.Response(200, text=f"v{len(hits)}", headers={"content-type": "text/plain"})

        def target(max_age: int | None = None) -> Target:
            return Target(f"{SITE}/", Options(max_age=max_age))

        async with mock_fetcher(
            handler, store=MemoryStore(), cache_ttl=300.0, wall_clock=clock
        ) as fetch:
            first = await fetch(CALLER, target())
            clock.advance(20)
            fresh = await fetch(CALLER, target(0))  # fetched: v2, and stored for the others
            clock.advance(20)
            plain = await fetch(CALLER, target())  # v2, 20 s old
            young = await fetch(CALLER, target(30))  # v2 is 20 s old: taken
            too_old = await fetch(CALLER, target(10))  # v2 is 20 s old: fetched again, v3

        assert [first.content, fresh.content, plain.content] == ["v1", "v2", "v2"]
        assert (fresh.meta["cached"], plain.meta["cached"], plain.meta["age"]) == (False, True, 20)
        assert (young.content, young.meta["cached"]) == ("v2", True)
        assert (too_old.content, too_old.meta["cached"]) == ("v3", False)
        assert 3 == len(hits)

    async def test_max_age_zero_with_recover_still_serves_the_last_copy(self) -> None:
        """max_age: 0 skips the cache's answer, not recover's: a failure still serves the copy."""
        clock = WallClock()
        replies = [httpx.Response(200, text="good", headers={"content-type": "text/plain"})]

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.lowlevel.checkpoint()
            return replies.pop(0) if replies else httpx.Response(500, text="down")

        async with mock_fetcher(handler, store=MemoryStore(), wall_clock=clock) as fetch:
            await fetch(CALLER, Target(f"{SITE}/"))
            stale = await fetch(CALLER, Target(f"{SITE}/", Options(max_age=0, recover=True)))

        assert (stale.content, stale.meta["stale"]) == ("good", True)

    @pytest.mark.parametrize(
        ("cache_control", "fetches"),
        [("no-store", 2), ("max-age=0", 2), ("no-cache", 2), ("max-age=3600", 1), ("private", 2)],
    )
    async def test_cache_control(self, cache_control: str, fetches: int) -> None:
        """no-store, no-cache, max-age and private (for shared entries) are honoured."""
        hits = 0

        async def handler(request: httpx.Request) -> httpx.Response:
            nonlocal hits
            hits += 1
            await trio.lowlevel.checkpoint()
            headers = {"content-type": "text/plain", "cache-control": cache_control}
            return httpx.Response(200, text="body", headers=headers)

        async with mock_fetcher(handler, store=MemoryStore()) as fetch:
            await fetch(CALLER, Target(f"{SITE}/"))
            await fetch(CALLER, Target(f"{SITE}/"))

        assert fetches == hits

    async def test_restricted_callers_have_a_private_cache(self) -> None:
        """Fleet callers share entries; a restricted caller's entries are its own."""
        hits = 0

        async def handler(request: httpx.Request) -> httpx.Response:
            nonlocal hits
            hits += 1
            await trio.lowlevel.checkpoint()
            return httpx.Response(200, text="t", headers={"content-type": "text/plain"})

        restricted = {"guest1", "guest2"}
        async with mock_fetcher(
            handler, store=MemoryStore(), restricted=lambda c: c.name in restricted
        ) as fetch:
            for name in ("fleet1", "fleet2", "guest1", "guest2", "guest1"):
                await fetch(Caller(name), Target(f"{SITE}/"))

        assert hits == 3

    async def test_recover_serves_the_last_copy_marked_stale(self) -> None:
        """recover=true turns a failure into the last cached copy, with stale in meta."""
        clock = WallClock()
        replies = [httpx.Response(200, text="good", headers={"content-type": "text/plain"})]

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.lowlevel.checkpoint()
            return replies.pop(0) if replies else httpx.Response(500, text="down")

        async with mock_fetcher(
            handler, store=MemoryStore(), cache_ttl=60.0, wall_clock=clock
        ) as fetch:
            await fetch(CALLER, Target(f"{SITE}/"))
            clock.advance(120)
            stale = await fetch(CALLER, Target(f"{SITE}/", Options(recover=True)))
            with pytest.raises(TargetError, match="500"):
                await fetch(CALLER, Target(f"{SITE}/"))
            with pytest.raises(TargetError, match="500"):
                await fetch(CALLER, Target(f"{SITE}/other", Options(recover=True)))

        assert stale.content == "good"
        assert (stale.meta["stale"], stale.meta["cached"], stale.meta["age"]) == (True, True, 120.0)
        assert stale.meta["error"] == "the site failed with 500 Internal Server Error"

    async def test_a_fetch_cancelled_while_shaping_caches_nothing(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A cancel that arrives while the body is shaped in its thread stops the fetch before
        the cache write, even with a store whose write cannot be cancelled once begun. (A
        ``question`` sends even a small body to a thread; one shaped on the event loop meets a
        cancel only at the checkpoint before it.)"""
        entries: dict[str, CacheEntry] = {}

        class EagerCache:
            async def cache_get(self, key: str) -> CacheEntry | None:
                await trio.lowlevel.checkpoint()
                return entries.get(key)

            async def cache_put(self, key: str, entry: CacheEntry, max_bytes: int) -> None:
                entries[key] = entry  # no checkpoint: the write lands whatever the scope says

        with trio.CancelScope() as scope:

            def cancel_then_shape(body: Body, options: Options) -> tuple[str, dict[str, object]]:
                trio.from_thread.run_sync(scope.cancel)
                return body.data.decode(), {"mode": "text"}

            monkeypatch.setattr(trio_batch.web._extract._isolate, "shape_body", cancel_then_shape)
            store = typing.cast("ResponseCache", EagerCache())
            async with mock_fetcher(text_handler("shaped"), store=store) as fetch:
                await fetch(CALLER, Target(f"{SITE}/", Options(question="shaped")))

        assert scope.cancelled_caught
        assert {} == entries

    async def test_recover_never_covers_a_guard_refusal(self) -> None:
        """A host that now resolves to a private address is refused even with a cached copy."""
        dns = FakeDNS()
        dns.set("moved.example", [PUBLIC_IP], ["10.0.0.3"])
        clock = WallClock()

        async with WebFetcher(
            resolver=dns,
            transport=httpx.MockTransport(text_handler("public copy")),
            store=MemoryStore(),
            cache_ttl=60.0,
            wall_clock=clock,
        ) as fetch:
            await fetch(CALLER, Target("http://moved.example/", Options(recover=True)))
            clock.advance(120)
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target("http://moved.example/", Options(recover=True)))

        assert info.value.status == 403


class TestLifetime:
    async def test_call_before_entering_says_how_to_open_it(self) -> None:
        """Calling a fetcher that was never entered says to use async with."""
        fetcher = WebFetcher()

        with pytest.raises(
            RuntimeError,
            match=r"^the WebFetcher is not open; use `async with WebFetcher\(...\) as fetch:`$",
        ):
            await fetcher(CALLER, Target("https://example.com/"))

    async def test_call_after_close_is_a_closed_resource(self) -> None:
        """Once its block has ended, a fetcher raises trio.ClosedResourceError, as the engine."""
        async with mock_fetcher(text_handler()) as fetch:
            await fetch(CALLER, Target(f"{SITE}/"))

        with pytest.raises(
            trio.ClosedResourceError,
            match=r"^this WebFetcher is closed; fetch inside its `async with` block, "
            r"or make a new one$",
        ):
            await fetch(CALLER, Target(f"{SITE}/"))
        with pytest.raises(trio.ClosedResourceError, match=r"^this WebFetcher is closed"):
            await fetch.fetch_one(CALLER, Target(f"{SITE}/"))

    @pytest.mark.parametrize("opened", [True, False])
    async def test_entering_after_close_is_a_closed_resource(self, opened: bool) -> None:
        """A fetcher is entered once: after aclose (used or not) a new one is needed."""
        fetcher = WebFetcher()
        if opened:
            async with fetcher:
                pass
        else:
            await fetcher.aclose()

        with pytest.raises(
            trio.ClosedResourceError,
            match=r"^this WebFetcher is closed, and a fetcher is entered only once; "
            r"make a new one with `async with WebFetcher\(...\) as fetch:`$",
        ):
            async with fetcher:
                pass

    async def test_entering_while_open_is_refused_and_leaves_it_open(self) -> None:
        """A nested async with is refused, and the outer block keeps a working fetcher."""
        async with mock_fetcher(text_handler("still open")) as fetch:
            with pytest.raises(RuntimeError, match=r"^this WebFetcher is open already; "):
                async with fetch:
                    pass
            result = await fetch(CALLER, Target(f"{SITE}/"))

        assert result.content == "still open"

    async def test_aclose_is_idempotent_and_closes_even_when_cancelled(self) -> None:
        """Closing twice is fine, and a close in a cancelled scope closes all the same."""
        fetcher = mock_fetcher(text_handler())
        async with fetcher:
            with trio.CancelScope() as scope:
                scope.cancel()
                await fetcher.aclose()
            await fetcher.aclose()

            with pytest.raises(trio.ClosedResourceError):
                await fetcher(CALLER, Target(f"{SITE}/"))

    @pytest.mark.parametrize(
        "name", ["timeout", "max_bytes", "pool_size", "per_caller", "slot_wait"]
    )
    def test_settings_must_be_positive(self, name: str) -> None:
        """A non-positive setting is a ValueError naming it."""
        with pytest.raises(ValueError, match=f"^WebFetcher {name} must be > 0 \\(got 0\\)$"):
            WebFetcher(**{name: 0})  # type: ignore[arg-type]

    async def test_fetch_one_is_the_same_fetch(self, server: LocalSite) -> None:
        """fetch_one fetches through the same pool, for a synchronous API call."""
        server.route("/", Reply(body=b"one", headers=TEXT))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            result = await fetch.fetch_one(CALLER, Target(server.url("/")))

        assert result.content == "one"
