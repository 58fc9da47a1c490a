"""Live progress of a running engine, for the command line.

A :class:`ProgressTracker` learns what happens from two sources: the engine's :class:`Hooks`
(targets stored, busy retries, fetches in flight) and periodic :meth:`BatchEngine.status` reads
of the jobs it was told about (per-job counts and the target running now). Optionally it wraps
the fetch function to record which caller each fetch was for, which shows the rotation.

:func:`show_progress` draws it on a stream: a ``rich`` live display when the stream is a
terminal (overall bar, done/failed/retrying counts, rate, ETA, one line per live job), plain
progress lines every few seconds otherwise. ``rich`` is imported only for the live display.
"""

from __future__ import annotations

import math
import os
import stat
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Literal, final

import trio

from .._config import Hooks
from .._engine import BatchEngine, FetchFunc
from .._model import Caller, JobStatus, Result, Target, TargetState
from .._util import plural, raise_single_exception_from_group

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

__all__ = ["JobView", "ProgressMode", "ProgressTracker", "render_plain", "render_rich"]

ProgressMode = Literal["auto", "rich", "plain", "off"]

_RATE_WINDOW = 10.0  # seconds of history behind the rate and the ETA
_ROTATION_LENGTH = 30  # fetch starts shown in the rotation strip


@final
@dataclass(slots=True)
class JobView:
    """What the display knows about one job."""

    id: str
    label: str
    total: int
    done: int = 0
    failed: int = 0
    status: str = "queued"
    current: str = ""
    """The URL of the target being fetched now, or empty."""
    polled: bool = True
    """:meth:`ProgressTracker.poll` reads its counts; False: its command sets them (a crawl's
    job, too large to read whole every few seconds)."""

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def live(self) -> bool:
        return self.status in (JobStatus.QUEUED, JobStatus.RUNNING)


@final
class ProgressTracker:
    """Counts and per-job state for a progress display.

    Pass :meth:`hooks` in the engine's ``Config``, :meth:`add_job` each submitted job, and let
    :func:`show_progress` poll the engine. All methods are cheap and never block.
    """

    def __init__(self, *, total: int = 0, clock: Callable[[], float] = trio.current_time) -> None:
        self.total = total
        """Targets expected in all (grows with :meth:`add_job` when set lower)."""
        self.failed_unsubmitted = 0
        """Targets that failed before they reached the engine (e.g. refused URLs)."""
        self.retries = 0
        """Busy retries so far."""
        self.retrying = 0
        self.waiting = 0  # live jobs whose next target waits for its host's budget
        """Jobs waiting out a busy retry now."""
        self.inflight = 0
        self.jobs: dict[str, JobView] = {}
        self.rotation: deque[str] = deque(maxlen=_ROTATION_LENGTH)
        """Caller names of the latest fetch starts, oldest first (see :meth:`wrap`)."""
        self.callers: set[str] = set()
        self.phase = "running"
        """What the run does now: ``checking`` the input, ``submitting`` or ``running``."""
        self.checked = 0
        """Targets checked so far in the ``checking`` phase."""
        self.engine: BatchEngine | None = None
        """The engine :func:`show_progress` polls when it was given none (set once it runs)."""
        self._clock = clock
        self._started = clock()
        self._finishes: deque[float] = deque()

    # -- inputs -----------------------------------------------------------------------------

    def hooks(self) -> Hooks:
        """Engine hooks that feed this tracker."""
        return Hooks(target=self._on_target, retry=self._on_retry, inflight=self._on_inflight)

    def wrap(self, fetch: FetchFunc) -> FetchFunc:
        """``fetch``, recording the caller of each fetch start (the rotation strip)."""

        async def observed(caller: Caller, target: Target) -> Result:
            self.rotation.append(caller.name)
            self.callers.add(caller.name)
            return await fetch(caller, target)

        return observed

    def add_job(self, job_id: str, label: str, total: int, *, polled: bool = True) -> JobView:
        """Follow a submitted job; ``label`` is what its line shows (e.g. the caller).
        ``polled=False``: the caller keeps the view's counts and status."""
        view = self.jobs[job_id] = JobView(job_id, label, total, polled=polled)
        self.total = max(self.total, sum(v.total for v in self.jobs.values()))
        return view

    async def poll(self, engine: BatchEngine) -> None:
        """Read the live jobs' snapshots and the engine's statistics."""
        for view in list(self.jobs.values()):
            if not view.live or not view.polled:
                continue
            try:
                snap = await engine.status(view.id)
            except trio.ClosedResourceError:
                return  # the engine closed under us: keep the last counts
            if snap is None:
                view.status = "gone"
                continue
            view.status = snap.job.status.value
            view.done = sum(1 for t in snap.targets if t.status is TargetState.DONE)
            view.failed = sum(1 for t in snap.targets if t.status is TargetState.FAILED)
            running = [t.url for t in snap.targets if t.status is TargetState.RUNNING]
            view.current = running[0] if running and view.live else ""
        self.retrying = engine.statistics().retrying_jobs
        self.waiting = sum(
            1 for v in self.jobs.values() if v.live and engine.waiting(v.id) is not None
        )

    def _on_target(self, error: BaseException | None, seconds: float, size: int) -> None:
        self._finishes.append(self._clock())

    def _on_retry(self, wait: float) -> None:
        self.retries += 1

    def _on_inflight(self, n: int) -> None:
        self.inflight = n

    # -- outputs ----------------------------------------------------------------------------

    @property
    def waiting_now(self) -> int:
        """Live jobs waiting for their hosts, as last polled; 0 once no job is live (a job
        whose caller keeps its status, a crawl's, may end after the last poll)."""
        return self.waiting if any(v.live for v in self.jobs.values()) else 0

    @property
    def done(self) -> int:
        """Targets stored ``done``, as of the last poll."""
        return sum(v.done for v in self.jobs.values())

    @property
    def failed(self) -> int:
        """Targets stored ``failed`` as of the last poll, plus those never submitted."""
        return sum(v.failed for v in self.jobs.values()) + self.failed_unsubmitted

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def elapsed(self) -> float:
        return max(0.0, self._clock() - self._started)

    def rate(self) -> float:
        """Targets finished per second over the last few seconds (0 before the first)."""
        now = self._clock()
        while self._finishes and self._finishes[0] < now - _RATE_WINDOW:
            self._finishes.popleft()
        span = min(_RATE_WINDOW, now - self._started)
        if not self._finishes or span <= 0:
            return 0.0
        return len(self._finishes) / span

    def eta(self) -> float | None:
        """Seconds until every expected target is finished at the current rate, if known."""
        remaining = self.total - self.finished
        if remaining <= 0:
            return 0.0
        rate = self.rate()
        return remaining / rate if rate > 0 else None


def _duration(seconds: float | None) -> str:
    if seconds is None or math.isinf(seconds):
        return "?"
    seconds = round(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


def _phase_text(tracker: ProgressTracker) -> str:
    """What happens before the first target runs, or "" once the run is under way."""
    if tracker.phase == "checking":
        total = tracker.total
        return f"checking the input: {tracker.checked:,}/{total:,} target{plural(total)} checked"
    if tracker.phase == "submitting" and not tracker.jobs:
        total = tracker.total
        return f"submitting the first job{plural(total)} of {total:,} target{plural(total)}"
    return ""


def render_plain(tracker: ProgressTracker) -> str:
    """One line of progress, for logs and pipes."""
    phase = _phase_text(tracker)
    if phase:
        return f"trio-batch: {phase}, {_duration(tracker.elapsed)} elapsed"
    live = sum(1 for v in tracker.jobs.values() if v.live)
    return (
        f"trio-batch: {tracker.finished}/{tracker.total} target{plural(tracker.total)} "
        f"({tracker.done} done, {tracker.failed} failed), {tracker.retrying} busy-retrying, "
        f"{tracker.waiting_now} waiting for their hosts, "
        f"{tracker.rate():.1f}/s, ETA {_duration(tracker.eta())}, {live} live job{plural(live)}, "
        f"{_duration(tracker.elapsed)} elapsed"
    )


def render_rich(tracker: ProgressTracker, *, max_jobs: int = 12) -> RenderableType:
    """The live display: overall bar, counts, rotation strip and one line per live job."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        Text("overall", style="bold"),
        ProgressBar(total=max(tracker.total, 1), completed=tracker.finished, width=40),
        Text(f"{tracker.finished}/{tracker.total}"),
        Text(f"{tracker.rate():.1f}/s", style="cyan"),
        Text(f"ETA {_duration(tracker.eta())}", style="cyan"),
        Text(f"{_duration(tracker.elapsed)} elapsed", style="dim"),
    )
    counts = Text.assemble(
        ("done ", "dim"),
        (str(tracker.done), "green"),
        ("  failed ", "dim"),
        (str(tracker.failed), "red"),
        ("  busy-retrying ", "dim"),
        (str(tracker.retrying), "yellow"),
        ("  in flight ", "dim"),
        (str(tracker.inflight), "blue"),
        ("  retries so far ", "dim"),
        (str(tracker.retries), "yellow"),
        ("  waiting for their hosts ", "dim"),
        (str(tracker.waiting_now), "yellow"),
    )
    parts: list[RenderableType] = [bar, counts]
    phase = _phase_text(tracker)
    if phase:
        parts.append(Text(phase + " ...", style="yellow"))
    if len(tracker.callers) > 1:
        palette = ["magenta", "cyan", "green", "yellow", "blue", "red"]
        colours = {
            name: palette[i % len(palette)] for i, name in enumerate(sorted(tracker.callers))
        }
        strip = Text("rotation ", style="dim")
        for name in tracker.rotation:
            strip.append(name[:1], style=f"bold {colours[name]}")
        strip.append("   (latest fetch starts, newest last: ", style="dim")
        for i, name in enumerate(sorted(colours)):
            strip.append(("" if i == 0 else ", ") + name, style=colours[name])
        strip.append(")", style="dim")
        parts.append(strip)
    jobs = Table(box=None, padding=(0, 1), show_edge=False)
    label_width = max((len(v.label) for v in tracker.jobs.values()), default=0)
    jobs.add_column("job", no_wrap=True, min_width=label_width + 9)
    jobs.add_column("status", no_wrap=True, min_width=9)
    jobs.add_column("progress", no_wrap=True)
    jobs.add_column("done", justify="right", no_wrap=True, style="green", min_width=9)
    jobs.add_column("failed", justify="right", no_wrap=True, style="red")
    jobs.add_column("now fetching", overflow="ellipsis", no_wrap=True, ratio=1)
    live = [v for v in tracker.jobs.values() if v.live]
    for view in live[:max_jobs]:
        jobs.add_row(
            f"{view.label} {view.id[:8]}",
            view.status,
            ProgressBar(total=max(view.total, 1), completed=view.finished, width=16),
            f"{view.done}/{view.total}",
            str(view.failed),
            view.current.partition("://")[2] or view.current,
        )
    if live:
        parts.append(jobs)
    if len(live) > max_jobs:
        more = len(live) - max_jobs
        parts.append(Text(f"... and {more} more live job{plural(more)}", style="dim"))
    return Group(*parts)


def _have_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _stdout_is_pipe() -> bool:
    """Whether stdout is a pipe or a socket: what we write there may reach the screen later.

    ``trio-batch run urls.txt | jq .`` on a terminal: jq prints our lines on the terminal the
    live display redraws, and a redraw would overwrite them. A file, a terminal (the display
    prints the lines above itself) or no stdout at all is safe.
    """
    try:
        mode = os.fstat(sys.stdout.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _resolve_mode(mode: ProgressMode, stream: IO[str], console: Console | None) -> ProgressMode:
    """``auto`` made ``rich`` or ``plain``; ``rich`` made ``plain`` (saying so) without rich.

    ``auto`` is ``plain`` when stdout is a pipe: plain lines never move the cursor, so they
    cannot overwrite what the pipe's reader prints on the same terminal.
    """
    if mode == "auto":
        live = console is not None or (_is_terminal(stream) and not _stdout_is_pipe())
        mode = "rich" if live else "plain"
    if mode == "rich" and not _have_rich():
        stream.write("trio-batch: pip install 'trio-batch[cli]' for the live progress display\n")
        mode = "plain"
    return mode


def _start_live(
    tracker: ProgressTracker, stream: IO[str], console: Console | None, redirect_stdout: bool
) -> Live:
    """rich's live display of ``tracker`` on ``console`` (or a console on ``stream``), started.

    It refreshes only when drawn, so the frame rate is the poll's, not rich's own.
    """
    from rich.console import Console as RichConsole
    from rich.live import Live

    live_display = Live(
        render_rich(tracker),
        console=console if console is not None else RichConsole(file=stream),
        auto_refresh=False,
        transient=False,
        redirect_stdout=redirect_stdout,
        redirect_stderr=False,
    )
    live_display.start()
    return live_display


@asynccontextmanager
async def show_progress(
    tracker: ProgressTracker,
    engine: BatchEngine | None,
    *,
    stream: IO[str],
    mode: ProgressMode = "auto",
    console: Console | None = None,
    every: float | None = None,
    redirect_stdout: bool = False,
) -> AsyncIterator[None]:
    """Draw ``tracker`` on ``stream`` while the block runs, and once more at the end.

    ``mode="auto"`` is ``rich`` when ``stream`` is a terminal and stdout is no pipe, else
    ``plain`` (a line every ``every`` seconds, 5 by default); without ``rich`` installed it is
    ``plain`` too.
    ``console`` replaces the rich console (tests record with one); ``redirect_stdout`` prints
    what is written to stdout above the live display. Polling stops when the block exits; the
    last frame shows the final counts. With ``engine=None`` it polls ``tracker.engine`` once
    that is set, so the display can start before the engine (while a large input is checked).
    """
    mode = _resolve_mode(mode, stream, console)
    if mode == "off":
        yield
        return

    interval = every if every is not None else (0.25 if mode == "rich" else 5.0)
    live_display = None
    if mode == "rich":
        live_display = _start_live(tracker, stream, console, redirect_stdout)

    def draw() -> None:
        if live_display is not None:
            live_display.update(render_rich(tracker), refresh=True)
        else:
            stream.write(render_plain(tracker) + "\n")
            stream.flush()

    async def poll() -> None:
        current = engine if engine is not None else tracker.engine
        if current is not None:
            await tracker.poll(current)

    async def loop() -> None:
        # The first frame within a second: a large input is checked before the first fetch.
        await trio.sleep(min(interval, 1.0))
        while True:
            await poll()
            draw()
            await trio.sleep(interval)

    try:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(loop)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The body's own exception comes out as itself, not wrapped by our nursery.
            raise_single_exception_from_group(group)
            raise  # pragma: no cover - the loop task raises nothing of its own
        with trio.move_on_after(2, shield=True):
            await poll()
        draw()
    finally:
        if live_display is not None:
            live_display.stop()
