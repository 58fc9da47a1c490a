"""W6, the followers' cost (``bench/followers.py``): it measures, and it never waits for ever."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from bench.followers import follower_run


class TestFollowerRun:
    @pytest.mark.parametrize("route", ["results", "events"])
    async def test_measures_the_followers_of_a_job(self, route: str, tmp_path: Path) -> None:
        """Every follower watches, then gets every target; the run counts reads and CPU."""
        run = await follower_run("memory", str(tmp_path), "", followers=6, targets=4, wave=4)

        assert (6, 4) == (run.followers, run.targets)
        assert run.received > 0
        assert run.reads >= 1
        assert run.connect_cpu > 0
        assert run.run_cpu > 0
        assert run.heap_bytes is None

    async def test_a_refused_follower_stops_the_run_at_once(self, tmp_path: Path) -> None:
        """A follower answered 503 (the store too slow) fails the run; it used to spin for ever."""
        with (
            trio.fail_after(10),
            pytest.raises(RuntimeError, match=r"^a results follower was answered 503, not 200"),
        ):
            await follower_run(
                "memory", str(tmp_path), "", followers=5, targets=3, store_timeout=1e-9
            )

    async def test_heap_run_reports_the_heap_and_no_rss(self, tmp_path: Path) -> None:
        """Under tracemalloc the heap is measured, and the RSS (inflated by tracing) is not."""
        run = await follower_run(
            "memory", str(tmp_path), "", followers=5, targets=2, measure_heap=True
        )

        assert run.heap_bytes is not None
        assert run.heap_bytes > 0
        assert run.rss_bytes is None
