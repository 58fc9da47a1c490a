"""``trio-batch demo``: the whole system, offline, in a few seconds.

It starts a small site on 127.0.0.1 (articles, a JSON API, a PDF, a rate-limited page, a slow
page, a redirect into a private address), then three callers submit batches at once through the
real engine, the web fetcher and a SQLite store. Two workers rotate over the live jobs, so
carol's small job finishes long before alice's big one; the progress display shows the rotation.
At the end it prints a summary table per job and where the results are.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, final

import trio

from .._config import Config
from .._engine import BatchEngine, open_engine
from .._errors import StoreError
from .._model import Caller, JobStatus, Options, Target, TargetState
from .._util import raise_single_exception_from_group
from ._demo_site import DemoSite, serve_demo_site
from ._progress import ProgressMode, ProgressTracker, show_progress
from ._run import UsageError, add_progress_argument, open_web_fetch
from ._store_messages import open_cli_store
from ._timeline import Recorder, render_svg

if TYPE_CHECKING:
    from rich.console import Console

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run three callers' batches against a local demo site (offline, ~10 s)",
        description=(
            "Start a small site on 127.0.0.1 (articles, a JSON API, a PDF, a rate-limited page, "
            "a slow page, a redirect into a private address), then let three callers submit "
            "batches at once through the real engine, the web fetcher and a SQLite store. Two "
            "workers rotate over the live jobs, so carol's small job finishes long before "
            "alice's big one. At the end: a summary table per job and where the results are. "
            "Offline; about ten seconds."
        ),
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="the SQLite store to write (default: a new file in a temporary directory)",
    )
    parser.add_argument(
        "--timeline",
        metavar="FILE.svg",
        help="also draw which target ran when as an SVG: one lane per worker, bars by job",
    )
    add_progress_argument(parser)
    # For the test suite: the same demo with short delays.
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=main)


@final
@dataclass(frozen=True, slots=True)
class Pace:
    """How slow the demo site and the retries are."""

    latency: float = 0.25
    slow: float = 2.0
    retry_after: int = 1
    retry_wait: float = 0.5


QUICK = Pace(latency=0.005, slow=0.1, retry_after=0, retry_wait=0.05)


def batches(site: DemoSite) -> dict[str, list[list[Target]]]:
    """Each caller's batches, submitted one after the other (one live job per caller)."""
    url = site.url
    article = [Target(url(f"/articles/{n}")) for n in range(1, 9)]
    return {
        # A research agent with a big batch of articles.
        "alice": [
            [
                *article,
                Target(url("/articles/9"), Options(mode="markdown")),
                Target(
                    url("/articles/4"),
                    Options(question="what do polite clients do when an upstream is busy?"),
                ),
            ],
            [Target(url("/articles/10")), Target(url("/articles/12"), Options(grep="mock"))],
        ],
        # A data agent: JSON with jq, PDF pages, a rate-limited page and a slow one.
        "bob": [
            [
                Target(url("/api/items"), Options(jq="[.items[] | select(.price > 4) | .name]")),
                Target(url("/report.pdf"), Options(pages="2-3")),
                Target(url("/busy?as=bob")),
                Target(url("/slow")),
                Target(url("/articles/3"), Options(grep="rotat", context=True)),
            ],
            [Target(url("/api/items"), Options(jq=".count"))],
        ],
        # A careless caller: a redirect into a private address, a missing page; then a busy one.
        "carol": [
            [
                Target(url("/redirect-private")),
                Target(url("/articles/99")),
                Target(url("/articles/11"), Options(question="what must a fetcher never do?")),
            ],
            [Target(url("/busy?as=carol"))],
        ],
    }


@final
@dataclass(slots=True)
class JobRow:
    """One line of the summary table."""

    caller: str
    id: str
    status: str = ""
    total: int = 0
    done: int = 0
    failed: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


async def _caller(
    engine: BatchEngine,
    tracker: ProgressTracker,
    name: str,
    jobs: list[list[Target]],
    rows: list[JobRow],
    poll: float,
    recorder: Recorder,
) -> None:
    caller = Caller(name)
    for targets in jobs:
        t0 = trio.current_time()
        submitted = recorder.submitting(name)
        sub = await engine.submit(caller, "fleet", targets)
        submitted(sub.id)
        tracker.add_job(sub.id, name, len(targets))
        row = JobRow(name, sub.id, total=len(targets))
        rows.append(row)
        while True:
            snap = await engine.status(sub.id)
            if snap is None or not snap.job.status.live:
                break
            await trio.sleep(poll)
        row.seconds = trio.current_time() - t0
        if snap is not None:
            row.status = snap.job.status.value
            row.done = sum(1 for t in snap.targets if t.status is TargetState.DONE)
            row.failed = sum(1 for t in snap.targets if t.status is TargetState.FAILED)
            row.errors = [
                f"{t.url.removeprefix(engine_base(t.url))}: {t.error}"
                for t in snap.targets
                if t.status is TargetState.FAILED
            ]


def engine_base(url: str) -> str:
    """``http://127.0.0.1:PORT`` of a demo URL (the summary shows paths only)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


async def run_demo(
    *,
    db: str,
    out: IO[str],
    err: IO[str],
    progress: ProgressMode = "auto",
    pace: Pace = Pace(),
    console: Console | None = None,
    timeline: str = "",
) -> list[JobRow]:
    """Run the demo, print its summary on ``out``; return the summary's rows.

    With ``timeline``, also write an SVG of which target ran when to that file.
    """
    recorder = Recorder()
    site = DemoSite(slow_seconds=pace.slow, retry_after=pace.retry_after, latency=pace.latency)
    tracker = ProgressTracker()
    config = Config(
        workers=2,
        max_workers=2,
        jobs_per_caller=1,
        jobs_total=6,
        retry_wait=pace.retry_wait,
        retry_for=60.0,
        hooks=tracker.hooks(),
    )
    rows: list[JobRow] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_demo_site, site)
            plan = batches(site)
            tracker.total = sum(len(t) for jobs in plan.values() for t in jobs)
            err.write(
                f"trio-batch demo: site on {site.base_url}; 3 callers, 2 workers; store {db}\n"
            )
            err.flush()
            async with (
                open_cli_store(db) as store,
                open_web_fetch(store, [LOOPBACK]) as web,
                open_engine(
                    store,
                    tracker.wrap(recorder.wrap(web.fetch, label=_path)),
                    config,
                    **web.politeness(),
                ) as engine,
                show_progress(tracker, engine, stream=err, mode=progress, console=console),
                trio.open_nursery() as callers,
            ):
                for name, jobs in plan.items():
                    callers.start_soon(_caller, engine, tracker, name, jobs, rows, 0.05, recorder)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)  # e.g. the UsageError of a bad --db
        raise
    rows.sort(key=lambda r: r.caller)  # stable: each caller's jobs stay in submit order
    print_summary(rows, db, out)
    if timeline:
        svg = render_svg(
            recorder.bars(),
            title="trio-batch demo: 3 callers, 2 workers; each bar is one fetch",
            lane_name="worker",
        )
        try:
            await trio.Path(timeline).write_text(svg, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write --timeline {timeline}: {exc.strerror}") from None
        out.write(f"the timeline is in {timeline}\n")
    return rows


def _path(target: Target) -> str:
    """A demo target's label in the timeline: its path and the options set."""
    path = target.url.removeprefix(engine_base(target.url))
    options = " ".join(f"{k}={v}" for k, v in target.options.to_json().items())
    return f"{path} ({options})" if options else path


def print_summary(rows: Sequence[JobRow], db: str, out: IO[str]) -> None:
    """The summary table, then where the results are."""
    headers = ("caller", "job", "status", "done", "failed", "seconds")
    table = [
        (r.caller, r.id, r.status, f"{r.done}/{r.total}", str(r.failed), f"{r.seconds:.1f}")
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    out.write("\n")
    out.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for row in table:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
    failures = [(r, e) for r in rows for e in r.errors]
    if failures:
        out.write("\nfailed targets (each with an error and a hint in the results):\n")
        for r, error in failures:
            out.write(f"  {r.caller} {r.id[:8]} {error}\n")
    out.write(f"\nresults are in {db}; read them with:\n")
    for r in rows[:1]:
        out.write(f"  trio-batch results {r.id} --db {db}\n")
        out.write(f"  trio-batch status {r.id} --db {db}\n")
    out.flush()


def _default_db() -> str:
    return os.path.join(tempfile.mkdtemp(prefix="trio-batch-demo-"), "demo.sqlite")


def main(args: argparse.Namespace) -> int:
    """The ``demo`` subcommand."""
    db = args.db or _default_db()
    pace = QUICK if args.quick else Pace()
    if args.timeline:
        try:
            with open(args.timeline, "w", encoding="utf-8"):
                pass  # fail now rather than after the demo
        except OSError as exc:
            sys.stderr.write(f"trio-batch demo: cannot write --timeline {args.timeline}: ")
            sys.stderr.write(f"{exc.strerror}\n")
            return 2
    try:
        rows = trio.run(
            functools.partial(
                run_demo,
                db=db,
                out=sys.stdout,
                err=sys.stderr,
                progress=args.progress,
                pace=pace,
                timeline=args.timeline or "",
            )
        )
    except (UsageError, StoreError) as exc:
        sys.stderr.write(f"trio-batch demo: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("trio-batch demo: interrupted\n")
        return 130
    finished = all(r.status not in (JobStatus.QUEUED, JobStatus.RUNNING, "") for r in rows)
    return 0 if finished else 1
