"""Benchmarks W1-W6 of trio-batch, W1 and W2 beside a bare baseline, in one reproducible run.

Run ``python -m bench.run`` (the full set, a few minutes) or ``python -m bench.run --quick``
(under a minute); ``nox -s bench`` does the same in a fresh environment. The run prints a table
and writes ``bench/results/latest.json`` (machine, versions, every figure with min/median/max over
its repeats), ``bench/results/latest.md`` (the table in Markdown) and ``bench/results/latest.png``
(the plot). Everything is timed in real time (``trio.run`` without a mock clock). ``--pg DSN``
(or ``TRIO_BATCH_TEST_PG``) adds the ``PostgresStore`` rows; ``--only W1,W3`` picks workloads
(W6, the cost of a job's followers, is ``bench/followers.py``; FLEET, 1-3 ``serve`` processes on
one PostgreSQL database, is ``bench/fleet.py`` and runs only with a DSN; PAGES, real pages
through the CLI, is ``bench/real_pages.py``; MAIN, main content against ground truth beside
trafilatura and readability-lxml, is ``bench/main_content.py``; CRAWL, a crawl of a local site
against ``run`` over the same pages, is ``bench/crawl.py``);
``--render`` measures nothing and redraws the Markdown and the plot from ``latest.json``.

This module is the command: it records the machine and the versions, repeats each workload
(``run_w*``) and turns the raw timings into figures. The rest lives beside it:

- ``bench/workloads.py``: what W1-W5 and the bare baseline measure, one ``trio.run`` each;
- ``bench/report.py``: the goals, the tables, the plot and the result files;
- ``bench/_harness.py``: the sizes, ``Figure``, the stores and the fakes they all share.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

import trio_batch

from ._harness import (
    FULL,
    HERE,
    PG_ENV,
    QUICK,
    RESULTS,
    TINY,
    Figure,
    Settings,
    find,
    log,
    noop_fetch,
    percentile,
    postgres_skip_reason,
    sleep_fetch,
)
from .crawl import CRAWL_FULL, CRAWL_QUICK, CRAWL_TINY, run_crawl
from .fleet import FLEET_FULL, FLEET_QUICK, FLEET_TINY, FleetSettings, run_fleet
from .followers import LABELS, measure
from .main_content import run_main
from .politeness import run_politeness
from .real_pages import run_pages
from .report import figure_from_json, goals, render, report
from .workloads import (
    DrainRun,
    bare_drain,
    baseline_drain,
    engine_drain,
    fairness_run,
    floor_drain,
    scale_run,
)

# -- machine and versions -------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """What the figures were measured on: platform, CPU, memory, load and Python."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory": mem,
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def versions() -> dict[str, str]:
    """trio-batch, Trio and SQLite versions, and the git commit (``+dirty src`` if edited)."""
    out = {
        "trio_batch": trio_batch.__version__,
        "trio": trio.__version__,
        "sqlite": sqlite3.sqlite_version,
    }
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain", "--", "src"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        out["git"] = commit + ("+dirty src" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return out


# -- the run --------------------------------------------------------------------------------------


ALL_WORKLOADS = frozenset(
    {"W1", "W2", "W3", "W4", "W5", "W6", "FLEET", "PAGES", "MAIN", "POLITE", "CRAWL"}
)


def run_w1_w2(
    kinds: Sequence[str],
    workdir: str,
    pg_dsn: str,
    s: Settings,
    *,
    baseline: bool = True,
    only: frozenset[str] = ALL_WORKLOADS,
) -> list[Figure]:
    """W1 and W2 on the engine and (with ``baseline``) the bare baseline, per store.

    The engine's and the baseline's repeats alternate, so a neighbour's load on the machine
    falls on both alike and their ratio stays meaningful.
    """
    figures: list[Figure] = []
    systems: list[tuple[str, Callable[..., Awaitable[DrainRun]]]] = [("trio-batch", engine_drain)]
    if baseline:
        systems.append(("baseline", baseline_drain))
    ideal = s.w2_targets * s.w2_sleep / s.workers
    if "W2" in only and baseline:
        floor = [
            ideal / trio.run(floor_drain, s.w2_targets, sleep_fetch(s.w2_sleep), s.workers)
            for _ in range(s.w2_repeats)
        ]
        figures.append(Figure("W2", "none", "floor", "efficiency", "ideal/wall", floor))
        log(f"W2 {'none':8} {'floor':10} {figures[-1].median:10.3f} efficiency")
    for kind in kinds:
        if "W1" in only:
            w1_systems = list(systems)
            if baseline and kind in ("sqlite", "postgres"):
                w1_systems.append(("bare", bare_drain))  # the issues': a hop and a commit a write
            w1: dict[str, list[DrainRun]] = {name: [] for name, _ in w1_systems}
            for _ in range(s.w1_repeats):
                for name, drain in w1_systems:
                    w1[name].append(
                        trio.run(
                            functools.partial(
                                drain,
                                kind,
                                workdir,
                                pg_dsn,
                                n_targets=s.w1_targets,
                                job_size=s.w1_job_size,
                                fetch=noop_fetch,
                                workers=s.workers,
                            )
                        )
                    )
            for name, runs in w1.items():
                extra: dict[str, Any] = {}
                if runs[0].commits:
                    extra["writes_per_commit"] = [r.writes / r.commits for r in runs]
                # Where the wall goes: submits are one admission after another (each answered
                # before the next), and the drain overlaps them only as far as it can.
                extra["submit_share"] = [r.submit_seconds / r.seconds for r in runs]
                values = [r.targets / r.seconds for r in runs]
                figures.append(
                    Figure("W1", kind, name, "throughput", "targets/s", values, extra=extra)
                )
                share = statistics.median(extra["submit_share"])
                log(
                    f"W1 {kind:8} {name:10} {figures[-1].median:10.0f} targets/s "
                    f"(submits {share:.0%} of the wall)"
                )
        if "W2" in only:
            w2: dict[str, list[float]] = {name: [] for name, _ in systems}
            for _ in range(s.w2_repeats):
                for name, drain in systems:
                    run = trio.run(
                        functools.partial(
                            drain,
                            kind,
                            workdir,
                            pg_dsn,
                            n_targets=s.w2_targets,
                            job_size=s.w2_job_size,
                            fetch=sleep_fetch(s.w2_sleep),
                            workers=s.workers,
                        )
                    )
                    w2[name].append(ideal / run.seconds)
            for name, values in w2.items():
                figures.append(Figure("W2", kind, name, "efficiency", "ideal/wall", values))
                log(f"W2 {kind:8} {name:10} {figures[-1].median:10.3f} efficiency")
    return figures


def run_all(
    s: Settings,
    kinds: Sequence[str],
    workdir: str,
    pg_dsn: str,
    only: frozenset[str] = ALL_WORKLOADS,
    fleet: FleetSettings = FLEET_FULL,
) -> list[Figure]:
    """Every selected workload on every store kind, in the order W1/W2, then W3-W6 per store.

    FLEET runs last and only on PostgreSQL: it starts ``serve`` processes of its own.
    """
    figures = run_w1_w2(kinds, workdir, pg_dsn, s, only=only)
    for kind in kinds:
        if "W3" in only:
            figures += run_w3(kind, workdir, pg_dsn, s)
        if "W4" in only:
            figures += run_w4(kind, workdir, pg_dsn, s)
        if "W5" in only:
            figures += run_w5(kind, workdir, pg_dsn, s)
        if "W6" in only:
            figures += run_w6(kind, pg_dsn, s)
    if "FLEET" in only and "postgres" in kinds:
        figures += run_fleet(pg_dsn, fleet, workdir)
    return figures


def run_w3(kind: str, workdir: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W3 on one store: p50 and p99 of the small job, in target durations."""
    figures: list[Figure] = []
    p50: list[float] = []
    p99: list[float] = []
    units: list[float] = []
    for rep in range(s.w3_repeats):
        samples, unit = trio.run(fairness_run, kind, workdir, pg_dsn, s, rep)
        units.append(unit)
        p50.append(percentile(samples, 50) / unit)
        p99.append(percentile(samples, 99) / unit)
    bound = (s.w3_big_jobs + 1) / s.workers + 1
    extra = {
        "bound": bound,
        "samples_per_repeat": s.w3_samples,
        "nominal_target_seconds": s.w3_duration,
        "measured_target_seconds": units,
    }
    figures.append(
        Figure("W3", kind, "trio-batch", "small job p50", "target durations", p50, False, extra)
    )
    figures.append(
        Figure("W3", kind, "trio-batch", "small job p99", "target durations", p99, False, extra)
    )
    log(
        f"W3 {kind:8} p50 {statistics.median(p50):.2f} p99 {statistics.median(p99):.2f} "
        f"(bound {bound:.2f}) target durations"
    )
    return figures


def run_w4(kind: str, workdir: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W4 on one store: time per target and heap per live job at each size, and the ratio."""
    figures: list[Figure] = []
    for live in s.w4_sizes:
        per_target: list[float] = []
        heap: list[float] = []
        for rep in range(s.w4_repeats):
            run = trio.run(
                functools.partial(
                    scale_run, kind, workdir, pg_dsn, s, live, measure_memory=rep == 0
                )
            )
            per_target.append(run.seconds / run.targets * 1e6)
            if run.heap_bytes_per_job is not None:
                heap.append(run.heap_bytes_per_job)
        figures.append(
            Figure(
                "W4",
                kind,
                "trio-batch",
                f"time per target at {live} live",
                "µs",
                per_target,
                False,
                {"live_jobs": live},
            )
        )
        figures.append(
            Figure(
                "W4",
                kind,
                "trio-batch",
                f"heap per live job at {live} live",
                "bytes",
                heap,
                False,
                {"live_jobs": live},
            )
        )
        log(
            f"W4 {kind:8} {live:6} live: {statistics.median(per_target):8.1f} µs/target, "
            f"{heap[0]:8.0f} B/live job"
        )
    small = find(figures, "W4", kind, "trio-batch", f"time per target at {s.w4_sizes[0]} live")
    large = find(figures, "W4", kind, "trio-batch", f"time per target at {s.w4_sizes[-1]} live")
    figures.append(
        Figure(
            "W4",
            kind,
            "trio-batch",
            f"ratio {s.w4_sizes[-1]} / {s.w4_sizes[0]} live",
            "x",
            [large.median / small.median],
            False,
        )
    )
    return figures


def run_w5(kind: str, workdir: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W5 on one store: status reads/s of a finished job while W1 runs."""
    figures: list[Figure] = []
    reads: list[float] = []
    drain: list[float] = []
    for _ in range(s.w5_repeats):
        run = trio.run(
            functools.partial(
                engine_drain,
                kind,
                workdir,
                pg_dsn,
                n_targets=s.w5_targets,
                job_size=s.w1_job_size,
                fetch=noop_fetch,
                workers=s.workers,
                readers=s.w5_readers,
                read_job_size=s.w5_job_size,
            )
        )
        reads.append(run.reads / run.seconds)
        drain.append(run.targets / run.seconds)
    extra5 = {
        "readers": s.w5_readers,
        "job_targets": s.w5_job_size,
        "drain_targets": s.w5_targets,
    }
    figures.append(Figure("W5", kind, "trio-batch", "status reads", "reads/s", reads, True, extra5))
    figures.append(
        Figure("W5", kind, "trio-batch", "W1 throughput under reads", "targets/s", drain)
    )
    log(
        f"W5 {kind:8} {statistics.median(reads):8.0f} reads/s, W1 at "
        f"{statistics.median(drain):8.0f} targets/s"
    )
    return figures


def run_w6(kind: str, pg_dsn: str, s: Settings) -> list[Figure]:
    """W6 on one store: what a follower of one job costs, for NDJSON follow and SSE events.

    Each repeat runs in a fresh process (see ``bench/followers.py``); the heap is measured once.
    """
    n, t = s.w6_followers, s.w6_targets
    costs = measure(
        kind,
        pg_dsn,
        followers=n,
        targets=t,
        wave=s.w6_wave,
        repeats=s.w6_repeats,
        workers=s.workers,
    )
    figures: list[Figure] = []
    extra = {"followers": n, "targets": t, "wave": s.w6_wave}
    for route, cost in costs.items():
        label = LABELS[route]
        rows = [
            ("RSS per waiting follower", "KiB", [b / 1024 for b in cost.rss_bytes]),
            ("heap per waiting follower", "KiB", [b / 1024 for b in cost.heap_bytes]),
            ("CPU to connect a follower", "µs", [c * 1e6 for c in cost.connect_cpu]),
            ("CPU per follower per stored target", "µs", [c * 1e6 for c in cost.target_cpu]),
            ("store reads per stored target, all followers", "reads", cost.reads_per_target),
        ]
        for name, unit, values in rows:
            if values:
                figures.append(
                    Figure(
                        "W6",
                        kind,
                        "trio-batch",
                        f"{name} ({label})",
                        unit,
                        values,
                        False,
                        {**extra, "route": route},
                    )
                )
        rss = statistics.median(cost.rss_bytes) / 1024 if cost.rss_bytes else float("nan")
        log(
            f"W6 {kind:8} {label:13} {rss:6.1f} KiB RSS, "
            f"{statistics.median(cost.heap_bytes) / 1024:6.1f} KiB heap a follower; "
            f"{statistics.median(cost.target_cpu) * 1e6:6.1f} µs a follower a stored target"
        )
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.run``: measure (or ``--render``) and write the result files."""
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes: under a minute")
    parser.add_argument("--tiny", action="store_true", help="a few seconds (the harness test)")
    parser.add_argument("--pg", default=os.environ.get(PG_ENV, ""), help="PostgreSQL DSN")
    parser.add_argument("--stores", default="memory,sqlite,postgres", help="comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument(
        "--only",
        default="W1,W2,W3,W4,W5,W6,FLEET,PAGES,MAIN,POLITE,CRAWL",
        help="workloads, comma-separated",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: rewrite latest.md and the plots from the latest.json in --out",
    )
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads((args.out / "latest.json").read_text())
        figures = [figure_from_json(f) for f in doc["figures"]]
        doc["goals"] = goals(figures, FULL)  # the goals as this checkout states them
        (args.out / "latest.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        render(doc, figures, args.out, make_plot=not args.no_plot)
        return 0
    s, mode = (TINY, "tiny") if args.tiny else (QUICK, "quick") if args.quick else (FULL, "full")
    fleet = {"tiny": FLEET_TINY, "quick": FLEET_QUICK, "full": FLEET_FULL}[mode]
    notes: list[str] = []
    kinds = [k for k in args.stores.split(",") if k]
    if "postgres" in kinds and (reason := postgres_skip_reason(args.pg)) is not None:
        kinds.remove("postgres")
        notes.append(reason)
    at_start = {"machine": machine_info(), "versions": versions()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trio-batch-bench-") as workdir:
        only = frozenset(w.strip().upper() for w in args.only.split(",") if w.strip())
        if not only <= ALL_WORKLOADS:
            parser.error(
                f"--only takes W1 ... W6, FLEET, PAGES, MAIN, POLITE and CRAWL (got {args.only!r})"
            )
        figures = run_all(s, kinds, workdir, args.pg, only, fleet)
    if "POLITE" in only:  # host budgets on the real clock (bench/politeness.py)
        figures += run_politeness(1 if mode != "full" else 3)
    if "PAGES" in only:  # real pages through the CLI (bench/real_pages.py)
        pages, pages_notes = run_pages(mode)
        figures += pages
        notes += pages_notes
    if "MAIN" in only:  # main content against ground truth (bench/main_content.py)
        main, main_notes = run_main(mode)
        figures += main
        notes += main_notes
    if "CRAWL" in only:  # a crawl of a local site against run (bench/crawl.py)
        crawl, crawl_notes = run_crawl(
            {"tiny": CRAWL_TINY, "quick": CRAWL_QUICK, "full": CRAWL_FULL}[mode]
        )
        figures += crawl
        notes += crawl_notes
    notes.append(f"wall time of the whole run: {time.perf_counter() - started:.0f} s")
    report(figures, s, mode, notes, args.out, make_plot=not args.no_plot, started=at_start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
