"""Rendered pages: Debian's Chromium behind the guarded proxy, bounded and killable.

The browser tests start a real Chromium (skipped when ``/usr/bin/chromium`` is missing) and
serve pages from 127.0.0.2, the one address the guard allows; 127.0.0.3 plays the private
address, and a listener there counts every connection and datagram that reaches it.
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from tests.support import LocalSite, Reply, open_site, redirect
from tests.web.support import (
    ALLOW,
    ALLOWED_HOST,
    FORBIDDEN_HOST,
    SPA,
    CountingListener,
    html_page,
    needs_chromium,
    open_counting_listener,
)
from trio_batch import HostBudget, HostSlot, TargetError
from trio_batch.web._render._cdp import CdpClosed, CdpError, open_cdp
from trio_batch.web._render._pool import open_render_pool


def page_with_script(script: str) -> Reply:
    """A page that runs ``script`` and then writes ``done`` into #app."""
    html = f"""<!doctype html><html><body><div id="app">Loading...</div>
<script>
(async () => {{
  {script}
  document.getElementById("app").innerHTML = '<p id="done">done</p>';
}})();
</script></body></html>"""
    return html_page(html.encode())


def attempts_on(private: CountingListener) -> str:
    """A script that tries every way out to the private listener, each failure swallowed."""
    where = f"{FORBIDDEN_HOST}:{private.port}"
    return f"""
  const tries = [
    fetch("http://{where}/secret").catch(() => null),
    fetch("https://{where}/secret").catch(() => null),
    new Promise((resolve) => {{
      const ws = new WebSocket("ws://{where}/socket");
      ws.onerror = ws.onclose = ws.onopen = () => resolve(null);
    }}),
    new Promise((resolve) => {{
      const img = new Image();
      img.onerror = img.onload = () => resolve(null);
      img.src = "http://{where}/pixel.png";
    }}),
  ];
  await Promise.all(tries);
"""


@pytest.mark.slow
@needs_chromium
class TestRendering:
    async def test_a_single_page_app_gives_its_rendered_text(self) -> None:
        """A page whose content a script writes after load comes back with that content."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", html_page(SPA))
            page = await pool.render(site.url("/"))

        assert "Rendered by a script" in page.html
        assert "Loading..." not in page.html
        assert page.html.startswith("<!DOCTYPE html>")
        assert 200 == page.status
        assert site.url("/") == page.url
        assert page.settled

    async def test_wait_for_waits_for_the_selector(self) -> None:
        """With wait_for the DOM is taken once the selector matches, not before."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", page_with_script("await new Promise((r) => setTimeout(r, 300));"))
            page = await pool.render(site.url("/"), wait_for="#done")

        assert '<p id="done">done</p>' in page.html
        assert page.settled

    async def test_max_wait_takes_the_dom_as_it_is(self) -> None:
        """A page that never gets quiet is taken as it is after max_wait (settled False)."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", html_page(SPA.replace(b"</body>", b'<img src="/never"></body>')))
            site.route("/never", Reply(silent=True))
            page = await pool.render(site.url("/"), max_wait=1.0)

        assert "Rendered by a script" in page.html
        assert not page.settled

    async def test_an_invalid_selector_is_a_400(self) -> None:
        """A wait_for that is not CSS fails with a hint instead of waiting for nothing."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", html_page(SPA))
            with pytest.raises(
                TargetError, match=r"^wait_for is not a valid CSS selector$"
            ) as info:
                await pool.render(site.url("/"), wait_for="#(")

        assert 400 == info.value.status

    async def test_renders_past_the_pool_size_wait_for_a_renderer(self) -> None:
        """More renders than render_workers all finish, never with more browsers than that."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", html_page(SPA))
            pages: list[str] = []
            most = 0

            async def render() -> None:
                nonlocal most
                page = await pool.render(site.url("/"), wait_for="#ready")
                most = max(most, pool.statistics().renderers)
                pages.append(page.html)

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(render)

        assert 3 == len(pages)
        assert 1 == most


@pytest.mark.slow
@needs_chromium
class TestGuard:
    async def test_scripts_reach_no_private_address(self) -> None:
        """fetch (http and https), a WebSocket and an image aimed at a private address are all
        refused by the proxy; the render still ends and nothing reached the address."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_counting_listener() as private,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", page_with_script(attempts_on(private)))
            page = await pool.render(site.url("/"), wait_for="#done")

        assert '<p id="done">done</p>' in page.html
        assert page.refused >= 4
        assert 0 == private.connections

    @pytest.mark.parametrize("scheme", ["http", "https"])
    async def test_a_redirect_to_a_private_address_is_refused(self, scheme: str) -> None:
        """A redirect of the page to a private address fails the render with a 403, and
        nothing reached the address."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_counting_listener() as private,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            target = f"{scheme}://{FORBIDDEN_HOST}:{private.port}/"
            site.route("/go", redirect(target))
            with pytest.raises(TargetError, match=r"non-public address") as info:
                await pool.render(site.url("/go"))

        assert 403 == info.value.status
        assert 0 == private.connections

    async def test_a_script_redirect_to_a_private_address_is_refused(self) -> None:
        """A script that sends the page to a private address fails the render with a 403."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_counting_listener() as private,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            where = f"http://{FORBIDDEN_HOST}:{private.port}/"
            site.route(
                "/", html_page(f"<script>location.href = {json.dumps(where)};</script>".encode())
            )
            with pytest.raises(TargetError, match=r"non-public address"):
                await pool.render(site.url("/"))

        assert 0 == private.connections

    async def test_webrtc_sends_nothing_outside_the_proxy(self) -> None:
        """A peer connection's ICE gathering sends no UDP to a private STUN server."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_counting_listener() as private,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            stun = f"stun:{FORBIDDEN_HOST}:{private.port}"
            site.route(
                "/",
                page_with_script(
                    f"""
  const pc = new RTCPeerConnection({{iceServers: [{{urls: {json.dumps(stun)}}}]}});
  pc.createDataChannel("x");
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((resolve) => {{
    pc.onicegatheringstatechange = () => pc.iceGatheringState === "complete" && resolve();
    setTimeout(resolve, 1500);
  }});
"""
                ),
            )
            page = await pool.render(site.url("/"), wait_for="#done")

        assert "done" in page.html
        assert 0 == private.datagrams
        assert 0 == private.connections

    async def test_names_are_resolved_by_the_proxy_not_the_browser(self) -> None:
        """The browser resolves no name itself: the proxy resolves each one with the fetcher's
        resolver and checks the answers, so a name for a private address is refused too."""
        answers = {"app.test": [ALLOWED_HOST], "evil.test": [FORBIDDEN_HOST]}

        async def resolver(host: str, port: int) -> list[str]:
            await trio.lowlevel.checkpoint()
            return answers.get(host, [])

        async with (
            open_site(ALLOWED_HOST) as site,
            open_counting_listener() as private,
            open_render_pool(allow=ALLOW, workers=1, resolver=resolver) as pool,
        ):
            evil = f"http://evil.test:{private.port}/"
            site.route("/", page_with_script(f"await fetch({json.dumps(evil)}).catch(() => null);"))
            page = await pool.render(f"http://app.test:{site.port}/", wait_for="#done")

        assert "done" in page.html
        assert f"app.test:{site.port}" == site.seen[0].headers["host"]
        assert 1 == page.refused
        assert 0 == private.connections

    async def test_the_page_runs_in_the_engines_slot_for_its_host(self) -> None:
        """With the host's only slot held by the caller (the engine's), the page's requests to
        that host run in it instead of waiting forever for a second one."""
        budget = HostBudget(concurrency=1)
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1, budget=budget) as pool,
        ):
            site.route("/", html_page(SPA.replace(b"</body>", b'<img src="/pixel"></body>')))
            slot = budget.try_start(f"{site.host}:{site.port}")
            assert isinstance(slot, HostSlot)
            with trio.fail_after(20):
                page = await pool.render(site.url("/"), slot=slot)

        assert "Rendered by a script" in page.html
        assert ["/", "/pixel"] == sorted(p for p in site.paths() if p != "/favicon.ico")


@pytest.mark.slow
@needs_chromium
class TestCredentials:
    @staticmethod
    def credentials_seen(site: LocalSite) -> list[str]:
        return [
            seen.path
            for seen in site.seen
            if "authorization" in seen.headers or "secret=1" in seen.headers.get("cookie", "")
        ]

    async def test_headers_go_to_the_targets_exact_origin_only(self) -> None:
        """Cookie and Authorization reach the target's own requests, never a subresource or a
        fetch of another origin (the same host on another port is another origin)."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_site(ALLOWED_HOST) as other,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            other.route("/data", html_page(b"{}", headers=[("content-type", "application/json")]))
            script = f"""
  await fetch("/same").catch(() => null);
  await fetch({json.dumps(other.url("/data"))}).catch(() => null);
  await new Promise((resolve) => {{
    const img = new Image();
    img.onerror = img.onload = () => resolve(null);
    img.src = {json.dumps(other.url("/pixel"))};
  }});
"""
            site.route("/", page_with_script(script))
            site.route("/same", html_page(b"same"))
            headers = {"Authorization": "Bearer token-1", "Cookie": "secret=1"}
            await pool.render(site.url("/"), wait_for="#done", headers=headers)

        assert {"/", "/same"} <= set(self.credentials_seen(site))
        assert [] == self.credentials_seen(other)
        assert {"/data", "/pixel"} <= set(other.paths())

    async def test_headers_are_not_sent_after_a_redirect_to_another_origin(self) -> None:
        """A target that redirects to another origin loses its credentials on the way."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_site(ALLOWED_HOST) as other,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/hop", redirect(other.url("/landing")))
            other.route("/landing", html_page(SPA))
            page = await pool.render(
                site.url("/hop"), headers={"Authorization": "Bearer token-1", "Cookie": "secret=1"}
            )

        assert "Rendered by a script" in page.html
        assert ["/hop"] == self.credentials_seen(site)
        assert [] == self.credentials_seen(other)
        assert "/landing" in other.paths()

    async def test_a_header_with_a_line_break_is_refused(self) -> None:
        """A header value cannot smuggle a second header."""
        async with open_render_pool(allow=ALLOW, workers=1) as pool:
            with pytest.raises(TargetError, match=r"line break") as info:
                await pool.render("http://127.0.0.2:9/", headers={"Cookie": "a\r\nX-Evil: 1"})

        assert 400 == info.value.status


@pytest.mark.slow
@needs_chromium
class TestLimits:
    @pytest.mark.parametrize(
        ("pool_seconds", "call_seconds"), [(3.0, None), (30.0, 3.0)], ids=["pool", "call"]
    )
    async def test_a_page_that_never_stops_loading_is_killed_at_the_time_limit(
        self, pool_seconds: float, call_seconds: float | None
    ) -> None:
        """A page whose network never gets quiet fails at the time limit (render_seconds, or a
        shorter one the caller gives) with a hint, its browser is killed, and the pool goes on
        serving other pages."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1, seconds=pool_seconds) as pool,
        ):
            site.route("/", html_page(SPA))
            site.route("/forever", html_page(SPA.replace(b"</body>", b'<img src="/never"></body>')))
            site.route("/never", Reply(silent=True))
            with pytest.raises(
                TargetError, match=r"^the page did not finish rendering within 3 s$"
            ) as info:
                await pool.render(site.url("/forever"), seconds=call_seconds)
            page = await pool.render(site.url("/"), wait_for="#ready")
            stats = pool.statistics()

        assert 504 == info.value.status
        assert "wait_for" in info.value.hint
        assert "Rendered by a script" in page.html
        assert 1 == stats.killed

    async def test_a_cancelled_render_kills_its_browser_and_the_pool_goes_on(self) -> None:
        """A caller that gives up mid-page (its deadline) leaves no browser stuck in the page:
        the next render gets a fresh one."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1) as pool,
        ):
            site.route("/", html_page(SPA))
            site.route("/never", Reply(silent=True))
            with trio.move_on_after(2) as gave_up:
                await pool.render(site.url("/never"))
            page = await pool.render(site.url("/"))
            stats = pool.statistics()

        assert gave_up.cancelled_caught
        assert "Rendered by a script" in page.html
        assert 1 == stats.killed
        assert 1 == stats.renderers

    async def test_a_page_that_allocates_without_bound_is_killed_at_the_memory_limit(
        self,
    ) -> None:
        """A page that keeps allocating fails once its browser holds render_memory, and the
        pool goes on serving other pages."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1, memory=512 * 2**20, seconds=30) as pool,
        ):
            site.route("/", html_page(SPA))
            site.route(
                "/bomb",
                html_page(
                    b"""<script>
const keep = [];
(function grow() {
  for (let i = 0; i < 64; i++) keep.push(new Uint8Array(4 * 2**20).fill(7));
  setTimeout(grow, 0);
})();
</script>"""
                ),
            )
            with pytest.raises(TargetError, match=r"^the page used more than 512 MiB") as info:
                await pool.render(site.url("/bomb"), wait_for="#never-there")
            page = await pool.render(site.url("/"))

        assert 422 == info.value.status
        assert "without render" in info.value.hint
        assert "Rendered by a script" in page.html


class TestSettings:
    async def test_a_missing_chromium_names_the_package(self) -> None:
        """Without Chromium a render fails with a hint naming Debian's chromium package."""
        async with open_render_pool(executable="/nonexistent/chromium") as pool:
            with pytest.raises(TargetError, match=r"needs Chromium") as info:
                await pool.render("https://example.com/")

        assert 501 == info.value.status
        assert "apt-get install chromium" in info.value.hint

    async def test_a_browser_that_does_not_start_fails_the_render_with_a_hint(self) -> None:
        """A browser that exits at once (here /bin/false) fails the render with a 502 naming
        the cause, instead of hanging; the pool keeps no renderer for it."""
        async with open_render_pool(executable="/bin/false") as pool:
            with pytest.raises(TargetError, match=r"^the browser did not start") as info:
                await pool.render("https://example.com/")
            stats = pool.statistics()

        assert 502 == info.value.status
        assert "chromium" in info.value.hint
        assert 0 == stats.renderers

    @pytest.mark.parametrize(
        ("settings", "message"),
        [
            ({"workers": 0}, r"^render_workers must be an integer >= 1 \(got 0\)$"),
            ({"seconds": 0.0}, r"^render_seconds must be a finite number > 0 \(got 0.0\)$"),
            ({"memory": 2**20}, r"^render_memory must be at least 268435456 bytes"),
        ],
    )
    async def test_settings_out_of_range_name_the_setting(
        self, settings: dict[str, float], message: str
    ) -> None:
        """A setting out of range is a ValueError that names it."""
        with pytest.raises(ValueError, match=message):
            async with open_render_pool(**settings):  # type: ignore[arg-type]
                pass  # pragma: no cover

    async def test_a_refused_url_fails_before_any_browser_starts(self) -> None:
        """The guard's pre-check runs first: a private literal address is a 400."""
        async with open_render_pool() as pool:
            with pytest.raises(TargetError) as info:
                await pool.render("http://10.0.0.1/")

            assert 0 == pool.statistics().renderers

        assert 400 == info.value.status


class TestDevToolsPipe:
    """The client end of the browser's pipe: answers and events routed, every message bounded."""

    @staticmethod
    async def answer_first_command(
        to_browser: trio.abc.ReceiveStream, from_browser: trio.abc.SendStream, reply: bytes
    ) -> None:
        command = json.loads((await to_browser.receive_some()).rstrip(b"\0"))
        await from_browser.send_all(reply.replace(b"ID", str(command["id"]).encode()))

    async def test_answers_and_events_are_routed_across_chunks(self) -> None:
        """An answer split over several writes reaches its caller, and a session's event that
        shares a write with it reaches that session's channel."""
        to_send, to_browser = trio.testing.memory_stream_one_way_pair()
        from_browser, to_receive = trio.testing.memory_stream_one_way_pair()
        async with (
            open_cdp(to_send, to_receive, max_message_bytes=1024) as cdp,
            trio.open_nursery() as nursery,
        ):
            events = cdp.events("S1")

            async def browser() -> None:
                command = json.loads((await to_browser.receive_some()).rstrip(b"\0"))
                answer = json.dumps({"id": command["id"], "result": {"ok": True}}).encode()
                event = json.dumps({"sessionId": "S1", "method": "Page.x", "params": {}}).encode()
                await from_browser.send_all(answer[:5])
                await from_browser.send_all(answer[5:] + b"\0" + event + b"\0")

            nursery.start_soon(browser)
            result = await cdp.call("Browser.getVersion")
            event = await events.receive()

        assert {"ok": True} == result
        assert "Page.x" == event["method"]

    @pytest.mark.parametrize(
        "reply", [b"x" * 2000, b"{not json}\0"], ids=["over the size limit", "not JSON"]
    )
    async def test_a_bad_message_ends_the_connection(self, reply: bytes) -> None:
        """A message over max_message_bytes, or one that is not JSON, ends the connection:
        the waiting call fails instead of hanging, and so does every later one."""
        to_send, to_browser = trio.testing.memory_stream_one_way_pair()
        from_browser, to_receive = trio.testing.memory_stream_one_way_pair()
        async with (
            open_cdp(to_send, to_receive, max_message_bytes=1024) as cdp,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(self.answer_first_command, to_browser, from_browser, reply)
            with pytest.raises(CdpClosed):
                await cdp.call("Browser.getVersion")
            with pytest.raises(CdpClosed):
                await cdp.call("Browser.getVersion")

        assert cdp.closed

    async def test_an_error_answer_is_a_cdp_error(self) -> None:
        """A command the browser refuses raises CdpError with the browser's message."""
        to_send, to_browser = trio.testing.memory_stream_one_way_pair()
        from_browser, to_receive = trio.testing.memory_stream_one_way_pair()
        reply = b'{"id": ID, "error": {"message": "No target with given id"}}\0'
        async with (
            open_cdp(to_send, to_receive, max_message_bytes=1024) as cdp,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(self.answer_first_command, to_browser, from_browser, reply)
            with pytest.raises(CdpError, match=r"^No target with given id$"):
                await cdp.call("Target.attachToTarget")
