"""Timeline pictures: which target ran when, one lane per concurrent slot, bars coloured by job.

:func:`render_svg` draws :class:`Bar` s as a self-contained SVG (plain text, no plotting
library), deterministic for the same bars, every text escaped. Lanes are the concurrent slots
the bars need: :func:`assign_lanes` puts each bar in the first lane free when it starts, so with
``N`` workers there are at most ``N`` lanes and the round robin reads left to right.

Where the bars come from:

* ``trio-batch demo --timeline FILE.svg``: a :class:`Recorder` wraps the fetch function and
  notes each fetch's start and end (retries included), so every bar is one fetch of a target;
* ``trio-batch timeline JOB... --db PATH``: the store's times of each target
  (``TargetStatus.started_at`` and ``finished_at``), so every bar is the last run of a target,
  from its start to when its outcome was stored. The store does not know which worker ran a
  target; the lanes are the slots again, which for workers that each run one target at a time
  are the workers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import final

import trio

from .._engine import FetchFunc
from .._errors import StoreError
from .._model import Caller, Result, Target, TargetState, TargetStatus
from ..stores import SQLiteStore
from ._arguments import add_db_argument
from ._catalog import list_jobs, resolve_id
from ._output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError
from ._store_messages import store_open_message

__all__ = ["Bar", "Recorder", "assign_lanes", "render_svg"]

# (strong, light) per caller: a caller's jobs take turns between its two shades.
_FAMILIES = [
    ("#1f77b4", "#8fbce6"),
    ("#e6550d", "#fdae6b"),
    ("#31a354", "#a1d99b"),
    ("#756bb1", "#bcbddc"),
    ("#d62728", "#fc9272"),
    ("#8c564b", "#c49c94"),
]
_WIDTH, _LEFT, _RIGHT, _TOP, _LANE, _GAP = 960, 96, 24, 56, 30, 6


@final
@dataclass(frozen=True, slots=True)
class Bar:
    """One interval of work: a fetch of a target, or a whole job."""

    start: float
    end: float
    job: str
    caller: str
    label: str
    """What the bar's tooltip names (a URL path, or a target's index and URL)."""


def assign_lanes(bars: Sequence[Bar], *, slack: float = 1e-9) -> list[int]:
    """The lane of each bar: the first lane free at its start (bars sorted by start, then end).

    A lane is free once its last bar ended, or ends within ``slack`` after the start: a store
    stores outcomes in groups, so a target's finish time may come a little after its worker
    began the next one, and an overlap shorter than ``slack`` does not show in the picture.
    """
    order = sorted(range(len(bars)), key=lambda i: (bars[i].start, bars[i].end, i))
    free_at: list[float] = []
    lanes = [0] * len(bars)
    for i in order:
        bar = bars[i]
        lane = next((n for n, end in enumerate(free_at) if end <= bar.start + slack), None)
        if lane is None:
            lane = len(free_at)
            free_at.append(0.0)
        free_at[lane] = bar.end
        lanes[i] = lane
    return lanes


def _colours(bars: Sequence[Bar]) -> dict[str, str]:
    """A colour per job: a family per caller (in name order), shades by job order."""
    callers = sorted({b.caller for b in bars})
    jobs: dict[str, list[str]] = {}
    for bar in sorted(bars, key=lambda b: (b.start, b.job)):
        seen = jobs.setdefault(bar.caller, [])
        if bar.job not in seen:
            seen.append(bar.job)
    colours: dict[str, str] = {}
    for c, caller in enumerate(callers):
        family = _FAMILIES[c % len(_FAMILIES)]
        for j, job in enumerate(jobs[caller]):
            colours[job] = family[j % 2]
    return colours


def _tick_step(span: float) -> float:
    steps = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
    for step in steps:
        if span / step <= 12:
            return step
    return 7200.0


def render_svg(bars: Sequence[Bar], *, title: str, lane_name: str = "slot") -> str:
    """The bars as an SVG document: lanes top to bottom, time left to right, a legend by job.

    Bars that overlap by less than two pixels may share a lane (see :func:`assign_lanes`).
    """
    t0 = min((b.start for b in bars), default=0.0)
    span = max(max((b.end for b in bars), default=t0) - t0, 1e-3)
    scale = (_WIDTH - _LEFT - _RIGHT) / span
    lanes = assign_lanes(bars, slack=2 / scale)
    count = max(lanes, default=-1) + 1
    colours = _colours(bars)
    legend = sorted({(b.caller, b.job) for b in bars}, key=lambda cj: (cj[0], _first(bars, cj[1])))
    legend_rows = (len(legend) + 2) // 3
    height = _TOP + count * _LANE + 40 + legend_rows * 20 + 12

    def x(t: float) -> str:
        return f"{_LEFT + (t - t0) * scale:.1f}"

    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
        'font-family="system-ui, sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{_WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{_LEFT}" y="24" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    step = _tick_step(span)
    axis_y = _TOP + count * _LANE + 4
    for k in range(int(span / step) + 1):
        t = k * step
        tx = x(t0 + t)
        out.append(
            f'<line x1="{tx}" y1="{_TOP - 6}" x2="{tx}" y2="{axis_y}" stroke="#dddddd"/>'
            f'<text x="{tx}" y="{axis_y + 14}" text-anchor="middle" fill="#555555">'
            f"{t:g} s</text>"
        )
    for lane in range(count):
        y = _TOP + lane * _LANE
        out.append(
            f'<text x="{_LEFT - 8}" y="{y + _LANE / 2 + 4:.1f}" text-anchor="end" '
            f'fill="#333333">{escape(lane_name)} {lane + 1}</text>'
        )
    for bar, lane in sorted(zip(bars, lanes, strict=True), key=lambda bl: (bl[1], bl[0].start)):
        top = _TOP + lane * _LANE + _GAP / 2
        width = max((bar.end - bar.start) * scale, 1.5)
        tip = f"{bar.caller} {bar.job[:8]}: {bar.label} ({bar.start - t0:.2f}-{bar.end - t0:.2f} s)"
        out.append(
            f'<rect class="bar" x="{x(bar.start)}" y="{top:.1f}" width="{width:.1f}" '
            f'height="{_LANE - _GAP}" rx="3" fill="{colours[bar.job]}" stroke="#ffffff">'
            f"<title>{escape(tip)}</title></rect>"
        )
    legend_y = axis_y + 36
    for i, (caller, job) in enumerate(legend):
        lx = _LEFT + (i % 3) * 260
        ly = legend_y + (i // 3) * 20
        out.append(
            f'<rect x="{lx}" y="{ly - 10}" width="14" height="12" rx="2" '
            f'fill="{colours[job]}"/><text x="{lx + 20}" y="{ly}">'
            f"{escape(caller)} job {escape(job[:8])}</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _first(bars: Sequence[Bar], job: str) -> float:
    return min(b.start for b in bars if b.job == job)


@final
class Recorder:
    """Notes each fetch's start and end, to draw the timeline of a run afterwards.

    A fetch is attributed to a job by its caller: :meth:`submitting` marks when each caller
    submits its next job, and a caller's fetches belong to the job it submitted last before
    they started. That is exact when each caller has at most one live job (as in the demo).
    """

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._fetches: list[tuple[str, float, float, str]] = []  # caller, start, end, label
        self._jobs: dict[str, list[tuple[float, str]]] = {}  # caller -> (submitted at, job id)

    def submitting(self, caller: str) -> Callable[[str], None]:
        """Call before a caller submits a job; call what it returns with the new job's id."""
        at = self._clock()
        return lambda job_id: self._jobs.setdefault(caller, []).append((at, job_id))

    def wrap(self, fetch: FetchFunc, label: Callable[[Target], str] = lambda t: t.url) -> FetchFunc:
        """``fetch``, noting when each call starts and ends (whatever its outcome)."""

        async def recorded(caller: Caller, target: Target) -> Result:
            start = self._clock()
            try:
                return await fetch(caller, target)
            finally:
                self._fetches.append((caller.name, start, self._clock(), label(target)))

        return recorded

    def bars(self) -> list[Bar]:
        """One bar per fetch, in the order they ended."""
        found: list[Bar] = []
        for caller, start, end, label in self._fetches:
            jobs = [job for at, job in self._jobs.get(caller, []) if at <= start]
            found.append(Bar(start, end, jobs[-1] if jobs else "", caller, label))
        return found


# -- trio-batch timeline -------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "timeline",
        help="draw jobs of a local store as an SVG timeline",
        description=(
            "Draw jobs of a SQLite store as an SVG timeline: one bar per target that ran, from "
            "its start to when its outcome was stored (a target still running: to the latest "
            "time in the store), in as many lanes as targets ran at once (with one target per "
            "worker at a time: one lane per worker), coloured by job."
        ),
    )
    parser.add_argument(
        "jobs",
        metavar="JOB",
        nargs="*",
        help="job ids or unique id prefixes (default: every job of the store)",
    )
    add_db_argument(parser)
    parser.add_argument(
        "--out", metavar="FILE", default="-", help="write the SVG here (default stdout)"
    )
    parser.set_defaults(func=main)


_RAN = [TargetState.RUNNING, TargetState.DONE, TargetState.FAILED]
_CHUNK = 1024  # targets a read


async def target_bars(db: str, prefixes: Sequence[str]) -> tuple[int, list[Bar]]:
    """The jobs of ``db`` named by ``prefixes`` (every job when there are none): how many, and
    one bar per target of theirs that ran, from the store's times (:class:`TargetStatus`).

    A target still running ends at the latest time the store holds; one stored without a
    start (it never ran) is a bar of no length at its finish.

    Raises:
        UsageError: a prefix matches no job or several, or ``db`` cannot be read.
    """
    ids: list[str] | None = None
    if prefixes:
        ids = []
        for prefix in prefixes:
            job_id = await resolve_id(db, prefix)
            if job_id is None:
                raise UsageError(f"no job {prefix} in {db} (trio-batch jobs lists them)")
            ids.append(job_id)
    jobs = await list_jobs(db, ids)
    ran: list[tuple[str, str, TargetStatus]] = []
    try:
        async with SQLiteStore.open(db, readonly=True) as store:
            for job in jobs:
                after = -1
                while chunk := await store.read_targets(job.id, after, _CHUNK, _RAN, results=False):
                    ran += [(job.id, job.caller, t) for t in chunk]
                    after = chunk[-1].idx
    except (OSError, StoreError) as exc:
        raise UsageError(store_open_message(db, exc) or f"cannot read {db}: {exc}") from None
    known = [x for _, _, t in ran for x in (t.started_at, t.finished_at) if x is not None]
    latest = max(known, default=0.0)
    bars = []
    for job_id, caller, t in ran:
        start = t.started_at if t.started_at is not None else t.finished_at
        if start is None:
            continue
        end = latest if t.finished_at is None else t.finished_at
        state = "" if t.status is TargetState.DONE else f" ({t.status.value})"
        label = f"#{t.idx} {t.url}{state}"
        bars.append(Bar(start, max(end, start), job_id, caller, label))
    return len(jobs), bars


def main(args: argparse.Namespace) -> int:
    """The ``timeline`` subcommand."""
    try:
        jobs, bars = trio.run(target_bars, args.db, args.jobs)
        if not jobs:
            raise UsageError(f"no jobs in {args.db} to draw")
        if not bars:
            some = "the job" if jobs == 1 else f"the {jobs} jobs"
            raise UsageError(f"nothing to draw: no target of {some} has run yet")
        title = f"trio-batch jobs in {args.db}: each bar is one target, as the store holds it"
        svg = render_svg(bars, title=title, lane_name="lane")
        if args.out == "-":
            sys.stdout.write(svg)
        else:
            try:
                with open(args.out, "w", encoding="utf-8") as f:
                    f.write(svg)
            except OSError as exc:
                raise UsageError(f"cannot write --out {args.out}: {exc.strerror}") from None
    except UsageError as exc:
        sys.stderr.write(f"trio-batch timeline: {exc}\n")
        return EXIT_FAILED if str(exc).startswith("no job ") else EXIT_USAGE
    return EXIT_OK
