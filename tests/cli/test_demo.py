"""``trio-batch demo`` runs to completion, offline, and its summary is what the store holds."""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest
import trio

from trio_batch._cli import main
from trio_batch.stores import SQLiteStore

SVG = "{http://www.w3.org/2000/svg}"
ROW = re.compile(r"^(alice|bob|carol)\s+([0-9a-f]{32})\s+(\w+)\s+(\d+)/(\d+)\s+(\d+)\s+[\d.]+$")


async def _read(db: Path, ids: list[str]) -> dict[str, tuple[str, int, int, int]]:
    held: dict[str, tuple[str, int, int, int]] = {}
    async with SQLiteStore.open(db, readonly=True) as store:
        for job_id in ids:
            snap = await store.snapshot(job_id)
            assert snap is not None
            statuses = [t.status.value for t in snap.targets]
            held[job_id] = (
                snap.job.status.value,
                statuses.count("done"),
                len(statuses),
                statuses.count("failed"),
            )
    return held


@dataclass(frozen=True)
class DemoRun:
    code: int
    out: str
    err: str
    db: Path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One quick demo run, its output captured as a pipe would see it."""
    db = tmp_path_factory.mktemp("demo") / "demo.sqlite"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["demo", "--quick", "--db", str(db), "--timeline", str(db.with_suffix(".svg"))])
    return DemoRun(code, out.getvalue(), err.getvalue(), db)


class TestDemo:
    def test_demo_finishes_and_its_summary_matches_the_database(self, demo: DemoRun) -> None:
        """The demo exits 0, every job ends, and each summary row equals the stored job."""
        rows = [m.groups() for line in demo.out.splitlines() if (m := ROW.match(line))]
        held = trio.run(_read, demo.db, [row[1] for row in rows])

        assert demo.code == 0, demo.err
        assert [r[0] for r in rows] == ["alice", "alice", "bob", "bob", "carol", "carol"]
        assert {row[1]: (row[2], int(row[3]), int(row[4]), int(row[5])) for row in rows} == held
        assert {status for status, *_ in held.values()} <= {"done", "partial"}
        assert f"trio-batch results {rows[0][1]} --db {demo.db}" in demo.out

    def test_progress_is_plain_lines_when_not_on_a_terminal(self, demo: DemoRun) -> None:
        """Off a terminal the demo reports progress as plain lines, ending with every target."""
        last = demo.err.strip().splitlines()[-1]

        assert last.startswith("trio-batch: 22/22 targets")
        assert "\x1b[" not in demo.err

    def test_demo_shows_the_guard_refusing_the_private_redirect(self, demo: DemoRun) -> None:
        """Carol's redirect into 169.254.169.254 fails with an error, and so does the 404."""
        failures = demo.out.split("failed targets", 1)[1].split("results are in", 1)[0]

        assert "/redirect-private:" in failures
        assert "/articles/99:" in failures
        assert failures.count("carol") == 2

    def test_the_timeline_has_a_bar_for_every_target_of_every_job(self, demo: DemoRun) -> None:
        """`--timeline` draws each fetch as a bar, in at most two worker lanes, for every job."""
        svg = ElementTree.parse(demo.db.with_suffix(".svg")).getroot()
        bars = svg.findall(f"{SVG}rect[@class='bar']")
        tips = [bar.findtext(f"{SVG}title") or "" for bar in bars]
        ids = [m.group(2) for line in demo.out.splitlines() if (m := ROW.match(line))]
        held = trio.run(_read, demo.db, ids)
        lanes = {
            text.text for text in svg.findall(f"{SVG}text") if (text.text or "")[:7] == "worker "
        }

        assert lanes == {"worker 1", "worker 2"}
        # Every target has a bar; the busy pages are fetched three times (two 429s, then 200).
        assert len(bars) == sum(total for _, _, total, _ in held.values()) + 4
        for job_id in ids:
            assert sum(f" {job_id[:8]}: " in tip for tip in tips) >= held[job_id][2]
        assert f"the timeline is in {demo.db.with_suffix('.svg')}" in demo.out
