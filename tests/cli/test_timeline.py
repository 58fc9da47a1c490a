"""Timeline pictures: SVG text that parses, one bar per interval, lanes as slots, escaped."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from xml.etree import ElementTree

import pytest
import trio
import trio.testing

from tests.support import wait_ended
from trio_batch import Caller, Config, Target, open_engine
from trio_batch._cli import main
from trio_batch._cli._timeline import Bar, Recorder, assign_lanes, render_svg, target_bars
from trio_batch.stores import SQLiteStore
from trio_batch.testing import ScriptedFetch

from .support import make_jobs

SVG = "{http://www.w3.org/2000/svg}"


def _bars(svg: str) -> list[ElementTree.Element]:
    return ElementTree.fromstring(svg).findall(f"{SVG}rect[@class='bar']")


class TestLanes:
    def test_overlapping_intervals_take_separate_lanes_and_reuse_free_ones(self) -> None:
        """A bar goes in the first lane free at its start (shortest first): two slots, two lanes."""
        bars = [
            Bar(0.0, 1.0, "a", "alice", "a1"),
            Bar(0.0, 0.5, "b", "bob", "b1"),
            Bar(0.5, 1.5, "a", "alice", "a2"),
            Bar(1.0, 2.0, "b", "bob", "b2"),
        ]

        assert assign_lanes(bars) == [1, 0, 0, 1]

    def test_an_overlap_within_the_slack_shares_a_lane(self) -> None:
        """A bar that ends a little after the next one starts (a store's finish time comes
        when the outcome is stored) leaves its lane free to it within ``slack``."""
        bars = [Bar(0.0, 1.0004, "a", "alice", "a1"), Bar(1.0, 2.0, "b", "bob", "b1")]

        assert ([0, 1], [0, 0]) == (assign_lanes(bars), assign_lanes(bars, slack=0.001))


class TestRenderSvg:
    def test_one_bar_per_interval_and_the_document_parses(self) -> None:
        """Each interval is one `rect.bar` with a tooltip naming its caller, job and label."""
        bars = [Bar(10.0 + i, 10.5 + i, f"job{i % 3}", f"c{i % 3}", f"/p/{i}") for i in range(7)]

        svg = render_svg(bars, title="t")

        rects = _bars(svg)
        assert len(rects) == 7
        assert {r.findtext(f"{SVG}title") for r in rects} >= {"c0 job0: /p/0 (0.00-0.50 s)"}

    def test_text_is_escaped(self) -> None:
        """Labels, callers and titles with markup characters stay text."""
        bar = Bar(0.0, 1.0, "<job>", 'a&"b', "/q?x=<script>&y=1")

        svg = render_svg([bar], title="<b>&")

        root = ElementTree.fromstring(svg)
        assert root.findtext(f"{SVG}title") == "<b>&"
        assert "<script>" not in svg
        assert (
            _bars(svg)[0].findtext(f"{SVG}title") == 'a&"b <job>: /q?x=<script>&y=1 (0.00-1.00 s)'
        )

    def test_the_same_bars_give_the_same_picture(self) -> None:
        """Rendering is deterministic: the same bars in any order give identical text."""
        bars = [Bar(float(i), i + 1.5, f"j{i % 2}", "c", str(i)) for i in range(5)]

        assert render_svg(bars, title="x") == render_svg(bars[::-1], title="x")

    def test_no_bars_is_still_a_valid_document(self) -> None:
        """An empty timeline parses (and has no bars)."""
        assert _bars(render_svg([], title="empty")) == []


class TestRecorder:
    async def test_fetches_are_attributed_to_the_job_their_caller_submitted_last(self) -> None:
        """Each fetch becomes a bar of the job its caller had submitted when it started."""
        from trio_batch import Caller, Target
        from trio_batch.testing import ScriptedFetch

        clock = iter(range(100))
        recorder = Recorder(clock=lambda: float(next(clock)))
        fetch = recorder.wrap(ScriptedFetch(), label=lambda t: t.url)
        recorder.submitting("alice")("job-1")
        await fetch(Caller("alice"), Target("https://a.example/1"))
        recorder.submitting("alice")("job-2")
        await fetch(Caller("alice"), Target("https://a.example/2"))

        assert [(b.job, b.label) for b in recorder.bars()] == [
            ("job-1", "https://a.example/1"),
            ("job-2", "https://a.example/2"),
        ]


async def _run_jobs(db: Path) -> int:
    """Three callers' jobs of four targets each, run by two workers on the engine's clock (the
    mock clock here); returns how many fetches ran at once at most."""
    fetch = ScriptedFetch(duration=1.0)
    for i in range(4):
        fetch.set_duration(f"https://bob.test/{i}", 0.5)
    config = Config(workers=2, max_workers=2)
    async with (
        SQLiteStore.open(db) as store,
        open_engine(store, fetch, config, wall_clock=trio.current_time) as engine,
    ):
        subs = [
            await engine.submit(
                Caller(name), "fleet", [Target(f"https://{name}.test/{i}") for i in range(4)]
            )
            for name in ("alice", "bob", "carol")
        ]
        await wait_ended(engine, *(sub.id for sub in subs))
    return fetch.max_running


class TestTimelineCommand:
    def test_draws_each_target_of_an_engine_run_in_one_lane_per_worker(
        self, tmp_path: Path
    ) -> None:
        """`timeline --db` draws one bar per target from the store's times: a job's bars
        follow one another, and the lanes are the workers that ran at once."""
        db = tmp_path / "jobs.sqlite"
        # Time moves only when the engine has been idle for a while, so that it never moves
        # between a worker's next start and the store write of its last outcome.
        clock = trio.testing.MockClock(autojump_threshold=0.05)
        workers = trio.run(_run_jobs, db, clock=clock)

        code = main(["timeline", "--db", str(db), "--out", str(tmp_path / "t.svg")])
        svg = (tmp_path / "t.svg").read_text()
        _, bars = trio.run(target_bars, str(db), [])
        lanes = [t for t in ElementTree.fromstring(svg).itertext() if re.fullmatch(r"lane \d+", t)]

        assert 0 == code
        assert 12 == len(_bars(svg)) == len(bars)
        assert 12 == len({(b.job, b.label.split()[0]) for b in bars})
        for job in {b.job for b in bars}:
            mine = sorted((b.start, b.end) for b in bars if b.job == job)
            assert all(a[1] <= b[0] for a, b in pairwise(mine))
        assert (2, 2) == (workers, len(lanes))

    def test_draws_one_bar_per_target_of_the_store(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`timeline --db` draws every job, or the jobs named by id or prefix."""
        db = tmp_path / "jobs.sqlite"
        ids = trio.run(make_jobs, db, 3)

        every = main(["timeline", "--db", str(db)])
        svg = capsys.readouterr().out
        some = main(
            ["timeline", ids[0], ids[2][:10], "--db", str(db), "--out", str(tmp_path / "t.svg")]
        )

        assert (every, some) == (0, 0)
        assert len(_bars(svg)) == 3
        assert len(_bars((tmp_path / "t.svg").read_text())) == 2

    def test_an_unknown_job_exits_1(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A job id that matches nothing exits 1 and says how to list the jobs."""
        db = tmp_path / "jobs.sqlite"
        trio.run(make_jobs, db, 1)

        code = main(["timeline", "ffffffff", "--db", str(db)])

        assert code == 1
        assert "no job ffffffff" in capsys.readouterr().err
