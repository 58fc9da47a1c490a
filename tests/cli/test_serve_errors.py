"""``trio-batch serve`` start-up failures: one line, exit 2, naming the path or the port."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import trio

from tests.support import CLEAN_ENV
from trio_batch.stores import SQLiteStore

from .support import CLI, add_key, serve_until_it_stops

pytest.importorskip("hypercorn")


async def _serve(args: list[str], cwd: Path) -> tuple[int, str]:
    await add_key(cwd)
    return await serve_until_it_stops(args, cwd)


@pytest.mark.slow
class TestServeStartUp:
    async def test_a_database_in_a_missing_folder_names_the_folder_not_a_port(
        self, tmp_path: Path
    ) -> None:
        """`--db` in a missing folder exits 2 with one line about the folder and what to do."""
        code, err = await _serve(["--db", "no/such/db.sqlite", "--port", "0"], tmp_path)

        assert code == 2
        assert err == (
            f"trio-batch serve: cannot open the database no/such/db.sqlite: the folder "
            f"{tmp_path}/no/such does not exist; create it (mkdir -p {tmp_path}/no/such) or "
            "pass another --db (or TRIO_BATCH_DB)"
        )

    async def test_a_port_in_use_names_the_port_and_the_flag(self, tmp_path: Path) -> None:
        """A port another program listens on exits 2 with one line suggesting --port."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]

            code, err = await _serve(["--db", "db.sqlite", "--port", str(port)], tmp_path)

        assert code == 2
        assert err == (
            f"trio-batch serve: cannot listen on 127.0.0.1 port {port}: the port is in use "
            "(another server?); stop it, or pass another --port (or TRIO_BATCH_PORT), or "
            "--port 0 for any free port"
        )

    async def test_a_database_another_process_writes_names_it_and_the_flag(
        self, tmp_path: Path
    ) -> None:
        """A SQLite file held by another writer exits 2 naming the process and --db."""
        async with SQLiteStore.open(tmp_path / "db.sqlite"):
            code, err = await _serve(["--db", "db.sqlite", "--port", "0"], tmp_path)

        assert code == 2
        assert re.fullmatch(
            r"trio-batch serve: another process \(pid \d+, \S+\) is writing db\.sqlite: stop it, "
            r"or pass --db \(or TRIO_BATCH_DB\) with another file \(status, results and jobs "
            r"can read it meanwhile\)",
            err,
        )
        assert "SQLiteStore" not in err


@pytest.mark.slow
class TestServeLog:
    async def test_the_start_up_log_says_how_to_allow_a_private_network(
        self, tmp_path: Path
    ) -> None:
        """`serve` logs the remedy for refused private addresses in its own words (flag, env)."""
        await trio.run_process(
            [*CLI, "keys", "add", "alice", "--keys", "keys.toml"], cwd=tmp_path, env=CLEAN_ENV,
            capture_stdout=True, capture_stderr=True,
        )  # fmt: skip
        cmd = [*CLI, "serve", "--keys", "keys.toml", "--db", "db.sqlite", "--port", "0"]
        log = b""
        with trio.fail_after(30):
            proc = await trio.lowlevel.open_process(
                cmd, cwd=tmp_path, env=CLEAN_ENV, stderr=subprocess.PIPE
            )
            try:
                assert proc.stderr is not None
                while b"serving the trio-batch API" not in log:
                    chunk = await proc.stderr.receive_some()
                    assert chunk, log.decode()
                    log += chunk
                proc.send_signal(signal.SIGINT)
                await proc.wait()
            finally:
                if proc.returncode is None:
                    proc.kill()

        assert b"pass --allow-net CIDR (repeatable) or set TRIO_BATCH_ALLOW_NET" in log
        assert b"WebFetcher" not in log
