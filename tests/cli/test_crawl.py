"""``trio-batch crawl URL``: a crawl of a local site, its lines as pages are stored, exact and
resumable, its flags checked before anything is fetched.

The in-process tests call :func:`run_crawl` (the command's body) in the test's Trio loop beside
the site; the pipe and kill tests run the command as a process of its own (slow).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio
from bench.crawl_site import CrawlSite, serve_crawl_site

from tests.support import CLEAN_ENV, Reply, serve_site
from trio_batch import TargetState
from trio_batch._cli import EXIT_CLOSED_PIPE, build_parser, main
from trio_batch._cli._crawl import crawl_spec, run_crawl
from trio_batch.stores import SQLiteStore

from .support import CLI

pytest.importorskip("httpx")  # the web fetcher


LOOPBACK = ["--allow-net", "127.0.0.0/8"]


def _args(*argv: str) -> list[str]:
    return ["crawl", *argv]


async def _crawl(
    argv: list[str], db: Path, out: Callable[[str], None] | None = None
) -> tuple[int, list[dict[str, object]], str]:
    """``trio-batch crawl ARGV`` in this Trio loop (no signal handling, no display): its exit
    code, its lines and what it wrote on stderr."""
    args = build_parser().parse_args(["crawl", *argv, *LOOPBACK])
    lines: list[dict[str, object]] = []
    err = io.StringIO()

    def write(line: str) -> None:
        lines.append(json.loads(line))
        if out is not None:
            out(line)

    code = await run_crawl(
        crawl_spec(args),
        db=str(db),
        out=write,
        err=err,
        allow=args.allow_net,
        progress="off",
        handle_sigint=False,
        resume=args.resume,
        fresh=args.fresh,
    )
    return code, lines, err.getvalue()


def _page_ids(site: CrawlSite, urls: list[str]) -> list[str]:
    """The site's page id of each URL (every spelling of one page is one id)."""
    ids = []
    for url in urls:
        parts = urlsplit(url)
        ids.append(site.page_of(parts.path + (f"?{parts.query}" if parts.query else "")))
    return ids


class TestCrawl:
    async def test_the_limit_is_exact_and_each_page_is_fetched_once(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """--limit 40 at --concurrency 8 of a 200-page site with traps: exactly 40 pages done,
        one line each, no page requested twice, and the command says the crawl ended well."""
        site = await serve_crawl_site(nursery, 200)

        code, lines, err = await _crawl(
            [site.start, "--limit", "40", "--concurrency", "8", "--max-depth", "8"],
            tmp_path / "c.sqlite",
        )

        assert 0 == code, err
        assert 40 == sum(1 for line in lines if line["status"] == "done")
        assert len(lines) == len({line["idx"] for line in lines})
        ids = _page_ids(site, [str(line["url"]) for line in lines])
        assert len(ids) == len(set(ids))
        assert [] == site.twice()
        assert "40 pages done, 0 failed (limit 40)" in err

    async def test_robots_txt_is_obeyed_unless_no_robots(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """A crawl obeys robots.txt without being asked: the disallowed page the home page
        links is never requested; --no-robots fetches it."""
        site = await serve_crawl_site(nursery, 10)

        code, _, err = await _crawl([site.start, "--limit", "100"], tmp_path / "a.sqlite")
        obeyed = site.disallowed()
        site.reset()
        await _crawl([site.start, "--limit", "100", "--no-robots"], tmp_path / "b.sqlite")

        assert 0 == code, err
        assert [] == obeyed
        assert "1 robots" in err
        assert ["private/secret"] == site.disallowed()

    async def test_the_first_line_is_written_before_the_crawl_ends(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """The start page's line is written while a page it links is still being answered:
        lines stream as pages are stored, they do not wait for the crawl's end."""
        site = await serve_site(nursery)
        held = trio.Event()
        page = b'<html><body><a href="/a">a</a> <a href="/b">b</a></body></html>'
        html = [("content-type", "text/html")]
        site.route("/", Reply(200, page, html))
        site.route("/a", Reply(200, b"<html><body>a</body></html>", html))
        site.route("/b", Reply(200, b"<html><body>b</body></html>", html, hold=held))
        first = trio.Event()
        written_while_held: list[bool] = []

        def out(line: str) -> None:
            if not first.is_set():
                written_while_held.append(not held.is_set() and site.hits["/b"] <= 1)
                first.set()

        async def release() -> None:
            await first.wait()
            held.set()

        nursery.start_soon(release)
        code, lines, err = await _crawl([site.url("/")], tmp_path / "s.sqlite", out)

        assert 0 == code, err
        assert [True] == written_while_held
        assert [site.url("/"), site.url("/a"), site.url("/b")] == [line["url"] for line in lines]

    async def test_the_same_crawl_again_reuses_the_stored_one(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """The same crawl on the same --db prints the stored lines and fetches nothing; --fresh
        crawls again."""
        site = await serve_crawl_site(nursery, 30)
        argv = [site.start, "--limit", "10"]
        await _crawl(argv, tmp_path / "c.sqlite")
        site.reset()

        code, lines, err = await _crawl(argv, tmp_path / "c.sqlite")
        again = site.requests
        await _crawl([*argv, "--fresh"], tmp_path / "c.sqlite")

        assert 0 == code, err
        assert 10 == len(lines)
        assert 0 == again
        assert "nothing was fetched again" in err
        assert site.requests >= 10


class TestBadFlags:
    @pytest.mark.parametrize(
        ("argv", "hint"),
        [
            (["--limit", "0"], "above 0"),
            (["--scope", "nope"], "choose from"),
            (["--max-depth", "65"], "from 0 (the start page alone) to 64"),
            (["--include", "docs/*"], "e.g. /docs/**"),
            (["--sitemaps", "all"], "choose from"),
            (["--concurrency", "-1"], "above 0"),
            (["--header", "Cookie"], "Name: value"),
        ],
    )
    def test_a_bad_value_is_a_usage_error_naming_the_flag(
        self, argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A bad flag ends the command with exit 2 before anything is fetched, and the message
        names the flag and what to write."""
        with pytest.raises(SystemExit) as stopped:
            main(_args("https://example.org/", *argv))

        message = capsys.readouterr().err
        assert 2 == stopped.value.code
        assert argv[0] in message
        assert hint in message

    @pytest.mark.parametrize(
        ("argv", "hint"),
        [
            (["--limit", "20000"], "--max-crawl-pages 20000"),
            (["--prefix", "/docs/", "--scope", "host"], "drop one of them"),
            (["--resume", "--fresh"], "pass one"),
            (["--include", "/a"] * 33, "at most 32"),
        ],
    )
    def test_flags_that_do_not_go_together_are_a_usage_error(
        self, argv: list[str], hint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Flags each valid but not together: exit 2, a line saying what to change, no store
        made."""
        code = main(_args("https://example.org/", "--db", str(tmp_path / "x.sqlite"), *argv))

        assert 2 == code
        assert hint in capsys.readouterr().err
        assert not (tmp_path / "x.sqlite").exists()

    def test_a_url_that_cannot_be_crawled_is_a_usage_error(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`crawl ftp://...`: exit 2 with an example of a URL that can be crawled."""
        code = main(_args("ftp://example.org/", "--db", str(tmp_path / "x.sqlite")))

        assert 2 == code
        assert "e.g. https://example.org/docs/" in capsys.readouterr().err

    async def test_a_loopback_start_without_allow_net_names_the_flag(self, tmp_path: Path) -> None:
        """A start page on this machine without --allow-net: exit 2, naming the flag to pass."""
        args = build_parser().parse_args(_args("http://127.0.0.1:9/"))
        err = io.StringIO()

        with pytest.raises(Exception, match=r"--allow-net 127\.0\.0\.0/8"):
            await run_crawl(
                crawl_spec(args),
                db=str(tmp_path / "x.sqlite"),
                out=lambda line: None,
                err=err,
                progress="off",
                handle_sigint=False,
            )

    def test_help_lists_every_flag(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`trio-batch crawl --help` names every flag the docs promise, each with its why."""
        with pytest.raises(SystemExit):
            main(["crawl", "--help"])

        text = capsys.readouterr().out
        for flag in (
            "--limit",
            "--max-depth",
            "--concurrency",
            "--scope",
            "--prefix",
            "--include",
            "--exclude",
            "--sitemaps",
            "--formats",
            "--render",
            "--no-robots",
            "--header",
            "--host-concurrency",
            "--max-crawl-pages",
            "--allow-net",
            "--db",
            "--resume",
            "--fresh",
            "--out",
            "--progress",
            "--server",
        ):
            assert flag in text


async def _lines_of(stream: trio.abc.ReceiveStream, n: int) -> list[bytes]:
    """Read ``stream`` until it has given ``n`` whole lines (or ended)."""
    data = b""
    while data.count(b"\n") < n:
        chunk = await stream.receive_some()
        if not chunk:
            break
        data += chunk
    return data.split(b"\n")[:n]


@pytest.mark.slow
class TestProcess:
    async def test_a_reader_that_goes_away_ends_it_quietly(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """`trio-batch crawl URL --limit N | head -3`: three lines, then the command ends by
        itself with the status of a writer SIGPIPE ended and no traceback. (N is 150: its
        lines are more than a pipe's buffer holds, so a write fails after the reader left.)"""
        site = await serve_crawl_site(nursery, 200)
        read_end, write_end = os.pipe()
        proc = await trio.lowlevel.open_process(
            [*CLI, *_args(site.start, "--limit", "150", *LOOPBACK, "--progress", "off")],
            cwd=tmp_path,
            env=CLEAN_ENV,
            stdout=write_end,
            stderr=subprocess.PIPE,
        )
        os.close(write_end)
        with trio.fail_after(60):
            with os.fdopen(read_end, "rb") as reader:
                head = [await trio.to_thread.run_sync(reader.readline) for _ in range(3)]
            assert proc.stderr is not None
            err = b"".join([chunk async for chunk in proc.stderr])
            await proc.wait()

        assert 3 == len([line for line in head if line.startswith(b"{")])
        assert EXIT_CLOSED_PIPE == proc.returncode
        assert b"Traceback" not in err

    async def test_resume_after_kill_fetches_no_stored_page_again(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """kill -9 in the middle of a crawl, then the same command with --resume: the crawl
        ends with exactly --limit pages, one line each, and no page stored before the kill is
        requested again."""
        site = await serve_crawl_site(nursery, 300, seconds=0.02)
        db = tmp_path / "c.sqlite"
        argv = [*CLI, *_args(site.start, "--limit", "60", "--db", str(db), *LOOPBACK)]
        argv += ["--progress", "off", "--max-depth", "8"]
        first = await trio.lowlevel.open_process(
            argv, env=CLEAN_ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert first.stdout is not None
        with trio.fail_after(60):
            await _lines_of(first.stdout, 15)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        async with SQLiteStore.open(str(db), readonly=True) as store:
            (job,) = await store.list_jobs("cli", None, 10, None)
            stored = await store.read_targets(job.job.id, -1, 1000, [TargetState.DONE])
        before = set(_page_ids(site, [t.url for t in stored]))

        with trio.fail_after(120):
            second = await trio.run_process(
                [*argv, "--resume"],
                env=CLEAN_ENV,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        lines = [json.loads(line) for line in second.stdout.splitlines()]

        assert 0 == second.returncode, second.stderr.decode()[-2000:]
        assert 15 <= len(before) < 60
        assert 60 == sum(1 for line in lines if line["status"] == "done")
        assert len(lines) == len({line["idx"] for line in lines})
        assert [] == [page for page in site.twice() if page in before]
        assert b"carried on the crawl" in second.stderr


@pytest.mark.slow
class TestServer:
    async def test_crawl_on_a_server_prints_its_pages(
        self, nursery: trio.Nursery, tmp_path: Path
    ) -> None:
        """`crawl --server URL` submits the crawl (client.crawl) and prints each page's line
        from the server, exactly --limit pages."""
        pytest.importorskip("starlette")
        from trio_batch import Config, open_engine
        from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key, serve
        from trio_batch.stores import MemoryStore
        from trio_batch.web import WebFetcher, WebSiteGuide

        site = await serve_crawl_site(nursery, 60)
        key = "tb_alice-test-key"
        keys = KeyRing([KeyRecord("alice", "lab", "fleet", hash_key(key))])
        async with (
            WebFetcher(allow=site.allow) as fetch,
            open_engine(MemoryStore(), fetch, Config(), site_guide=WebSiteGuide(fetch)) as engine,
        ):
            app = create_app(engine, keys, precheck=lambda url: None, access_log_enabled=False)
            port: int = await nursery.start(
                lambda task_status: serve(app, port=0, task_status=task_status)
            )
            done = await trio.run_process(
                [*CLI, *_args(site.start, "--limit", "12", "--server", f"http://127.0.0.1:{port}")],
                env={**CLEAN_ENV, "TRIO_BATCH_KEY": key},
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        lines = [json.loads(line) for line in done.stdout.splitlines()]

        assert 0 == done.returncode, done.stderr.decode()[-2000:]
        assert 12 == sum(1 for line in lines if line["status"] == "done")
