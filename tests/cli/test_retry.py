"""A run that reuses an earlier job says so and how to fetch again; ``run --fresh`` makes new
jobs; ``trio-batch retry JOB`` runs a job's failed targets again as a linked job."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import sqlite3
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from tests.support import CLEAN_ENV
from trio_batch import Target, TargetError
from trio_batch._cli._arguments import IPNetwork
from trio_batch._cli._demo_site import DemoSite
from trio_batch._cli._run import run_batch
from trio_batch.testing import ScriptedFetch

from .support import CLI


async def _run(
    fetch: ScriptedFetch,
    db: Path,
    urls: list[str],
    *,
    fresh: bool = False,
    allow: Sequence[IPNetwork] = (),
) -> str:
    """Run ``urls`` with ``fetch`` on ``db``; what the run wrote on stderr."""
    err = io.StringIO()

    await run_batch(
        [Target(url) for url in urls],
        db=str(db),
        allow=allow,
        out=lambda line: None,
        err=err,
        fetch_factory=lambda store, allow: contextlib.nullcontext(fetch),
        progress="off",
        handle_sigint=False,
        fresh=fresh,
    )

    return err.getvalue()


class TestReuse:
    async def test_a_rerun_says_it_reused_the_job_and_how_to_fetch_again(
        self, tmp_path: Path
    ) -> None:
        """The same file again gives back the partial job: the summary says nothing was
        fetched again and names `trio-batch retry` and `--fresh`."""
        urls = ["https://a.example/ok", "https://a.example/later"]
        fetch = ScriptedFetch()
        fetch.script(urls[1], TargetError("the site answered 404"))
        await _run(fetch, tmp_path / "r.sqlite", urls)

        again = await _run(fetch, tmp_path / "r.sqlite", urls)

        assert fetch.calls == urls
        assert "reused" in again
        assert "nothing was fetched again" in again
        assert "trio-batch retry " in again
        assert f"--db {tmp_path / 'r.sqlite'}" in again
        assert "--fresh" in again

    async def test_the_suggested_retry_carries_the_runs_allowed_networks(
        self, tmp_path: Path
    ) -> None:
        """A run with --allow-net suggests a retry with the same flags, so it works as written."""
        urls = ["http://127.0.0.1:8765/ok", "http://127.0.0.1:8765/later"]
        fetch = ScriptedFetch()
        fetch.script(urls[1], TargetError("the site answered 404"))
        allow = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("10.1.2.3/32")]
        await _run(fetch, tmp_path / "r.sqlite", urls, allow=allow)

        again = await _run(fetch, tmp_path / "r.sqlite", urls, allow=allow)

        assert f"--db {tmp_path / 'r.sqlite'} --allow-net 127.0.0.0/8 --allow-net 10.1.2.3/32;" in (
            again
        )

    async def test_fresh_makes_a_new_job_that_fetches_everything(self, tmp_path: Path) -> None:
        """`run --fresh` after a run: every target is fetched again, and nothing says reused."""
        urls = ["https://a.example/ok", "https://a.example/later"]
        fetch = ScriptedFetch()
        fetch.script(urls[1], TargetError("the site answered 404"))
        await _run(fetch, tmp_path / "r.sqlite", urls)

        again = await _run(fetch, tmp_path / "r.sqlite", urls, fresh=True)

        assert fetch.calls == urls + urls
        assert "reused" not in again
        assert "2 done, 0 failed" in again


def _jobs(db: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows: list[tuple[str, str, str]] = conn.execute(
            "SELECT id, status, retry_of FROM jobs ORDER BY created_at, rowid"
        ).fetchall()
    finally:
        conn.close()
    return rows


async def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*CLI, *args], cwd=cwd, env=CLEAN_ENV, capture_stdout=True, capture_stderr=True, check=False
    )


@pytest.mark.slow
class TestRetryCommand:
    async def test_retry_runs_the_failed_targets_as_a_linked_job(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """`retry JOB --db` (an id prefix works) makes the linked job of the failed target,
        runs it here and writes its line; a repeat makes another (a failed job is never
        reused: SPEC §3.1)."""
        (tmp_path / "urls.txt").write_text(f"{site.url('/articles/1')}\n{site.url('/nope')}\n")
        net = ["--allow-net", "127.0.0.0/8"]
        await _cli(["run", "urls.txt", *net, "--progress", "off"], tmp_path)
        ((first, _, _),) = await trio.to_thread.run_sync(_jobs, tmp_path / "trio-batch.sqlite")

        retried = await _cli(["retry", first[:8], *net], tmp_path)
        again = await _cli(["retry", first, *net], tmp_path)

        lines = [json.loads(line) for line in retried.stdout.decode().splitlines()]
        jobs = await trio.to_thread.run_sync(_jobs, tmp_path / "trio-batch.sqlite")
        assert retried.returncode == 1, retried.stderr.decode()
        assert [(line["idx"], line["url"], line["status"]) for line in lines] == [
            (0, site.url("/nope"), "failed")
        ]
        assert [(status, retry_of) for _, status, retry_of in jobs] == [
            ("partial", ""),
            ("failed", first),
            ("failed", first),
        ]
        assert f"new job {jobs[1][0]} (retry of {first})" in retried.stderr.decode()
        assert f"new job {jobs[2][0]} (retry of {first})" in again.stderr.decode()

    async def test_retry_of_a_job_with_nothing_failed_is_a_usage_error(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """A job whose every target is done has nothing to retry: exit 2, saying so."""
        (tmp_path / "urls.txt").write_text(f"{site.url('/articles/1')}\n")
        await _cli(["run", "urls.txt", "--allow-net", "127.0.0.0/8"], tmp_path)
        ((first, _, _),) = await trio.to_thread.run_sync(_jobs, tmp_path / "trio-batch.sqlite")

        done = await _cli(["retry", first], tmp_path)

        assert done.returncode == 2
        assert f"job {first} has nothing to retry" in done.stderr.decode()

    async def test_an_unknown_job_exits_1(self, tmp_path: Path) -> None:
        """`retry` of an id the store does not hold: exit 1, pointing at `jobs`."""
        (tmp_path / "urls.txt").write_text("file:///nowhere\n")
        await _cli(["run", "urls.txt", "--progress", "off"], tmp_path)

        done = await _cli(["retry", "ffff"], tmp_path)

        assert done.returncode == 1
        assert "no job ffff" in done.stderr.decode()

    async def test_retry_of_a_target_with_a_credential_says_what_to_run(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """A run kept the target's Authorization in its own memory only, so `retry` (a process
        of its own) cannot send it: the target fails 410, and the hint says to run it again
        with its header, not to restart a server instance."""
        target = {"url": site.url("/nope"), "options": {"headers": {"Authorization": "Bearer x"}}}
        (tmp_path / "urls.jsonl").write_text(json.dumps(target) + "\n")
        net = ["--allow-net", "127.0.0.0/8"]
        await _cli(["run", "urls.jsonl", *net, "--progress", "off"], tmp_path)
        ((first, _, _),) = await trio.to_thread.run_sync(_jobs, tmp_path / "trio-batch.sqlite")

        retried = await _cli(["retry", first, *net], tmp_path)

        [line] = [json.loads(text) for text in retried.stdout.decode().splitlines()]
        assert 1 == retried.returncode, retried.stderr.decode()
        assert "the Authorization header of this target is no longer held" in line["error"]
        assert "--header 'Authorization: ...'" in line["hint"]
        assert "instance" not in line["hint"]
        assert "secrets-key" not in line["hint"]
