"""WIDE (``bench/wide.py``) in a small configuration: what it measures holds, whatever the time."""

from __future__ import annotations

import argparse

import pytest
import trio

from bench import wide

from ..stores.postgres.support import PG_DSN, SKIP_REASON


@pytest.mark.slow
def test_a_wide_job_keeps_each_host_budget_and_index_order() -> None:
    """One job of 12 pages over 3 hosts at concurrency 4, on one SQLite instance and on a
    fleet of two: no host sees more than its budget (2), every door answers in index order,
    and no page is fetched twice."""
    args = argparse.Namespace(
        pg=PG_DSN, instances=2, pages=12, hosts=3, seconds=0.1, concurrency=4, workers=4
    )
    if not PG_DSN:
        pytest.skip(SKIP_REASON)

    runs = trio.run(wide.main_async, args)

    assert 2 == len(runs)
    for run in runs:
        assert max(run.most_per_host) <= 2, run
        assert {"results=1": True, "ndjson": True, "sse": True} == run.in_order, run
        assert 0 == run.fetched_twice, run
