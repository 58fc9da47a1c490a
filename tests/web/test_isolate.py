"""Shaping in worker processes: CPU and memory limits, kills, replacement, the cheap path."""

from __future__ import annotations

import os
import re

import httpx
import pytest
import trio
import trio.testing

from tests.web.support import ARTICLE_HTML, CALLER, PUBLIC_IP, SITE, FakeDNS, make_pdf
from trio_batch import Caller, Options, Target, TargetError
from trio_batch.web import WebFetcher
from trio_batch.web._isolate import IN_PROCESS_BYTES, MIN_MEMORY, ShapeLimits, in_process
from trio_batch.web._shape import Body

PAGES: dict[str, tuple[bytes, str]] = {
    "/data.json": (b'{"items": [1, 2, 3]}', "application/json"),
    "/page.html": (ARTICLE_HTML, "text/html"),
    "/hostile.html": (b"<a b='" * 12_000, "text/html"),
    "/small.txt": (b"hello world\n", "text/plain"),
}


async def site(request: httpx.Request) -> httpx.Response:
    await trio.lowlevel.checkpoint()
    body, ctype = PAGES[request.url.path]
    return httpx.Response(200, content=body, headers={"content-type": ctype})


def fetcher(**settings: object) -> WebFetcher:
    """A fetcher over the in-process site above, with shaping limits for a quick test."""
    settings.setdefault("shape_cpu_seconds", 0.5)
    settings.setdefault("shape_memory", MIN_MEMORY)
    return WebFetcher(
        resolver=FakeDNS({"site.example": [[PUBLIC_IP]]}),
        transport=httpx.MockTransport(site),
        **settings,  # type: ignore[arg-type]
    )


def body(data: bytes, ctype: str) -> Body:
    return Body(data, ctype, None, f"{SITE}/")


class TestWhereShapingRuns:
    @pytest.mark.parametrize(
        ("page", "options", "expected"),
        [
            (body(b"text", "text/plain"), Options(), True),
            (body(b"{}", "application/json"), Options(), True),
            (body(ARTICLE_HTML, "text/html"), Options(mode="raw"), True),
            (body(ARTICLE_HTML, "text/html"), Options(mode="html"), True),
            (body(b"x" * IN_PROCESS_BYTES, "text/plain"), Options(question="x"), True),
            (body(b"\x89PNG", "image/png"), Options(), True),
            (body(ARTICLE_HTML, "text/html"), Options(), False),
            (body(ARTICLE_HTML, "text/html"), Options(mode="markdown"), False),
            (body(b"x" * (IN_PROCESS_BYTES + 1), "text/plain"), Options(question="x"), False),
            (body(b"text", "text/plain"), Options(grep="t"), False),
            (body(b"{}", "application/json"), Options(jq="."), False),
            (body(make_pdf(["p"]), "application/pdf"), Options(), False),
        ],
    )
    def test_only_cheap_and_bounded_work_stays_in_the_service(
        self, page: Body, options: Options, expected: bool
    ) -> None:
        """User code, HTML parsing, PDFs and long questions go to a worker; decoding text
        and returning a source stay in a thread of the service."""
        assert expected == in_process(page, options)

    @pytest.mark.parametrize(
        ("settings", "message"),
        [
            ({"shape_workers": 0}, "WebFetcher shape_workers must be >= 1 (got 0)"),
            ({"shape_cpu_seconds": 0}, "WebFetcher shape_cpu_seconds must be > 0 (got 0)"),
            ({"shape_memory": 2**20}, "WebFetcher shape_memory must be at least 268435456"),
        ],
    )
    def test_limits_are_checked(self, settings: dict[str, float], message: str) -> None:
        """A shaping setting out of range is a ValueError naming it."""
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            WebFetcher(**settings)  # type: ignore[arg-type]

    def test_wall_time_allows_for_a_busy_machine(self) -> None:
        """A job gets twice its CPU time of wall time, plus 5 s for a worker to start."""
        assert 25.0 == ShapeLimits(2, 10.0, MIN_MEMORY).wall_seconds


class TestLimits:
    async def test_a_jq_loop_is_killed_at_its_cpu_limit(self) -> None:
        """def f: f; f never ends: the worker is killed at the CPU limit, the target fails
        with a hint, and the next target is shaped by a fresh worker."""
        async with fetcher() as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq="def f: f; f")))
            after = await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq=".items[1]")))

        assert (
            422,
            "shaping this response took more than 0.5 s of CPU time (the limit per target)",
        ) == (info.value.status, info.value.msg)
        assert "ask for less" in info.value.hint
        assert after.content == "2\n"

    async def test_a_memory_bomb_ends_its_worker_not_the_service(
        self, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """def f: 1 + f; f made jq abort the whole service; now it ends a worker at its
        address-space limit, and jq's complaint never reaches the service's output."""
        async with fetcher(shape_cpu_seconds=30.0) as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq="def f: 1 + f; f")))
            after = await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq=".items[0]")))

        assert (
            422,
            "shaping this response needed more than 256 MiB of memory (the limit per target)",
        ) == (info.value.status, info.value.msg)
        assert after.content == "1\n"
        assert "allocate" not in capfd.readouterr().err

    async def test_quadratic_html_is_stopped(self) -> None:
        """64 KiB of <a b=' takes html.parser about 12 s: stopped at the CPU limit."""
        async with fetcher() as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/hostile.html"))

        assert info.value.status == 422
        assert "CPU time" in info.value.msg

    async def test_cancel_kills_the_job_at_once(self) -> None:
        """A cancelled fetch whose body is in a worker returns at once; the worker is killed
        and the next job gets a new one."""
        async with fetcher(shape_cpu_seconds=60.0) as fetch:
            with trio.move_on_after(0.5) as scope:
                await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq="def f: f; f")))
            ended = trio.current_time()
            after = await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq=".items[2]")))

        assert scope.cancelled_caught
        assert ended - scope.deadline < 1.0  # the promise is "at once": no 60 s wait
        assert after.content == "3\n"


class TestFairness:
    @pytest.mark.slow
    async def test_one_caller_never_holds_every_worker(self) -> None:
        """With 2 workers, a caller's two endless jobs get one worker between them: another
        caller's HTML page is shaped in the other one meanwhile."""
        async with fetcher(shape_workers=2, shape_cpu_seconds=20.0) as fetch:
            hog = Caller("hog")
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(
                        fetch, hog, Target(f"{SITE}/data.json", Options(jq="def f: f; f"))
                    )
                # One hog holds a worker, the other waits for its caller's share.
                await trio.testing.wait_all_tasks_blocked()
                start = trio.current_time()
                page = await fetch(Caller("other"), Target(f"{SITE}/page.html"))
                took = trio.current_time() - start
                nursery.cancel_scope.cancel()

        assert page.content.startswith("Widgets")
        assert took < 5.0  # not the hogs' 20 s


def test_workers_do_not_outlive_the_fetcher() -> None:
    """Leaving the fetcher's block ends its worker processes."""

    async def main() -> set[int]:
        async with fetcher() as fetch:
            await fetch(CALLER, Target(f"{SITE}/page.html"))
            return _children()

    before = _children()
    during = trio.run(main)

    assert during - before
    assert set() == (_children() - before)


def _children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[1] == me:
                        found.add(int(entry))
            except OSError:
                continue
    return found
