"""``trio-batch run FILE``: run a file of URLs through a local engine and print the results.

The input is one URL a line, or one JSON object ``{"url": ..., "options": {...}}`` a line (the
two may be mixed; blank lines and ``#`` comments are skipped). It is split into jobs of
``--job-size`` targets, ``--jobs`` of them live at once, on the SQLite store at ``--db`` with
the web fetcher. One JSON line per target goes to stdout (or ``--out``), in input order:
``{"idx", "url", "status", "error", "hint", "result"}``.

Exit codes: 0 every target done, 1 some failed, 2 a usage error, 130 interrupted (Ctrl-C: the
live jobs end ``failed``/``interrupted`` and the lines of the targets that finished are written).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import ipaddress
import json
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, final

import trio

from .._config import Config
from .._engine import BatchEngine, FetchFunc, open_engine
from .._errors import Busy, CallerBusy, StoreError, TargetError
from .._model import (
    Caller,
    JSONValue,
    Options,
    Snapshot,
    Target,
    TargetState,
    TargetStatus,
    target_json,
)
from ..stores import SQLiteStore, Store
from ._progress import ProgressMode, ProgressTracker, show_progress
from ._signals import watch_signals

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_DB = "trio-batch.sqlite"
CALLER = Caller("cli")
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_FLUSH_SECONDS = 30.0  # writing the finished lines after an interrupt: bounded, never stuck


class UsageError(Exception):
    """A problem with the command line or its input; exit 2 with this message."""


# -- arguments ----------------------------------------------------------------------------------


def cidr(value: str) -> IPNetwork:
    """An ``--allow-net`` value: a network such as ``127.0.0.0/8`` or ``10.1.2.3``."""
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a network; write it as CIDR, e.g. 127.0.0.0/8 or 10.0.0.5/32"
        ) from None


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0 (got {value!r})")
    return number


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        choices=["auto", "rich", "plain", "off"],
        default="auto",
        help="progress on stderr: a live display on a terminal (auto), plain lines, or none",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a file of URLs through a local engine; JSON lines out",
        description=(
            "Run a file of targets through a local engine and the web fetcher. The input is one "
            'URL a line, or one JSON object {"url": ..., "options": {...}} a line (mixed freely; '
            "blank lines and # comments are skipped). It is split into jobs of --job-size "
            "targets, --jobs of them live at once, stored in the SQLite file --db. One JSON line "
            "per target is written, in input order: idx, url, status, error, hint, result."
        ),
        epilog=(
            "Exit status: 0 every target done, 1 some failed, 2 usage error, 130 interrupted "
            "(Ctrl-C: the live jobs stop as failed/interrupted and the lines of the targets "
            "that finished are written)."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="URLs one a line, or JSONL; '-' for stdin")
    parser.add_argument(
        "--db",
        default=DEFAULT_DB,
        metavar="PATH",
        help=f"the SQLite store (default ./{DEFAULT_DB})",
    )
    parser.add_argument(
        "--out", metavar="FILE", default="-", help="write the JSON lines here (default stdout)"
    )
    parser.add_argument(
        "--job-size", type=positive_int, default=32, metavar="N", help="targets a job (32)"
    )
    parser.add_argument(
        "--jobs", type=positive_int, default=4, metavar="N", help="jobs live at once (4)"
    )
    parser.add_argument(
        "--workers", type=positive_int, default=4, metavar="N", help="fetches at once (4)"
    )
    parser.add_argument(
        "--allow-net",
        type=cidr,
        action="append",
        default=[],
        metavar="CIDR",
        help="let the fetcher reach this private network (repeatable), e.g. 127.0.0.0/8",
    )
    add_progress_argument(parser)
    parser.set_defaults(func=main)


# -- input --------------------------------------------------------------------------------------


def parse_targets(lines: Iterable[str], source: str) -> list[Target]:
    """The targets of an input file: URLs one a line, or JSON objects one a line.

    Raises:
        UsageError: a line is neither; the message names the line and how to fix it.
    """
    targets: list[Target] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}, line {lineno}"
        if line.startswith("{"):
            targets.append(_json_target(line, where))
        elif any(c.isspace() for c in line):
            raise UsageError(
                f"{where}: a URL cannot contain spaces; write one URL a line "
                '(or one JSON object {"url": ..., "options": {...}} a line)'
            )
        else:
            targets.append(Target(line))
    return targets


def _json_target(line: str, where: str) -> Target:
    try:
        data: object = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'{where}: not valid JSON ({exc.msg}); write {{"url": "https://...", "options": '
            "{...}} on one line"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f'{where}: expected a JSON object {{"url": ..., "options": ...}}')
    unknown = sorted(set(data) - {"url", "options"})
    if unknown:
        raise UsageError(f"{where}: unknown field {unknown[0]!r}; the fields are url and options")
    url = data.get("url")
    if not isinstance(url, str) or not url:
        raise UsageError(f'{where}: "url" must be a non-empty string')
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f'{where}: "options" must be a JSON object')
    try:
        return Target(url, Options.from_json(options))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def read_input(path: str) -> list[Target]:
    """Read and parse ``path`` (``-`` is stdin)."""
    if path == "-":
        return parse_targets(sys.stdin, "stdin")
    try:
        with open(path, encoding="utf-8") as f:
            return parse_targets(f, path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; write one URL a line") from None


# -- output -------------------------------------------------------------------------------------


def target_line(idx: int, target: TargetStatus) -> dict[str, JSONValue]:
    """One target's JSON line for ``run`` and ``results``; ``idx`` is its place in the input."""
    return {**target_json(target), "idx": idx}


def dump_line(data: Mapping[str, JSONValue]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


# -- the fetch function -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_web_fetch(
    store: Store, allow: Sequence[IPNetwork], *, slots: int = 2
) -> AsyncIterator[FetchFunc]:
    """The web fetcher on ``store``, allowed to reach the ``allow`` networks.

    ``slots`` fetches may run at once for one caller (the engine's workers), so no worker
    waits for a pool slot.

    Raises:
        UsageError: the web extra is not installed.
    """
    try:
        from ..web import WebFetcher
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("trio_batch."):
            raise
        raise UsageError(
            f"the web fetcher needs {exc.name}: pip install 'trio-batch[web]'"
        ) from None
    async with WebFetcher(
        store=store, allow=list(allow), per_caller=slots, pool_size=max(8, slots)
    ) as fetch:
        yield fetch


def precheck_func(allow: Sequence[IPNetwork]) -> Callable[[str], TargetError | None]:
    """A function that says why the web fetcher would refuse a URL (None when it would not)."""
    try:
        from ..web import precheck
    except ModuleNotFoundError:
        return lambda url: None

    def check(url: str) -> TargetError | None:
        try:
            precheck(url, allow=list(allow))
        except TargetError as exc:
            return exc
        return None

    return check


# -- the run ------------------------------------------------------------------------------------


@final
@dataclass(slots=True)
class _Job:
    idxs: list[int]
    """Input index of each of its targets."""
    targets: list[Target]
    id: str = ""
    finished: bool = False


@final
class _LineWriter:
    """Writes the lines in input order as the jobs holding them finish."""

    def __init__(
        self, out: Callable[[str], None], items: dict[int, dict[str, JSONValue] | _Job], total: int
    ) -> None:
        self._out = out
        self._items = items  # idx -> a ready line (refused target) or the job holding it
        self._total = total
        self.next = 0
        self.done = 0
        self.failed = 0

    def _emit(self, line: dict[str, JSONValue]) -> None:
        if line["status"] == TargetState.DONE:
            self.done += 1
        else:
            self.failed += 1
        self._out(dump_line(line))

    async def flush(
        self, read: Callable[[str], Awaitable[Snapshot | None]], *, partial: bool = False
    ) -> None:
        """Write every line that is ready, in input order.

        A job's lines are ready when it has finished. With ``partial`` (after an interrupt),
        write the finished targets of every submitted job and skip the rest.
        """
        while self.next < self._total:
            item = self._items[self.next]
            if isinstance(item, dict):
                self._emit(item)
                self.next += 1
                continue
            if not item.finished and not partial:
                return
            snap: Snapshot | None = await read(item.id) if item.id else None
            targets = snap.targets if snap is not None else []
            for idx, target in zip(item.idxs, targets, strict=False):
                if target.status in (TargetState.DONE, TargetState.FAILED):
                    self._emit(target_line(idx, target))
            self.next = item.idxs[-1] + 1


async def _run_jobs(
    engine: BatchEngine,
    jobs: list[_Job],
    live_cap: int,
    tracker: ProgressTracker,
    changed: Callable[[], trio.Event],
    writer: _LineWriter,
) -> None:
    next_job = 0
    live: list[_Job] = []
    while next_job < len(jobs) or live:
        while next_job < len(jobs) and len(live) < live_cap:
            job = jobs[next_job]
            try:
                sub = await engine.submit(CALLER, "fleet", job.targets)
            except (CallerBusy, Busy):
                break  # a slot frees up when a live job finishes
            job.id = sub.id
            tracker.add_job(sub.id, f"job {next_job + 1}", len(job.targets))
            live.append(job)
            next_job += 1
        event = changed()
        for job in list(live):
            snap = await engine.status(job.id)
            if snap is None or not snap.job.status.live:
                job.finished = True
                live.remove(job)
        await writer.flush(engine.status)
        if live and not any(job.finished for job in live):
            with trio.move_on_after(1.0):
                await event.wait()


async def run_batch(
    targets: list[Target],
    *,
    db: str,
    out: Callable[[str], None],
    err: IO[str],
    job_size: int = 32,
    jobs: int = 4,
    workers: int = 4,
    allow: Sequence[IPNetwork] = (),
    progress: ProgressMode = "auto",
    fetch_factory: Callable[
        [Store, Sequence[IPNetwork]], contextlib.AbstractAsyncContextManager[FetchFunc]
    ]
    | None = None,
    handle_sigint: bool = True,
    redirect_stdout: bool = False,
) -> int:
    """Run ``targets`` and write their lines with ``out``; return the exit code.

    ``fetch_factory(store, allow)`` opens the fetch function; the web fetcher by default (whose
    pre-check then refuses bad URLs up front, each with a failed line). ``redirect_stdout``: the
    lines go to a terminal that the live display shares, so the display prints them above itself.
    """
    if fetch_factory is None:
        fetch_factory = functools.partial(open_web_fetch, slots=workers)
        check = precheck_func(allow)
    else:
        check = lambda url: None  # noqa: E731 - a custom fetch function checks for itself
    items: dict[int, dict[str, JSONValue] | _Job] = {}
    batch: list[_Job] = []
    tracker = ProgressTracker(total=len(targets))
    current: _Job | None = None
    for idx, target in enumerate(targets):
        refused = check(target.url)
        if refused is not None:
            items[idx] = {
                "idx": idx,
                "url": target.url,
                "status": "failed",
                "error": refused.msg,
                "hint": refused.hint
                or "fix the URL in the input, or allow its network with --allow-net",
                "result": None,
            }
            tracker.failed_unsubmitted += 1
            continue
        if current is None or len(current.targets) >= job_size:
            current = _Job(idxs=[], targets=[])
            batch.append(current)
        current.idxs.append(idx)
        current.targets.append(target)
        items[idx] = current
    writer = _LineWriter(out, items, len(targets))

    event = trio.Event()

    def changed() -> trio.Event:
        nonlocal event
        if event.is_set():
            event = trio.Event()
        return event

    def on_job(status: str) -> None:
        event.set()

    hooks = dataclasses.replace(tracker.hooks(), job=on_job)
    config = Config(
        targets_per_job=job_size,
        jobs_per_caller=jobs,
        jobs_total=jobs,
        workers=workers,
        max_workers=workers,
        # Every result stays until this run has written it: no eviction for bytes.
        max_bytes=sys.maxsize,
        hooks=hooks,
    )
    interrupted = False
    async with SQLiteStore.open(db) as store:
        async with fetch_factory(store, allow) as fetch:
            with trio.CancelScope() as scope, contextlib.ExitStack() as signal_stack:
                async with trio.open_nursery() as nursery:
                    if handle_sigint:
                        signals = signal_stack.enter_context(
                            trio.open_signal_receiver(signal.SIGINT)
                        )
                        nursery.start_soon(watch_signals, signals, lambda _: scope.cancel(), scope)
                    async with (
                        open_engine(store, tracker.wrap(fetch), config) as engine,
                        show_progress(
                            tracker,
                            engine,
                            stream=err,
                            mode=progress,
                            redirect_stdout=redirect_stdout,
                        ),
                    ):
                        await _run_jobs(engine, batch, jobs, tracker, changed, writer)
                    nursery.cancel_scope.cancel()
            interrupted = scope.cancelled_caught
        # After an interrupt the engine has failed the live jobs; write what finished, even
        # while being cancelled, but not forever.
        with trio.move_on_after(_FLUSH_SECONDS, shield=True):
            await writer.flush(store.snapshot, partial=True)
    submitted = [job.id for job in batch if job.id]
    ids = " ".join(submitted[:5]) + (
        f" and {len(submitted) - 5} more" if len(submitted) > 5 else ""
    )
    summary = f"{writer.done} done, {writer.failed} failed"
    if interrupted:
        err.write(
            f"trio-batch: interrupted; {summary} of {len(targets)} targets; the live jobs "
            f"were stopped (failed: interrupted). Jobs in {db}: {ids}. Run the same command "
            "again to finish: the jobs that finished are reused, not fetched again.\n"
        )
        return EXIT_INTERRUPTED
    err.write(f"trio-batch: {len(targets)} targets: {summary}. Jobs in {db}: {ids}\n")
    return EXIT_OK if writer.failed == 0 else EXIT_FAILED


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def main(args: argparse.Namespace) -> int:
    """The ``run`` subcommand."""
    try:
        targets = read_input(args.file)
        if not targets:
            raise UsageError(f"{args.file} has no URLs; write one URL a line")
        out_file: IO[str] | None = None
        if args.out != "-":
            try:
                out_file = open(args.out, "w", encoding="utf-8")  # noqa: SIM115 - closed below
            except OSError as exc:
                raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    except UsageError as exc:
        sys.stderr.write(f"trio-batch run: {exc}\n")
        return EXIT_USAGE

    def out(line: str) -> None:
        stream = out_file if out_file is not None else sys.stdout
        stream.write(line)
        stream.flush()

    try:
        return trio.run(
            functools.partial(
                run_batch,
                targets,
                db=args.db,
                out=out,
                err=sys.stderr,
                job_size=args.job_size,
                jobs=args.jobs,
                workers=args.workers,
                allow=args.allow_net,
                progress=args.progress,
                redirect_stdout=out_file is None and _is_terminal(sys.stdout),
            )
        )
    except (UsageError, StoreError) as exc:
        sys.stderr.write(f"trio-batch run: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("trio-batch run: interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        if out_file is not None:
            out_file.close()
