"""Serving over real sockets: hypercorn's Trio worker in-process, and `trio-batch serve` itself."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.support import CLEAN_ENV
from trio_batch import Config, open_engine
from trio_batch.http import add_key, create_app, serve
from trio_batch.stores import MemoryStore, SQLiteStore
from trio_batch.testing import ScriptedFetch
from trio_batch.web import precheck

from .support import ALICE_KEY, auth, make_keys

SLOW = "https://slow.example.test/"


class TestServe:
    async def test_reports_the_bound_port_and_serves(self) -> None:
        """port=0 binds a free port, reported through task_status; requests are answered."""
        shutdown = trio.Event()
        async with open_engine(MemoryStore(), ScriptedFetch()) as engine:
            app = create_app(engine, make_keys(), precheck=precheck)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app, port=0, shutdown_trigger=shutdown.wait, task_status=task_status
                    )
                )
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                    r = await client.get("/healthz")

                    async def chunks() -> AsyncIterator[bytes]:
                        for _ in range(300):
                            yield b"x" * 1024

                    too_big = await client.post("/v1/batch", content=chunks(), headers=auth())
                shutdown.set()

        assert port > 0
        assert r.status_code == 200
        assert too_big.status_code == 413

    async def test_shutdown_lets_requests_in_flight_finish(self) -> None:
        """After the trigger, a request in flight still gets its answer, then serve returns."""
        fetch = ScriptedFetch()
        gate = fetch.hold(SLOW)
        shutdown = trio.Event()
        answers: list[int] = []
        async with open_engine(MemoryStore(), fetch) as engine:
            app = create_app(engine, make_keys(), fetch=fetch, precheck=precheck)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app,
                        port=0,
                        shutdown_trigger=shutdown.wait,
                        graceful_timeout=5,
                        task_status=task_status,
                    )
                )
                async with (
                    httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
                    trio.open_nursery() as requests,
                ):

                    async def slow_request() -> None:
                        r = await client.post("/v1/fetch", json={"url": SLOW}, headers=auth())
                        answers.append(r.status_code)

                    requests.start_soon(slow_request)
                    while not fetch.calls:
                        await trio.testing.wait_all_tasks_blocked()
                    shutdown.set()
                    await trio.testing.wait_all_tasks_blocked()
                    gate.set()

        assert answers == [200]


def _site() -> Starlette:
    async def page(request: Request) -> Response:
        n = request.path_params["n"]
        return HTMLResponse(
            f"<html><body><h1>Page {n}</h1><p>Hello from page {n}.</p></body></html>"
        )

    async def data(request: Request) -> Response:
        return Response(b'{"n": 1}', media_type="application/json")

    return Starlette(routes=[Route("/page/{n:int}", page), Route("/data.json", data)])


async def _read_port(stream: trio.abc.ReceiveStream, log: bytearray) -> int:
    while True:
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError(f"the server exited before listening:\n{log.decode()}")
        log += chunk
        found = re.search(rb"serving the trio-batch API on \S+ port (\d+)", log)
        if found:
            return int(found.group(1))


@asynccontextmanager
async def _serve_command(
    nursery: trio.Nursery, db: Path, keys_file: Path, log: bytearray
) -> AsyncIterator[tuple[trio.Process, int]]:
    """``trio-batch serve`` in a child process on a free port; its stderr goes into ``log``.

    Killed on the way out if it is still running (a test that failed before its SIGTERM).
    """
    cmd = [
        sys.executable,
        "-c",
        "from trio_batch._cli import entry; entry()",
        "serve",
        "--port=0",
        f"--db={db}",
        f"--keys={keys_file}",
        "--allow-net=127.0.0.0/8",
        "--workers=2",
        "--shape-cpu-seconds=1",
    ]
    proc = await trio.lowlevel.open_process(cmd, stderr=subprocess.PIPE, env=CLEAN_ENV)
    try:
        assert proc.stderr is not None
        with trio.fail_after(30):
            port = await _read_port(proc.stderr, log)

        async def drain() -> None:
            assert proc.stderr is not None
            async for chunk in proc.stderr:
                log.extend(chunk)

        nursery.start_soon(drain)
        yield proc, port
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


async def _run_job(
    port: int, key: str, targets: list[dict[str, Any]]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Submit ``targets``, follow the job's events to its end; its id, summary and results."""
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        sub = await client.post("/v1/batch", json={"targets": targets})
        assert sub.status_code == 202, sub.text
        job_id = sub.json()["id"]

        with trio.fail_after(30):
            async with client.stream("GET", f"/v1/batch/{job_id}/events", timeout=None) as events:
                async for line in events.aiter_lines():
                    if line.startswith("event: end"):
                        break

        summary = (await client.get(f"/v1/batch/{job_id}")).json()
        results = (await client.get(f"/v1/batch/{job_id}?results=1")).json()
    return job_id, summary, results


@pytest.mark.slow
class TestServeCommand:
    async def test_end_to_end_submit_poll_results_sigterm(self, tmp_path: Path) -> None:
        """The real service: submit pages of a local site, follow to done, read, SIGTERM, exit 0.

        A fourth target's jq never ends: --shape-cpu-seconds bounds it, and it fails alone.
        """
        keys_file = tmp_path / "keys.toml"
        db = tmp_path / "jobs.sqlite"
        _, key = add_key(keys_file, "alice")
        site_stop = trio.Event()
        log = bytearray()

        async with trio.open_nursery() as nursery:
            site_port: int = await nursery.start(
                lambda task_status: serve(
                    _site(), port=0, shutdown_trigger=site_stop.wait, task_status=task_status
                )
            )
            urls = [f"http://127.0.0.1:{site_port}/page/{i}" for i in range(3)]
            forever = {
                "url": f"http://127.0.0.1:{site_port}/data.json",
                "options": {"jq": "def f: f; f"},
            }
            async with _serve_command(nursery, db, keys_file, log) as (proc, port):
                job_id, summary, results = await _run_job(
                    port, key, [*({"url": u} for u in urls), forever]
                )
                proc.send_signal(signal.SIGTERM)
                with trio.fail_after(30):
                    code = await proc.wait()
            site_stop.set()

        text = log.decode()
        assert code == 0, text
        assert summary["status"] == "partial", results
        assert [t["result"]["content"].split("\n")[0].strip() for t in results["targets"][:3]] == [
            "Page 0",
            "Page 1",
            "Page 2",
        ]
        assert results["targets"][3]["status"] == "failed"
        assert "more than 1 s of CPU time" in results["targets"][3]["error"]
        assert "127.0.0.1:" + str(site_port) not in text  # no target URL in the logs
        assert key not in text
        assert ALICE_KEY not in text
        async with SQLiteStore.open(db, readonly=True) as store:
            snap = await store.snapshot(job_id)
        assert snap is not None
        job = snap.job
        assert (job.status, job.targets_done) == ("partial", 4)

    @pytest.mark.parametrize(
        ("args", "env", "words"),
        [
            (["--port", "99999"], {}, "setting port (flag --port) must be between 0 and 65535"),
            ([], {"TRIO_BATCH_WORKERS": "many"}, "TRIO_BATCH_WORKERS) must be a whole number"),
            (["--allow-net", "localhost"], {}, "setting allow_net (flag --allow-net)"),
        ],
    )
    async def test_invalid_setting_stops_startup_naming_it(
        self, tmp_path: Path, args: list[str], env: dict[str, str], words: str
    ) -> None:
        """A bad flag or variable exits 2 before anything starts, naming the setting."""
        cmd = [sys.executable, "-c", "from trio_batch._cli import entry; entry()", "serve", *args]
        result = await trio.run_process(
            cmd, env={**CLEAN_ENV, **env}, capture_stdout=True, capture_stderr=True, check=False,
            cwd=tmp_path,
        )  # fmt: skip

        assert result.returncode == 2
        assert words in result.stderr.decode()

    async def test_missing_keys_file_says_how_to_make_one(self, tmp_path: Path) -> None:
        """Without a keys file the server does not start, and says which command makes one."""
        cmd = [sys.executable, "-c", "from trio_batch._cli import entry; entry()", "serve"]
        result = await trio.run_process(
            cmd, env=CLEAN_ENV, capture_stdout=True, capture_stderr=True, check=False, cwd=tmp_path
        )

        assert result.returncode == 2
        assert "trio-batch keys add NAME" in result.stderr.decode()


class TestEngineConfig:
    def test_settings_reach_the_engine(self) -> None:
        """--workers above the engine's default max is honoured, not clamped."""
        from trio_batch._cli._settings import load_settings

        config = load_settings({"workers": "4"}, environ={}).engine_config()

        assert (config.workers, config.effective_workers) == (4, 4)
        assert isinstance(config, Config)
