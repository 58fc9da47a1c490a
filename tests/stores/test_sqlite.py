"""What only the SQLite store does: one writer, group commit, schema versions, read-only use."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from trio_batch import Caller, Config, StoreError, open_engine
from trio_batch.stores import Limits, SQLiteStore
from trio_batch.stores._sqlite._schema import SCHEMA_VERSION

from ..support import targets, wait_ended
from .support import new_job

LIMITS = Limits(ttl=100.0, targets_per_job=32, jobs_per_caller=1000, jobs_total=1000)
"""Room for the many jobs one test admits."""


class TestSQLiteStore:
    async def test_second_writer_is_refused_with_advice(self, tmp_path: Path) -> None:
        """A second SQLiteStore on the same file is refused and told to use PostgreSQL."""
        path = tmp_path / "jobs.sqlite"
        async with SQLiteStore.open(path) as store:
            await store.admit(new_job("j1", n=1), LIMITS)
            with pytest.raises(StoreError, match=r"already open for writing.*PostgresStore"):
                async with SQLiteStore.open(path):
                    pass
            snap = await store.snapshot("j1")

            assert snap is not None

    def test_second_process_is_refused(self, tmp_path: Path) -> None:
        """Another process opening the file for writing gets the same clear error."""
        path = tmp_path / "jobs.sqlite"
        code = (
            "import sys, trio\n"
            "from trio_batch.stores import SQLiteStore\n"
            "async def main():\n"
            "    async with SQLiteStore.open(sys.argv[1]):\n"
            "        print('opened', flush=True)\n"
            "        await trio.sleep_forever()\n"
            "trio.run(main)\n"
        )
        with subprocess.Popen(
            [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True
        ) as first:
            try:
                assert first.stdout is not None and "opened\n" == first.stdout.readline()
                second = subprocess.run(
                    [sys.executable, "-c", code, str(path)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )

                assert 0 != second.returncode
                assert "use PostgresStore" in second.stderr
            finally:
                first.kill()

    async def test_reopen_keeps_jobs_and_schema_version(self, tmp_path: Path) -> None:
        """Closing and reopening keeps every job; the schema is at the latest version."""
        path = tmp_path / "jobs.sqlite"
        async with SQLiteStore.open(path) as store:
            await store.admit(new_job("j1", n=1), LIMITS)
        async with SQLiteStore.open(path) as store:
            assert await store.snapshot("j1") is not None
        conn = sqlite3.connect(path)
        try:
            assert SCHEMA_VERSION == conn.execute("PRAGMA user_version").fetchone()[0]
            assert "wal" == conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()

    async def test_newer_schema_is_refused_untouched(self, tmp_path: Path) -> None:
        """A file written by a newer trio-batch is refused, and left as it was."""
        path = tmp_path / "jobs.sqlite"
        conn = sqlite3.connect(path)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
        with pytest.raises(StoreError, match=r"newer than this trio-batch knows"):
            async with SQLiteStore.open(path):
                pass
        conn = sqlite3.connect(path)
        assert SCHEMA_VERSION + 1 == conn.execute("PRAGMA user_version").fetchone()[0]
        conn.close()

    async def test_migrates_from_version_one(self, tmp_path: Path) -> None:
        """A version-1 file gains the web cache table and keeps its jobs."""
        from trio_batch.stores._sqlite._schema import MIGRATIONS

        path = tmp_path / "jobs.sqlite"
        conn = sqlite3.connect(path, isolation_level=None)
        for statement in MIGRATIONS[0].split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        conn.close()
        async with SQLiteStore.open(path) as store:
            await store.admit(new_job("j1", n=1), LIMITS)
            assert await store.cache_get("nothing") is None
            assert await store.snapshot("j1") is not None

    async def test_memory_path_is_refused(self) -> None:
        """':memory:' points to MemoryStore."""
        with pytest.raises(ValueError, match=r"use MemoryStore"):
            async with SQLiteStore.open(":memory:"):
                pass

    async def test_readonly_reads_beside_a_writer(self, tmp_path: Path) -> None:
        """A read-only store reads what the writer committed, and cannot write."""
        path = tmp_path / "jobs.sqlite"
        async with SQLiteStore.open(path) as store, SQLiteStore.open(path, readonly=True) as ro:
            await store.admit(new_job("j1", n=1), LIMITS)
            assert await ro.snapshot("j1") is not None
            with pytest.raises(StoreError, match=r"read-only"):
                await ro.touch("j1", 1.0)
        with pytest.raises(StoreError, match=r"does not exist"):
            async with SQLiteStore.open(tmp_path / "missing.sqlite", readonly=True):
                pass

    async def test_concurrent_writes_share_commits(self, tmp_path: Path) -> None:
        """Writes queued while the writer is busy are committed together (group commit)."""
        import threading

        import trio.testing

        started, gate = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> None:
            started.set()
            gate.wait(30)

        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store._write, hold)
                await trio.to_thread.run_sync(started.wait)
                for i in range(200):
                    nursery.start_soon(store.admit, new_job(f"j{i}", n=1), LIMITS)
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            commits, writes = store.commit_statistics()

            assert (2, 201) == (commits, writes)

    async def test_engine_runs_a_batch_on_sqlite(self, tmp_path: Path) -> None:
        """A whole batch runs on SQLite and reads back after reopening."""
        from trio_batch.testing import ScriptedFetch

        path = tmp_path / "jobs.sqlite"
        async with SQLiteStore.open(path) as store:
            config = Config(workers=2, jobs_per_caller=3)
            async with open_engine(store, ScriptedFetch(), config) as engine:
                subs = [await engine.submit(Caller("a"), "fleet", targets(j, 5)) for j in "xyz"]
                await wait_ended(engine, *(sub.id for sub in subs))
        async with SQLiteStore.open(path, readonly=True) as store:
            for sub in subs:
                snap = await store.snapshot(sub.id)
                assert snap is not None and "done" == snap.job.status

    async def test_a_failing_write_does_not_undo_its_batch(self, tmp_path: Path) -> None:
        """One write that fails inside a group commit gets its error; the others land."""
        import threading

        import trio.testing

        started, gate = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> None:
            started.set()
            gate.wait(30)

        def broken(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO counters (caller) VALUES ('half-done')")
            conn.execute("INSERT INTO no_such_table VALUES (1)")

        errors: list[BaseException] = []

        async def write_broken() -> None:
            try:
                await store._write(broken)
            except sqlite3.OperationalError as exc:
                errors.append(exc)

        async with SQLiteStore.open(tmp_path / "jobs.sqlite") as store:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store._write, hold)
                await trio.to_thread.run_sync(started.wait)
                nursery.start_soon(store.admit, new_job("before", n=1), LIMITS)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(write_broken)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(store.admit, new_job("after", n=1), LIMITS)
                await trio.testing.wait_all_tasks_blocked()
                gate.set()

            assert 1 == len(errors)
            assert await store.snapshot("before") is not None
            assert await store.snapshot("after") is not None
        conn = sqlite3.connect(tmp_path / "jobs.sqlite")
        assert [] == conn.execute("SELECT * FROM counters WHERE caller = 'half-done'").fetchall()
        conn.close()
