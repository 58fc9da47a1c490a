"""What one ``POST /v1/batch`` costs: time per submit and store reads per submit (issue 21).

    python -m bench.submit_path [--submits 200] [--targets 32] [--store sqlite|memory|postgres]
        [--repeat 3] [--json]

One ``trio.run`` per repeat: an engine on a fresh store, the app of ``create_app`` over it, and
``submits`` jobs of ``targets`` distinct URLs each posted one after the other through
``httpx.ASGITransport`` (in-process, no sockets), so the figure is the app's and the store's
own cost of a submit. The fetch function never returns: the engine admits each job and its
workers hold their first targets, so no result is written while the submits are timed, and
what is measured is admission, the write, and whatever the route reads to answer.

It reports the median time per submit (wall clock, ``time.perf_counter``), the store reads
each submit made, by method, and the rows they returned (``snapshot`` reads a whole job with
every target; ``read_job`` one row; ``job_summary`` one row and the targets' counts;
``read_targets`` a page). The reads are counted by wrapping the store's read methods on the
instance.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from trio_batch import Caller, Hooks, Result, Target, open_engine
from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key
from trio_batch.testing import asgi_lifespan

from ._harness import PG_ENV, caps, open_bench_store

_KEY = "tb_bench-submit-key"
_READS = ("snapshot", "read_job", "job_summary", "read_targets")


@dataclass(frozen=True)
class SubmitRun:
    """What one :func:`submit_run` measured."""

    store: str
    submits: int
    targets: int
    seconds_per_submit: float
    """The median wall-clock time of one submit, from request to answer."""
    reads: dict[str, int]
    """Store reads made by all the submits, by method."""
    rows: int
    """Rows those reads returned (a job row, a target row)."""

    @property
    def reads_per_submit(self) -> float:
        """All store reads, divided by the submits."""
        return sum(self.reads.values()) / self.submits


async def _never(caller: Caller, target: Target) -> Result:
    """A fetch that never ends, so no target finishes while the submits are timed."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def _rows(answer: object) -> int:
    """How many rows a read returned: a job, a job and its targets, a page of targets."""
    if answer is None:
        return 0
    if isinstance(answer, list):
        return len(answer)
    targets = getattr(answer, "targets", None)  # a Snapshot: the job and every target
    return 1 + len(targets) if isinstance(targets, (list, tuple)) else 1


def _count_reads(store: object, counts: Counter[str]) -> None:
    """Count the store's reads by method, and the rows they return under ``"rows"``.

    An instance attribute hides each method.
    """

    def counted(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def read(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            answer = await method(*args, **kwargs)
            counts["rows"] += _rows(answer)
            return answer

        return read

    for name in _READS:
        setattr(store, name, counted(name, getattr(store, name)))


async def submit_run(kind: str, submits: int, targets: int, pg_dsn: str = "") -> SubmitRun:
    """Post ``submits`` jobs of ``targets`` targets to a fresh app; see the module docstring."""
    keys = KeyRing([KeyRecord("bench", "", "fleet", hash_key(_KEY))])
    config = caps(submits, targets, Hooks(), workers=1)
    counts: Counter[str] = Counter()
    times: list[float] = []

    with tempfile.TemporaryDirectory() as workdir:
        async with (
            open_bench_store(kind, workdir, pg_dsn) as store,
            open_engine(store, _never, config) as engine,
        ):
            app = create_app(engine, keys, access_log_enabled=False)
            async with (
                asgi_lifespan(app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://bench.test"
                ) as client,
            ):
                _count_reads(store, counts)
                headers = {"Authorization": f"Bearer {_KEY}"}

                for n in range(submits):
                    body = {
                        "targets": [
                            {"url": f"https://bench.example/{n}/{i}"} for i in range(targets)
                        ]
                    }
                    start = time.perf_counter()
                    answer = await client.post("/v1/batch", json=body, headers=headers)
                    times.append(time.perf_counter() - start)
                    if answer.status_code != 202:
                        raise RuntimeError(f"submit {n} answered {answer.status_code}")

    rows = counts.pop("rows", 0)
    return SubmitRun(kind, submits, targets, statistics.median(times), dict(counts), rows)


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print its figures (one line per repeat, or JSON)."""
    parser = argparse.ArgumentParser(prog="python -m bench.submit_path", description=__doc__)
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--targets", type=int, default=32)
    parser.add_argument("--store", choices=("memory", "sqlite", "postgres"), default="sqlite")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    args = parser.parse_args(argv)

    pg_dsn = os.environ.get(PG_ENV, "")
    if args.store == "postgres" and not pg_dsn:
        print(f"set {PG_ENV} to a PostgreSQL DSN to measure PostgresStore", file=sys.stderr)
        return 2

    runs = [
        trio.run(submit_run, args.store, args.submits, args.targets, pg_dsn)
        for _ in range(args.repeat)
    ]

    if args.json:
        print(json.dumps([{**vars(r), "reads_per_submit": r.reads_per_submit} for r in runs]))
        return 0
    for run in runs:
        reads = ", ".join(f"{name} {count}" for name, count in sorted(run.reads.items()))
        print(
            f"{run.store}: {run.submits} submits of {run.targets} targets: "
            f"{run.seconds_per_submit * 1e3:.2f} ms a submit (median), "
            f"{run.reads_per_submit:g} store reads a submit ({reads}), "
            f"{run.rows / run.submits:g} rows read a submit"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
