"""The guarded proxy: the browser's only way out goes through the guard and the host budget."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests.support import open_site
from tests.web.support import (
    ALLOW,
    ALLOWED_HOST,
    FORBIDDEN_HOST,
    html_page,
    open_counting_listener,
)
from trio_batch import HostBudget, HostSlot
from trio_batch.web._render._proxy import MAX_HEAD_BYTES, REFUSED_HEADER, open_guarded_proxy


async def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` to the proxy and read everything until it closes the connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = bytearray()
        while chunk := await stream.receive_some(65536):
            data += chunk
        return bytes(data)


def get(url: str, host: str, *extra: str) -> bytes:
    lines = [f"GET {url} HTTP/1.1", f"Host: {host}", "Proxy-Connection: keep-alive", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class TestRefusal:
    async def test_a_plain_request_to_a_refused_address_gets_a_403_and_no_connection(
        self,
    ) -> None:
        """A request for an address outside the allow-list is answered 403 by the proxy, counted
        as refused, and nothing reaches the address."""
        async with open_counting_listener() as private, open_guarded_proxy(allow=ALLOW) as proxy:
            where = f"{FORBIDDEN_HOST}:{private.port}"
            answer = await exchange(proxy.port, get(f"http://{where}/secret", where))

            assert answer.startswith(b"HTTP/1.1 403 ")
            assert REFUSED_HEADER.encode() in answer
            assert 1 == proxy.statistics().refused
            assert 0 == private.connections

    async def test_a_tunnel_to_a_refused_address_gets_a_403_and_no_connection(self) -> None:
        """CONNECT (HTTPS, WebSockets) to a refused address is answered 403, nothing reached."""
        async with open_counting_listener() as private, open_guarded_proxy(allow=ALLOW) as proxy:
            where = f"{FORBIDDEN_HOST}:{private.port}"
            answer = await exchange(
                proxy.port, f"CONNECT {where} HTTP/1.1\r\nHost: {where}\r\n\r\n".encode()
            )

            assert answer.startswith(b"HTTP/1.1 403 ")
            assert 1 == proxy.statistics().refused
            assert 0 == private.connections

    async def test_a_name_that_resolves_to_a_refused_address_is_refused(self) -> None:
        """The proxy resolves names itself and checks every answer: one refused address among
        allowed ones refuses the request."""

        async def resolver(host: str, port: int) -> list[str]:
            await trio.lowlevel.checkpoint()
            return [ALLOWED_HOST, FORBIDDEN_HOST]

        async with (
            open_counting_listener() as private,
            open_guarded_proxy(allow=ALLOW, resolver=resolver) as proxy,
        ):
            where = f"site.example:{private.port}"
            answer = await exchange(proxy.port, get(f"http://{where}/", where))

            assert answer.startswith(b"HTTP/1.1 403 ")
            assert 0 == private.connections

    async def test_the_pinned_address_is_the_one_connected_to(self) -> None:
        """A name is resolved once and the connection goes to the checked answer (a later DNS
        answer cannot swap it)."""
        answers = [[ALLOWED_HOST], [FORBIDDEN_HOST]]

        async def resolver(host: str, port: int) -> list[str]:
            await trio.lowlevel.checkpoint()
            return answers.pop(0)

        async with (
            open_site(ALLOWED_HOST) as site,
            open_guarded_proxy(allow=ALLOW, resolver=resolver) as proxy,
        ):
            site.route("/", html_page(b"hello"))
            where = f"site.example:{site.port}"
            answer = await exchange(proxy.port, get(f"http://{where}/", where))

            assert answer.startswith(b"HTTP/1.1 200 ")
            assert answer.endswith(b"hello")
            assert [[FORBIDDEN_HOST]] == answers

    async def test_an_oversized_head_gets_a_431(self) -> None:
        """A request head over the limit is answered 431 without reading on."""
        async with open_guarded_proxy(allow=ALLOW) as proxy:
            huge = "X-Big: " + "a" * (MAX_HEAD_BYTES + 10)
            answer = await exchange(proxy.port, get("http://127.0.0.2:9/", "x", huge))

            assert answer.startswith(b"HTTP/1.1 431 ")

    async def test_an_idle_connection_is_closed(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A browser connection that sends nothing is answered 408 and closed after the idle
        time."""
        async with open_guarded_proxy(allow=ALLOW, idle_seconds=5) as proxy:
            stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            async with stream:
                await stream.send_all(b"GET http://127.0.0.2:9/ HTTP/1.1\r\n")
                answer = await stream.receive_some(65536)

            assert answer.startswith(b"HTTP/1.1 408 ")

    async def test_connections_past_the_limit_get_a_503(self) -> None:
        """The proxy holds at most max_connections browser connections at once."""
        async with open_guarded_proxy(allow=ALLOW, max_connections=1) as proxy:
            first = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            async with first:
                await trio.testing.wait_all_tasks_blocked()
                answer = await exchange(proxy.port, get("http://127.0.0.2:9/", "x"))

            assert answer.startswith(b"HTTP/1.1 503 ")

    @pytest.mark.parametrize("value", [0, float("nan")])
    async def test_settings_out_of_range_are_refused(self, value: float) -> None:
        """A setting out of range is a ValueError naming it."""
        with pytest.raises(ValueError, match=r"^idle_seconds must be a finite number > 0"):
            async with open_guarded_proxy(idle_seconds=value):
                pass  # pragma: no cover


class TestRelay:
    async def test_an_allowed_request_is_relayed_with_connection_close(self) -> None:
        """An allowed plain request reaches the site in origin form without the proxy's own
        headers, and its answer comes back marked Connection: close."""
        async with open_site(ALLOWED_HOST) as site, open_guarded_proxy(allow=ALLOW) as proxy:
            site.route("/page", html_page(b"<p>hi</p>"))
            where = f"{ALLOWED_HOST}:{site.port}"
            answer = await exchange(
                proxy.port, get(f"http://{where}/page?q=1", where, "Accept-Language: fr")
            )

            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert b"connection: close" in head.lower()
            assert b"<p>hi</p>" == body
            assert ["/page"] == site.paths()
            assert "fr" == site.seen[0].headers["accept-language"]
            assert "proxy-connection" not in site.seen[0].headers
            assert 1 == proxy.statistics().requests

    async def test_a_request_body_is_relayed(self) -> None:
        """A body with a Content-Length reaches the site whole."""
        async with open_site(ALLOWED_HOST) as site, open_guarded_proxy(allow=ALLOW) as proxy:
            site.route("/form", html_page(b"ok"))
            where = f"{ALLOWED_HOST}:{site.port}"
            request = (
                f"POST http://{where}/form HTTP/1.1\r\nHost: {where}\r\n"
                "Content-Length: 5\r\n\r\nhello"
            ).encode()
            answer = await exchange(proxy.port, request)

            assert answer.endswith(b"ok")
            assert ["/form"] == site.paths()

    async def test_a_tunnel_relays_bytes_both_ways(self) -> None:
        """CONNECT to an allowed address answers 200 and then carries the bytes as they are."""
        async with open_site(ALLOWED_HOST) as site, open_guarded_proxy(allow=ALLOW) as proxy:
            site.route("/", html_page(b"through the tunnel"))
            where = f"{ALLOWED_HOST}:{site.port}"
            request = f"CONNECT {where} HTTP/1.1\r\nHost: {where}\r\n\r\n".encode()
            request += f"GET / HTTP/1.1\r\nHost: {where}\r\nConnection: close\r\n\r\n".encode()
            answer = await exchange(proxy.port, request)

            assert answer.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            assert answer.endswith(b"through the tunnel")
            assert 1 == proxy.statistics().tunnels


class TestBudget:
    async def test_two_requests_to_one_host_never_overlap_at_concurrency_one(self) -> None:
        """With HostBudget(concurrency=1) the proxy holds the host's slot for each request, so
        a second request reaches the site only after the first has been answered."""
        budget = HostBudget(concurrency=1)
        async with (
            open_site(ALLOWED_HOST) as site,
            open_guarded_proxy(allow=ALLOW, budget=budget) as proxy,
            trio.open_nursery() as nursery,
        ):
            release = trio.Event()
            site.route("/slow", html_page(b"slow", hold=release))
            site.route("/other", html_page(b"other"))
            where = f"{ALLOWED_HOST}:{site.port}"
            answers: list[bytes] = []

            async def fetch(path: str) -> None:
                answers.append(await exchange(proxy.port, get(f"http://{where}{path}", where)))

            nursery.start_soon(fetch, "/slow")
            await site.arrived.wait()
            nursery.start_soon(fetch, "/other")
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert ["/slow"] == site.paths()

            release.set()

        assert ["/slow", "/other"] == site.paths()
        assert 1 == site.most_in_flight
        assert 2 == len(answers)

    async def test_a_held_slot_is_used_for_its_own_host(self) -> None:
        """Requests to the host whose slot the caller already holds (the engine's) run in that
        slot instead of waiting for a second one, which at concurrency 1 would never come."""
        budget = HostBudget(concurrency=1)
        async with (
            open_site(ALLOWED_HOST) as site,
            open_guarded_proxy(allow=ALLOW, budget=budget) as proxy,
        ):
            site.route("/", html_page(b"mine"))
            where = f"{ALLOWED_HOST}:{site.port}"
            slot = budget.try_start(where)
            assert isinstance(slot, HostSlot)
            with proxy.holding(slot), trio.fail_after(10):
                answer = await exchange(proxy.port, get(f"http://{where}/", where))

            assert answer.endswith(b"mine")

    async def test_a_429_pushes_the_host_back(self) -> None:
        """A site's 429 through the proxy backs its scope off, as the fetcher's requests do."""
        budget = HostBudget(concurrency=1)
        async with (
            open_site(ALLOWED_HOST) as site,
            open_guarded_proxy(allow=ALLOW, budget=budget) as proxy,
        ):
            site.route("/", html_page(b"slow down", 429))
            where = f"{ALLOWED_HOST}:{site.port}"
            await exchange(proxy.port, get(f"http://{where}/", where))

            waiting = budget.waiting(where)
            assert waiting is not None
            assert "backoff" == waiting.reason
