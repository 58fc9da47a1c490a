"""A target's request headers: the allowed ones reach the site, credentials only its origin.

The sites are local servers on 127.0.0.1 and 127.0.0.2 (two origins) that record every request's
headers; the fetcher may reach loopback. Credentials come in as the HTTP API stores them: sealed
into the process's memory (``trio_batch._headers.SECRETS``), a reference in the options.
"""

from __future__ import annotations

import logging

import pytest
import trio

from tests.support import LocalSite, Reply, redirect, serve_site
from tests.web.support import CALLER, LOOPBACK, TEXT
from trio_batch import Options, Target, TargetError
from trio_batch._headers import SECRET_MARK, SECRETS, HeaderSecrets
from trio_batch._sealing import SealingKeys
from trio_batch.stores import MemoryStore
from trio_batch.web import DEFAULT_USER_AGENT, WebFetcher, validate_options

COOKIE = "session=cookie-value-7f3a9"
BEARER = "Bearer token-value-5c1e2"
URL = "https://a.test/"
OK = Reply(body=b"ok", headers=TEXT)
"""What a routed page answers."""


@pytest.fixture
async def site(nursery: trio.Nursery) -> LocalSite:
    """The target's site, on 127.0.0.1."""
    return await serve_site(nursery, "127.0.0.1")


@pytest.fixture
async def other(nursery: trio.Nursery) -> LocalSite:
    """Another origin, on 127.0.0.2."""
    return await serve_site(nursery, "127.0.0.2")


def sealed(url: str, **headers: str) -> Target:
    """A target as the HTTP API stores it: credentials sealed, names canonical."""
    raw = {name.replace("_", "-"): value for name, value in headers.items()}
    return Target(url, Options(headers=SECRETS.seal(CALLER.name, raw, url=url)))


class TestAllowedHeaders:
    async def test_allowed_headers_reach_the_site(self, site: LocalSite) -> None:
        """Accept, Accept-Language, Referer, Cookie and Authorization arrive as sent."""
        site.route("/page", OK)
        target = sealed(
            site.url("/page"),
            Accept="text/plain",
            Accept_Language="fr-CH, fr;q=0.9",
            Referer="https://example.org/from",
            Cookie=COOKIE,
            Authorization=BEARER,
        )
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, target)
        [got] = site.headers_of("/page")

        assert "text/plain" == got["accept"]
        assert "fr-CH, fr;q=0.9" == got["accept-language"]
        assert "https://example.org/from" == got["referer"]
        assert COOKIE == got["cookie"]
        assert BEARER == got["authorization"]

    async def test_a_user_agent_is_appended_to_ours(self, site: LocalSite) -> None:
        """The caller's User-Agent follows ours: the site always knows who fetches."""
        site.route("/page", OK)
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, sealed(site.url("/page"), User_Agent="my-agent/2.0"))
        [got] = site.headers_of("/page")

        assert f"{DEFAULT_USER_AGENT} my-agent/2.0" == got["user-agent"]

    async def test_a_stored_credential_is_a_reference_not_the_value(self) -> None:
        """What the store keeps of a sealed target has no credential value in it."""
        stored = sealed("https://a.test/", Cookie=COOKIE, Accept_Language="de").options.to_json()

        assert COOKIE not in str(stored)
        headers = stored["headers"]
        assert isinstance(headers, dict)
        assert "de" == headers["Accept-Language"]
        assert str(headers["Cookie"]).startswith("<secret ")

    async def test_a_credential_no_longer_held_fails_without_a_request(
        self, site: LocalSite
    ) -> None:
        """A reference this process does not hold (a restart, another instance): a 410 with
        a hint to submit again, and the site is never asked without it."""
        site.route("/page", OK)
        elsewhere = HeaderSecrets()  # another process's memory
        headers = elsewhere.seal(CALLER.name, {"Cookie": COOKIE}, url=site.url("/page"))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(site.url("/page"), Options(headers=headers)))

        assert 410 == info.value.status
        assert "submit the job again" in info.value.hint
        assert [] == site.seen

    async def test_another_callers_reference_is_not_honoured(self, site: LocalSite) -> None:
        """A reference sealed for one caller does not unlock its value for another."""
        site.route("/page", OK)
        target = sealed(site.url("/page"), Cookie=COOKIE)
        async with WebFetcher(allow=LOOPBACK) as fetch:
            with pytest.raises(TargetError):
                await fetch(CALLER.__class__("mallory"), target)

        assert [] == site.seen


class TestSealedWithKeys:
    """With a fleet's secrets key (``serve --secrets-key-file``) the store holds the value
    encrypted, and any process with the key opens it at fetch time."""

    async def test_the_longest_credential_reaches_the_site(self, site: LocalSite) -> None:
        """A 4,096-character value, stored sealed (longer than 4,096), is sent whole."""
        pytest.importorskip("cryptography")
        site.route("/page", OK)
        longest = "Bearer " + "t" * (4096 - len("Bearer "))
        with SECRETS.keyed(SealingKeys([b"k" * 32])):
            target = sealed(site.url("/page"), Authorization=longest)
            async with WebFetcher(allow=LOOPBACK) as fetch:
                await fetch(CALLER, target)
        [got] = site.headers_of("/page")

        assert 4096 < len(target.options.headers["Authorization"])
        assert longest == got["authorization"]

    async def test_a_key_this_process_lacks_fails_without_a_request(self, site: LocalSite) -> None:
        """Sealed with a key this process does not have: 410 naming the key file, and the
        site is never asked without it."""
        pytest.importorskip("cryptography")
        site.route("/page", OK)
        with SECRETS.keyed(SealingKeys([b"a" * 32])):
            target = sealed(site.url("/page"), Cookie=COOKIE)
        with SECRETS.keyed(SealingKeys([b"b" * 32])):
            async with WebFetcher(allow=LOOPBACK) as fetch:
                with pytest.raises(TargetError) as info:
                    await fetch(CALLER, target)

        assert 410 == info.value.status
        assert "--secrets-key-file" in info.value.msg
        assert [] == site.seen


class TestCredentialsStayHome:
    async def test_not_sent_after_a_redirect_to_another_origin(
        self, site: LocalSite, other: LocalSite
    ) -> None:
        """A redirect to 127.0.0.2 gets neither Cookie nor Authorization; Accept-Language
        goes on."""
        site.route("/page", redirect(other.url("/landing")))
        other.route("/landing", OK)
        target = sealed(
            site.url("/page"), Cookie=COOKIE, Authorization=BEARER, Accept_Language="fr"
        )
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, target)
        [there] = other.headers_of("/landing")

        assert COOKIE == site.headers_of("/page")[0]["cookie"]
        assert "cookie" not in there
        assert "authorization" not in there
        assert "fr" == there["accept-language"]

    async def test_not_sent_back_home_after_leaving(
        self, site: LocalSite, other: LocalSite
    ) -> None:
        """Once a redirect left the origin, a redirect back to it carries no credential."""
        site.route("/page", redirect(other.url("/bounce")))
        other.route("/bounce", redirect(site.url("/back")))
        site.route("/back", OK)
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, sealed(site.url("/page"), Cookie=COOKIE))

        assert "cookie" not in site.headers_of("/back")[0]

    async def test_another_port_is_another_origin(
        self, site: LocalSite, nursery: trio.Nursery
    ) -> None:
        """Same host, another port: no credential."""
        second = await serve_site(nursery, "127.0.0.1")
        site.route("/page", redirect(second.url("/landing")))
        second.route("/landing", OK)
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, sealed(site.url("/page"), Authorization=BEARER))

        assert "authorization" not in second.headers_of("/landing")[0]

    async def test_kept_on_a_redirect_within_the_origin(self, site: LocalSite) -> None:
        """A redirect to another path of the same origin still carries them."""
        site.route("/page", redirect(site.url("/moved")))
        site.route("/moved", OK)
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, sealed(site.url("/page"), Cookie=COOKIE))

        assert COOKIE == site.headers_of("/moved")[0]["cookie"]

    async def test_robots_txt_gets_none(self, site: LocalSite) -> None:
        """Obeying robots.txt reads it without the target's headers."""
        site.route("/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n", headers=TEXT))
        site.route("/page", OK)
        target = sealed(site.url("/page"), Cookie=COOKIE)
        target = Target(target.url, Options(headers=target.options.headers, robots=True))
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, target)

        assert "cookie" not in site.headers_of("/robots.txt")[0]
        assert COOKIE == site.headers_of("/page")[0]["cookie"]


class TestCache:
    async def test_a_target_with_a_cookie_bypasses_the_cache(self, site: LocalSite) -> None:
        """Two fetches of one URL with a cookie both reach the site (and none is kept)."""
        site.route("/page", OK)
        store = MemoryStore()
        async with WebFetcher(allow=LOOPBACK, store=store) as fetch:
            first = await fetch(CALLER, sealed(site.url("/page"), Cookie=COOKIE))
            second = await fetch(CALLER, sealed(site.url("/page"), Cookie=COOKIE))

        assert 2 == len(site.headers_of("/page"))
        assert first.meta["cached"] is False
        assert second.meta["cached"] is False

    async def test_without_credentials_the_cache_serves(self, site: LocalSite) -> None:
        """The control: the same URL with Accept-Language alone is served from the cache."""
        site.route("/page", OK)
        async with WebFetcher(allow=LOOPBACK, store=MemoryStore()) as fetch:
            await fetch(CALLER, sealed(site.url("/page"), Accept_Language="fr"))
            second = await fetch(CALLER, sealed(site.url("/page"), Accept_Language="fr"))

        assert 1 == len(site.headers_of("/page"))
        assert second.meta["cached"] is True


class TestLogs:
    async def test_no_credential_in_any_log_record(
        self, site: LocalSite, other: LocalSite, caplog: pytest.LogCaptureFixture
    ) -> None:
        """At DEBUG, on every logger (httpx and httpcore included), no record holds a value,
        whether the fetch succeeds, redirects or fails."""
        site.route("/page", redirect(other.url("/landing")))
        other.route("/landing", OK)
        caplog.set_level(logging.DEBUG)
        async with WebFetcher(allow=LOOPBACK) as fetch:
            await fetch(CALLER, sealed(site.url("/page"), Cookie=COOKIE, Authorization=BEARER))
            with pytest.raises(TargetError):
                await fetch(CALLER, sealed(site.url("/missing"), Cookie=COOKIE))
            logging.getLogger("test").debug("options: %r", sealed(site.url("/"), Cookie=COOKIE))
        text = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)

        assert caplog.records
        assert "cookie-value" not in text
        assert "token-value" not in text


class TestRefused:
    @pytest.mark.parametrize(
        ("headers", "named", "words"),
        [
            ({"X-Forwarded-For": "1.2.3.4"}, "headers.X-Forwarded-For", "is not a header"),
            ({"Host": "internal"}, "headers.Host", "is not a header"),
            ({"Accept": "a\r\nX-Evil: 1"}, "headers.Accept", "line break"),
            ({"Cookie": "a\nb"}, "headers.Cookie", "line break"),
            ({"Referer": "a\x00b"}, "headers.Referer", "control"),
            ({"Accept-Language": "fr" * 3000}, "headers.Accept-Language", "the limit is 4,096"),
            ({"Cookie": "a", "cookie": "b"}, "headers.cookie", "twice"),
            ({"Accept": ""}, "headers.Accept", "empty"),
            ({"Accept": " fr"}, "headers.Accept", "space"),
            ({f"X-{i}": "v" for i in range(1000)}, "headers has 1,000", "at most 6"),
        ],
    )
    def test_refused_with_the_header_named_and_a_hint(
        self, headers: dict[str, str], named: str, words: str
    ) -> None:
        """A name off the allow-list or a hostile value: a 400 naming it, never quoting it."""
        with pytest.raises(TargetError) as info:
            validate_options(Options(headers=headers))

        assert 400 == info.value.status
        assert info.value.msg.startswith(named)
        assert words in info.value.msg
        assert info.value.hint
        assert "X-Evil" not in info.value.msg

    def test_names_are_case_insensitive(self) -> None:
        """accept-language and COOKIE are the allowed headers, stored in canonical case."""
        options = Options(headers={"accept-language": "fr", "COOKIE": COOKIE})
        validate_options(options)
        stored = SECRETS.seal("agent", options.headers, url=URL)

        assert ["Accept-Language", "Cookie"] == list(stored)

    def test_options_never_show_a_credential(self) -> None:
        """An Options' repr (what a log line or a traceback would print) hides the value."""
        shown = repr(Options(headers={"Cookie": COOKIE}))

        assert COOKIE not in shown
        assert SECRET_MARK in shown


class TestHeld:
    def test_a_credential_goes_when_unused_for_keep_seconds(self) -> None:
        """Held ``keep`` seconds after its last use; past that, its target fails (410)."""
        now = [0.0]
        held = HeaderSecrets(keep=60.0, clock=lambda: now[0])
        sealed_headers = held.seal("agent", {"Cookie": COOKIE}, url=URL)
        now[0] = 59.0
        used = held.unseal("agent", sealed_headers, url=URL)  # a use holds it 60 s more
        now[0] = 118.0
        again = held.unseal("agent", sealed_headers, url=URL)
        now[0] = 179.0

        assert COOKIE == used["Cookie"] == again["Cookie"]
        with pytest.raises(TargetError) as info:
            held.unseal("agent", sealed_headers, url=URL)
        assert 410 == info.value.status
        assert 0 == len(held)

    def test_at_most_most_are_held(self) -> None:
        """Past ``most``, the least recently used credential goes first."""
        held = HeaderSecrets(most=2)
        first = held.seal("agent", {"Cookie": "a=1"}, url=URL)
        second = held.seal("agent", {"Cookie": "a=2"}, url=URL)
        held.unseal("agent", first, url=URL)
        held.seal("agent", {"Cookie": "a=3"}, url=URL)

        assert 2 == len(held)
        assert "a=1" == held.unseal("agent", first, url=URL)["Cookie"]
        with pytest.raises(TargetError):
            held.unseal("agent", second, url=URL)

    def test_one_reference_per_caller_and_value(self) -> None:
        """The same value of the same caller seals alike (a repeat reuses its job); another
        value or another caller does not."""
        held = HeaderSecrets()
        one = held.seal("agent", {"Cookie": COOKIE}, url=URL)

        assert one == held.seal("agent", {"cookie": COOKIE}, url=URL)
        assert one != held.seal("agent", {"Cookie": COOKIE + "x"}, url=URL)
        assert one != held.seal("other", {"Cookie": COOKIE}, url=URL)
        assert one != HeaderSecrets().seal("agent", {"Cookie": COOKIE}, url=URL)
