"""The guard: submit-time pre-check and fetch-time address checks (SPEC §5 and §6)."""

from __future__ import annotations

import ipaddress

import pytest

from tests.support import LocalSite, Reply, redirect
from tests.web.support import CALLER, LOOPBACK, PUBLIC_IP, FakeDNS, RecordingBackend, TlsServer
from trio_batch import Caller, Target, TargetError
from trio_batch.web import WebFetcher, precheck
from trio_batch.web._guard._check import (
    IPAddress,
    check_url,
    is_public,
    parse_ipv4_spelling,
    redact_url,
)


class TestPrecheck:
    @pytest.mark.parametrize(
        ("url", "host", "port", "literal"),
        [
            ("https://example.com/", "example.com", 443, None),
            ("http://example.com:8080/path?q=1", "example.com", 8080, None),
            ("https://bücher.de/", "xn--bcher-kva.de", 443, None),
            ("http://example.com./", "example.com.", 80, None),
            (f"http://{PUBLIC_IP}/", PUBLIC_IP, 80, ipaddress.IPv4Address(PUBLIC_IP)),
            (
                "http://[2606:4700::1111]/",
                "2606:4700::1111",
                80,
                ipaddress.IPv6Address("2606:4700::1111"),
            ),
        ],
    )
    def test_accepts_public_urls(
        self, url: str, host: str, port: int, literal: IPAddress | None
    ) -> None:
        """A public http(s) URL passes, parsed to the host (IDNA) and port it connects to."""
        precheck(url)
        checked = check_url(url, ())

        assert (host, port, literal) == (checked.host, checked.port, checked.literal)

    @pytest.mark.parametrize(
        ("url", "fragment"),
        [
            ("ftp://example.com/", "only http and https"),
            ("file:///etc/passwd", "only http and https"),
            ("example.com/page", "no scheme"),
            ("http:///path", "no host"),
            ("http://user:pw@example.com/", "credentials"),
            ("http://public@127.0.0.1/", "credentials"),
            ("http://127.0.0.1/", "non-public"),
            ("http://127.0.0.1./", "non-public"),
            ("http://2130706433/", "non-public"),
            ("http://0x7f.1/", "non-public"),
            ("http://0x7f000001/", "non-public"),
            ("http://127.1/", "non-public"),
            ("http://0/", "non-public"),
            ("http://0.0.0.0:8080/", "non-public"),
            ("http://10.0.0.1/", "non-public"),
            ("http://192.168.1.1/", "non-public"),
            ("http://172.16.0.1/", "non-public"),
            ("http://169.254.169.254/latest/meta-data/", "non-public"),
            ("http://100.64.0.1/", "non-public"),
            ("http://224.0.0.1/", "non-public"),
            ("http://240.0.0.1/", "non-public"),
            ("http://[::1]/", "non-public"),
            ("http://[::]/", "non-public"),
            ("http://[::ffff:127.0.0.1]/", "non-public"),
            ("http://[::ffff:10.0.0.1]:8080/", "non-public"),
            ("http://[fe80::1]/", "non-public"),
            ("http://[fc00::1]/", "non-public"),
            ("http://[ff02::1]/", "non-public"),
            ("http://[2002:a00:1::]/", "non-public"),
            ("http://[64:ff9b::a00:1]/", "non-public"),
            ("http://localhost:8000/", "non-public"),
            ("http://api.localhost/", "non-public"),
            ("http://1.2.3.4.5/", "not a valid"),
            ("http://256.1.1.1/", "Invalid IPv4"),
            ("http://ex%61mple.com/", "not a valid host"),
            ("http://exa mple.com/", "whitespace"),
            ("http://127.0.0.1\\@example.com/", "backslash"),
            ("http://example.com:99999/", "out of range"),
            ("https://example.com/" + "a" * 2100, "the limit is 2,048"),
        ],
    )
    def test_refuses_with_a_400_and_a_hint(self, url: str, fragment: str) -> None:
        """A refused URL is a TargetError 400 saying what is wrong, with a hint."""
        with pytest.raises(TargetError) as info:
            precheck(url)

        assert info.value.status == 400
        assert fragment in info.value.msg
        assert info.value.hint

    def test_allow_list_lets_loopback_through(self) -> None:
        """Addresses inside an allowed network pass, in any spelling."""
        for url in ("http://127.0.0.1:8000/", "http://2130706433/", "http://[::ffff:127.0.0.1]/"):
            precheck(url, allow=LOOPBACK)
        with pytest.raises(TargetError):
            precheck("http://10.0.0.1/", allow=LOOPBACK)


class TestAddresses:
    @pytest.mark.parametrize(
        ("spelling", "address"),
        [
            ("2130706433", "127.0.0.1"),
            ("0x7f.0.0.1", "127.0.0.1"),
            ("0177.0.0.01", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("10.1", "10.0.0.1"),
            ("8.8.8.8", "8.8.8.8"),
        ],
    )
    def test_reads_ipv4_spellings_like_a_resolver(self, spelling: str, address: str) -> None:
        """Decimal, octal, hex and short IPv4 forms mean what inet_aton reads."""
        assert ipaddress.IPv4Address(address) == parse_ipv4_spelling(spelling)

    def test_names_are_not_addresses(self) -> None:
        """A host name is not an IPv4 spelling."""
        assert parse_ipv4_spelling("example.com") is None

    @pytest.mark.parametrize(
        ("address", "public"),
        [
            ("93.184.216.34", True),
            ("2606:4700::1111", True),
            ("127.0.0.1", False),
            ("10.2.3.4", False),
            ("169.254.1.1", False),
            ("::ffff:192.168.0.1", False),
            ("::ffff:93.184.216.34", True),
            ("239.1.1.1", False),
            ("198.18.0.1", False),
        ],
    )
    def test_public_means_global_unicast(self, address: str, public: bool) -> None:
        """Only global unicast addresses (and mapped ones) count as public."""
        assert public == is_public(ipaddress.ip_address(address))


class TestRedaction:
    def test_drops_credentials_and_token_like_values(self) -> None:
        """Final URLs in meta never carry credentials, keys or tokens."""
        url = (
            "https://u:p@example.com/a?q=widgets&api_key=abc&token=xyz"
            "&sig=1&page=2&x=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5"
        )

        redacted = redact_url(url)

        assert "u:p" not in redacted
        assert "q=widgets" in redacted
        assert "page=2" in redacted
        for secret in ("abc", "xyz", "sig=1", "Zm9vYmFy"):
            assert secret not in redacted
        assert redacted.count("REDACTED") == 4

    @pytest.mark.parametrize(
        "url",
        [
            "https://example.com/a?398",
            "https://example.com/a?a=1;b=2",
            "https://example.com/a%2Fb?path=x%2Fy&q=a+b&empty=&flag#frag",
            "https://example.com/?",
            "https://example.com/search?q=%E2%9C%93",
        ],
    )
    def test_a_url_with_nothing_secret_is_left_as_it_is(self, url: str) -> None:
        """``meta["url"]`` is the final URL itself when there is nothing to hide."""
        assert url == redact_url(url)

    def test_only_the_secret_values_change(self) -> None:
        """Redaction drops the credentials and a secret's value, and keeps every other byte of
        the URL (its escapes, separators and fragment) as it was."""
        url = "https://u@example.com/a%2Fb?x=1;y&token=abc%2Fdef&q=a+b#top"

        assert "https://example.com/a%2Fb?x=1;y&token=REDACTED&q=a+b#top" == redact_url(url)


class TestFetchTimeGuard:
    async def test_name_resolving_to_a_private_address_is_refused(self) -> None:
        """A host whose DNS answer is private is refused before any connection."""
        dns = FakeDNS({"intranet.example": [["10.1.2.3"]]})
        backend = RecordingBackend()
        async with WebFetcher(resolver=dns, network_backend=backend) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target("http://intranet.example/"))

        assert info.value.status == 403
        assert "resolves to a private" in info.value.msg
        assert "allow" in info.value.hint
        assert backend.connects == []

    async def test_one_private_answer_among_public_ones_is_refused(self) -> None:
        """Every resolved address must be allowed, not just the first."""
        dns = FakeDNS({"mixed.example": [[PUBLIC_IP, "192.168.0.10"]]})
        backend = RecordingBackend()
        async with WebFetcher(resolver=dns, network_backend=backend) as fetch:
            with pytest.raises(TargetError, match="private"):
                await fetch(CALLER, Target("http://mixed.example/"))

        assert backend.connects == []

    async def test_connects_to_the_checked_answer_only(self, server: LocalSite) -> None:
        """A name whose second DNS answer is private is never reached (no rebinding)."""
        server.route("/", Reply(body=b"hello", headers=[("content-type", "text/plain")]))
        dns = FakeDNS()
        dns.set("rebind.example", ["127.0.0.1"], ["10.9.9.9"])
        backend = RecordingBackend()
        async with WebFetcher(resolver=dns, network_backend=backend, allow=LOOPBACK) as fetch:
            result = await fetch(CALLER, Target(f"http://rebind.example:{server.port}/"))
            with pytest.raises(TargetError, match="private"):
                await fetch(
                    Caller("other"), Target(f"http://rebind.example:{server.port}/?again=1")
                )

        assert result.content == "hello"
        assert dns.calls == ["rebind.example", "rebind.example"]
        assert backend.connects == ["127.0.0.1"]

    async def test_tls_keeps_the_host_name(self, server: LocalSite) -> None:
        """The request still names the host (Host header and SNI), not the pinned address."""
        server.route("/", Reply(body=b"ok", headers=[("content-type", "text/plain")]))
        dns = FakeDNS({"named.example": [["127.0.0.1"]]})
        backend = RecordingBackend()
        async with WebFetcher(resolver=dns, network_backend=backend, allow=LOOPBACK) as fetch:
            result = await fetch(CALLER, Target(f"http://named.example:{server.port}/"))

        assert f"http://named.example:{server.port}/" == result.meta["url"]
        assert backend.connects == ["127.0.0.1"]

    async def test_https_verifies_the_host_name_on_the_pinned_address(
        self, tls_server: TlsServer
    ) -> None:
        """Over TLS the certificate is checked against the host name, not the pinned address."""
        tls_server.server.route(
            "/", Reply(body=b"secret-free", headers=[("content-type", "text/plain")])
        )
        dns = FakeDNS({"secure.example": [["127.0.0.1"]], "impostor.example": [["127.0.0.1"]]})
        backend = RecordingBackend()
        port = tls_server.server.port
        async with WebFetcher(
            resolver=dns,
            network_backend=backend,
            allow=LOOPBACK,
            ssl_context=tls_server.client_context,
        ) as fetch:
            result = await fetch(CALLER, Target(f"https://secure.example:{port}/"))
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"https://impostor.example:{port}/"))

        assert result.content == "secret-free"
        assert info.value.msg == "the site's TLS certificate could not be verified"
        assert backend.connects == ["127.0.0.1", "127.0.0.1"]

    async def test_redirect_chain_ending_in_a_private_address_is_refused(
        self, server: LocalSite
    ) -> None:
        """Every redirect is re-checked: a chain that ends on a private address stops there."""
        server.route("/r1", redirect("/r2"))
        server.route("/r2", redirect("http://10.0.0.1/admin", 301))
        backend = RecordingBackend()
        async with WebFetcher(allow=LOOPBACK, network_backend=backend) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/r1")))

        assert info.value.status == 403
        assert "redirects to a URL that cannot be fetched" in info.value.msg
        assert server.hits["/r1"] == 1
        assert server.hits["/r2"] == 1
        assert all(host == "127.0.0.1" for host in backend.connects)

    async def test_redirect_to_a_name_resolving_private_is_refused(self, server: LocalSite) -> None:
        """A redirect to a host name is resolved and checked like the first hop."""
        server.route("/go", redirect("http://internal.example/"))
        dns = FakeDNS({"internal.example": [["172.20.0.5"]]})
        backend = RecordingBackend()
        async with WebFetcher(resolver=dns, allow=LOOPBACK, network_backend=backend) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(server.url("/go")))

        assert "redirects to a host that resolves to a private" in info.value.msg
        assert dns.calls == ["internal.example"]
        assert backend.connects == ["127.0.0.1"]

    async def test_literal_private_url_is_refused_at_fetch_time(self) -> None:
        """The fetcher runs the pre-check itself, so a URL that skipped submit checks fails."""
        backend = RecordingBackend()
        async with WebFetcher(network_backend=backend) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target("http://0x0a000001/"))

        assert info.value.status == 400
        assert backend.connects == []
