"""The commands with ``--server``: ``results --follow``, ``jobs`` and ``run`` against a served app.

The command runs as a subprocess (it has its own ``trio.run``); the server runs in the test's
Trio loop on a real socket, with a scripted fetch function.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_batch import Config, TargetError, open_engine
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

pytest.importorskip("httpx")
pytest.importorskip("starlette")

from trio_batch.client import open_client
from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key, serve

ALICE_KEY = "tb_alice-test-key"
A, B, C = "https://a.example.test/", "https://b.example.test/", "https://c.example.test/"


@asynccontextmanager
async def served(fetch: ScriptedFetch, config: Config | None = None) -> AsyncIterator[str]:
    stop = trio.Event()
    config = config or Config(jobs_per_caller=4, jobs_total=8)
    async with open_engine(MemoryStore(), fetch, config) as engine:
        keys = KeyRing([KeyRecord("alice", "lab", "fleet", hash_key(ALICE_KEY))])
        app = create_app(engine, keys, precheck=lambda url: None, access_log_enabled=False)
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(
                lambda task_status: serve(
                    app, port=0, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                stop.set()


async def cli(*argv: str, key: str | None = ALICE_KEY) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "TRIO_BATCH_KEY"}
    if key is not None:
        env["TRIO_BATCH_KEY"] = key
    code = "import sys; from trio_batch._cli import main; sys.exit(main(sys.argv[1:]))"
    return await trio.run_process(
        [sys.executable, "-c", code, *argv],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )


@pytest.mark.slow
class TestServer:
    async def test_results_follow_prints_lines_as_they_land(self) -> None:
        """results --follow --server streams each target's line and ends with the job."""
        fetch = ScriptedFetch()
        gate = fetch.hold(B)
        async with served(fetch) as url, open_client(url, ALICE_KEY) as client:
            sub = await client.submit([A, B])
            code = "import sys; from trio_batch._cli import main; sys.exit(main(sys.argv[1:]))"
            argv = [sys.executable, "-c", code, "results", sub.id, "--server", url, "--follow"]
            env = {**os.environ, "TRIO_BATCH_KEY": ALICE_KEY}
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
            assert proc.stdout is not None
            out = b""
            with trio.fail_after(30):
                while b"\n" not in out:
                    out += await proc.stdout.receive_some()
                first = out  # printed while target 1 is still held
                gate.set()
                while chunk := await proc.stdout.receive_some():
                    out += chunk
                code_ = await proc.wait()
        lines = [json.loads(x) for x in out.splitlines()]

        assert 0 == code_
        assert [0] == [json.loads(x)["idx"] for x in first.splitlines()]
        assert [0, 1] == [x["idx"] for x in lines]
        assert ALICE_KEY.encode() not in out

    async def test_results_follow_on_a_local_file_prints_lines_as_they_land(
        self, tmp_path: Path
    ) -> None:
        """results --follow --db reads the file another process writes, line by line."""
        from trio_batch import Caller, Target
        from trio_batch.stores import SQLiteStore

        fetch = ScriptedFetch()
        gate = fetch.hold(B)
        db = str(tmp_path / "runs.sqlite")
        async with SQLiteStore.open(db) as store, open_engine(store, fetch) as engine:
            sub = await engine.submit(Caller("cli"), "fleet", [Target(A), Target(B)])
            code = "import sys; from trio_batch._cli import main; sys.exit(main(sys.argv[1:]))"
            argv = [sys.executable, "-c", code, "results", sub.id, "--db", db, "--follow"]
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
            assert proc.stdout is not None
            out = b""
            with trio.fail_after(30):
                while b"\n" not in out:
                    out += await proc.stdout.receive_some()
                first = out
                gate.set()
                while chunk := await proc.stdout.receive_some():
                    out += chunk
                returncode = await proc.wait()

        assert 0 == returncode
        assert [0] == [json.loads(x)["idx"] for x in first.splitlines()]
        assert [0, 1] == [json.loads(x)["idx"] for x in out.splitlines()]

    async def test_jobs_lists_the_keys_jobs(self) -> None:
        """jobs --server lists the key's jobs, newest first, as a table or JSON lines."""
        fetch = ScriptedFetch()
        async with served(fetch) as url, open_client(url, ALICE_KEY) as client:
            first = await client.submit([A])
            await client.wait(first.id)
            second = await client.submit([B])
            await client.wait(second.id)
            table = await cli("jobs", "--server", url)
            as_json = await cli("jobs", "--server", url, "--json")

        rows = [json.loads(x) for x in as_json.stdout.splitlines()]
        assert 0 == table.returncode == as_json.returncode, table.stderr
        assert [second.id, first.id] == [r["id"] for r in rows]
        assert second.id.encode() in table.stdout

    async def test_run_submits_and_prints_in_input_order(self, tmp_path: Path) -> None:
        """run --server splits the file into jobs and prints every line in input order."""
        fetch = ScriptedFetch()
        fetch.script(C, TargetError("gone", status=404))
        urls = tmp_path / "urls.txt"
        await trio.Path(urls).write_text(f"{A}\n{B}\n{C}\n")
        async with served(fetch) as url:
            result = await cli("run", str(urls), "--server", url, "--job-size", "2")
        lines = [json.loads(x) for x in result.stdout.splitlines()]

        assert 1 == result.returncode, result.stderr
        assert [0, 1, 2] == [x["idx"] for x in lines]
        assert ["done", "done", "failed"] == [x["status"] for x in lines]

    async def test_run_asks_for_workers_targets_of_a_job_at_once(self, tmp_path: Path) -> None:
        """run --server --workers 3: each job fetches 3 targets at once (its concurrency), not
        one after another, nor the server's default of 4."""
        fetch = ScriptedFetch(duration=0.5)
        hosts = [f"https://h{i}.example.test/" for i in range(6)]
        urls = tmp_path / "urls.txt"
        await trio.Path(urls).write_text("".join(f"{u}\n" for u in hosts))
        config = Config(jobs_per_caller=4, jobs_total=8, workers=8, max_workers=8)
        async with served(fetch, config) as url:
            result = await cli("run", str(urls), "--server", url, "--workers", "3")

        assert 0 == result.returncode, result.stderr
        assert 3 == fetch.max_running

    async def test_without_a_key_is_a_usage_error(self) -> None:
        """--server without --key or TRIO_BATCH_KEY: exit 2 and a message naming the variable."""
        result = await cli("jobs", "--server", "http://127.0.0.1:9", key=None)

        assert 2 == result.returncode
        assert b"TRIO_BATCH_KEY" in result.stderr
