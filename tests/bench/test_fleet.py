"""FLEET, the fleet's benchmark (``bench/fleet.py``): its pieces, and one tiny run on PostgreSQL.

The tiny run's figures mean nothing; it only checks that the serve processes start, share the
work, are stopped, and that the figures and goals have the shape the report reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio
from bench._harness import Figure

from bench import fleet
from tests.stores.postgres.support import PG_DSN, SKIP_REASON


class TestFleetPieces:
    def test_caller_waits_are_the_gaps_between_outcomes(self) -> None:
        """The first wait counts from the submit, each next one from the previous outcome."""
        waits = fleet.caller_waits({"a": [10.0, 10.5, 10.2], "b": [20.0]})

        assert [round(w, 6) for w in waits] == [0.2, 0.3]

    async def test_the_site_answers_each_page_after_its_delay(self) -> None:
        """A page's path names its delay; the answer is a small 200 that is never cached."""
        async with trio.open_nursery() as nursery:
            port = await nursery.start(fleet.serve_site)
            async with httpx.AsyncClient() as client:
                started = trio.current_time()
                answer = await client.get(f"http://{fleet.SITE_HOST}:{port}/ms/50/x/1")
                waited = trio.current_time() - started
            nursery.cancel_scope.cancel()

        assert answer.status_code == 200
        assert answer.headers["cache-control"] == "no-store"
        assert answer.text == "page /ms/50/x/1\n"
        assert waited >= 0.05


@pytest.mark.slow
@pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)
def test_a_tiny_fleet_run(tmp_path: Path) -> None:
    """``python -m bench.fleet --tiny``: every FLEET figure and goal, from real serve processes."""
    out = tmp_path / "fleet.json"

    assert fleet.main(["--tiny", "--pg", PG_DSN, "--json", str(out)]) == 0

    figures = json.loads(out.read_text())
    have = {(f["system"], f["name"]) for f in figures}
    assert ("1 instances", "I/O-bound throughput") in have
    assert ("2 instances", "caller wait p99") in have
    assert ("2 vs 1 instances", "throughput ratio") in have
    assert ("1 instance", "admissions/s while draining") in have
    assert all(f["min"] > 0 for f in figures)
    goals = {goal for goal, *_ in fleet.fleet_goals([fleet_figure(f) for f in figures])}
    assert "FLEET 2 vs 1 instances >= 2.5x" in goals


def fleet_figure(doc: dict[str, object]) -> Figure:
    """A figure back from its JSON (the fields ``fleet_goals`` reads)."""
    return Figure(
        str(doc["workload"]),
        str(doc["store"]),
        str(doc["system"]),
        str(doc["name"]),
        str(doc["unit"]),
        list(doc["values"]),  # type: ignore[call-overload]
        bool(doc["higher_is_better"]),
        dict(doc.get("extra", {})),  # type: ignore[call-overload]
    )
