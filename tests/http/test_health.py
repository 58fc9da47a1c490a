"""/healthz tells the truth about writes: 503 while the API's or the engine's fail, 200 after.

A fake store that fails its writes at once (as SQLite does when the disk is full) while reads
still answer, on Trio's mock clock; and the real thing, a SQLite store on a tmpfs that the test
fills (root only). Also: ``?results=1`` streams a body byte-identical to the whole object.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sqlite3
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing
from starlette.responses import JSONResponse

from tests.support import wait_ended
from trio_batch import Result
from trio_batch.http._health import FAILED_WRITE_SECONDS
from trio_batch.stores import MemoryStore, SQLiteStore, Store
from trio_batch.testing import ScriptedFetch

from .support import Api, open_api

A = "https://a.example.test/"
B = "https://b.example.test/"
FULL = sqlite3.OperationalError("database or disk is full")
WRITES = frozenset({"admit", "touch", "cancel", "finish_targets", "start_target", "interrupt"})


class FullDiskStore:
    """A :class:`MemoryStore` whose writes fail at once while ``full`` (reads still answer)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.full = False
        self.engine_failed = trio.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(method) or name not in WRITES:
            return method

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.full:
                await trio.lowlevel.checkpoint()
                if name == "finish_targets":
                    self.engine_failed.set()
                raise FULL
            return await method(*args, **kwargs)

        return call


@pytest.fixture
async def disk() -> FullDiskStore:
    return FullDiskStore()


@pytest.fixture
async def api(disk: FullDiskStore) -> AsyncIterator[Api]:
    async with open_api(store=cast("Store", disk), store_timeout=2.0) as a:
        yield a


class TestFailingWrites:
    async def test_a_write_that_fails_at_once_makes_healthz_503_until_one_lands(
        self, api: Api, disk: FullDiskStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A submit failing with SQLITE_FULL: /healthz 503 with a reason; a write lands: 200."""
        before = await api.client.get("/healthz")
        disk.full = True
        refused = await api.submit(A)
        sick = await api.client.get("/healthz")
        disk.full = False
        landed = await api.submit(A)
        well = await api.client.get("/healthz")

        assert before.status_code == 200
        assert refused.status_code == 503
        assert (sick.status_code, sick.headers.get("retry-after")) == (503, "5")
        assert sick.json()["error"] == "the database cannot write"
        assert "by the API failed with OperationalError" in sick.json()["hint"]
        assert landed.status_code == 202
        assert (well.status_code, well.json()["status"]) == (200, "ok")

    async def test_without_writes_healthz_is_200_again_after_the_window(
        self, api: Api, disk: FullDiskStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """An instance nobody writes to any more (a balancer took it out) comes back by itself."""
        disk.full = True
        await api.submit(A)
        sick = await api.client.get("/healthz")
        await trio.sleep(FAILED_WRITE_SECONDS)
        later = await api.client.get("/healthz")

        assert sick.status_code == 503
        assert later.status_code == 200

    async def test_the_engine_failing_to_store_outcomes_makes_healthz_503(
        self, api: Api, disk: FullDiskStore, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Results that cannot be stored: 503 naming the engine; 200 once its retry lands."""
        gate = api.fetch.hold(A)
        job_id = (await api.submit(A)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        disk.full = True
        gate.set()
        await disk.engine_failed.wait()
        sick = [await api.client.get("/healthz")]
        await trio.sleep(FAILED_WRITE_SECONDS * 2)  # the engine keeps trying: still failing
        sick.append(await api.client.get("/healthz"))
        disk.full = False
        t0 = trio.current_time()
        await wait_ended(api.engine, job_id)
        recovered_in = trio.current_time() - t0
        well = await api.client.get("/healthz")

        assert [r.status_code for r in sick] == [503, 503]
        assert "by the engine (storing results)" in sick[1].json()["hint"]
        assert recovered_in <= 10.5
        assert well.status_code == 200

    async def test_a_failing_poll_is_logged_once_per_spell_not_per_request(
        self,
        api: Api,
        disk: FullDiskStore,
        autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Polls whose background touch fails, and refused submits: a few lines, not one each."""
        job_id = (await api.submit(A)).json()["id"]
        await trio.testing.wait_all_tasks_blocked()
        disk.full = True
        with caplog.at_level(logging.INFO, logger="trio_batch.http"):
            for _ in range(60):
                await api.get(f"/v1/batch/{job_id}")
                await api.submit(B)
                await api.client.get("/healthz")
                await trio.sleep(0.3)
            disk.full = False
            await api.submit(B)
        lines = [r.getMessage() for r in caplog.records if r.name == "trio_batch.http"]

        assert 1 == sum("a write to the database failed" in line for line in lines)
        assert 1 == sum("writes to the database work again" in line for line in lines)
        assert len(lines) <= 8  # 18 s of failures: the throttled lines, one per 10 s a kind


@contextlib.contextmanager
def small_filesystem(size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a new folder for the block (root only), then unmounted."""
    folder = Path(tempfile.mkdtemp(prefix="trio-batch-full-"))
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], check=True)
        try:
            yield folder
        finally:
            subprocess.run(["umount", "-l", folder], check=True)
    finally:
        folder.rmdir()


def fill(folder: Path) -> Path:
    """Write a file until the filesystem has no byte left; return it (delete it to free)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for block in (65536, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * block)
    finally:
        os.close(fd)
    return filler


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="mounting a small tmpfs to fill needs root (CI runs as root)",
)
async def test_a_real_full_disk_makes_healthz_503_and_recovery_makes_it_200() -> None:
    """SQLite on a full tmpfs: submits 503, /healthz 503 'cannot write'; room again: 202, 200."""
    targets = [f"https://a.example.test/{'x' * 1900}/{i}" for i in range(30)]
    with small_filesystem("2m") as folder:
        async with (
            SQLiteStore.open(folder / "jobs.sqlite") as store,
            open_api(store=store, fetch=ScriptedFetch()) as api,
        ):
            filler = fill(folder)
            refused = await api.submit(*targets)
            sick = await api.client.get("/healthz")
            filler.unlink()
            admitted = await api.submit(*targets)
            well = await api.client.get("/healthz")

    assert refused.status_code == 503
    assert (sick.status_code, sick.json()["error"]) == (503, "the database cannot write")
    assert admitted.status_code == 202
    assert well.status_code == 200


class TestResultsBody:
    @pytest.mark.parametrize(
        "query",
        [
            {"results": 1},
            {"results": 1, "limit": 2},
            {"results": 1, "offset": 1, "limit": 1},
            {"results": 1, "offset": 9},
            {"results": 1, "state": "failed"},
            {"results": 1, "state": "done", "offset": 1},
        ],
    )
    async def test_the_streamed_body_is_the_json_object_byte_for_byte(
        self, query: dict[str, Any], autojump_clock: trio.testing.MockClock
    ) -> None:
        """``?results=1`` in pieces: the same bytes ``JSONResponse`` makes of the whole object."""
        fetch = ScriptedFetch()
        fetch.script(A, Result("ä " * 3000, {"title": "Grüße \u2028"}))
        fetch.script(B, RuntimeError("boom"))
        async with open_api(fetch=fetch) as api:
            job_id = (await api.submit(A, B, A + "2", A + "3")).json()["id"]
            await trio.testing.wait_all_tasks_blocked()
            r = await api.get(f"/v1/batch/{job_id}", **query)

        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert JSONResponse(r.json()).body == r.content
