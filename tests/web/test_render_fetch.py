"""Targets with ``render``: the web fetcher loads them in Chromium and shapes the rendered DOM.

The browser tests start a real Chromium (skipped when ``/usr/bin/chromium`` is missing) and
serve pages from 127.0.0.2, the one address the guard allows; 127.0.0.3 plays the private
address, and a listener there counts every connection that reaches it.
"""

from __future__ import annotations

import pytest
import trio

from tests.support import open_site, redirect, wait_ended
from tests.web.support import (
    ALLOW,
    ALLOWED_HOST,
    CALLER,
    SPA,
    html_page,
    needs_chromium,
    open_counting_listener,
)
from trio_batch import Config, JobStatus, Options, Target, TargetError, TargetState, open_engine
from trio_batch.stores import MemoryStore
from trio_batch.web import WebFetcher, validate_options

LATE = b"""<!doctype html><html><body><div id="app">Loading...</div>
<script>
setTimeout(() => {
  document.getElementById("app").innerHTML = '<p id="late">Written late</p>';
}, 600);
</script></body></html>"""
"""A page whose content comes 0.6 s after load: network idle (0.5 s quiet) is taken before it."""


def rendered(url: str, **options: object) -> Target:
    return Target(url, Options(render=True, **options))  # type: ignore[arg-type]


@pytest.mark.slow
@needs_chromium
class TestRenderedTargets:
    async def test_a_single_page_app_needs_render(self) -> None:
        """Without render the app says Loading...; with it, the text its script wrote."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1) as fetch,
        ):
            site.route("/", html_page(SPA))
            plain = await fetch(CALLER, Target(site.url("/")))
            page = await fetch(CALLER, rendered(site.url("/")))

        assert "Loading..." in plain.content
        assert "Rendered by a script" not in plain.content
        assert "Rendered by a script" in page.content
        assert "Loading..." not in page.content
        assert page.meta["rendered"] is True
        assert page.meta["settled"] is True
        assert (200, "text/html", False) == (
            page.meta["status"],
            page.meta["content_type"],
            page.meta["cached"],
        )

    async def test_markdown_of_the_rendered_dom(self) -> None:
        """The rendered DOM goes through the usual shaper: mode=markdown gives a heading."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1) as fetch,
        ):
            site.route("/", html_page(SPA))
            page = await fetch(CALLER, rendered(site.url("/"), mode="markdown"))

        assert "# Rendered by a script" in page.content

    async def test_wait_for_waits_for_the_selector(self) -> None:
        """With wait_for the DOM is taken once the selector matches, after network idle."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1) as fetch,
        ):
            site.route("/", html_page(LATE))
            page = await fetch(CALLER, rendered(site.url("/"), wait_for="#late"))

        assert "Written late" in page.content

    async def test_a_redirect_to_a_private_address_is_refused(self) -> None:
        """A page that redirects to a forbidden address fails 403; nothing reaches it."""
        async with (
            open_counting_listener() as private,
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1) as fetch,
        ):
            to = f"http://{private.host}:{private.port}/"
            site.route("/", redirect(to))
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, rendered(site.url("/")))

        assert 403 == info.value.status
        assert 0 == private.connections

    async def test_an_error_status_fails_as_a_fetch_does(self) -> None:
        """The page's own HTTP status maps to the error a plain fetch gets (404 keeps it)."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1) as fetch,
        ):
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, rendered(site.url("/missing")))

        assert 404 == info.value.status

    async def test_a_cookie_reaches_the_page_origin_only(self) -> None:
        """render + headers: the Cookie goes to the target's origin, not to another origin's
        subresource (a second site, on another port)."""
        async with (
            open_site(ALLOWED_HOST) as site,
            open_site(ALLOWED_HOST) as other,
            WebFetcher(allow=ALLOW, render_workers=1) as fetch,
        ):
            html = f'<html><body><p>hi</p><img src="{other.url("/pixel.png")}"></body></html>'
            site.route("/", html_page(html.encode()))
            other.route("/pixel.png", html_page(b"", headers=[("content-type", "image/png")]))
            target = Target(
                site.url("/"), Options(render=True, headers={"Cookie": "session=abc123"})
            )
            await fetch(CALLER, target)

        [page] = [seen for seen in site.seen if seen.path == "/"]
        [pixel] = [seen for seen in other.seen if seen.path == "/pixel.png"]
        assert "session=abc123" == page.headers.get("cookie")
        assert "trio-batch" in page.headers.get("user-agent", "")
        assert "cookie" not in pixel.headers

    async def test_a_rendered_target_is_never_cached(self) -> None:
        """Two renders of one page load it twice: no response cache read or written."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(store=MemoryStore(), allow=ALLOW, render_workers=1) as fetch,
        ):
            site.route("/", html_page(SPA))
            await fetch(CALLER, rendered(site.url("/")))
            again = await fetch(CALLER, rendered(site.url("/")))

        assert 2 == site.paths().count("/")
        assert again.meta["cached"] is False

    async def test_a_job_of_rendered_targets_ends_done(self) -> None:
        """Through the engine: a job with render ends done with the rendered content."""
        store = MemoryStore()
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(store=store, allow=ALLOW, render_workers=1) as fetch,
            open_engine(store, fetch, Config()) as engine,
        ):
            site.route("/", html_page(SPA))
            submitted = await engine.submit(CALLER, "fleet", [rendered(site.url("/"))])
            with trio.fail_after(60):
                await wait_ended(engine, submitted.id)
            snapshot = await engine.status(submitted.id)

        assert snapshot is not None
        assert JobStatus.DONE == snapshot.job.status
        [target] = snapshot.targets
        assert TargetState.DONE == target.status
        assert target.result is not None
        assert "Rendered by a script" in target.result.content


class TestWithoutChromium:
    async def test_a_missing_chromium_is_a_501_naming_the_package(self) -> None:
        """No browser installed: the render fails with a hint to install Debian's chromium."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_executable="/nonexistent/chromium") as fetch,
        ):
            site.route("/", html_page(SPA))
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, rendered(site.url("/")))

        assert 501 == info.value.status
        assert "apt-get install chromium" in info.value.hint
        assert [] == site.paths()

    def test_render_settings_are_checked(self) -> None:
        """A render setting out of range is a ValueError naming it."""
        with pytest.raises(ValueError, match="render_workers"):
            WebFetcher(render_workers=0)
        with pytest.raises(ValueError, match="render_memory"):
            WebFetcher(render_memory=2**20)


class TestSubmitChecks:
    def test_render_must_be_a_bool(self) -> None:
        """``Options.render`` is a bool; anything else is a TypeError naming the type."""
        with pytest.raises(TypeError, match=r"^Options.render must be a bool \(got str\)$"):
            Options(render="yes")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (Options(wait_for="#app"), "^wait_for applies with render only$"),
            (Options(render=True, wait_for="x" * 1025), "^wait_for is 1,025 characters"),
            (Options(render=True, wait_for="x" * 5000), "^wait_for is 5,000 characters"),
            (Options(render=True, wait_for="#a\n#b"), "^wait_for holds a control character"),
            (Options(render=True, wait_for="#a\x00"), "^wait_for holds a control character"),
            (Options(render=True, wait_for="   "), "^wait_for is blank$"),
            (Options(render=True, wait_for="\ud800"), "^wait_for is not valid Unicode"),
            (Options(render=True, jq="."), "^render and jq cannot be used together"),
            (Options(render=True, pages="1"), "^render and pages cannot be used together"),
            (Options(render=True, recover=True), "^render and recover cannot be used together"),
        ],
    )
    def test_a_bad_render_option_is_a_400_with_a_hint(self, options: Options, message: str) -> None:
        """A render option out of its range is a 400 TargetError with a hint."""
        with pytest.raises(TargetError, match=message) as info:
            validate_options(options)

        assert 400 == info.value.status
        assert info.value.hint

    def test_good_render_options_pass(self) -> None:
        """``render`` with a CSS ``wait_for`` and any mode passes the checks."""
        validate_options(Options(render=True))
        validate_options(Options(render=True, wait_for="main article > h1", mode="markdown"))

    def test_defaults_leave_the_stored_options_as_they_were(self) -> None:
        """render and wait_for at their defaults add nothing to the options' JSON, so the
        idempotency keys of jobs stored before them stay the same."""
        assert {"mode": "text"} == Options(mode="text").to_json()
        assert {"render": True, "wait_for": "#a"} == Options(render=True, wait_for="#a").to_json()
