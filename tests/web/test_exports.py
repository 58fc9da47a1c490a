"""The public surface of ``trio_batch.web`` and what it never leaks."""

from __future__ import annotations

import logging
import typing

import httpx
import pytest
import trio

import trio_batch.web
from tests.support import LocalSite, Reply
from tests.web.support import LOOPBACK, PUBLIC_IP, FakeDNS
from trio_batch import Caller, Target, TargetError
from trio_batch.web import WebFetcher


class TestSurface:
    def test_public_names(self) -> None:
        """The module exports exactly its documented names."""
        assert sorted(trio_batch.web.__all__) == [
            "AddressRefused",
            "DEFAULT_USER_AGENT",
            "MapBounds",
            "Network",
            "Resolver",
            "SiteMap",
            "WebFetcher",
            "WebFetcherStatistics",
            "WebSiteGuide",
            "guarded_transport",
            "precheck",
            "shape",
            "site_map",
            "start_shaping",
            "validate_options",
        ]

    def test_classes_are_final_and_report_the_public_module(self) -> None:
        """Public classes are final and live in trio_batch.web."""
        classes = (
            trio_batch.web.AddressRefused,
            trio_batch.web.MapBounds,
            trio_batch.web.SiteMap,
            trio_batch.web.WebFetcher,
            trio_batch.web.WebFetcherStatistics,
        )
        for cls in classes:
            assert cls.__module__ == "trio_batch.web"
            assert getattr(cls, "__final__", False)
        assert typing.get_type_hints(trio_batch.web.precheck)["return"] is type(None)


class TestHygiene:
    async def test_logs_never_name_the_url_or_host(
        self, server: LocalSite, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Log records of fetches, good and bad, carry no URL and no host."""
        server.route("/ok", Reply(body=b"fine", headers=[("content-type", "text/plain")]))
        dns = FakeDNS({"private.example": [["10.0.0.2"]], "named.example": [["127.0.0.1"]]})
        caplog.set_level(logging.DEBUG, logger="trio_batch")
        async with WebFetcher(resolver=dns, allow=LOOPBACK) as fetch:
            await fetch(Caller("a"), Target(f"http://named.example:{server.port}/ok"))
            for url in ("http://private.example/", f"http://named.example:{server.port}/nope"):
                with pytest.raises(TargetError):
                    await fetch(Caller("a"), Target(url))

        assert caplog.records
        for record in caplog.records:
            text = record.getMessage()
            assert "example" not in text
            assert "127.0.0.1" not in text
            assert "http" not in text

    async def test_cancelled_fetch_gives_its_slots_back(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Cancelling a fetch mid-flight releases its pool and caller slots."""

        async def handler(request: httpx.Request) -> httpx.Response:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        dns = FakeDNS({"site.example": [[PUBLIC_IP]]})
        async with WebFetcher(resolver=dns, transport=httpx.MockTransport(handler)) as fetch:
            with trio.move_on_after(5) as scope:
                await fetch(Caller("a"), Target("http://site.example/"))
            stats = fetch.statistics()

        assert scope.cancelled_caught
        assert (stats.in_flight, stats.waiting, stats.callers) == (0, 0, 0)
