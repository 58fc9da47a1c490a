"""``trio-batch run`` end to end against the local demo site, and its input parsing."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import re
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
import trio

import trio_batch.web
from trio_batch import Options, Target
from trio_batch._cli import build_parser, main
from trio_batch._cli._demo_site import DemoSite, serve_demo_site
from trio_batch._cli._option_flags import option_defaults
from trio_batch._cli._run import UsageError, fetched_again, parse_targets, run_batch
from trio_batch._model import JSONValue
from trio_batch.stores import SQLiteStore
from trio_batch.testing import ScriptedFetch

from .support import CLI

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def _db_rows(db: Path) -> tuple[list[tuple[str, str, int]], list[tuple[str, int, str]]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        jobs = conn.execute(
            "SELECT status, error, targets_done FROM jobs ORDER BY created_at, rowid"
        ).fetchall()
        targets = conn.execute("SELECT job_id, idx, status FROM targets").fetchall()
    finally:
        conn.close()
    return jobs, targets


class TestParseTargets:
    def test_urls_and_json_lines_mix_and_comments_are_skipped(self) -> None:
        """A file may mix plain URLs and JSON objects; blank lines and # comments are skipped."""
        lines = [
            "# my batch\n",
            "https://a.example/\n",
            "\n",
            '{"url": "https://b.example/doc.pdf", "options": {"pages": "1-2"}}\n',
        ]

        targets = parse_targets(lines, "in.txt")

        assert [
            Target("https://a.example/"),
            Target("https://b.example/doc.pdf", Options(pages="1-2")),
        ] == targets

    def test_the_option_flags_apply_to_every_line_that_does_not_say(self) -> None:
        """A URL line takes the flags' options; a JSON line keeps each option it names, and a
        header it sends (in any case) wins over the flag's of the same name."""
        defaults: dict[str, JSONValue] = {
            "formats": ["markdown", "links"],
            "render": True,
            "headers": {"Accept-Language": "fr", "Referer": "https://r.example/"},
        }
        lines = [
            "https://a.example/\n",
            '{"url": "https://b.example/", "options": {"formats": ["text"], "render": false,'
            ' "headers": {"accept-language": "de"}}}\n',
        ]

        plain, own = parse_targets(lines, "in.txt", defaults)

        assert (
            Options(
                formats=("markdown", "links"),
                render=True,
                headers={"Accept-Language": "fr", "Referer": "https://r.example/"},
            )
            == plain.options
        )
        assert (
            Options(
                formats=("text",),
                render=False,
                headers={"Referer": "https://r.example/", "accept-language": "de"},
            )
            == own.options
        )

    def test_run_reads_its_option_flags_as_a_lines_options(self) -> None:
        """run's --formats, --render, --no-robots and --header are the options a line would
        write; without them a URL line has none."""
        parser = build_parser()
        flags = ["--formats", "markdown, links", "--render", "--no-robots"]
        headers = ["--header", "accept-language: fr", "--header", "Cookie: sid=1"]
        given = parser.parse_args(["run", "in.txt", *flags, *headers])

        assert {} == option_defaults(parser.parse_args(["run", "in.txt"]))
        assert {
            "formats": ["markdown", "links"],
            "render": True,
            "robots": False,
            "headers": {"Accept-Language": "fr", "Cookie": "sid=1"},
        } == option_defaults(given)

    @pytest.mark.parametrize(
        ("line", "message"),
        [
            ("{not json", r"^in\.txt, line 2: not valid JSON"),
            ('{"url": "https://a/", "depth": 2}', r"^in\.txt, line 2: unknown field 'depth'"),
            ('{"url": "https://a/", "options": {"speed": 1}}', r"unknown option 'speed'"),
            ('{"options": {}}', r'^in\.txt, line 2: "url" must be a non-empty string$'),
            ("https://a.example/ https://b.example/", r"^in\.txt, line 2: a URL cannot contain"),
        ],
    )
    def test_a_bad_line_is_a_usage_error_naming_it(self, line: str, message: str) -> None:
        """A line that is neither a URL nor a target object is refused with its line number."""
        with pytest.raises(UsageError, match=message):
            parse_targets(["https://ok.example/\n", line + "\n"], "in.txt")


class TestRunInProcess:
    async def test_lines_come_in_input_order_with_their_statuses(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """Every target gets one line, in input order across jobs, with status, error and hint."""
        paths = ["/articles/1", "/articles/99", "/articles/2", "/api/items", "/articles/3"]
        paths += ["/articles/4", "/report.pdf"]
        lines: list[str] = []
        err = io.StringIO()

        code = await run_batch(
            [Target(site.url(p)) for p in paths],
            db=str(tmp_path / "run.sqlite"),
            out=lines.append,
            err=err,
            job_size=2,
            jobs=2,
            workers=2,
            allow=[LOOPBACK],
            progress="off",
            handle_sigint=False,
        )

        parsed = [json.loads(line) for line in lines]
        assert code == 1
        assert list(range(len(paths))) == [p["idx"] for p in parsed]
        assert [site.url(p) for p in paths] == [p["url"] for p in parsed]
        assert [p["status"] for p in parsed] == [
            "done",
            "failed",
            "done",
            "done",
            "done",
            "done",
            "done",
        ]
        assert {"idx", "url", "status", "error", "hint", "result"} == set(parsed[0])
        assert parsed[1]["error"]
        assert parsed[1]["hint"]
        assert parsed[1]["result"] is None
        assert "Structured concurrency" in parsed[0]["result"]["content"]
        assert "6 done, 1 failed" in err.getvalue()

    async def test_a_refused_url_gets_a_failed_line_and_is_not_fetched(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """A URL the pre-check refuses fails in place with a hint, without being submitted."""
        lines: list[str] = []

        code = await run_batch(
            [Target("ftp://files.example/x"), Target(site.url("/articles/1"))],
            db=str(tmp_path / "run.sqlite"),
            out=lines.append,
            err=io.StringIO(),
            allow=[LOOPBACK],
            progress="off",
            handle_sigint=False,
        )

        parsed = [json.loads(line) for line in lines]
        assert code == 1
        assert [p["status"] for p in parsed] == ["failed", "done"]
        assert parsed[0]["hint"]


class TestFresh:
    async def test_fresh_fetches_every_target_again(self, site: DemoSite, tmp_path: Path) -> None:
        """run --fresh after a run of the same file sends one more request per target: no
        earlier job and no response cache answers (every line says cached: false)."""
        paths = ["/articles/1", "/articles/2", "/articles/3"]
        db = str(tmp_path / "run.sqlite")
        runs: list[list[dict[str, object]]] = []
        for fresh in (False, True):
            lines: list[str] = []
            code = await run_batch(
                [Target(site.url(p)) for p in paths],
                db=db,
                out=lines.append,
                err=io.StringIO(),
                allow=[LOOPBACK],
                progress="off",
                handle_sigint=False,
                fresh=fresh,
            )
            assert 0 == code
            runs.append([json.loads(line) for line in lines])

        assert [2, 2, 2] == [site.requests[p] for p in paths]
        assert [False] * 3 == [line["result"]["meta"]["cached"] for line in runs[1]]  # type: ignore[index]

    async def test_a_run_keeps_no_response_cache(self, site: DemoSite, tmp_path: Path) -> None:
        """A run writes no page bodies to a response cache it never reads back; a target with
        recover keeps it, since recover serves the last cached copy of a failed fetch."""
        db = tmp_path / "run.sqlite"
        counts = []
        for options in (Options(), Options(recover=True)):
            await run_batch(
                [Target(site.url("/articles/1"), options)],
                db=str(db),
                out=lambda line: None,
                err=io.StringIO(),
                allow=[LOOPBACK],
                progress="off",
                handle_sigint=False,
            )
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                counts.append(conn.execute("SELECT count(*) FROM web_cache").fetchone()[0])
            finally:
                conn.close()

        assert [0, 1] == counts

    def test_fetched_again_sets_max_age_zero_unless_the_target_says(self) -> None:
        """--fresh gives every target max_age 0, but a line's own max_age stands."""
        plain, own = (
            fetched_again(Target("https://a.example/")),
            Target("https://b.example/", Options(max_age=60)),
        )

        assert 0 == plain.options.max_age
        assert own == fetched_again(own)


class TestHostConcurrency:
    async def test_host_concurrency_lets_one_site_take_more_at_once(self, tmp_path: Path) -> None:
        """--host-concurrency 4: the one site of the file sees 4 requests at once (never more),
        where the default budget of 2 would hold it to 2 whatever --workers says."""
        async with trio.open_nursery() as nursery:
            site: DemoSite = await nursery.start(serve_demo_site, DemoSite(latency=1.0))
            code = await run_batch(
                [Target(site.url(f"/articles/{n}")) for n in (1, 2, 3, 4, 5, 6, 1, 2)],
                db=str(tmp_path / "run.sqlite"),
                out=lambda line: None,
                err=io.StringIO(),
                workers=8,
                allow=[LOOPBACK],
                progress="off",
                handle_sigint=False,
                host_concurrency=4,
            )
            nursery.cancel_scope.cancel()

        assert 0 == code
        assert 4 == site.most_at_once


class TestEveryLine:
    @pytest.mark.parametrize("job_size", [1, 2, 32])
    async def test_a_refused_url_between_accepted_ones_keeps_its_line_and_fails_the_run(
        self, site: DemoSite, tmp_path: Path, job_size: int
    ) -> None:
        """Refused URLs inside a job's span get their lines in place; the exit status is 1."""
        urls = [
            site.url("/articles/1"),
            site.url("/articles/2").replace("127.0.0.1", "127.0.0.2"),
            site.url("/articles/3"),
            "http://10.0.0.1/",
            site.url("/articles/4"),
        ]
        lines: list[str] = []
        err = io.StringIO()

        code = await run_batch(
            [Target(u) for u in urls],
            db=str(tmp_path / "run.sqlite"),
            out=lines.append,
            err=err,
            job_size=job_size,
            allow=[ipaddress.ip_network("127.0.0.1/32")],
            progress="off",
            handle_sigint=False,
        )

        parsed = [json.loads(line) for line in lines]
        assert code == 1
        assert [(p["idx"], p["url"]) for p in parsed] == list(enumerate(urls))
        assert [p["status"] for p in parsed] == ["done", "failed", "done", "failed", "done"]
        assert "3 done, 2 failed" in err.getvalue()

    async def test_refused_lines_after_the_last_job_are_written(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """Refused URLs at the end of the input, and an input of refused URLs only, get lines."""
        lines: list[str] = []

        code = await run_batch(
            [Target(site.url("/articles/1")), Target("http://10.0.0.1/"), Target("ftp://x/")],
            db=str(tmp_path / "run.sqlite"),
            out=lines.append,
            err=io.StringIO(),
            allow=[LOOPBACK],
            progress="off",
            handle_sigint=False,
        )

        assert code == 1
        assert [json.loads(line)["idx"] for line in lines] == [0, 1, 2]

    async def test_the_summary_counts_what_the_progress_display_counts(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """The last progress line and the summary agree on done and failed."""
        err = io.StringIO()

        await run_batch(
            [Target(site.url("/articles/1")), Target("http://10.0.0.1/"), Target(site.url("/x"))],
            db=str(tmp_path / "run.sqlite"),
            out=lambda line: None,
            err=err,
            allow=[LOOPBACK],
            progress="plain",
            handle_sigint=False,
        )

        progress, summary = err.getvalue().splitlines()[-2:]
        assert "(1 done, 2 failed)" in progress
        assert "3 targets: 1 done, 2 failed." in summary


class TestHints:
    @pytest.mark.parametrize(
        ("url", "flag"),
        [
            ("http://127.0.0.2:9/", "--allow-net 127.0.0.0/8"),
            ("http://localhost:9/", "--allow-net 127.0.0.0/8"),
            ("http://10.1.2.3/", "--allow-net 10.1.2.3/32"),
        ],
    )
    async def test_a_refused_private_address_names_the_flag_that_allows_it(
        self, tmp_path: Path, url: str, flag: str
    ) -> None:
        """The hint of a refused private address speaks the command line, not the Python API."""
        lines: list[str] = []

        await run_batch(
            [Target(url)],
            db=str(tmp_path / "run.sqlite"),
            out=lines.append,
            err=io.StringIO(),
            progress="off",
            handle_sigint=False,
        )

        hint = json.loads(lines[0])["hint"]
        assert flag in hint
        assert "WebFetcher" not in hint


class TestStreaming:
    async def test_a_line_is_written_while_later_targets_of_its_job_still_run(
        self, tmp_path: Path
    ) -> None:
        """`run` writes a target's line once it and the earlier ones are stored, not when its
        whole job ends: the last target of the one job waits for the first line."""
        urls = [f"https://a.example/{n}" for n in range(3)]
        fetch = ScriptedFetch()
        last_gate = fetch.hold(urls[-1])
        lines: list[str] = []

        def out(line: str) -> None:
            lines.append(line)
            last_gate.set()

        with trio.fail_after(30):  # a bound for a broken run, not a wait: the gate opens it
            code = await run_batch(
                [Target(url) for url in urls],
                db=str(tmp_path / "run.sqlite"),
                out=out,
                err=io.StringIO(),
                job_size=32,
                fetch_factory=lambda store, allow: contextlib.nullcontext(fetch),
                progress="off",
                handle_sigint=False,
            )

        assert code == 0
        assert [json.loads(line)["url"] for line in lines] == urls
        assert fetch.calls == urls


class TestIds:
    async def test_every_job_id_is_reported_as_it_is_submitted(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """`on_submit` (what `--ids FILE` writes) gets every job's id; the summary counts them."""
        ids: list[str] = []
        err = io.StringIO()

        await run_batch(
            [Target(site.url(f"/articles/{n}")) for n in range(1, 10)],
            db=str(tmp_path / "run.sqlite"),
            out=lambda line: None,
            err=err,
            job_size=2,
            allow=[LOOPBACK],
            progress="off",
            handle_sigint=False,
            on_submit=ids.append,
        )

        jobs, _ = await trio.to_thread.run_sync(_db_rows, tmp_path / "run.sqlite")
        assert len(ids) == len(set(ids)) == len(jobs) == 5
        assert "5 jobs in" in err.getvalue()


async def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*CLI, *args], cwd=cwd, capture_stdout=True, capture_stderr=True, check=False
    )


@pytest.mark.slow
class TestRunCommand:
    async def test_exit_0_when_every_target_is_done(self, site: DemoSite, tmp_path: Path) -> None:
        """`trio-batch run` exits 0 and writes ./trio-batch.sqlite when every target is done."""
        (tmp_path / "urls.txt").write_text(
            "".join(site.url(f"/articles/{n}") + "\n" for n in (1, 2, 3))
            + json.dumps({"url": site.url("/api/items"), "options": {"jq": ".count"}})
            + "\n"
        )

        done = await _cli(["run", "urls.txt", "--allow-net", "127.0.0.0/8"], tmp_path)

        lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
        assert done.returncode == 0, done.stderr.decode()
        assert [line["idx"] for line in lines] == [0, 1, 2, 3]
        assert {"done"} == {line["status"] for line in lines}
        assert (tmp_path / "trio-batch.sqlite").exists()

    async def test_exit_1_when_some_target_failed_and_stdin_works(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """Reading `-` (stdin), a failed target exits 1; --out and --ids get written and named."""
        urls = f"{site.url('/articles/1')}\n{site.url('/nope')}\n".encode()

        done = await trio.run_process(
            [
                *CLI,
                "run",
                "-",
                "--out",
                "out.jsonl",
                "--db",
                "x.sqlite",
                "--allow-net",
                "127.0.0.1",
                "--ids",
                "ids.txt",
            ],
            cwd=tmp_path,
            stdin=urls,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

        lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        jobs, _ = await trio.to_thread.run_sync(_db_rows, tmp_path / "x.sqlite")
        assert done.returncode == 1, done.stderr.decode()
        assert done.stdout == b""
        assert [line["status"] for line in lines] == ["done", "failed"]
        assert len((tmp_path / "ids.txt").read_text().split()) == len(jobs) == 1
        assert b"2 targets: 1 done, 1 failed. Lines in out.jsonl. Job in x.sqlite: " in done.stderr

    @pytest.mark.parametrize(
        ("args", "content", "message"),
        [
            (["missing.txt"], None, b"cannot read missing.txt"),
            (["in.txt"], "{oops\n", b"in.txt, line 1: not valid JSON"),
            (["in.txt"], "# nothing\n", b"in.txt has no URLs"),
            (["in.txt", "--allow-net", "nonsense"], "https://a.example/\n", b"is not a network"),
            (["in.txt", "--job-size", "0"], "https://a.example/\n", b"must be a whole number"),
            (["in.txt", "--formats", "link"], "https://a.example/\n", b"unknown format 'link'"),
            (
                ["in.txt", "--allow-net", "127.0.0.0"],
                "https://a.example/\n",
                b"'127.0.0.0' is one address (127.0.0.0/32); write a network with its prefix",
            ),
            (["in.txt", "--formats", ","], "https://a.example/\n", b"name one format or more"),
            (
                ["in.txt", "--formats", "markdown,markdown"],
                "https://a.example/\n",
                b"formats lists 'markdown' twice",
            ),
            (["in.txt", "--header", "Accept"], "https://a.example/\n", b"write a header as"),
            (
                ["in.txt", "--header", "X-Api-Key: 1"],
                "https://a.example/\n",
                b"X-Api-Key is not a header a target may send",
            ),
            (
                ["in.txt", "--header", "Accept: a", "--header", "accept: b"],
                "https://a.example/\n",
                b"--header gives Accept twice",
            ),
            (
                ["in.txt", "--host-concurrency", "0"],
                "https://a.example/\n",
                b"must be a whole number",
            ),
        ],
    )
    def test_exit_2_on_a_usage_error(
        self,
        args: list[str],
        content: str | None,
        message: bytes,
        tmp_path: Path,
        capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Bad arguments or input exit 2 with a message that says what to fix."""
        monkeypatch.chdir(tmp_path)
        if content is not None:
            (tmp_path / "in.txt").write_text(content)

        try:
            code = main(["run", *args])
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)

        assert code == 2
        assert message.decode() in capfd.readouterr().err
        assert not (tmp_path / "trio-batch.sqlite").exists()

    async def test_a_database_another_process_writes_is_a_usage_error(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """A second writer on the same SQLite file exits 2 and says what to do instead."""
        (tmp_path / "urls.txt").write_text(site.url("/articles/1") + "\n")

        async with SQLiteStore.open(tmp_path / "busy.sqlite"):
            done = await _cli(["run", "urls.txt", "--db", "busy.sqlite"], tmp_path)

        assert done.returncode == 2
        assert re.fullmatch(
            rb"trio-batch run: another process \(pid \d+, \S+\) is writing busy\.sqlite: stop "
            rb"it, or pass --db with another file \(status, results and jobs can read it "
            rb"meanwhile\)\n",
            done.stderr,
        )
        assert done.stdout == b""

    async def test_a_database_in_a_missing_folder_is_a_usage_error(self, tmp_path: Path) -> None:
        """`--db` in a folder that does not exist exits 2 with one line naming the folder."""
        (tmp_path / "urls.txt").write_text("https://example.org/\n")

        done = await _cli(["run", "urls.txt", "--db", "no/such/x.sqlite"], tmp_path)

        assert done.returncode == 2
        assert done.stderr.decode() == (
            f"trio-batch run: cannot open the database no/such/x.sqlite: the folder "
            f"{tmp_path}/no/such does not exist; create it (mkdir -p {tmp_path}/no/such) or "
            "pass another --db\n"
        )
        assert done.stdout == b""

    async def test_ctrl_c_writes_what_finished_and_leaves_the_database_consistent(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """SIGINT mid-run exits 130, writes the finished lines, and leaves no job live."""
        paths = ["/articles/1", "/articles/2", "/slow", "/articles/3"]
        (tmp_path / "urls.txt").write_text("".join(site.url(p) + "\n" for p in paths))
        cmd = [*CLI, "run", "urls.txt", "--out", "out.jsonl", "--job-size", "1", "--jobs", "1"]
        cmd += ["--workers", "1", "--allow-net", "127.0.0.0/8", "--progress", "plain"]

        with (tmp_path / "stderr.txt").open("wb") as stderr, trio.fail_after(30):
            proc = await trio.lowlevel.open_process(cmd, cwd=tmp_path, stderr=stderr)
            try:
                await site.slow_started.wait()
                proc.send_signal(signal.SIGINT)
                code = await proc.wait()
            finally:
                if proc.returncode is None:
                    proc.kill()

        lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        jobs, targets = await trio.to_thread.run_sync(_db_rows, tmp_path / "trio-batch.sqlite")
        assert code == 130, (tmp_path / "stderr.txt").read_text()
        assert [(line["idx"], line["status"]) for line in lines] == [(0, "done"), (1, "done")]
        assert jobs == [("done", "", 1), ("done", "", 1), ("failed", "interrupted", 0)]
        assert "running" not in {status for _, _, status in targets}
        assert "interrupted" in (tmp_path / "stderr.txt").read_text()


def test_cli_module_runs_as_a_script() -> None:
    """The console script's entry point exists (what `pip install` wires to `trio-batch`)."""
    done = subprocess.run([*CLI, "run", "--help"], capture_output=True, check=False)

    assert done.returncode == 0
    assert b"--allow-net" in done.stdout


@pytest.mark.parametrize(
    ("argv", "started"),
    [
        (["run", "--help"], True),
        (["crawl", "--help"], True),
        (["run", "--server", "http://127.0.0.1:9", "--help"], False),
        (["run", "--server=http://127.0.0.1:9", "--help"], False),
        (["status", "--help"], False),
    ],
)
def test_a_command_that_shapes_here_starts_the_shaping_server_first(
    argv: list[str], started: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run`` and ``crawl`` start the shaping workers' fork server before anything else (its
    0.1 s start then overlaps the command's own imports, where a run's first page waited for
    it); with ``--server`` the pages are shaped there, and other commands shape nothing."""
    calls: list[str] = []
    monkeypatch.setattr(trio_batch.web, "start_shaping", lambda: calls.append("started"))

    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
        main(argv)

    assert calls == (["started"] if started else [])


class TestLargeInput:
    async def test_ctrl_c_while_checking_says_nothing_was_submitted(self, tmp_path: Path) -> None:
        """SIGINT while a large input is checked exits 130, submits nothing, and says so."""
        urls = [f"https://example.org/{i}" for i in range(10_000)]
        err = io.StringIO()

        def check(url: str) -> None:
            if url == urls[3000]:
                signal.raise_signal(signal.SIGINT)

        code = await run_batch(
            [Target(u) for u in urls],
            db=str(tmp_path / "run.sqlite"),
            out=lambda line: pytest.fail("no line may be written"),
            err=err,
            progress="off",
            precheck=check,
        )

        assert code == 130
        assert re.fullmatch(
            r"trio-batch: interrupted while checking the input \(\d,000 of 10,000 targets "
            r"checked\); nothing was submitted and no line was written\.\n",
            err.getvalue(),
        )
        assert not (tmp_path / "run.sqlite").exists()
