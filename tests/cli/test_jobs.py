"""``trio-batch jobs``, and the bare ``trio-batch``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from trio_batch._cli import main

from .support import make_jobs


@pytest.fixture
def db_with_jobs(tmp_path: Path) -> tuple[Path, list[str]]:
    db = tmp_path / "jobs.sqlite"
    return db, trio.run(make_jobs, db, 2)


class TestJobs:
    def test_lists_every_job_with_status_and_counts(
        self, db_with_jobs: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`jobs --db` prints a header and one line per job, oldest first, with its counts."""
        db, ids = db_with_jobs

        code = main(["jobs", "--db", str(db)])
        lines = capsys.readouterr().out.splitlines()

        assert code == 0
        assert lines[0].split() == [
            "id",
            "caller",
            "status",
            "done",
            "failed",
            "created",
            "updated",
        ]
        assert [line.split()[:5] for line in lines[1:]] == [
            [job_id, "cli", "done", "1/1", "0"] for job_id in ids
        ]

    def test_json_lines_carry_counts_and_iso_times(
        self, db_with_jobs: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`jobs --json` prints one object a job, with per-state counts and ISO times."""
        db, ids = db_with_jobs

        code = main(["jobs", "--db", str(db), "--json"])
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

        assert code == 0
        assert [row["id"] for row in rows] == ids
        assert rows[0]["counts"] == {"pending": 0, "running": 0, "done": 1, "failed": 0}
        assert rows[0]["created_at_iso"].endswith("Z")

    def test_a_missing_database_is_a_usage_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A `--db` that does not exist exits 2 and says so; nothing is created."""
        code = main(["jobs", "--db", str(tmp_path / "nope.sqlite")])

        assert code == 2
        assert "nope.sqlite does not exist" in capsys.readouterr().err
        assert not (tmp_path / "nope.sqlite").exists()


def test_a_bare_command_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    """`trio-batch` alone prints the usage and the commands, and exits 2."""
    code = main([])

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("usage: trio-batch")
    assert "jobs" in err
    assert "timeline" in err
