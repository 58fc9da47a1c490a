"""What the commands print reads as English: one target, one job, and no empty ``field=``."""

from __future__ import annotations

import dataclasses
import io
import ipaddress
import logging
from pathlib import Path

import pytest
import trio
from rich.console import Console

from trio_batch import Target
from trio_batch._cli import main
from trio_batch._cli._demo_site import DemoSite
from trio_batch._cli._progress import ProgressTracker, render_plain, render_rich
from trio_batch._cli._run import run_batch
from trio_batch.testing import ScriptedFetch

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


class TestOneOfAThing:
    async def test_the_run_summary_of_one_target_and_one_job_is_singular(
        self, site: DemoSite, tmp_path: Path
    ) -> None:
        """`run` with one URL says "1 target" and "Job in DB: ID", not "1 targets"/"Jobs"."""
        err = io.StringIO()
        ids: list[str] = []
        db = str(tmp_path / "one.sqlite")

        await run_batch(
            [Target(site.url("/articles/1"))],
            db=db,
            out=lambda line: None,
            err=err,
            allow=[LOOPBACK],
            progress="off",
            handle_sigint=False,
            on_submit=ids.append,
        )

        assert f"trio-batch: 1 target: 1 done, 0 failed. Job in {db}: {ids[0]}\n" == (
            err.getvalue()
        )

    def test_the_progress_lines_of_one_target_and_one_job_are_singular(self) -> None:
        """The plain progress line, and what it says while checking and submitting."""
        tracker = ProgressTracker(total=1, clock=lambda: 0.0)
        tracker.phase, tracker.checked = "checking", 0
        checking = render_plain(tracker)
        tracker.phase = "submitting"
        submitting = render_plain(tracker)
        tracker.phase = ""
        tracker.add_job("c" * 32, "cli", 1).status = "running"
        running = render_plain(tracker)

        assert "trio-batch: checking the input: 0/1 target checked, 0:00 elapsed" == checking
        assert "trio-batch: submitting the first job of 1 target, 0:00 elapsed" == submitting
        assert running.startswith("trio-batch: 0/1 target (0 done, 0 failed), ")
        assert running.endswith(", 1 live job, 0:00 elapsed")

    def test_the_live_display_counts_one_more_job_in_the_singular(self) -> None:
        """Past the jobs it lists, the live display says "... and 1 more live job"."""
        tracker = ProgressTracker(total=3, clock=lambda: 0.0)
        for n in "abc":
            tracker.add_job(n * 32, n, 1).status = "running"
        console = Console(record=True, width=120, file=io.StringIO(), force_terminal=True)

        console.print(render_rich(tracker, max_jobs=2))

        assert "... and 1 more live job\n" in console.export_text()

    async def test_serve_logs_one_worker_and_one_network_in_the_singular(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """`serve --workers 1 --allow-net NET` logs "(1 worker)" and "1 allowed private network"."""
        pytest.importorskip("hypercorn")
        from trio_batch._cli._service import _log_allowed_networks, run_service
        from trio_batch._cli._settings import Settings
        from trio_batch.http import add_key

        add_key(tmp_path / "keys.toml", "alice")
        settings = dataclasses.replace(
            Settings(),
            db=str(tmp_path / "db.sqlite"),
            keys=str(tmp_path / "keys.toml"),
            port=0,
            workers=1,
            allow_net=("10.0.0.0/8",),
            access_log=False,
        )
        caplog.set_level(logging.INFO, logger="trio_batch")

        _log_allowed_networks(settings)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: run_service(
                    settings, fetch=ScriptedFetch(), task_status=task_status
                )
            )
            nursery.cancel_scope.cancel()

        messages = [record.getMessage() for record in caplog.records]
        assert any("and 1 allowed private network (--allow-net" in m for m in messages), messages
        assert any(m.endswith(" (1 worker)") for m in messages), messages


class TestKeysList:
    def test_a_caller_without_a_workspace_shows_no_empty_field(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`keys list` omits `workspace=` for a caller without one; `keys add` says so in words."""
        keys = str(tmp_path / "keys.toml")
        main(["keys", "add", "carol", "--keys", keys])
        added = capsys.readouterr().out.splitlines()[0]
        main(["keys", "add", "dave", "--workspace", "w", "--class", "restricted", "--keys", keys])
        capsys.readouterr()

        code = main(["keys", "list", "--keys", keys])

        assert 0 == code
        assert f"added caller 'carol' (no workspace, class fleet) to {keys}" == added
        assert "carol\tclass=fleet\ndave\tworkspace=w\tclass=restricted\n" == (
            capsys.readouterr().out
        )
