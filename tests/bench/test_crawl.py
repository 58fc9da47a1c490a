"""CRAWL (``bench/crawl.py``) in a small configuration: what it measures holds, whatever the
time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bench._harness import Figure

from bench import crawl


@pytest.mark.slow
def test_a_child_processs_peak_memory_and_lines_are_measured(tmp_path: Path) -> None:
    """A child that holds 80 MiB for a moment shows at least that peak, and its JSON lines
    are read back (the crawl's and run's output)."""
    out = tmp_path / "out.jsonl"
    script = (
        "import json, sys\n"
        "held = bytearray(80 * 2**20)\n"
        f"open({str(out)!r}, 'w').write(json.dumps({{'status': 'done'}}) + '\\n' + 'not json\\n')\n"
    )

    child = crawl.run_child([sys.executable, "-c", script], out, tmp_path / "err")

    assert 0 == child.returncode
    assert child.peak_rss >= 80 * 2**20
    assert 1 == child.done


@pytest.mark.slow
def test_the_site_runs_as_a_process_with_its_log_over_http() -> None:
    """``python -m bench.crawl_site`` serves the site and answers its log, which a reset
    clears, so one site serves ``run`` and the crawls in turn."""
    with crawl.site_process(12) as site:
        import urllib.request

        with urllib.request.urlopen(site.site.url("/p1.html"), timeout=30) as answer:
            assert 200 == answer.status
        seen = site.stats()
        site.reset()

        assert {"page/1": 1} == seen["hits"]
        assert 0 == site.stats()["requests"]


@pytest.mark.slow
def test_the_tiny_run_measures_each_row_it_can(tmp_path: Path) -> None:
    """``--tiny``: the judge's cost, ``run`` over the site's pages and the API's crawl, each
    a figure; the CLI's crawl, until ``trio-batch crawl`` exists, a note, never a failure."""
    out = tmp_path / "crawl.json"

    assert 0 == crawl.main(["--tiny", "--json", str(out)])

    figures = json.loads(out.read_text())
    names = {(f["system"], f["name"]) for f in figures}
    assert {("rules", "judge, site links"), ("rules", "judge, distinct URLs")} <= names
    assert {("run", "pages/s"), ("run", "peak RSS")} <= names
    assert {
        ("crawl", "API: pages stored off the limit"),
        ("crawl", "API: pages fetched twice"),
    } <= names
    assert all(f["median"] > 0 for f in figures if f["system"] in ("rules", "run"))


def test_the_goals_read_each_crawl_figure_with_its_direction() -> None:
    """A speed goal is met at or above it, a count or memory goal at or below it."""
    figures = [
        Figure("CRAWL", "sqlite", "crawl", "pages/s vs run", "x", [0.9], True, {"goal": 0.8}),
        Figure("CRAWL", "sqlite", "crawl", "peak RSS ratio", "x", [1.6], False, {"goal": 1.5}),
        Figure(
            "CRAWL", "sqlite", "crawl", "pages fetched twice", "pages", [0.0], False, {"goal": 0}
        ),
        Figure("CRAWL", "sqlite", "run", "pages/s", "pages/s", [100.0]),
    ]

    met = {goal: ok for goal, _, ok, _ in crawl.crawl_goals(figures)}

    assert {
        "CRAWL pages/s vs run >= 0.8": True,
        "CRAWL peak RSS ratio <= 1.5": False,
        "CRAWL pages fetched twice <= 0": True,
    } == met
