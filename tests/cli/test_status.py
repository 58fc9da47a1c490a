"""``trio-batch status`` and ``results``: a local database read-only, or a server."""

from __future__ import annotations

import argparse
import datetime
import io
import json
from pathlib import Path

import pytest
import trio

from tests.support import wait_ended
from trio_batch import (
    BatchEngine,
    Caller,
    Config,
    RetryLater,
    Target,
    TargetError,
    open_engine,
)
from trio_batch._cli import main
from trio_batch._cli._status import _remote
from trio_batch.stores import MemoryStore, SQLiteStore
from trio_batch.testing import ScriptedFetch

from .support import make_jobs

URLS = ["https://a.example/1", "https://a.example/2", "https://a.example/3"]


async def _make_job(db: Path) -> str:
    fetch = ScriptedFetch()
    fetch.script(URLS[1], TargetError("gone", hint="drop it", status=404))
    async with SQLiteStore.open(db) as store, open_engine(store, fetch) as engine:
        sub = await engine.submit(Caller("cli"), "fleet", [Target(u) for u in URLS])
        await wait_ended(engine, sub.id)
    return sub.id


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "jobs.sqlite"
    return db, trio.run(_make_job, db)


class TestLocal:
    def test_status_prints_the_summary_as_json(
        self, job: tuple[Path, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`status ID --db` prints the job's status and per-state counts."""
        db, job_id = job

        code = main(["status", job_id, "--db", str(db)])

        summary = json.loads(capsys.readouterr().out)
        assert code == 0
        assert (job_id, "partial", 3) == (
            summary["id"],
            summary["status"],
            summary["targets_total"],
        )
        assert summary["counts"] == {"pending": 0, "running": 0, "done": 2, "failed": 1}

    def test_results_prints_one_line_per_target_and_filters_by_state(
        self, job: tuple[Path, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`results ID` prints every target in input order; `--state failed` only the failed."""
        db, job_id = job

        all_code = main(["results", job_id, "--db", str(db)])
        every = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        failed_code = main(["results", job_id, "--db", str(db), "--state", "failed"])
        failed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

        assert (all_code, failed_code) == (0, 0)
        assert [line["idx"] for line in every] == [0, 1, 2]
        assert every[0]["result"]["content"] == "content of https://a.example/1"
        assert [(t["idx"], t["status"], t["error"], t["hint"]) for t in failed] == [
            (1, "failed", "gone", "drop it")
        ]

    def test_the_database_is_opened_read_only(
        self, job: tuple[Path, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Reading works while another store holds the database open for writing."""
        db, job_id = job

        async def read_beside_a_writer() -> int:
            async with SQLiteStore.open(db):
                return await trio.to_thread.run_sync(main, ["status", job_id, "--db", str(db)])

        code = trio.run(read_beside_a_writer)

        assert code == 0
        assert "partial" in capsys.readouterr().out

    def test_unknown_job_exits_1_and_missing_database_exits_2(
        self, job: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown id exits 1; a database that does not exist is a usage error (2)."""
        db, _ = job

        unknown = main(["status", "0" * 32, "--db", str(db)])
        unknown_err = capsys.readouterr().err
        missing = main(["results", "0" * 32, "--db", str(tmp_path / "nope.sqlite")])
        missing_err = capsys.readouterr().err

        assert (unknown, missing) == (1, 2)
        assert f"no job {'0' * 32} in {db}" in unknown_err
        assert "does not exist" in missing_err

    def test_server_without_a_key_is_a_usage_error(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`--server` needs `--key` or TRIO_BATCH_KEY."""
        monkeypatch.delenv("TRIO_BATCH_KEY", raising=False)

        code = main(["status", "abc", "--server", "http://127.0.0.1:9"])

        assert code == 2
        assert "pass --key or set TRIO_BATCH_KEY" in capsys.readouterr().err


class TestServer:
    async def test_status_and_results_read_a_server(self, nursery: trio.Nursery) -> None:
        """With --server and a key, status and results read the HTTP API, every page of it."""
        pytest.importorskip("hypercorn")
        from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key, serve

        key = "tb_" + "k" * 43
        record = KeyRecord("alice", "", "fleet", hash_key(key))
        fetch = ScriptedFetch()
        fetch.script(URLS[2], RetryLater(), TargetError("nope", hint="skip it"))
        engine: BatchEngine = await nursery.start(_engine_task, fetch)
        app = create_app(engine, KeyRing([record]), precheck=lambda url: None)
        port: int = await nursery.start(
            lambda task_status: serve(app, port=0, task_status=task_status)
        )
        sub = await engine.submit(record.caller(), "fleet", [Target(u) for u in URLS])
        await wait_ended(engine, sub.id)
        base = argparse.Namespace(id=sub.id, server=f"http://127.0.0.1:{port}", key=key)
        status_out, results_out, failed_out = io.StringIO(), io.StringIO(), io.StringIO()

        await _remote("status", base, status_out)
        await _remote("results", argparse.Namespace(**vars(base), state=None), results_out)
        await _remote("results", argparse.Namespace(**vars(base), state="failed"), failed_out)

        summary = json.loads(status_out.getvalue())
        lines = [json.loads(line) for line in results_out.getvalue().splitlines()]
        failed = [json.loads(line) for line in failed_out.getvalue().splitlines()]
        assert (summary["status"], summary["targets_total"]) == ("partial", 3)
        assert [line["idx"] for line in lines] == [0, 1, 2]
        assert [line["status"] for line in lines] == ["done", "done", "failed"]
        assert [(t["idx"], t["error"], t["hint"]) for t in failed] == [(2, "nope", "skip it")]


async def _engine_task(fetch: ScriptedFetch, *, task_status: trio.TaskStatus[BatchEngine]) -> None:
    async with open_engine(MemoryStore(), fetch, Config(retry_wait=0.01)) as engine:
        task_status.started(engine)
        await trio.sleep_forever()


class TestIdPrefixes:
    def test_a_unique_prefix_reads_the_job(
        self, job: tuple[Path, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`status` and `results` accept the first characters of an id (as the display shows)."""
        db, job_id = job

        status_code = main(["status", job_id[:8], "--db", str(db)])
        summary = json.loads(capsys.readouterr().out)
        results_code = main(["results", job_id[:4], "--db", str(db)])
        lines = capsys.readouterr().out.splitlines()

        assert (status_code, results_code) == (0, 0)
        assert summary["id"] == job_id
        assert len(lines) == 3

    def test_an_ambiguous_prefix_exits_2_naming_the_candidates(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A prefix of several ids is a usage error that counts them and asks for more."""
        db = tmp_path / "jobs.sqlite"
        ids = trio.run(make_jobs, db, 17)  # 17 hex ids: two share a first digit, at least
        shared = next(i[0] for i in ids if sum(j.startswith(i[0]) for j in ids) > 1)
        count = sum(j.startswith(shared) for j in ids)

        code = main(["status", shared, "--db", str(db)])
        err = capsys.readouterr().err
        empty = main(["status", "", "--db", str(db)])

        assert (code, empty) == (2, 2)
        named = f"{count}" if count <= 5 else "more than 5"
        assert err.startswith(f"trio-batch status: {shared} is the start of {named} job ids (")
        assert err.endswith("; give more characters\n")
        assert "the job id is empty" in capsys.readouterr().err

    def test_status_shows_iso_times_beside_epoch_seconds(
        self, job: tuple[Path, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`status` prints `created_at_iso`/`updated_at_iso` (UTC) beside the epoch seconds."""
        db, job_id = job

        main(["status", job_id, "--db", str(db)])
        summary = json.loads(capsys.readouterr().out)

        created = datetime.datetime.fromisoformat(summary["created_at_iso"])
        assert created.utcoffset() == datetime.timedelta(0)
        assert abs(created.timestamp() - summary["created_at"]) < 0.001
        assert summary["updated_at_iso"].endswith("Z")
