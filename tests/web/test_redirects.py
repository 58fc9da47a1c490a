"""Every way a redirect can fail is a failed target with a hint, never an internal error."""

from __future__ import annotations

import pytest

from tests.support import LocalSite, Reply, redirect
from tests.web.support import CALLER, LOOPBACK, TEXT
from trio_batch import Target, TargetError
from trio_batch.web import WebFetcher


class TestRedirectFailures:
    @pytest.mark.parametrize(
        ("location", "status", "fragment"),
        [
            ("https:x", 403, "the page redirects to a URL that cannot be fetched: the URL has no"),
            ("http://[::1", 502, "the site redirected to an invalid address"),
            ("http://a b/", 403, "the page redirects to a URL that cannot be fetched"),
            ("ftp://files.example/x", 403, "only http and https URLs can be fetched"),
            ("javascript:alert(1)", 403, "only http and https URLs can be fetched"),
            ("http://169.254.169.254/", 403, "private or otherwise non-public address"),
            ("http://user:pw@site.example/", 403, "carries credentials"),
            ("http://a:99999/", 403, "port 99999 is out of range"),
            ("https:", 403, "the URL has no host"),
        ],
    )
    async def test_a_bad_location_fails_the_target_with_a_hint(
        self, server: LocalSite, location: str, status: int, fragment: str
    ) -> None:
        """An unparsable Location, another scheme or a refused address: a 4xx/502 TargetError
        with a hint (before, httpx raised a bare InvalidURL for https:x: an internal error)."""
        server.route("/r", redirect(location))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/r")))

        assert status == info.value.status
        assert fragment in info.value.msg
        assert info.value.hint

    @pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
    async def test_odd_locations_read_as_paths_stay_on_the_site(
        self, server: LocalSite, code: int
    ) -> None:
        """http:127.0.0.1:8/ is a relative reference (a path on the same site), as httpx and
        browsers read it: the fetch stays on the site, whatever the redirect code."""
        server.route("/r", Reply(code, headers=[("location", "http:127.0.0.1:8/")]))
        server.route("/127.0.0.1:8/", Reply(body=b"same site", headers=TEXT))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            result = await fetch(CALLER, Target(server.url("/r")))

        assert result.content == "same site"
        assert result.meta["redirects"] == 1

    async def test_a_3xx_without_location_is_a_502(self, server: LocalSite) -> None:
        """A redirect status without a Location has nothing to read: 502 with a hint."""
        server.route("/r", Reply(302, body=b"moved somewhere", headers=TEXT))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/r")))

        assert (502, "the site answered 302 Found, which has no content to read") == (
            info.value.status,
            info.value.msg,
        )
        assert info.value.hint
