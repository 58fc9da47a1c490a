"""``trio-batch run`` with credentials in a target's headers: fetched with them, never stored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import trio

from trio_batch._cli._demo_site import DemoSite

from .support import CLI

COOKIE = "session=run-secret-4b7f0c2e9a"


async def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*CLI, *args], cwd=cwd, capture_stdout=True, capture_stderr=True, check=False
    )


def _db_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.glob("run.sqlite*"))


@pytest.mark.slow
async def test_a_cookie_is_sent_and_kept_out_of_the_db(site: DemoSite, tmp_path: Path) -> None:
    """The target ends done; the SQLite file and its WAL hold a reference, not the value; the
    output and the logs do not show it either."""
    target = {
        "url": site.url("/articles/1"),
        "options": {"headers": {"Cookie": COOKIE, "Accept-Language": "fr"}},
    }
    (tmp_path / "urls.jsonl").write_text(json.dumps(target) + "\n")

    done = await _cli(
        ["run", "urls.jsonl", "--db", "run.sqlite", "--allow-net", "127.0.0.0/8"], tmp_path
    )

    assert done.returncode == 0, done.stderr.decode()
    assert ["done"] == [json.loads(line)["status"] for line in done.stdout.decode().splitlines()]
    stored = await trio.to_thread.run_sync(_db_bytes, tmp_path)
    assert b"Accept-Language" in stored  # the options were stored, headers and all
    assert COOKIE.encode() not in stored
    assert COOKIE not in done.stdout.decode() + done.stderr.decode()
