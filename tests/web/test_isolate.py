"""Shaping in worker processes: CPU and memory limits, kills, replacement, the cheap path."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TypeVar, cast

import httpx
import pytest
import trio
import trio.testing

from tests.support import fresh_python
from tests.web.support import ARTICLE_HTML, CALLER, PUBLIC_IP, SITE, FakeDNS, make_pdf
from trio_batch import Caller, Options, Target, TargetError
from trio_batch.web import WebFetcher
from trio_batch.web._extract._isolate import (
    IN_PROCESS_BYTES,
    MIN_MEMORY,
    ON_LOOP_BYTES,
    ShapeLimits,
    Shaper,
    WorkerContext,
    in_process,
)
from trio_batch.web._extract._preload import PRELOADED
from trio_batch.web._extract._shape import Body, shape_body
from trio_batch.web._extract._worker import Shaped

T = TypeVar("T")
PAGES: dict[str, tuple[bytes, str]] = {
    "/data.json": (b'{"items": [1, 2, 3]}', "application/json"),
    "/old-quadratic.html": (b"<a b='" * 12_000, "text/html"),
    "/huge-attribute.html": (b"<p class='" + b"x" * 9 * 2**20 + b"'>kept</p>", "text/html"),
    "/invalid-utf8.html": (b"<p>kept</p>" + bytes(range(256)) * 2_000, "text/html; charset=utf-8"),
    "/utf7.html": (b"<p>kept +2D0-</p>", "text/html; charset=utf-7"),
    "/nul.html": (b"<p>kept</p>" + b"\x00" * 2**20, "text/html"),
    "/open-comment.html": (b"<p>kept</p><!--" + b"<!--x" * 200_000, "text/html"),
    "/nested-inline.html": (b"<p>kept</p>" + b"<b><i><a href=x>y" * 20_000, "text/html"),
    "/page.html": (ARTICLE_HTML, "text/html"),
    "/hostile.html": (b"<div>" * 200_000, "text/html"),
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


def body(data: bytes, ctype: str, url: str = f"{SITE}/") -> Body:
    return Body(data, ctype, None, url)


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

    @pytest.mark.parametrize(
        ("page", "options", "on_loop"),
        [
            (body(b"text", "text/plain"), Options(), True),
            (body(b"x" * ON_LOOP_BYTES, "text/plain"), Options(mode="markdown"), True),
            (body(b'{"a": 1}', "application/json"), Options(formats=("raw",)), True),
            (body(b"x" * (ON_LOOP_BYTES + 1), "text/plain"), Options(), False),
            (body(b"text", "text/plain"), Options(question="text"), False),
        ],
    )
    async def test_a_small_body_that_needs_only_decoding_is_shaped_on_the_loop(
        self, page: Body, options: Options, on_loop: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A thread's round trip costs more CPU than decoding a small body: such a body is
        shaped on the event loop, as the thread would have shaped it; others still go to a
        thread."""
        threads: list[object] = []
        to_thread = trio.to_thread.run_sync

        async def counted(fn: Callable[[], T], **kwargs: object) -> T:
            threads.append(fn)
            return await to_thread(fn, **kwargs)  # type: ignore[arg-type]

        shaper = Shaper(cast("WorkerContext", None), ShapeLimits(1, 1.0, MIN_MEMORY))
        monkeypatch.setattr(trio.to_thread, "run_sync", counted)
        shaped = await shaper.run("c", page, options)

        assert shaped == shape_body(page, options)
        assert len(threads) == (0 if on_loop else 1)

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
        """200,000 nested <div>s (1 MB): HTML5's tree building is quadratic in the depth
        (50,000 take lexbor 2.3 s), so the page is stopped at the CPU limit."""
        async with fetcher() as fetch:
            with pytest.raises(TargetError) as info:
                await fetch(CALLER, Target(f"{SITE}/hostile.html"))

        assert info.value.status == 422
        assert "CPU time" in info.value.msg

    @pytest.mark.parametrize(
        "path",
        [
            "/old-quadratic.html",
            "/huge-attribute.html",
            "/invalid-utf8.html",
            "/utf7.html",
            "/nul.html",
            "/open-comment.html",
            "/nested-inline.html",
        ],
    )
    @pytest.mark.parametrize("mode", ["text", "markdown"])
    async def test_hostile_html_is_shaped_within_the_limits(self, path: str, mode: str) -> None:
        """Inputs that are linear for lexbor (64 KiB of <a b=' took html.parser 12 s; a 9 MiB
        attribute; broken or odd encodings; NULs; an unclosed comment; 60,000 open inline
        elements) are shaped within 3 s of CPU time and 256 MiB: the page's text comes back.
        (60,000 open inline elements take about 1 s on a slow 2-core VM; quadratic work on
        them would take minutes.)"""
        async with fetcher(shape_cpu_seconds=3.0) as fetch:
            result = await fetch(CALLER, Target(f"{SITE}{path}", Options(mode=mode)))

        assert path == "/old-quadratic.html" or result.content.startswith("kept")

    async def test_cancel_kills_the_job_at_once(self) -> None:
        """A cancelled fetch whose body is in a worker returns at once; the worker is killed
        and the next job gets a new one. "At once" is measured against that next job, which
        starts a worker in the same test (so a loaded machine slows both), not the 60 s the
        endless job would take."""
        async with fetcher(shape_cpu_seconds=60.0) as fetch:
            with trio.move_on_after(0.5) as scope:
                await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq="def f: f; f")))
            ended = trio.current_time()
            after = await fetch(CALLER, Target(f"{SITE}/data.json", Options(jq=".items[2]")))
            next_job = trio.current_time() - ended

        assert scope.cancelled_caught
        assert ended - scope.deadline < max(1.0, 2 * next_job)  # about 0.01 s; not 60 s
        assert after.content == "3\n"


class GatedWorkers:
    """A stand-in for trio-parallel's context: each job runs until its page's gate opens."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, trio.Event] = {}

    async def run_sync(
        self,
        sync_fn: Callable[..., T],
        *args: object,
        kill_on_cancel: bool,
        limiter: trio.CapacityLimiter,
    ) -> T:
        page = args[0]
        assert isinstance(page, Body)
        self.started.append(page.url)
        await self.gates.setdefault(page.url, trio.Event()).wait()
        return cast("T", Shaped(page.url, {}))


class TestFairness:
    async def test_a_caller_alone_uses_every_worker_and_the_next_goes_to_another(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Alice alone has both workers (her third job waits); bob, who comes next, gets the
        first worker that comes free, before alice's third job: he waits for one job."""
        workers = GatedWorkers()
        shaper = Shaper(workers, ShapeLimits(2, 10.0, MIN_MEMORY))

        async def shape(caller: str, name: str) -> None:
            await shaper.run(caller, body(ARTICLE_HTML, "text/html", name), Options())

        async with trio.open_nursery() as nursery:
            for name in ("a1", "a2", "a3"):
                nursery.start_soon(shape, "alice", name)
                await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(shape, "bob", "b1")
            await trio.testing.wait_all_tasks_blocked()
            alone = list(workers.started)
            workers.gates["a2"].set()
            await trio.testing.wait_all_tasks_blocked()
            next_one = workers.started[2:]
            for name in ("a1", "a3", "b1"):
                workers.gates.setdefault(name, trio.Event()).set()
                await trio.testing.wait_all_tasks_blocked()

        assert ["a1", "a2"] == alone
        assert ["b1"] == next_one
        assert ["a1", "a2", "b1", "a3"] == workers.started

    @pytest.mark.slow
    async def test_a_waiting_caller_waits_for_one_job_at_most(self) -> None:
        """With 2 workers, a caller's endless jobs take both (no one else waits); another
        caller's page is shaped as soon as the first of them is stopped at its CPU limit: its
        wait is that one job, then a worker's start and the page (a page on a new fetcher,
        measured in the same test, so a loaded machine stretches them alike), not the hog's
        jobs in turn."""
        endless = Target(f"{SITE}/data.json", Options(jq="def f: f; f"))
        stopped: list[float] = []

        async def hogging(fetch: WebFetcher) -> None:
            await _fails(fetch, Caller("hog"), endless)
            stopped.append(trio.current_time())

        async with (
            fetcher(shape_workers=2, shape_cpu_seconds=2.0, shape_warm=False) as fetch,
            trio.open_nursery() as nursery,
        ):
            for _ in range(3):
                nursery.start_soon(hogging, fetch)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            page = await fetch(Caller("other"), Target(f"{SITE}/page.html"))
            took = trio.current_time() - start
            nursery.cancel_scope.cancel()
        async with fetcher(shape_workers=2, shape_warm=False) as fresh:
            begun = trio.current_time()  # a worker starts, then shapes the page
            await fresh(Caller("alone"), Target(f"{SITE}/page.html"))
            alone = trio.current_time() - begun

        assert page.content.startswith("Widgets")
        assert stopped, "no hog job was stopped before the page was shaped"
        first_stopped = min(stopped) - start
        assert took < first_stopped + 2 * alone + 0.5  # one job, not the hog's three in turn


async def _fails(fetch: WebFetcher, caller: Caller, target: Target) -> None:
    with pytest.raises(TargetError):
        await fetch(caller, target)


def test_what_a_worker_imports_is_the_shaping_code_alone() -> None:
    """The fork server imports the worker's side (``PRELOADED``) before the first page of every
    run can be shaped, so that is only the shaping code: not Trio, not the engine or the stores
    (0.22 s of a 0.69 s one-page run when it was), and every public name of the package still
    comes from it, through its module, without them (a worker unpickles
    ``trio_batch.Options``)."""
    script = (
        "import sys\n"
        f"for name in {list(PRELOADED)!r}:\n"
        "    __import__(name)\n"
        "import trio_batch\n"
        "assert trio_batch.Options.__module__ == 'trio_batch'\n"
        "print('\\n'.join(sys.modules))"
    )
    loaded = set(fresh_python(script).split())

    assert "trio_batch.web._extract._shape" in loaded
    assert "_trio_parallel_workers" in loaded
    assert set() == {
        name
        for name in loaded
        if name.partition(".")[0] in ("trio", "trio_parallel", "httpx", "sqlite3")
        or name.startswith(("trio_batch._engine", "trio_batch.stores", "trio_batch._budget"))
    }


def test_start_shaping_launches_the_fork_server_with_the_shaping_preload() -> None:
    """``start_shaping()`` (``trio-batch run`` calls it first thing) has the fork server running
    at once, told to import the worker's side, so its start overlaps the program's imports; a
    second call starts no other."""
    script = (
        "import os, trio_batch.web as web\n"
        "web.start_shaping()\n"
        "web.start_shaping()\n"
        "me = str(os.getpid())\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        stat = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()\n"
        "        line = open(f'/proc/{pid}/cmdline').read().replace('\\0', ' ')\n"
        "    except (OSError, IndexError):\n"
        "        continue\n"
        "    if stat[1] == me and 'forkserver' in line:\n"
        "        print(line)\n"
    )
    servers = fresh_python(script).splitlines()

    assert 1 == len(servers)
    assert all(name in servers[0] for name in PRELOADED)


@pytest.mark.parametrize(
    ("settings", "options", "expected"),
    [({}, Options(), 1), ({"shape_warm": False}, Options(), 0), ({}, Options(mode="raw"), 0)],
)
def test_the_first_fetch_that_may_shape_starts_a_worker(
    settings: dict[str, object], options: Options, expected: int
) -> None:
    """The first worker takes 0.2-2 s to start, so one starts beside the first download that
    may need it (here a text page, shaped in a thread): the next page finds it running. A fetch that
    cannot need one (mode=raw), or ``shape_warm=False``, starts none."""

    async def main() -> int:
        async with fetcher(shape_workers=2, **settings) as fetch:
            await fetch(CALLER, Target(f"{SITE}/small.txt", options))
            return len(_children() - before)

    before = _children()

    assert expected == trio.run(main)


def test_warm_starts_a_worker_before_any_fetch_and_the_first_fetch_starts_no_other() -> None:
    """``WebFetcher.warm()`` (serve calls it as it starts) has a worker running before the
    first page; that page then starts no second one beside its download."""

    async def main() -> tuple[int, int]:
        async with fetcher(shape_workers=2) as fetch:
            await fetch.warm()
            warmed = len(_children() - before)
            await fetch(CALLER, Target(f"{SITE}/small.txt"))
            return warmed, len(_children() - before)

    before = _children()

    assert (1, 1) == trio.run(main)


def test_warm_outside_the_block_is_a_clear_error() -> None:
    """``warm()`` outside the fetcher's block is a clear error: not open before, closed after."""

    async def main() -> None:
        fetch = fetcher()
        with pytest.raises(RuntimeError, match="not open"):
            await fetch.warm()
        async with fetch:
            pass
        with pytest.raises(trio.ClosedResourceError):
            await fetch.warm()

    trio.run(main)


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
    """The shaping workers of this process: the children of its fork server (which the first
    worker of a process starts, once, beside multiprocessing's resource tracker; neither is a
    worker, and a test run alone counted them)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    servers = {pid for pid, parent in parents.items() if parent == os.getpid() and _forks(pid)}
    return {pid for pid, parent in parents.items() if parent in servers}


def _forks(pid: int) -> bool:
    """Whether ``pid`` is multiprocessing's fork server."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"forkserver" in cmdline.read()
    except OSError:
        return False
