"""The benchmark harness (``python -m bench.run``) in a tiny configuration, so that it cannot rot.

The figures of a tiny run mean nothing; these tests only check that every workload runs on
every store and that the report has the shape the docs and the plot read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import _harness, report, run


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One tiny run of W1-W6 on MemoryStore and SQLiteStore, shared by the tests below."""
    out = tmp_path_factory.mktemp("bench")
    argv = ["--tiny", "--stores", "memory,sqlite,postgres", "--pg", "", "--no-plot"]
    assert run.main([*argv, "--out", str(out)]) == 0
    doc: dict[str, Any] = json.loads((out / "latest.json").read_text())
    doc["_md"] = (out / "latest.md").read_text()
    doc["_dir"] = str(out)
    return doc


@pytest.mark.slow
class TestBenchHarness:
    def test_every_workload_runs_on_every_store(self, tiny_report: dict[str, Any]) -> None:
        """Each workload has figures on MemoryStore and SQLiteStore, and W1/W2 a baseline."""
        have = {(f["workload"], f["store"], f["system"]) for f in tiny_report["figures"]}

        for store in ("memory", "sqlite"):
            for workload in ("W1", "W2", "W3", "W4", "W5", "W6"):
                assert (workload, store, "trio-batch") in have
            assert ("W1", store, "baseline") in have
            assert ("W2", store, "baseline") in have
        assert ("W2", "none", "floor") in have

    def test_figures_carry_min_median_max(self, tiny_report: dict[str, Any]) -> None:
        """Every figure lists its repeats with min <= median <= max, all positive.

        W6's RSS and CPU per stored target are differences of two measurements: in a tiny run
        (20 followers of 10 targets) they may come out at zero or below. CRAWL's counts whose
        goal is 0 (pages fetched twice, past the limit) are 0 when all is well.
        """
        for fig in tiny_report["figures"]:
            assert fig["values"], fig["name"]
            difference = fig["workload"] == "W6" and fig["name"].startswith(("RSS", "CPU per"))
            count = fig["workload"] == "CRAWL" and fig.get("extra", {}).get("goal") == 0
            assert fig["min"] <= fig["median"] <= fig["max"], fig
            assert difference or count or fig["min"] > 0, fig

    def test_w1_says_how_much_of_its_wall_went_to_submits(
        self, tiny_report: dict[str, Any]
    ) -> None:
        """Each W1 run of every system carries the share of its wall spent until the last job
        was submitted: a fraction, one per repeat (where a slow W1 on a store loses its time)."""
        w1 = [f for f in tiny_report["figures"] if f["workload"] == "W1"]
        assert w1
        for fig in w1:
            shares = fig["extra"]["submit_share"]
            assert len(shares) == len(fig["values"]), fig
            assert all(0 < share < 1 for share in shares), fig

    def test_followers_for_each_route(self, tiny_report: dict[str, Any]) -> None:
        """W6 reports memory, CPU and store reads per follower for NDJSON follow and SSE."""
        names = {f["name"] for f in tiny_report["figures"] if f["workload"] == "W6"}

        for route in ("NDJSON follow", "SSE events"):
            for figure in (
                "RSS per waiting follower",
                "heap per waiting follower",
                "CPU to connect a follower",
                "CPU per follower per stored target",
                "store reads per stored target, all followers",
            ):
                assert f"{figure} ({route})" in names
        assert (
            "| W6 | sqlite | trio-batch | heap per waiting follower (SSE events) |"
            in (tiny_report["_md"])
        )

    def test_report_names_machine_versions_and_goals(self, tiny_report: dict[str, Any]) -> None:
        """The report records where it ran, with what, and each goal's verdict."""
        assert tiny_report["mode"] == "tiny"
        assert tiny_report["versions"]["trio"]
        assert tiny_report["machine"]["python"]
        assert {g["goal"] for g in tiny_report["goals"]} >= {"W1 on SQLite >= 15,000 targets/s"}
        assert "| W1 | sqlite | trio-batch | throughput |" in tiny_report["_md"]

    def test_postgres_rows_are_skipped_with_a_note(self, tiny_report: dict[str, Any]) -> None:
        """Without a DSN the PostgreSQL rows are left out and the notes say why."""
        assert not any(f["store"] == "postgres" for f in tiny_report["figures"])
        assert any(n.startswith("PostgresStore rows skipped") for n in tiny_report["notes"])

    def test_plot_is_written(self, tiny_report: dict[str, Any], tmp_path: Path) -> None:
        """The plot renders from the report's figures (needs matplotlib, the bench group)."""
        pytest.importorskip("matplotlib")
        figures = [report.figure_from_json(f) for f in tiny_report["figures"]]

        report.plot(figures, tmp_path / "plot.png", "tiny")

        assert (tmp_path / "plot.png").stat().st_size > 10_000

    def test_render_rewrites_the_table_from_the_json(self, tiny_report: dict[str, Any]) -> None:
        """``--render`` measures nothing and rewrites latest.md from latest.json."""
        out = Path(tiny_report["_dir"])
        (out / "latest.md").unlink()

        assert run.main(["--render", "--no-plot", "--out", str(out)]) == 0

        assert (out / "latest.md").read_text() == tiny_report["_md"]


class TestPercentile:
    def test_nearest_rank(self) -> None:
        """p99 of 100 samples is the 99th smallest, and p50 of 1..4 is 2."""
        assert _harness.percentile(list(range(1, 101)), 99) == 99
        assert _harness.percentile([4, 1, 3, 2], 50) == 2
