"""robots.txt as a site operator writes it and a user relies on it (RFC 9309, issue 23).

The parser is held to the RFC's own examples (§2.2.2, §2.2.3, §5) and to the precedence and
path-matching tables Google documents for its crawler; the cache to one request per origin
whatever the number of askers, its TTL on Trio's mock clock, its bound, and the status rules;
and both to hostile files, which must stay bounded in size and time (a hang is caught by
pytest-timeout, never by a timing assert).
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from trio_batch import RetryLater
from trio_batch.web._fetch._robots import (
    DEFAULT_MAX_CRAWL_DELAY,
    DEFAULT_TTL,
    MAX_ROBOTS_BYTES,
    PRODUCT_TOKEN,
    QUOTE_CHARS,
    UNREACHABLE_TTL,
    RobotsCache,
    RobotsCacheStatistics,
    RobotsVerdict,
    parse_robots,
    path_of,
    rules_for_status,
)

RFC_5_1 = b"""\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""


def allowed(body: bytes, path: str, agent: str = PRODUCT_TOKEN) -> bool:
    return parse_robots(body, agent=agent).check(path).allowed


def star(*lines: str) -> bytes:
    """A robots.txt of one ``*`` group with these rule lines."""
    return ("User-agent: *\n" + "\n".join(lines) + "\n").encode()


class TestRfcExamples:
    """RFC 9309 §5: the example files, read as the RFC's text says."""

    @pytest.mark.parametrize(
        ("agent", "path", "expected"),
        [
            # foobot: only its two allowed paths; the * group is not added to it.
            ("foobot", "/example/page.html", True),
            ("foobot", "/example/allowed.gif", True),
            ("foobot", "/example/other.html", False),
            ("foobot", "/", False),
            ("foobot", "/publications/x.html", False),
            # barbot and bazbot share one group.
            ("barbot", "/example/page.html", False),
            ("bazbot", "/example/page.html", False),
            ("bazbot", "/example/other.html", True),
            ("bazbot", "/a.gif", True),
            # quxbot's group is empty: everything is allowed, no fallback to *.
            ("quxbot", "/example/page.html", True),
            ("quxbot", "/a.gif", True),
            # Anyone else, us included, gets the * group.
            ("trio-batch", "/example/x", False),
            ("trio-batch", "/images/a.gif", False),
            ("trio-batch", "/a.gif?size=2", True),
            ("trio-batch", "/a.gif.bak", True),
            ("trio-batch", "/publications/a.gif", True),
            ("trio-batch", "/other", True),
        ],
    )
    def test_simple_example(self, agent: str, path: str, expected: bool) -> None:
        """§5.1: the named groups, the shared group, the empty group and the * fallback."""
        assert expected == allowed(RFC_5_1, path, agent)

    def test_longest_match(self) -> None:
        """§5.2: the longer Disallow beats the shorter Allow under it."""
        body = b"User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif"
        rules = parse_robots(body, agent="foobot")

        assert rules.check("/example/page/").allowed
        assert rules.check("/example/page/other.gif").allowed
        assert RobotsVerdict(False, "Disallow: /example/page/disallowed.gif") == rules.check(
            "/example/page/disallowed.gif"
        )

    def test_groups_with_one_agent_are_merged(self) -> None:
        """§2.2.1: two groups naming one agent are combined into one."""
        body = (
            b"user-agent: ExampleBot\ndisallow: /foo\ndisallow: /bar\n\n"
            b"user-agent: *\ndisallow: /qux\n\n"
            b"user-agent: ExampleBot\ndisallow: /baz\n"
        )
        rules = parse_robots(body, agent="examplebot")

        assert [False, False, False, True] == [
            rules.check(p).allowed for p in ("/foo", "/bar", "/baz", "/qux")
        ]

    def test_robots_txt_itself_is_always_allowed(self) -> None:
        """§2.2.2: /robots.txt is implicitly allowed, even under Disallow: /."""
        assert allowed(star("Disallow: /"), "/robots.txt")
        assert not allowed(star("Disallow: /"), "/robots.txt.bak")


class TestGoogleExamples:
    """Google's documented order of precedence and path matching tables."""

    @pytest.mark.parametrize(
        ("url", "rules", "decider"),
        [
            ("/page", ["allow: /p", "disallow: /"], "Allow: /p"),
            ("/folder/page", ["allow: /folder", "disallow: /folder"], "Allow: /folder"),
            ("/page.htm", ["allow: /page", "disallow: /*.htm"], "Disallow: /*.htm"),
            ("/page.php5", ["allow: /page", "disallow: /*.ph"], "Allow: /page"),
            ("/", ["allow: /$", "disallow: /"], "Allow: /$"),
            ("/page.htm", ["allow: /$", "disallow: /"], "Disallow: /"),
        ],
    )
    def test_order_of_precedence(self, url: str, rules: list[str], decider: str) -> None:
        """The most specific rule wins; on a tie, the least restrictive (Allow)."""
        for order in (rules, rules[::-1]):
            verdict = parse_robots(star(*order)).check(url)

            assert decider == verdict.rule
            assert decider.startswith("Allow") == verdict.allowed

    @pytest.mark.parametrize(
        ("pattern", "matched", "unmatched"),
        [
            ("/", ["/", "/a", "/a/b?c"], []),
            ("/*", ["/", "/a"], []),
            ("/$", ["/"], ["/a", "/?a"]),
            (
                "/fish",
                ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fish.php?id=x"],
                ["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"],
            ),
            ("/fish*", ["/fish", "/fish.html", "/fishheads/yummy.html"], ["/Fish.asp", "/catfish"]),
            (
                "/fish/",
                ["/fish/", "/fish/?id=anything", "/fish/salmon.htm"],
                ["/fish", "/fish.html", "/animals/fish/", "/Fish/Salmon.asp"],
            ),
            (
                "/*.php",
                ["/index.php", "/folder/filename.php?parameters", "/folder/any.php.file.html"],
                ["/", "/windows.PHP"],
            ),
            (
                "/*.php$",
                ["/filename.php", "/folder/filename.php"],
                ["/filename.php?parameters", "/filename.php/", "/filename.php5", "/windows.PHP"],
            ),
            (
                "/fish*.php",
                ["/fish.php", "/fishheads/catfish.php?parameters"],
                ["/Fish.PHP"],
            ),
        ],
    )
    def test_path_matching(self, pattern: str, matched: list[str], unmatched: list[str]) -> None:
        """A Disallow pattern blocks exactly the paths Google's table says it matches."""
        rules = parse_robots(star(f"Disallow: {pattern}"))

        assert [] == [p for p in matched if rules.check(p).allowed]
        assert [] == [p for p in unmatched if not rules.check(p).allowed]


class TestGroups:
    """Which group applies to us."""

    @pytest.mark.parametrize("line", ["trio-batch", "TRIO-BATCH", "Trio-Batch/0.1 (+https://x)"])
    def test_our_group_is_found_case_insensitively_by_product_token(self, line: str) -> None:
        """A group naming trio-batch in any case, or with a version, is ours and beats *."""
        body = f"User-agent: *\nDisallow: /\n\nUser-agent: {line}\nDisallow: /private/\n".encode()
        rules = parse_robots(body)

        assert rules.check("/public").allowed
        assert RobotsVerdict(False, "Disallow: /private/") == rules.check("/private/x")

    @pytest.mark.parametrize("line", ["trio", "batch", "trio-batcher", "trio_batch"])
    def test_other_tokens_are_not_ours(self, line: str) -> None:
        """Only the whole product token names us, not a part or a longer name."""
        body = f"User-agent: {line}\nAllow: /\n\nUser-agent: *\nDisallow: /x\n".encode()

        assert not allowed(body, "/x")

    def test_user_agent_lines_around_blank_lines_form_one_group(self) -> None:
        """A group is its user-agent lines up to the first rule, blank lines between them."""
        body = b"User-agent: trio-batch\n\n# ours too\nUser-agent: other\nDisallow: /x\n"

        assert not allowed(body, "/x")

    def test_a_rule_ends_the_user_agent_lines(self) -> None:
        """A user-agent line after a rule starts a new group."""
        body = b"User-agent: other\nDisallow: /x\nUser-agent: trio-batch\nDisallow: /y\n"
        rules = parse_robots(body)

        assert rules.check("/x").allowed
        assert not rules.check("/y").allowed

    def test_rules_outside_any_group_are_ignored(self) -> None:
        """Rules before the first user-agent line belong to no one."""
        assert allowed(b"Disallow: /\nUser-agent: other\nDisallow: /\n", "/x")

    def test_no_group_for_us_allows_everything(self) -> None:
        """No named group and no * group: no rule applies (§2.2.1)."""
        rules = parse_robots(b"User-agent: other\nDisallow: /\n")

        assert RobotsVerdict(True) == rules.check("/x")
        assert 0 == len(rules)

    def test_empty_file_and_empty_disallow_allow_everything(self) -> None:
        """An empty file, or 'Disallow:' with no path, forbids nothing."""
        assert allowed(b"", "/x")
        assert allowed(star("Disallow:"), "/x")

    def test_keys_are_case_insensitive_and_misspellings_read(self) -> None:
        """'USER-AGENT', 'disalow' and spaces around the colon are read as Google reads them."""
        body = b"USER-AGENT :  *  \nDISALOW\t:\t/a   # comment\nallow:/a/b\n"
        rules = parse_robots(body)

        assert not rules.check("/a").allowed
        assert rules.check("/a/b").allowed

    @pytest.mark.parametrize(("line", "starred"), [("*", True), ("* (all)", True), ("*bot", False)])
    def test_only_a_lone_star_is_the_star_group(self, line: str, starred: bool) -> None:
        """'*' (alone, or before blanks) is every crawler; '*bot' names no crawler of ours."""
        body = f"User-agent: {line}\nDisallow: /a\n".encode()

        assert starred != allowed(body, "/a")

    @pytest.mark.parametrize("agent", ["", "trio batch", "trio-batch/1.0", "bot2"])
    def test_a_bad_product_token_is_refused(self, agent: str) -> None:
        """Our own token must be one the RFC allows, or no group could ever name it."""
        with pytest.raises(ValueError, match=r"^a robots.txt product token is letters"):
            parse_robots(b"", agent=agent)


class TestPercentEncoding:
    """RFC 9309 §2.2.2-3: paths and patterns compared in one normal form."""

    @pytest.mark.parametrize(
        ("pattern", "url"),
        [
            ("/foo/bar?baz=quz", "/foo/bar?baz=quz"),
            ("/foo/bar?baz=https%3A%2F%2Ffoo.bar", "/foo/bar?baz=https%3A%2F%2Ffoo.bar"),
            ("/foo/bar/\u30c4", "/foo/bar/%E3%83%84"),
            ("/foo/bar/%E3%83%84", "/foo/bar/\u30c4"),
            ("/foo/bar/%e3%83%84", "/foo/bar/%E3%83%84"),
            ("/foo/bar/%62%61%7A", "/foo/bar/baz"),
            ("/foo/bar/baz", "/foo/bar/%62%61%7a"),
            ("/path/file-with-a-%2A.html", "https://www.example.com/path/file-with-a-*.html"),
            ("/path/foo-%24", "https://www.example.com/path/foo-$"),
            ("/a$b", "/a$b"),
        ],
    )
    def test_equivalent_spellings_match(self, pattern: str, url: str) -> None:
        """The RFC's tables: UTF-8, escapes of unreserved characters, and escaped '*' and '$'."""
        verdict = parse_robots(star(f"Disallow: {pattern}")).check(url)

        assert not verdict.allowed

    @pytest.mark.parametrize(
        ("pattern", "url"),
        [
            ("/foo/bar?baz=https://foo.bar", "/foo/bar?baz=https%3A%2F%2Ffoo.bar"),
            ("/path/file-with-a-%2A.html", "/path/file-with-a-x.html"),
            ("/a%2Fb", "/a/b"),
        ],
    )
    def test_reserved_escapes_stay_distinct(self, pattern: str, url: str) -> None:
        """An escaped reserved character is not its plain form (a %2F is not a path step)."""
        assert allowed(star(f"Disallow: {pattern}"), url)

    def test_paths_are_normalised_once(self) -> None:
        """The path of a URL: query kept, fragment dropped, '/' for an empty path."""
        assert "/" == path_of("https://example.com")
        assert "/a%20b?x=%C3%A9" == path_of("https://example.com/a b?x=\u00e9#frag")


class TestCrawlDelay:
    """Crawl-delay (not in the RFC) from the group that applies, capped, the cap reported."""

    def test_read_as_seconds(self) -> None:
        """'Crawl-delay: 2.5' spaces requests by 2.5 s, on every verdict of the file."""
        verdict = parse_robots(star("Crawl-delay: 2.5", "Disallow: /x")).check("/x")

        assert (2.5, 2.5, False) == (
            verdict.crawl_delay,
            verdict.crawl_delay_asked,
            verdict.crawl_delay_capped,
        )
        assert not verdict.allowed

    def test_capped_and_reported(self) -> None:
        """A delay past the cap is capped, and the verdict says what the site asked for."""
        verdict = parse_robots(star("Crawl-delay: 3600"), max_crawl_delay=10).check("/")

        assert (10, 3600, True) == (
            verdict.crawl_delay,
            verdict.crawl_delay_asked,
            verdict.crawl_delay_capped,
        )

    def test_the_default_cap(self) -> None:
        """Without a cap given, DEFAULT_MAX_CRAWL_DELAY applies."""
        verdict = parse_robots(star("Crawl-delay: 86400")).check("/")

        assert DEFAULT_MAX_CRAWL_DELAY == verdict.crawl_delay
        assert verdict.crawl_delay_capped

    def test_from_the_group_that_applies_only(self) -> None:
        """Our own group's silence wins over the * group's delay; merged groups take the max."""
        body = (
            b"User-agent: *\nCrawl-delay: 30\n\nUser-agent: trio-batch\nDisallow: /x\n"
            b"Crawl-delay: 1\n\nUser-agent: trio-batch\nCrawl-delay: 4\n"
        )

        assert 4 == parse_robots(body).check("/").crawl_delay
        assert 30 == parse_robots(body, agent="other").check("/").crawl_delay

    def test_our_group_without_a_delay_has_none(self) -> None:
        """The * group's delay is not added to a named group that sets none."""
        body = b"User-agent: *\nCrawl-delay: 3\n\nUser-agent: trio-batch\nDisallow: /x\n"

        assert None is parse_robots(body).check("/").crawl_delay

    @pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", "1e3", "1_0", "", "2 s"])
    def test_garbage_is_ignored(self, value: str) -> None:
        """A value that is not a plain number of seconds sets no delay."""
        verdict = parse_robots(star(f"Crawl-delay: {value}")).check("/")

        assert None is verdict.crawl_delay
        assert not verdict.crawl_delay_capped

    @pytest.mark.parametrize("cap", [-1.0, math.nan, math.inf])
    def test_a_bad_cap_is_refused(self, cap: float) -> None:
        """The cap must be a finite number of seconds."""
        with pytest.raises(ValueError, match=r"^max_crawl_delay must be a finite number"):
            parse_robots(b"", max_crawl_delay=cap)


class TestStatusRules:
    """RFC 9309 §2.3.1: what the robots.txt answer's status means."""

    def test_success_is_parsed(self) -> None:
        """A 200 robots.txt is read for its rules."""
        assert not rules_for_status(200, star("Disallow: /")).check("/x").allowed

    @pytest.mark.parametrize("status", [301, 400, 401, 403, 404, 410, 451])
    def test_unavailable_allows_everything(self, status: int) -> None:
        """A 4xx (and a redirect the fetcher would not follow) means no rules at all."""
        verdict = rules_for_status(status, star("Disallow: /")).check("/x")

        assert RobotsVerdict(True) == verdict

    @pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 599, 100, 600])
    def test_unreachable_disallows_everything_and_says_so(self, status: int) -> None:
        """A 5xx (or a 429, or a nonsense status) disallows, flagged so the host backs off."""
        verdict = rules_for_status(status, b"").check("/x")

        assert RobotsVerdict(False, unreachable=True) == verdict


class FakeSite:
    """A scripted ``get``: answers per robots URL, counts requests, can hold them."""

    def __init__(self, status: int = 200, body: bytes = b"") -> None:
        self.answer: tuple[int, bytes] | BaseException = (status, body)
        self.requests: list[str] = []
        self.release = trio.Event()
        self.hold = False

    async def get(self, url: str) -> tuple[int, bytes]:
        self.requests.append(url)
        if self.hold:
            await self.release.wait()
        await trio.lowlevel.checkpoint()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.timeout(60)
class TestRobotsCache:
    """One robots.txt request per origin and TTL, however many tasks ask."""

    async def test_one_fetch_for_fifty_concurrent_askers(self) -> None:
        """50 targets of one host starting at once make one robots.txt request."""
        site = FakeSite(body=star("Disallow: /private/"))
        site.hold = True
        cache = RobotsCache(site.get)
        verdicts: list[RobotsVerdict] = []

        async def ask(i: int) -> None:
            verdicts.append(await cache.check(f"https://site.example/private/{i}"))

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(ask, i)
            await trio.testing.wait_all_tasks_blocked()

            assert ["https://site.example/robots.txt"] == site.requests
            assert 1 == cache.statistics().fetching
            site.release.set()

        assert 50 * [RobotsVerdict(False, "Disallow: /private/")] == verdicts
        assert RobotsCacheStatistics(entries=1, fetching=0, fetches=1) == cache.statistics()

    async def test_fresh_for_the_ttl_then_fetched_again(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A read file is used for the TTL (24 h by default), then read again."""
        site = FakeSite(body=star("Disallow: /x"))
        cache = RobotsCache(site.get)
        await cache.check("http://site.example/a")
        await trio.sleep(DEFAULT_TTL - 1)
        await cache.check("http://site.example/b")

        assert 1 == len(site.requests)

        site.answer = (200, star("Allow: /"))
        await trio.sleep(2)
        verdict = await cache.check("http://site.example/x")

        assert 2 == len(site.requests)
        assert RobotsVerdict(True, "Allow: /") == verdict

    async def test_an_unreachable_answer_is_kept_briefly(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A 503 disallows for UNREACHABLE_TTL only; the file is read again after it."""
        site = FakeSite(503)
        cache = RobotsCache(site.get)

        assert (await cache.check("http://site.example/a")).unreachable
        await trio.sleep(UNREACHABLE_TTL - 1)
        assert (await cache.check("http://site.example/a")).unreachable
        assert 1 == len(site.requests)

        site.answer = (404, b"")
        await trio.sleep(2)

        assert RobotsVerdict(True) == await cache.check("http://site.example/a")
        assert 2 == len(site.requests)

    async def test_how_long_unreachable_is_counted_until_a_good_read(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """The verdict says how long robots.txt has been unreachable, for the host's limit."""
        site = FakeSite(503)
        cache = RobotsCache(site.get)
        url = "http://site.example/a"
        first = await cache.check(url)
        await trio.sleep(UNREACHABLE_TTL + 5)
        site.answer = OSError("connection reset")
        later = await cache.check(url)
        await trio.sleep(1)

        assert (0.0, UNREACHABLE_TTL + 5) == (first.unreachable_for, later.unreachable_for)
        assert UNREACHABLE_TTL + 6 == (await cache.check(url)).unreachable_for
        assert UNREACHABLE_TTL + 6 == cache.check_nowait(url).unreachable_for

        site.answer = (200, b"")
        await trio.sleep(UNREACHABLE_TTL)
        assert RobotsVerdict(True) == await cache.check(url)

        site.answer = (500, b"")
        await trio.sleep(DEFAULT_TTL)
        assert RobotsVerdict(False, unreachable=True) == await cache.check(url)

    async def test_a_host_that_cannot_be_reached_is_unreachable(self) -> None:
        """An exception from get (refused, DNS, timeout) makes the verdict unreachable."""
        site = FakeSite()
        site.answer = OSError("connection refused")
        cache = RobotsCache(site.get)

        verdict = await cache.check("http://site.example/")

        assert (False, True, None) == (verdict.allowed, verdict.unreachable, verdict.rule)

    async def test_retry_later_reaches_the_caller_and_is_not_cached(self) -> None:
        """A full fetch pool is not the site's fault: the caller tries again, nothing cached."""
        site = FakeSite(body=star("Disallow: /x"))
        site.answer = RetryLater("the fetch pool is all in use")
        cache = RobotsCache(site.get)

        with pytest.raises(RetryLater, match=r"^the fetch pool is all in use$"):
            await cache.check("http://site.example/x")

        site.answer = (200, star("Disallow: /x"))
        assert not (await cache.check("http://site.example/x")).allowed
        assert 2 == len(site.requests)

    async def test_least_recently_asked_origin_is_forgotten(self) -> None:
        """Past max_entries, the origin asked least recently is dropped (and fetched anew)."""
        site = FakeSite()
        cache = RobotsCache(site.get, max_entries=2)
        for host in ("a", "b", "a", "c", "a", "b"):
            await cache.check(f"http://{host}.example/page")

        assert [f"http://{h}.example/robots.txt" for h in "abcb"] == site.requests
        assert 2 == cache.statistics().entries

    async def test_origins_are_scheme_host_and_port(self) -> None:
        """http and https, and each port, have their own file; host case does not matter."""
        site = FakeSite()
        cache = RobotsCache(site.get)
        for url in (
            "http://Site.Example/a",
            "http://site.example:80/b",
            "https://site.example/c",
            "https://site.example:8443/d",
            "http://[2001:db8::1]:8080/e",
            "http://user:pw@site.example/f",
        ):
            await cache.check(url)

        assert [
            "http://site.example/robots.txt",
            "https://site.example/robots.txt",
            "https://site.example:8443/robots.txt",
            "http://[2001:db8::1]:8080/robots.txt",
        ] == site.requests

    async def test_robots_txt_is_allowed_without_a_fetch(self) -> None:
        """robots.txt itself is always allowed, without a request for it."""
        site = FakeSite(503)
        cache = RobotsCache(site.get)

        assert RobotsVerdict(True) == await cache.check("http://site.example/robots.txt")
        assert [] == site.requests

    async def test_a_cancelled_fetch_does_not_strand_the_waiters(self) -> None:
        """When the asker that fetches is cancelled, a waiting asker fetches in its place."""
        site = FakeSite(body=star("Disallow: /x"))
        site.hold = True
        cache = RobotsCache(site.get)
        first = trio.CancelScope()
        verdicts: list[RobotsVerdict] = []

        async def cancelled_ask() -> None:
            with first:
                await cache.check("http://site.example/x")

        async def ask() -> None:
            verdicts.append(await cache.check("http://site.example/x"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancelled_ask)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()

            assert 1 == len(site.requests)

            site.hold = False
            first.cancel()

        assert [RobotsVerdict(False, "Disallow: /x")] == verdicts
        assert 2 == len(site.requests)

    async def test_check_nowait_answers_only_from_a_fresh_entry(self) -> None:
        """For a step that must not wait: WouldBlock until the origin's file is cached."""
        site = FakeSite(body=star("Disallow: /x"))
        cache = RobotsCache(site.get)

        with pytest.raises(trio.WouldBlock):
            cache.check_nowait("http://site.example/x")
        await cache.check("http://site.example/")

        assert not cache.check_nowait("http://site.example/x").allowed
        assert cache.check_nowait("http://other.example/robots.txt").allowed

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"ttl": DEFAULT_TTL + 1}, r"^RobotsCache ttl must be > 0 and at most 86400 s"),
            ({"ttl": 0.0}, r"^RobotsCache ttl must be > 0"),
            ({"unreachable_ttl": 0.0}, r"^RobotsCache unreachable_ttl must be > 0"),
            ({"max_entries": 0}, r"^RobotsCache max_entries must be >= 1 \(got 0\)$"),
            ({"agent": "trio batch"}, r"^a robots.txt product token"),
            ({"max_crawl_delay": -1.0}, r"^max_crawl_delay must be"),
        ],
    )
    def test_bad_settings_are_refused(self, kwargs: dict[str, object], message: str) -> None:
        """A TTL past the RFC's 24 h, or any setting out of range, says which and why."""
        with pytest.raises(ValueError, match=message):
            RobotsCache(FakeSite().get, **kwargs)  # type: ignore[arg-type]

    @pytest.mark.parametrize("url", ["ftp://site.example/x", "http:///x", "/relative/path"])
    async def test_a_url_without_an_http_origin_is_refused(self, url: str) -> None:
        """A URL without an http or https origin is a ValueError: robots.txt does not apply to
        it."""
        with pytest.raises(ValueError, match=r"^robots.txt applies to http:// and https:// URLs"):
            await RobotsCache(FakeSite().get).check(url)


@pytest.mark.timeout(60)
class TestHostileFiles:
    """A site's file may be huge, binary or built to blow up a matcher; each stays bounded."""

    def test_only_the_first_500_kib_are_read(self) -> None:
        """A rule past MAX_ROBOTS_BYTES is ignored; the rules before it apply."""
        head = star("Disallow: /early")
        filler = b"# " + b"x" * 78 + b"\n"
        within = head + filler * (MAX_ROBOTS_BYTES // len(filler) + 1)
        body = within + b"Disallow: /late\n" + b"Disallow: /later\n" * 1_000_000  # 17 MB more
        rules = parse_robots(body)

        assert len(within) > MAX_ROBOTS_BYTES
        assert not rules.check("/early").allowed
        assert rules.check("/late").allowed
        assert 1 == len(rules)

    def test_a_line_cut_by_the_limit_is_dropped(self) -> None:
        """'Allow: /a/b' cut to 'Allow: /a' would allow more than the site said: it is dropped."""
        head = star("Disallow: /a")
        filler = b"#" * (MAX_ROBOTS_BYTES - len(head) - len(b"\nAllow: /a")) + b"\n"
        rules = parse_robots(head + filler + b"Allow: /a/b\n")

        assert len(head + filler + b"Allow: /a") == MAX_ROBOTS_BYTES
        assert not rules.check("/a/b").allowed
        assert not rules.check("/a").allowed

    def test_a_very_long_line(self) -> None:
        """One pattern of 400 KiB is read, matched, and quoted short."""
        pattern = "/" + "ab" * 200_000
        rules = parse_robots(star(f"Disallow: {pattern}"))
        verdict = rules.check(pattern + "/x")

        assert not verdict.allowed
        assert verdict.rule is not None
        assert len("Disallow: ") + QUOTE_CHARS + 3 == len(verdict.rule)
        assert rules.check("/ab").allowed

    def test_thousands_of_stars(self) -> None:
        """'*' repeated 100,000 times is one star."""
        rules = parse_robots(star("Disallow: /" + "*" * 100_000 + "x", "Allow: /" + "*" * 50_000))

        assert not rules.check("/aaaa/x").allowed
        assert RobotsVerdict(True, "Allow: /" + "*" * (QUOTE_CHARS - 1) + "...") == rules.check(
            "/" + "a" * 2000
        )

    @pytest.mark.parametrize("anchor", ["", "$"])
    def test_a_backtracking_bomb(self, anchor: str) -> None:
        """'/*a*a*...*a*b' against '/aaaa...' (exponential for a backtracking regex) is fast."""
        path = "/" + "a" * 2000
        bomb = "/" + "*a" * 20_000 + "*b" + anchor
        near_miss = "/" + "*a" * 1999 + "*b" + anchor
        rules = parse_robots(star(f"Disallow: {bomb}", f"Disallow: {near_miss}"))

        assert rules.check(path).allowed
        assert not rules.check(path + "b").allowed

    def test_many_rules_against_a_long_path(self) -> None:
        """25,000 wildcard rules (a 500 KiB file) against a 2,000-character path."""
        lines = [f"Disallow:/*x{i:06d}" for i in range(25_000)]
        body = star(*lines)
        rules = parse_robots(body)
        path = "/" + "x0" * 1000

        assert len(body) <= MAX_ROBOTS_BYTES
        assert 25_000 == len(rules)
        assert rules.check(path).allowed
        assert RobotsVerdict(False, "Disallow: /*x024999") == rules.check(path + "x024999")

    async def test_many_rules_through_the_cache(self) -> None:
        """The same file through the cache: the long check runs off the event loop, same answer."""
        site = FakeSite(body=star(*(f"Disallow:/*x{i:06d}" for i in range(25_000))))
        cache = RobotsCache(site.get)
        path = "/" + "x0" * 1000

        assert (await cache.check(f"http://site.example{path}")).allowed
        assert not (await cache.check(f"http://site.example{path}x000007")).allowed

    def test_nul_bytes_and_binary_garbage(self) -> None:
        """NUL bytes and control characters are octets like others: escaped, never a crash."""
        body = (
            b"\x00\x01\x02garbage\x00\nUser-agent: *\x00\nDisallow: /a\x00b\n"
            + bytes(range(256)) * 100
            + b"\nDisallow: /c\n"
        )
        rules = parse_robots(body)

        assert not rules.check("/a%00b").allowed
        assert rules.check("/ab").allowed
        assert not rules.check("/c").allowed

    def test_not_utf8(self) -> None:
        """Latin-1 or broken UTF-8 patterns match the same octets, percent-encoded."""
        body = b"User-agent: \xff\xfe\nUser-agent: *\nDisallow: /caf\xe9\nDisallow: /\xc3(\n"
        rules = parse_robots(body)

        assert not rules.check("/caf%E9").allowed
        assert not rules.check("/caf%e9/x").allowed
        assert not rules.check("/%C3(").allowed
        assert rules.check("/caf\u00e9").allowed  # UTF-8 é is %C3%A9, another path

    @pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
    def test_any_line_ending(self, newline: bytes) -> None:
        """LF, CRLF and lone CR (RFC 9309's NL) all end a line; a BOM is skipped."""
        body = newline.join([b"\xef\xbb\xbfUser-agent: *", b"Disallow: /x", b"Allow: /x/y"])
        rules = parse_robots(body)

        assert not rules.check("/x").allowed
        assert rules.check("/x/y").allowed

    async def test_a_huge_answer_through_the_cache(self) -> None:
        """A 20 MB robots.txt through the cache: parsed off the event loop, bounded."""
        site = FakeSite(body=star("Disallow: /x") + b"\n" * 20_000_000)
        cache = RobotsCache(site.get)

        assert not (await cache.check("http://site.example/x")).allowed
