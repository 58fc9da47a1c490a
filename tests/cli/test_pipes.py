"""The commands in pipes: a reader that goes away ends them quietly, and the live display steps
aside when stdout is a pipe (whose reader may print on the same terminal)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.support import CLEAN_ENV
from trio_batch._cli import EXIT_CLOSED_PIPE
from trio_batch._cli._demo_site import DemoSite
from trio_batch._cli._progress import _resolve_mode

from .support import CLI, make_jobs


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestLiveDisplay:
    def test_a_pipe_on_stdout_makes_the_display_plain_lines(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`run urls.txt | jq .` on a terminal: plain progress lines, which never move the
        cursor over the lines jq prints."""
        read_end, write_end = os.pipe()
        with open(write_end, "w") as piped:
            monkeypatch.setattr(sys, "stdout", piped)

            mode = _resolve_mode("auto", _Terminal(), None)

        os.close(read_end)
        assert mode == "plain"

    def test_a_file_on_stdout_keeps_the_live_display(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """`run urls.txt > out.jsonl` on a terminal: nothing else prints there, so it stays live."""
        with open(tmp_path / "out.jsonl", "w") as file:
            monkeypatch.setattr(sys, "stdout", file)

            mode = _resolve_mode("auto", _Terminal(), None)

        assert mode == "rich"


def _closed_reader(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """Run the command with a stdout pipe whose reader is gone before the first line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [*CLI, *args],
            cwd=cwd,
            env=CLEAN_ENV,
            stdout=write_end,
            stderr=subprocess.PIPE,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.slow
class TestClosedPipe:
    @pytest.mark.parametrize(
        "command", [["results"], ["status"], ["jobs"], ["results", "--follow"]]
    )
    async def test_a_reading_command_ends_quietly(self, command: list[str], tmp_path: Path) -> None:
        """`trio-batch results ID | head -1`: no traceback, the status a shell shows for a
        writer that SIGPIPE ended (141)."""
        (job_id,) = await make_jobs(tmp_path / "t.sqlite", 1)
        args = [command[0], *([job_id] if command[0] != "jobs" else []), *command[1:]]

        done = await trio.to_thread.run_sync(_closed_reader, [*args, "--db", "t.sqlite"], tmp_path)

        assert (done.returncode, done.stderr.decode()) == (EXIT_CLOSED_PIPE, "")

    async def test_run_ends_quietly(self, site: DemoSite, tmp_path: Path) -> None:
        """`trio-batch run urls.txt | head -1`: no traceback, status 141."""
        (tmp_path / "urls.txt").write_text(site.url("/articles/1") + "\n")

        done = await trio.to_thread.run_sync(
            _closed_reader,
            ["run", "urls.txt", "--allow-net", "127.0.0.0/8", "--progress", "off"],
            tmp_path,
        )

        assert (done.returncode, done.stderr.decode()) == (EXIT_CLOSED_PIPE, "")
