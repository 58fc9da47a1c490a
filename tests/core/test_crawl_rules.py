"""A crawl's rules: one canonical key per page, and a judge of every link found (issue 38)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings, strategies as st

from trio_batch._crawl import CrawlScope, CrawlSpec
from trio_batch._crawl_rules import (
    MAX_PARAMETERS,
    MAX_SEGMENTS,
    MAX_TRAP_CHARS,
    QUERY_VARIANTS,
    TRACKING_PARAMETERS,
    VARIANT_PATHS,
    CrawlRules,
    canonical_url,
    fetchable_url,
    registrable_domain,
)

SITE = "https://site.example"


def rules(
    url: str = SITE + "/",
    *,
    scope: CrawlScope = "host",
    max_depth: int = 3,
    prefix: str = "",
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
) -> CrawlRules:
    return CrawlRules(
        CrawlSpec(
            url, scope=scope, max_depth=max_depth, prefix=prefix, include=include, exclude=exclude
        )
    )


CANONICAL = [
    # scheme, host, port
    ("HTTP://Site.EXAMPLE/a", "http://site.example/a"),
    ("https://site.example:443/a", "https://site.example/a"),
    ("http://site.example:80/a", "http://site.example/a"),
    ("https://site.example:80/a", "https://site.example:80/a"),
    ("http://site.example:0080/a", "http://site.example/a"),
    ("http://site.example:8080/a", "http://site.example:8080/a"),
    ("http://site.example./a", "http://site.example/a"),
    ("http://site.example", "http://site.example/"),
    ("http://site.example?q=1", "http://site.example/?q=1"),
    # IDNA and address literals
    ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com/", "http://example.com/"),  # full width
    ("http://[2001:DB8:0:0::0001]:8080/", "http://[2001:db8::1]:8080/"),
    ("http://[::FFFF:127.0.0.1]/", "http://[::ffff:7f00:1]/"),
    ("http://127.0.0.1:80/", "http://127.0.0.1/"),
    ("http://under_score.example/", "http://under_score.example/"),
    # fragments, dot segments, empty path
    ("https://site.example/a#part", "https://site.example/a"),
    ("https://site.example/#!/route", "https://site.example/"),
    ("https://site.example/a/./b/../c", "https://site.example/a/c"),
    ("https://site.example/../../a", "https://site.example/a"),
    ("https://site.example/a/%2E%2E/b", "https://site.example/b"),
    ("https://site.example/a/..", "https://site.example/"),
    # index files and trailing slashes: one page
    ("https://site.example/a/", "https://site.example/a"),
    ("https://site.example/a/index.html", "https://site.example/a"),
    ("https://site.example/a/index.htm", "https://site.example/a"),
    ("https://site.example/a/index.php?id=3", "https://site.example/a?id=3"),
    ("https://site.example/index.html", "https://site.example/"),
    ("https://site.example/a//", "https://site.example/a"),
    ("https://site.example/a/Index.html", "https://site.example/a/Index.html"),
    ("https://site.example/a/main.html", "https://site.example/a/main.html"),
    # percent-encoding
    ("https://site.example/%7euser/%41", "https://site.example/~user/A"),
    ("https://site.example/a%2fb", "https://site.example/a%2Fb"),
    ("https://site.example/100%", "https://site.example/100%25"),
    ("https://site.example/%zz", "https://site.example/%25zz"),
    ("https://site.example/a b", "https://site.example/a%20b"),
    ("https://site.example/café", "https://site.example/caf%C3%A9"),
    ("https://site.example/caf%c3%a9", "https://site.example/caf%C3%A9"),
    ("https://site.example/a\x01b", "https://site.example/a%01b"),
    ('https://site.example/<"x">', "https://site.example/%3C%22x%22%3E"),
    ("https://site.example/a\\b", "https://site.example/a%5Cb"),
    ("https://site.example/?q=[1]&x=a+b", "https://site.example/?q=%5B1%5D&x=a+b"),
    ("https://site.example/?q=%26&r=%3d", "https://site.example/?q=%26&r=%3D"),
    # whitespace around and inside, as browsers drop it
    ("  https://site.example/a\n", "https://site.example/a"),
    ("https://site.example/a\tb\r\nc", "https://site.example/abc"),
    # query: order kept, tracking and session parameters dropped, empty pieces dropped
    ("https://site.example/?b=2&a=1", "https://site.example/?b=2&a=1"),
    ("https://site.example/?utm_source=x&b=2&UTM_Medium=y", "https://site.example/?b=2"),
    ("https://site.example/?gclid=1&fbclid=2&ref_src=3", "https://site.example/"),
    ("https://site.example/?a=1&&b=2&", "https://site.example/?a=1&b=2"),
    ("https://site.example/a?", "https://site.example/a"),
    ("https://site.example/?utm%5Fsource=x", "https://site.example/"),
    ("https://site.example/?sid=3", "https://site.example/?sid=3"),
    ("https://site.example/?sid=8f14e45fceea167a5a36dedd4bea2543", "https://site.example/"),
    ("https://site.example/cart;jsessionid=A1B2?x=1", "https://site.example/cart?x=1"),
    ("https://site.example/a;JSESSIONID=A1B2/b", "https://site.example/a/b"),
    ("https://site.example/a;v=2", "https://site.example/a;v=2"),
]


class TestCanonicalUrl:
    @pytest.mark.parametrize(("url", "expected"), CANONICAL)
    def test_each_spelling_of_a_page_has_one_documented_form(self, url: str, expected: str) -> None:
        """A URL's canonical form follows the documented rules, one by one."""
        assert expected == canonical_url(url)

    @pytest.mark.parametrize(("url", "expected"), CANONICAL)
    def test_the_canonical_form_is_its_own_canonical_form(self, url: str, expected: str) -> None:
        """Canonicalising a key again changes nothing."""
        assert expected == canonical_url(expected)

    @pytest.mark.parametrize(
        "url",
        [
            "ftp://site.example/",
            "mailto:someone@site.example",
            "javascript:alert(1)",
            "data:text/html,hi",
            "/relative/path",
            "//site.example/no-scheme",
            "http:site.example",
            "http://",
            "http:///path",
            "http://user@site.example/",
            "http://user:secret@site.example/",
            "http://good.example@evil.example/",
            "http://site.example:0/",
            "http://site.example:65536/",
            "http://site.example:8o/",
            "http://site.example:-1/",
            "http://site.example:\u00b2/",  # a superscript two: a digit to str.isdigit
            "http://site.example:\u0663/",  # an Arabic-Indic three: a digit to int()
            "http://si te.example/",
            "http://site%2Eexample/",
            "http://site..example/",
            "http://.site.example/",
            "http://[2001:db8::1/",
            "http://[fe80::1%25eth0]/",
            "http://[not-an-address]/",
            "http://[::1]x/",
            "http://" + "a" * 64 + ".example/",
            "http://site.example/\ud800",
            "http://site.example/" + "a" * 2048,
            "http://site.example/" + "é" * 400,
            "",
            "\x00\x01",
        ],
    )
    def test_what_a_crawl_cannot_follow_has_no_form(self, url: str) -> None:
        """Not http(s), no host or a bad one, credentials, a bad port, over 2,048 characters
        (as found or once escaped): None, never an exception."""
        assert canonical_url(url) is None

    def test_a_url_that_is_not_a_string_has_no_form(self) -> None:
        """Whatever a page's metadata holds, the canonical form of a non-string is None."""
        assert canonical_url(42) is None  # type: ignore[arg-type]

    def test_a_long_url_just_under_the_cap_has_a_form(self) -> None:
        """2,048 characters is allowed; the cap is on what is longer."""
        url = "http://site.example/" + "a" * (2048 - len("http://site.example/"))

        assert url == canonical_url(url)

    def test_the_tracking_list_is_in_lower_case(self) -> None:
        """Names are compared without case, so the documented list is written in lower case."""
        assert all(name == name.lower() for name in TRACKING_PARAMETERS)


class TestFetchableUrl:
    @pytest.mark.parametrize(
        ("found", "fetched"),
        [
            ("https://a.test/a b/c d.html", "https://a.test/a%20b/c%20d.html"),
            ("https://a.test/d/", "https://a.test/d/"),  # the spelling the site answers, kept
            ("https://a.test/d/index.html#top", "https://a.test/d/index.html"),
            ("https://a.test/s?q=a b&x=é", "https://a.test/s?q=a%20b&x=%C3%A9"),
            ("https://a.test", "https://a.test/"),
            ("  https://a.test/x\t ", "https://a.test/x"),
        ],
    )
    def test_a_link_is_fetched_as_found_with_what_must_be_escaped_escaped(
        self, found: str, fetched: str
    ) -> None:
        """A crawl fetches a link as the page wrote it, but escaped as a browser sends it (a
        space as %20), without its fragment, so a loosely written link is not refused."""
        assert fetched == fetchable_url(found)
        assert canonical_url(found) == canonical_url(fetched)


class TestRegistrableDomain:
    @pytest.mark.parametrize(
        ("host", "expected"),
        [
            ("www.example.com", "example.com"),
            ("a.b.example.co.uk", "example.co.uk"),
            ("site.github.io", "site.github.io"),
            ("co.uk", "co.uk"),
            ("localhost", "localhost"),
            ("127.0.0.2", "127.0.0.2"),
            ("[2001:db8::1]", "[2001:db8::1]"),
            ("www.site.test", "site.test"),
        ],
    )
    def test_the_public_suffix_list_decides(self, host: str, expected: str) -> None:
        """The registrable domain is the Public Suffix List's (private suffixes included);
        addresses and single labels are their own."""
        pytest.importorskip("publicsuffixlist")

        assert expected == registrable_domain(host)

    @pytest.mark.parametrize(
        ("host", "expected"),
        [
            ("www.example.com", "example.com"),
            ("a.b.example.co.uk", "example.co.uk"),
            ("shop.example.com.au", "example.com.au"),
            ("a.b.example.de", "example.de"),
            ("127.0.0.2", "127.0.0.2"),
        ],
    )
    def test_without_the_package_a_documented_rule_decides(
        self, host: str, expected: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without ``publicsuffixlist`` the last two labels are the domain, three under a
        common second level of a country code."""
        from trio_batch import _crawl_rules

        monkeypatch.setattr(_crawl_rules, "_suffix_list", lambda: None)

        assert expected == registrable_domain.__wrapped__(host)


class TestScope:
    def test_the_start_key_is_the_start_urls_canonical_form(self) -> None:
        """A crawl's first key is its start URL's canonical form."""
        assert SITE + "/docs" == rules(SITE + "/docs/index.html#top").start_key

    def test_a_start_url_that_cannot_be_crawled_is_refused_with_how_to_fix_it(self) -> None:
        """A start URL with credentials, say, is a clear error at the start, not a silent
        empty crawl."""
        with pytest.raises(ValueError, match=r"^CrawlSpec.url cannot be crawled .*write an http"):
            rules("https://user@site.example/")

    def test_host_scope_keeps_to_the_start_host(self) -> None:
        """By default a crawl follows links on its host only (any port or scheme); www. and
        the bare host are different hosts."""
        crawl = rules()

        assert (SITE + "/a", "") == crawl.judge(SITE + "/a", 1)
        assert ("http://site.example/a", "") == crawl.judge("http://site.example/a", 1)
        assert ("", "scope") == crawl.judge("https://www.site.example/a", 1)
        assert ("", "scope") == crawl.judge("https://sub.site.example/a", 1)
        assert ("", "scope") == crawl.judge("https://other.example/a", 1)

    def test_what_cannot_be_crawled_is_out_of_scope(self) -> None:
        """A link the crawl cannot follow (credentials, a bad host) is counted as scope."""
        assert ("", "scope") == rules().judge("https://user@site.example/a", 1)

    def test_domain_scope_follows_the_registrable_domain(self) -> None:
        """``domain`` follows every host of the start's registrable domain, no further."""
        pytest.importorskip("publicsuffixlist")
        crawl = rules("https://docs.example.co.uk/", scope="domain")

        assert "" == crawl.judge("https://blog.example.co.uk/a", 1)[1]
        assert "" == crawl.judge("https://example.co.uk/a", 1)[1]
        assert "scope" == crawl.judge("https://other.co.uk/a", 1)[1]
        assert "scope" == crawl.judge("https://co.uk/a", 1)[1]

    def test_domain_scope_makes_www_and_the_bare_host_one_key(self) -> None:
        """With ``domain``, ``www.site/a`` and ``site/a`` are one page: fetched once."""
        crawl = rules("https://www.site.example/", scope="domain")

        assert SITE + "/" == crawl.start_key
        assert (SITE + "/a", "") == crawl.judge("https://www.site.example/a/", 1)
        assert (SITE + "/a", "") == crawl.judge(SITE + "/a", 1)
        assert SITE + "/a" == crawl.key("https://WWW.site.example/a/index.html")

    def test_www_is_kept_where_it_is_the_domains_own_label(self) -> None:
        """``www.co.uk`` is a registrable domain of its own: its ``www`` is not dropped."""
        pytest.importorskip("publicsuffixlist")
        crawl = rules("https://www.co.uk/", scope="domain")

        assert "https://www.co.uk/" == crawl.start_key

    def test_host_scope_keeps_www_in_the_key(self) -> None:
        """Only the domain scope folds ``www.``: a host crawl's key is the canonical URL."""
        crawl = rules("https://www.site.example/")

        assert "https://www.site.example/a" == crawl.key("https://www.site.example/a/")

    def test_prefix_scope_defaults_to_the_start_urls_directory(self) -> None:
        """``prefix`` without a prefix keeps below the start page's directory, whole
        segments only (``/docs`` is not ``/docsearch``)."""
        crawl = rules(SITE + "/docs/intro.html", scope="prefix")

        assert "" == crawl.judge(SITE + "/docs/", 1)[1]
        assert "" == crawl.judge(SITE + "/docs/api/x", 1)[1]
        assert "scope" == crawl.judge(SITE + "/docsearch", 1)[1]
        assert "scope" == crawl.judge(SITE + "/blog/", 1)[1]
        assert "scope" == crawl.judge("https://other.example/docs/a", 1)[1]

    def test_prefix_scope_of_a_directory_without_a_slash_is_that_directory(self) -> None:
        """A start URL ``/docs`` means below ``/docs`` (its last segment names no file)."""
        crawl = rules(SITE + "/docs", scope="prefix")

        assert "" == crawl.judge(SITE + "/docs/a", 1)[1]
        assert "scope" == crawl.judge(SITE + "/a", 1)[1]

    def test_a_given_prefix_is_read_in_canonical_form(self) -> None:
        """``prefix="/blog/"`` and ``"blog"`` both keep below ``/blog``."""
        for prefix in ("/blog/", "blog", "/%62log"):
            crawl = rules(SITE + "/", scope="prefix", prefix=prefix)

            assert "" == crawl.judge(SITE + "/blog", 1)[1]
            assert "" == crawl.judge(SITE + "/blog/2024/post", 1)[1]
            assert "scope" == crawl.judge(SITE + "/about", 1)[1]

    def test_a_root_prefix_keeps_the_whole_host(self) -> None:
        """A crawl of ``/`` with scope prefix is a host crawl."""
        crawl = rules(SITE + "/", scope="prefix")

        assert "" == crawl.judge(SITE + "/anything/at/all", 1)[1]


class TestDepthAndPatterns:
    def test_deeper_than_max_depth_is_skipped_as_depth(self) -> None:
        """``max_depth`` 1 admits the start page's links and nothing found on them."""
        crawl = rules(max_depth=1)

        assert "" == crawl.judge(SITE + "/a", 1)[1]
        assert "depth" == crawl.judge(SITE + "/b", 2)[1]

    def test_depth_is_judged_before_scope(self) -> None:
        """A link that is both too deep and off-site counts once, as depth."""
        assert ("", "depth") == rules(max_depth=0).judge("https://other.example/", 1)

    @pytest.mark.parametrize(
        ("pattern", "path", "matches"),
        [
            ("/blog/*", "/blog/post", True),
            ("/blog/*", "/blog/2024/post", False),
            ("/blog/**", "/blog/2024/post", True),
            ("/blog/**", "/blog", True),
            ("/blog/**", "/blogroll", False),
            ("/*.pdf", "/report.pdf", True),
            ("/*.pdf", "/a/report.pdf", False),
            ("/**.pdf", "/a/report.pdf", True),
            ("/p?.html", "/p1.html", True),
            ("/p?.html", "/p12.html", False),
            ("/p?.html", "/p/.html", False),
            ("/search*", "/search?q=x", True),
            ("/search", "/search?q=x", False),
            ("blog/*", "/blog/post", True),
            ("/docs/", "/docs", True),
            ("/café/*", "/caf%C3%A9/menu", True),
            ("/a+b", "/a+b", True),
            ("/a.b", "/axb", False),
        ],
    )
    def test_a_glob_matches_the_whole_canonical_path_and_query(
        self, pattern: str, path: str, matches: bool
    ) -> None:
        """``*`` stays within a segment, ``**`` crosses them, ``?`` is one character but
        ``/``, and everything else is literal; ``/x/**`` includes ``/x`` itself."""
        crawl = rules(include=(pattern,))

        assert matches == (crawl.judge(SITE + path, 1)[1] == "")

    def test_a_url_must_match_an_include_and_no_exclude(self) -> None:
        """Includes admit, excludes win over them."""
        crawl = rules(include=("/docs/**", "/blog/**"), exclude=("/docs/old/**",))

        assert "" == crawl.judge(SITE + "/docs/a", 1)[1]
        assert "" == crawl.judge(SITE + "/blog/b", 1)[1]
        assert "pattern" == crawl.judge(SITE + "/shop/c", 1)[1]
        assert "pattern" == crawl.judge(SITE + "/docs/old/d", 1)[1]

    def test_patterns_see_the_canonical_form(self) -> None:
        """An exclude of ``/private/**`` holds for every spelling of those paths."""
        crawl = rules(exclude=("/private/**",))

        for url in ("/private/", "/PRIVATE/x", "/a/../private/x", "/%70rivate/x"):
            expected = "" if url == "/PRIVATE/x" else "pattern"
            assert expected == crawl.judge(SITE + url, 1)[1], url


class TestTraps:
    def test_a_long_path_and_query_is_a_trap(self) -> None:
        """Past 1,024 characters of path and query a URL is a trap, not a page."""
        crawl = rules()
        short = SITE + "/" + "a" * (MAX_TRAP_CHARS - 1)

        assert "" == crawl.judge(short, 1)[1]
        assert "trap" == crawl.judge(short + "b", 1)[1]

    @pytest.mark.parametrize(
        "path",
        ["/a/b/a/c/a", "/x/a/a/a", "/a/b/a/b", "/x/a/b/c/a/b/c/y", "/" + "/".join("s" * 65)],
    )
    def test_repeated_path_segments_are_a_trap(self, path: str) -> None:
        """A segment three times, a run of segments twice in a row (relative links that pile
        up), or over 64 segments: a trap."""
        if path.count("/") > MAX_SEGMENTS:
            path = "/" + "/".join(str(i) for i in range(MAX_SEGMENTS + 1))

        assert "trap" == rules().judge(SITE + path, 1)[1]

    @pytest.mark.parametrize(
        "path", ["/a/b/a", "/docs/v1/api/v1", "/2024/01/01", "/a/a", "/a/b/c/d/e/f/g"]
    )
    def test_ordinary_paths_are_not_traps(self, path: str) -> None:
        """A segment twice, apart or side by side, is an ordinary path."""
        assert "" == rules().judge(SITE + path, 1)[1]

    def test_a_query_that_grows_is_a_trap(self) -> None:
        """``?p=1&p=2`` is still a page; a third ``p`` is a query growing without end."""
        crawl = rules()

        assert "" == crawl.judge(SITE + "/list?p=1&p=2", 1)[1]
        assert "trap" == crawl.judge(SITE + "/list?p=1&p=2&p=3", 1)[1]

    def test_too_many_query_parameters_are_a_trap(self) -> None:
        """Over 16 parameters is a trap."""
        crawl = rules()
        query = "&".join(f"k{i}=v" for i in range(MAX_PARAMETERS))

        assert "" == crawl.judge(f"{SITE}/s?{query}", 1)[1]
        assert "trap" == crawl.judge(f"{SITE}/s?{query}&one=more", 1)[1]

    def test_a_path_gets_fifty_query_variants_then_traps(self) -> None:
        """A counter in the query (``?page=N``) gets 50 pages; the rest are traps."""
        crawl = rules()
        verdicts = [crawl.judge(f"{SITE}/feed?page={n}", 1)[1] for n in range(QUERY_VARIANTS + 5)]

        assert [""] * QUERY_VARIANTS + ["trap"] * 5 == verdicts
        assert "" == crawl.judge(f"{SITE}/other?page=1", 1)[1]
        assert "" == crawl.judge(f"{SITE}/feed", 1)[1]

    def test_judging_a_variant_again_does_not_use_up_the_cap(self) -> None:
        """A link on every page (``?page=2``) is judged many times but counts once, and one
        already admitted is admitted again (the visited set makes it a duplicate)."""
        crawl = rules()
        for _ in range(3 * QUERY_VARIANTS):
            assert "" == crawl.judge(f"{SITE}/feed?page=2", 1)[1]
        for n in range(QUERY_VARIANTS):
            crawl.judge(f"{SITE}/feed?page={n}", 1)

        assert "" == crawl.judge(f"{SITE}/feed?page=2", 1)[1]
        assert "trap" == crawl.judge(f"{SITE}/feed?page=999", 1)[1]

    def test_session_and_tracking_parameters_do_not_use_up_the_cap(self) -> None:
        """A session id that changes on every view is no variant at all: one key."""
        crawl = rules()
        keys = {crawl.judge(f"{SITE}/cart?sid={n:032x}&utm_source=x", 1) for n in range(200)}

        assert {(SITE + "/cart", "")} == keys

    def test_what_was_skipped_for_another_reason_uses_no_variant(self) -> None:
        """Variants are counted only for URLs admitted: excluded ones leave the cap alone."""
        crawl = rules(exclude=("/feed?x=*",))
        for n in range(2 * QUERY_VARIANTS):
            assert "pattern" == crawl.judge(f"{SITE}/feed?x={n}", 1)[1]

        assert "" == crawl.judge(f"{SITE}/feed?page=1", 1)[1]

    def test_the_variant_counts_stay_bounded_forgetting_the_oldest_path(self) -> None:
        """Past 4,096 paths the least recently seen path's count is forgotten: the memory is
        bounded whatever the site, and a trap path seen again starts a new count."""
        crawl = rules()
        for n in range(QUERY_VARIANTS):
            crawl.judge(f"{SITE}/first?n={n}", 1)
        assert "trap" == crawl.judge(f"{SITE}/first?n=x", 1)[1]
        for path in range(VARIANT_PATHS):
            crawl.judge(f"{SITE}/p{path}?n=1", 1)

        assert "" == crawl.judge(f"{SITE}/first?n=x", 1)[1]

    def test_a_path_seen_recently_keeps_its_count(self) -> None:
        """A path still in use is not the one forgotten."""
        crawl = rules()
        for n in range(QUERY_VARIANTS):
            crawl.judge(f"{SITE}/first?n={n}", 1)
        for path in range(VARIANT_PATHS):
            crawl.judge(f"{SITE}/p{path}?n=1", 1)
            if path % 1000 == 0:
                crawl.judge(f"{SITE}/first?n=1", 1)

        assert "trap" == crawl.judge(f"{SITE}/first?n=x", 1)[1]

    def test_each_rules_object_counts_for_itself(self) -> None:
        """Two rules objects (two instances of a fleet) keep their own counts."""
        one, two = rules(), rules()
        for n in range(QUERY_VARIANTS):
            one.judge(f"{SITE}/feed?page={n}", 1)

        assert "trap" == one.judge(f"{SITE}/feed?page=x", 1)[1]
        assert "" == two.judge(f"{SITE}/feed?page=x", 1)[1]


# -- properties -------------------------------------------------------------------------------

_SEGMENT_CHARS = string.ascii_letters + string.digits + "-._~!$'()*+,;=:@ é%/"
_LABEL = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8)


@st.composite
def pages(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]]]:
    """A page's origin, its path (no trailing slash, no index file) and its query."""
    host = ".".join(draw(st.lists(_LABEL, min_size=2, max_size=3)))
    port = draw(st.sampled_from(["", ":8080"]))
    segments = draw(
        st.lists(
            st.text(string.ascii_lowercase + string.digits + "-_~", min_size=1, max_size=6).filter(
                lambda s: s not in (".", "..") and not s.startswith("index.")
            ),
            max_size=4,
            unique=True,
        )
    )
    query = draw(
        st.lists(
            st.tuples(
                st.text(string.ascii_lowercase, min_size=1, max_size=4).filter(
                    lambda n: n not in TRACKING_PARAMETERS and not n.startswith("utm_")
                ),
                st.text(string.ascii_lowercase + string.digits, max_size=4),
            ),
            max_size=3,
            unique_by=lambda p: p[0],
        )
    )
    return f"https://{host}{port}", "/" + "/".join(segments), query


def _spell(url_path: str, draw: st.DrawFn) -> str:
    """``url_path`` with some unreserved characters percent-escaped, in either hex case."""
    out = []
    for char in url_path:
        if char.isalnum() and char.isascii() and draw(st.booleans()):
            escape = f"%{ord(char):02X}"
            out.append(escape.lower() if draw(st.booleans()) else escape)
        else:
            out.append(char)
    return "".join(out)


@st.composite
def spellings(draw: st.DrawFn) -> tuple[str, str]:
    """A page's plain URL and another spelling of the same page."""
    origin, path, query = draw(pages())
    plain_query = "&".join(f"{k}={v}" for k, v in query)
    plain = origin + path + (f"?{plain_query}" if plain_query else "")
    host_origin = "".join(c.upper() if draw(st.booleans()) else c for c in origin)
    if draw(st.booleans()) and ":8080" not in origin:
        host_origin += ":443"
    spelled = _spell(path, draw)
    if draw(st.booleans()) and spelled != "/":
        spelled += "/"
    if draw(st.booleans()):
        spelled = spelled.rstrip("/") + "/" + draw(st.sampled_from(["index.html", "index.php"]))
    if draw(st.booleans()):
        spelled = "/./x/.." + spelled
    params = [f"{k}={v}" for k, v in query]
    for tracker in draw(st.lists(st.sampled_from(sorted(TRACKING_PARAMETERS)), max_size=2)):
        params.insert(draw(st.integers(0, len(params))), f"{tracker}=t")
    if draw(st.booleans()):
        params.insert(draw(st.integers(0, len(params))), "utm_campaign=spring")
    if draw(st.booleans()):
        params.append("")
    other = host_origin + spelled + ("?" + "&".join(params) if params else "")
    if draw(st.booleans()):
        other += "#" + draw(st.text(string.ascii_letters, max_size=5))
    return plain, other


class TestProperties:
    @settings(max_examples=300)  # pure and fast: microseconds an example
    @given(st.text(max_size=200))
    def test_any_text_has_a_form_or_none_and_the_form_is_stable(self, text: str) -> None:
        """Whatever a page holds, canonical_url never raises, and its answer is a fixed point."""
        for url in (text, "http://site.example/" + text, "https://" + text):
            key = canonical_url(url)
            if key is not None:
                assert key == canonical_url(key)
                assert len(key) <= 2048

    @settings(max_examples=300)
    @given(
        st.text(alphabet=st.sampled_from(_SEGMENT_CHARS), max_size=40),
        st.text(alphabet=st.sampled_from(_SEGMENT_CHARS + "?&=#"), max_size=40),
    )
    def test_paths_and_queries_of_odd_characters_have_stable_forms(
        self, path: str, query: str
    ) -> None:
        """Escapes, dots, slashes, session parameters and index files in any mix: the form of
        the form is the form."""
        key = canonical_url(f"https://site.example/{path}?{query}")

        assert key is not None
        assert key == canonical_url(key)

    @settings(max_examples=300)
    @given(spellings())
    def test_every_spelling_of_a_page_is_one_key(self, pair: tuple[str, str]) -> None:
        """Case, default port, escapes of unreserved characters, dot segments, a trailing
        slash, an index file, tracking parameters and a fragment: one key."""
        plain, other = pair

        assert canonical_url(plain) == canonical_url(other)

    @settings(max_examples=100)
    @given(spellings(), st.booleans())
    def test_in_domain_scope_www_is_one_more_spelling(
        self, pair: tuple[str, str], www: bool
    ) -> None:
        """With scope ``domain``, ``www.`` or not is one more spelling of the same page."""
        plain, other = pair
        if www:
            other = other.replace("://", "://www.", 1)
        crawl = rules(plain, scope="domain")

        assert crawl.key(plain) == crawl.key(other)
        assert crawl.start_key == crawl.key(other)
