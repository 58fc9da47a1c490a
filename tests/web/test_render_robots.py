"""Rendered pages obey robots.txt (issue 36, item 1), and refused frames, forms and
refreshes end the render soon (item 11).

A real Chromium (skipped when ``/usr/bin/chromium`` is missing) loads pages from 127.0.0.2,
the address the guard allows (127.0.0.4 too where a second site is needed); 127.0.0.3 plays
the private address. Each render here ends in a few seconds: the old failures ran to the
render limit, which these tests set far above that (``RENDER_SECONDS``) so that a render that
does not end early fails the bound on its own.
"""

from __future__ import annotations

import ipaddress

import pytest
import trio

from tests.support import LocalSite, open_site, redirect
from tests.web.support import (
    ALLOW,
    ALLOWED_HOST,
    CALLER,
    html_page,
    needs_chromium,
    open_counting_listener,
)
from trio_batch import Options, Target, TargetError
from trio_batch.web import WebFetcher
from trio_batch.web._render._pool import open_render_pool

RENDER_SECONDS = 60.0
"""The render limit of these tests; a render that ran into it would fail the test's bound."""
SOON = 20.0
"""The most a render that ends by itself may take here (the browser's start included, on a
loaded machine); far under ``RENDER_SECONDS``."""
ROBOTS = b"User-agent: *\nDisallow: /private\n"
SECRET_PAGE = b"""<!doctype html><html><head><title>home</title>
<script src="/private/app.js"></script></head><body><p>public text</p>
<img src="/private/pixel.png">
<div id="out"></div>
<script>
fetch("/private/data.json").then((r) => r.text()).then((t) => {
  document.getElementById("out").textContent = t;
}).catch(() => {}).finally(() => {
  document.body.insertAdjacentHTML("beforeend", '<p id="done">done</p>');
});
</script></body></html>"""


PAGES = {
    "iframe": '<p>hi</p><iframe src="REFUSED"></iframe>',
    "form": (
        '<p>hi</p><iframe name="f"></iframe><form id="x" method="post" action="REFUSED" '
        'target="f"><input name="a" value="1"></form>'
        '<script>document.getElementById("x").submit();</script>'
    ),
    "refresh-self": '<meta http-equiv="refresh" content="0"><p>hi</p>',
    "refresh-other": '<meta http-equiv="refresh" content="0;url=/b"><p>hi</p>',
}
"""Pages that used to hold a browser to the render limit (REFUSED: a refused address)."""


def rendered(url: str, **options: object) -> Target:
    return Target(url, Options(render=True, **options))  # type: ignore[arg-type]


def robots_site_pages(site: LocalSite) -> None:
    """The site's robots.txt (disallowing /private) and a page that asks for three private parts."""
    site.route("/robots.txt", html_page(ROBOTS, headers=[("content-type", "text/plain")]))
    site.route("/", html_page(SECRET_PAGE))
    site.route(
        "/private/app.js",
        html_page(
            b'document.title = "js ran: secret script";',
            headers=[("content-type", "text/javascript")],
        ),
    )
    site.route(
        "/private/data.json",
        html_page(b'"secret data"', headers=[("content-type", "application/json")]),
    )
    site.route("/private/pixel.png", html_page(b"", headers=[("content-type", "image/png")]))


@pytest.mark.slow
@needs_chromium
class TestRobotsInTheBrowser:
    async def test_disallowed_scripts_xhr_and_images_are_never_requested(self) -> None:
        """robots on: the page's disallowed script, fetch and image never leave the browser,
        nothing of theirs reaches the result, and meta counts them."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1, render_seconds=RENDER_SECONDS) as fetch,
        ):
            robots_site_pages(site)
            with trio.fail_after(SOON):
                page = await fetch(CALLER, rendered(site.url("/"), robots=True, wait_for="#done"))

        assert "public text" in page.content
        assert "secret" not in page.content
        assert "secret" not in str(page.meta.get("title", ""))
        assert not any(path.startswith("/private") for path in site.paths())
        assert page.meta["disallowed"] == 3

    async def test_without_robots_the_same_page_loads_everything(self) -> None:
        """robots off: the same page loads its private parts (the test's control)."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(allow=ALLOW, render_workers=1, render_seconds=RENDER_SECONDS) as fetch,
        ):
            robots_site_pages(site)
            with trio.fail_after(SOON):
                page = await fetch(CALLER, rendered(site.url("/"), wait_for="#done"))

        assert "secret data" in page.content
        assert "/private/data.json" in site.paths()
        assert "disallowed" not in page.meta

    async def test_a_redirect_of_the_page_into_a_disallowed_path_fails_403(self) -> None:
        """The target redirects to a path robots.txt disallows: 403, the path never asked."""
        async with (
            open_site(ALLOWED_HOST) as site,
            WebFetcher(
                allow=ALLOW, render_workers=1, render_seconds=RENDER_SECONDS, robots=True
            ) as fetch,
        ):
            robots_site_pages(site)
            site.route("/go", redirect(site.url("/private/x")))
            with trio.fail_after(SOON), pytest.raises(TargetError) as refused:
                await fetch(CALLER, rendered(site.url("/go")))

        assert 403 == refused.value.status
        assert "robots.txt disallows" in refused.value.msg
        assert "/private/x" not in site.paths()

    async def test_a_frame_of_another_site_obeys_its_own_robots_txt(self) -> None:
        """An iframe of another site (its own renderer process) asks that site's robots.txt,
        and its disallowed request is stopped in the browser, before the proxy."""
        both = [*ALLOW, ipaddress.ip_network("127.0.0.4/32")]
        async with (
            open_site(ALLOWED_HOST) as site,
            open_site("127.0.0.4") as other,
            open_render_pool(allow=both, workers=1, seconds=RENDER_SECONDS) as pool,
        ):
            other.route(
                "/frame.html",
                html_page(b'<p>frame</p><script>fetch("/private/x").catch(() => {});</script>'),
            )
            frame = other.url("/frame.html")
            site.route("/", html_page(f'<p>home</p><iframe src="{frame}"></iframe>'.encode()))
            asked: list[str] = []

            async def robots(url: str) -> str | None:
                asked.append(url)
                await trio.lowlevel.checkpoint()
                return "Disallow: /private" if "/private" in url else None

            with trio.fail_after(SOON):
                page = await pool.render(site.url("/"), robots=robots)
            [renderer] = pool._live
            proxied = renderer.proxy.statistics().disallowed

        assert other.url("/private/x") in asked
        assert "/private/x" not in other.paths()
        assert "/frame.html" in other.paths()
        assert 1 == page.disallowed
        assert 0 == proxied  # stopped by the page's own check


@pytest.mark.slow
@needs_chromium
class TestRefusedPartsEndTheRender:
    """Item 11 of issue 36: a refused subframe or navigation does not hold the render."""

    @pytest.mark.parametrize("kind", list(PAGES))
    async def test_the_render_ends_soon(self, kind: str) -> None:
        """A refused iframe, a form posted into one, or a meta refresh with no delay (to the
        page itself, or to another page) ends the render within seconds."""
        async with (
            open_counting_listener() as private,
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1, seconds=RENDER_SECONDS) as pool,
        ):
            refused = f"http://{private.host}:{private.port}/c"
            site.route("/", html_page(PAGES[kind].replace("REFUSED", refused).encode()))
            site.route("/b", html_page(b"<p>page b</p>"))
            with trio.fail_after(SOON):
                page = await pool.render(site.url("/"))

        assert 0 == private.connections
        assert page.settled
        assert ("page b" if kind == "refresh-other" else "hi") in page.html

    async def test_a_refresh_to_a_refused_address_fails_soon(self) -> None:
        """A meta refresh with no delay to a refused address: 403 within seconds, as a
        script's navigation there is."""
        async with (
            open_counting_listener() as private,
            open_site(ALLOWED_HOST) as site,
            open_render_pool(allow=ALLOW, workers=1, seconds=RENDER_SECONDS) as pool,
        ):
            refused = f"http://{private.host}:{private.port}/c"
            site.route(
                "/", html_page(f'<meta http-equiv="refresh" content="0;url={refused}">'.encode())
            )
            with trio.fail_after(SOON), pytest.raises(TargetError) as failed:
                await pool.render(site.url("/"))

        assert 403 == failed.value.status
        assert 0 == private.connections
