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
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import IO, Any, NamedTuple

import trio

from .._budget import HostBudget
from .._config import Config
from .._engine import BatchEngine, FetchFunc, SiteGuide, open_engine
from .._errors import Busy, CallerBusy, TargetError
from .._headers import SECRETS
from .._model import Caller, JSONValue, Target, TargetStatus
from .._util import plural, raise_single_exception_from_group
from ..stores import ServiceStore
from ._arguments import (
    DEFAULT_DB,
    DEFAULT_SERVER,
    IPNetwork,
    add_allow_net_argument,
    add_db_argument,
    add_progress_argument,
    positive_int,
)
from ._input import parse_targets, read_input
from ._lines import Item, Job, LineWriter
from ._option_flags import add_option_arguments, option_defaults
from ._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    allow_net_hint,
    dump_line,
    target_line,
)
from ._progress import ProgressMode, ProgressTracker, show_progress
from ._remote import RemoteProblem, add_server_arguments, run_remote
from ._signals import watch_signals
from ._store_messages import open_cli_store

__all__ = [  # the names other commands and the tests take from here
    "DEFAULT_DB",
    "UsageError",
    "add_progress_argument",
    "dump_line",
    "open_web_fetch",
    "parse_targets",
    "run_batch",
    "target_line",
]

CALLER = Caller("cli")
_FLUSH_SECONDS = 30.0  # writing the finished lines after an interrupt: bounded, never stuck
_STORED_PAGE = 1000  # a live job's targets read at once to write their lines (the engine's most)
_CHECK_CHUNK = 2000  # targets pre-checked between checkpoints, so the display and Ctrl-C work


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
    add_db_argument(parser, readonly=False)
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
        "--workers",
        type=positive_int,
        default=4,
        metavar="N",
        help="fetches at once (4), a job's targets too, as far as each host's budget allows "
        "(--host-concurrency): raise it for files of many hosts; with --server, each job's "
        "concurrency",
    )
    parser.add_argument(
        "--host-concurrency",
        type=positive_int,
        default=2,
        metavar="N",
        help="requests to one host (and port) in flight at once (2), every job and worker "
        "together; raise it only for a site that you know takes more (as serve's "
        "--host-concurrency)",
    )
    add_option_arguments(parser)
    add_allow_net_argument(parser)
    parser.add_argument(
        "--ids",
        metavar="FILE",
        help="write the id of every job of the run here, one a line, as each is submitted",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="new jobs, fetching every target again (max_age 0: never from a response "
        "cache), even where an identical earlier run's jobs in --db would be reused (its "
        "failed targets included)",
    )
    add_progress_argument(parser)
    add_server_arguments(parser, DEFAULT_SERVER)
    parser.set_defaults(func=main)


# -- the fetch function -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_web_fetch(
    store: ServiceStore,
    allow: Sequence[IPNetwork],
    *,
    slots: int = 2,
    budget: HostBudget | None = None,
    cache: bool = True,
) -> AsyncIterator[WebFetch]:
    """The web fetcher on ``store``, allowed to reach the ``allow`` networks.

    ``slots`` fetches may run at once for one caller (the engine's workers), so no worker
    waits for a pool slot. Every request takes its host's ``budget`` (HostBudget() if None);
    give the engine :func:`politeness` of the fetcher so that its rotation does too. Without
    ``cache`` the fetcher keeps no response cache in ``store`` (``run``: its results are its
    jobs', and a run neither reads an earlier run's bodies nor writes bodies no one reads).

    Raises:
        UsageError: the web extra is not installed.
    """
    try:
        from ..web import WebFetcher, WebSiteGuide
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("trio_batch."):
            raise
        raise UsageError(
            f"the web fetcher needs {exc.name}: pip install 'trio-batch[web]'"
        ) from None
    budget = HostBudget() if budget is None else budget
    async with WebFetcher(
        store=store if cache else None,
        allow=list(allow),
        per_caller=slots,
        pool_size=max(8, slots),
        budget=budget,
    ) as fetch:
        yield WebFetch(fetch, budget, fetch.scope, WebSiteGuide(fetch))


def fetch_of(opened: FetchFunc | WebFetch) -> FetchFunc:
    """The fetch function of what a fetch factory opened."""
    return opened.fetch if isinstance(opened, WebFetch) else opened


def politeness_of(opened: FetchFunc | WebFetch) -> dict[str, Any]:
    """``open_engine``'s budget arguments for what a fetch factory opened (none for others)."""
    return opened.politeness() if isinstance(opened, WebFetch) else {}


class WebFetch(NamedTuple):
    """A web fetcher with its host budget, scope function and site guide, for
    :func:`open_engine`."""

    fetch: FetchFunc
    budget: HostBudget
    scope: Callable[[Target], str | None]
    guide: SiteGuide

    def politeness(self) -> dict[str, Any]:
        """``open_engine``'s keyword arguments that make the rotation keep the budget and a
        crawl read robots.txt and sitemaps."""
        return {"budget": self.budget, "scope": self.scope, "site_guide": self.guide}


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


def _sealed(caller: Caller, targets: list[Target]) -> list[Target]:
    """``targets`` with their credentials (``Cookie``, ``Authorization``) held in this process's
    memory and a reference in their place, so that ``--db`` never stores a secret."""
    return [
        dataclasses.replace(
            t,
            options=dataclasses.replace(
                t.options, headers=SECRETS.seal(caller.name, t.options.headers, url=t.url)
            ),
        )
        if t.options.headers
        else t
        for t in targets
    ]


async def _run_jobs(
    engine: BatchEngine,
    jobs: list[Job],
    live_cap: int,
    tracker: ProgressTracker,
    changed: Callable[[], trio.Event],
    writer: LineWriter,
    on_submit: Callable[[str], None],
    caller: Caller,
) -> None:
    # A job runs as many targets at once as there are workers, within its hosts' budgets.
    concurrency = min(engine.config.effective_workers, engine.config.max_concurrency)
    next_job = 0
    live: list[Job] = []
    while next_job < len(jobs) or live:
        while next_job < len(jobs) and len(live) < live_cap:
            job = jobs[next_job]
            try:
                sealed = _sealed(caller, job.targets)
                sub = await engine.submit(caller, "fleet", sealed, concurrency=concurrency)
            except (CallerBusy, Busy):
                break  # a slot frees up when a live job finishes
            job.id, job.reused = sub.id, sub.reused
            on_submit(sub.id)
            tracker.add_job(sub.id, f"job {next_job + 1}", len(job.targets))
            live.append(job)
            next_job += 1
        tracker.phase = "running"
        event = changed()
        for job in list(live):
            row = await engine.job(job.id)
            if row is None or not row.status.live:
                job.finished = True
                live.remove(job)
        await writer.flush(engine.status, read_stored=functools.partial(_stored, engine))
        if live and not any(job.finished for job in live):
            with trio.move_on_after(1.0):
                await event.wait()
    await writer.flush(engine.status)  # the refused targets after the last job


async def _stored(engine: BatchEngine, job_id: str, after: int) -> list[TargetStatus]:
    """A page of the job's targets after position ``after``, with their results."""
    return await engine.targets(job_id, after=after, limit=_STORED_PAGE)


def fetched_again(target: Target) -> Target:
    """``target`` with ``max_age`` 0 (never answered from a response cache) unless it says."""
    if target.options.max_age is not None:
        return target
    return dataclasses.replace(target, options=dataclasses.replace(target.options, max_age=0))


def fresh_caller() -> Caller:
    """A caller of its own for ``run --fresh``.

    The engine reuses a caller's identical job (SPEC §3.1), and only the caller's name takes
    part in that: a name no earlier run had makes new jobs, listed by ``jobs`` under it.
    """
    return Caller(f"{CALLER.name}-{secrets.token_hex(4)}")


def _refused_line(idx: int, url: str, refused: TargetError) -> dict[str, JSONValue]:
    hint = refused.hint or "fix the URL in the input, or allow its network with --allow-net"
    return {
        "idx": idx,
        "url": url,
        "status": "failed",
        "error": refused.msg,
        "hint": allow_net_hint(url, refused.msg, hint),
        "result": None,
    }


async def _plan(
    targets: Sequence[Target],
    check: Callable[[str], TargetError | None],
    job_size: int,
    tracker: ProgressTracker,
) -> tuple[list[Item], list[Job]]:
    """Pre-check every target and split the accepted ones into jobs, in input order.

    Checks a chunk at a time with a checkpoint between, so the display moves and Ctrl-C works
    on a large input.
    """
    items: list[Item] = []
    jobs: list[Job] = []
    current: Job | None = None
    for idx, target in enumerate(targets):
        if idx % _CHECK_CHUNK == 0:
            tracker.checked = idx
            await trio.lowlevel.checkpoint()
        refused = check(target.url)
        if refused is not None:
            items.append(_refused_line(idx, target.url, refused))
            tracker.failed_unsubmitted += 1
            continue
        if current is None or len(current.targets) >= job_size:
            current = Job(idxs=[], targets=[])
            jobs.append(current)
        current.add(idx, target)
        items.append(current)
    tracker.checked = len(targets)
    return items, jobs


def waking_config(
    tracker: ProgressTracker, **fields: Any
) -> tuple[Config, Callable[[], trio.Event]]:
    """A command's engine config of ``fields``, and ``changed()``: an event set when a job or a
    target changes.

    The command's loop waits on it: a job that ended frees a slot for the next, and a stored
    target may be the next line to write. Every result stays until the command has written it
    (no eviction for bytes); the tracker counts the targets.
    """
    event = trio.Event()

    def changed() -> trio.Event:
        nonlocal event
        if event.is_set():
            event = trio.Event()
        return event

    def on_job(status: str) -> None:
        event.set()

    tracker_hooks = tracker.hooks()
    count_target = tracker_hooks.target

    def on_target(error: BaseException | None, seconds: float, size: int) -> None:
        if count_target is not None:
            count_target(error, seconds, size)
        event.set()

    config = Config(
        max_bytes=sys.maxsize,
        hooks=dataclasses.replace(tracker_hooks, job=on_job, target=on_target),
        **fields,
    )
    return config, changed


def web_fetch_factory(
    *, workers: int, host_concurrency: int, cache: bool
) -> Callable[
    [ServiceStore, Sequence[IPNetwork]], contextlib.AbstractAsyncContextManager[WebFetch]
]:
    """The web fetcher as ``run`` and ``crawl`` open it: ``workers`` fetches at once, at most
    ``host_concurrency`` to one host, a response cache in the store only with ``cache``."""
    return functools.partial(
        open_web_fetch,
        slots=workers,
        cache=cache,
        budget=HostBudget(concurrency=host_concurrency),
    )


FetchFactory = Callable[
    [ServiceStore, Sequence[IPNetwork]],
    contextlib.AbstractAsyncContextManager[FetchFunc | WebFetch],
]
"""``fetch_factory(store, allow)``: opens a command's fetch function (the web fetcher's, or a
test's)."""


@contextlib.asynccontextmanager
async def open_cli_engine(
    store: ServiceStore,
    fetch_factory: FetchFactory,
    allow: Sequence[IPNetwork],
    config: Config,
    tracker: ProgressTracker,
) -> AsyncIterator[BatchEngine]:
    """An engine on ``store`` with the fetch function ``fetch_factory`` opens, its host budget
    and site guide when it is the web fetcher's, every fetch shown by ``tracker``."""
    async with (
        fetch_factory(store, allow) as opened,
        open_engine(
            store, tracker.wrap(fetch_of(opened)), config, **politeness_of(opened)
        ) as engine,
    ):
        tracker.engine = engine
        try:
            yield engine
        finally:
            tracker.engine = None


@contextlib.asynccontextmanager
async def interruptible(handle_sigint: bool = True) -> AsyncIterator[trio.CancelScope]:
    """A scope the first Ctrl-C (SIGINT) cancels (a second cancels at once: see
    :func:`watch_signals`); after the block, its ``cancelled_caught`` says whether it was.

    An exception group of one exception comes out as that exception.
    """
    try:
        with trio.CancelScope() as scope, contextlib.ExitStack() as signal_stack:
            async with trio.open_nursery() as nursery:
                if handle_sigint:
                    signals = signal_stack.enter_context(trio.open_signal_receiver(signal.SIGINT))
                    nursery.start_soon(watch_signals, signals, lambda _: scope.cancel(), scope)
                yield scope
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise


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
    fetch_factory: FetchFactory | None = None,
    handle_sigint: bool = True,
    redirect_stdout: bool = False,
    on_submit: Callable[[str], None] = lambda job_id: None,
    out_name: str = "",
    precheck: Callable[[str], TargetError | None] | None = None,
    fresh: bool = False,
    host_concurrency: int = 2,
) -> int:
    """Run ``targets`` and write their lines with ``out``; return the exit code.

    ``fetch_factory(store, allow)`` opens the fetch function; the web fetcher by default (whose
    pre-check then refuses bad URLs up front, each with a failed line). ``redirect_stdout``: the
    lines go to a terminal that the live display shares, so the display prints them above itself.
    ``on_submit(job_id)`` is called as each job is submitted; ``out_name`` names where the lines
    went, for the summary; ``precheck(url)`` replaces the pre-check (an error refuses the URL).
    ``host_concurrency``: requests to one host in flight at once (the web fetcher's budget).
    ``fresh``: new jobs even where an identical earlier run's jobs would be reused, and every
    target that does not say otherwise fetched again (``max_age`` 0). The web fetcher keeps no
    response cache unless a target has ``recover`` (which serves the last cached copy of a
    failed fetch): a run's results are in its jobs, and an identical run reuses those.

    Raises:
        UsageError: the store cannot be opened (the message names the path and what to do).
    """
    if fresh:
        targets = [fetched_again(t) for t in targets]
    if fetch_factory is None:
        recover = any(t.options.recover for t in targets)
        fetch_factory = web_fetch_factory(
            workers=workers, host_concurrency=host_concurrency, cache=recover
        )
        check = precheck_func(allow)
    else:
        check = lambda url: None  # noqa: E731 - a custom fetch function checks for itself
    if precheck is not None:
        check = precheck
    tracker = ProgressTracker(total=len(targets))
    tracker.phase = "checking"
    config, changed = waking_config(
        tracker,
        targets_per_job=job_size,
        jobs_per_caller=jobs,
        jobs_total=jobs,
        workers=workers,
        max_workers=workers,
        max_concurrency=max(workers, Config().max_concurrency),
    )
    batch: list[Job] = []
    writer: LineWriter | None = None
    async with (
        interruptible(handle_sigint) as scope,
        show_progress(tracker, None, stream=err, mode=progress, redirect_stdout=redirect_stdout),
    ):
        items, batch = await _plan(targets, check, job_size, tracker)
        writer = LineWriter(out, items)
        tracker.phase = "submitting"
        async with open_cli_store(db, server_flag=True) as store:
            try:
                async with open_cli_engine(store, fetch_factory, allow, config, tracker) as engine:
                    await _run_jobs(
                        engine,
                        batch,
                        jobs,
                        tracker,
                        changed,
                        writer,
                        on_submit,
                        fresh_caller() if fresh else CALLER,
                    )
                    await tracker.poll(engine)
            finally:
                # After an interrupt the engine has failed the live jobs; write what
                # finished, even while being cancelled, but not forever.
                with trio.move_on_after(_FLUSH_SECONDS, shield=True):
                    await writer.flush(store.snapshot, partial=True)
    return _summary(
        err,
        targets,
        batch,
        writer,
        tracker,
        db,
        out_name,
        allow=allow,
        interrupted=scope.cancelled_caught,
    )


def _summary(
    err: IO[str],
    targets: Sequence[Target],
    batch: Sequence[Job],
    writer: LineWriter | None,
    tracker: ProgressTracker,
    db: str,
    out_name: str,
    *,
    allow: Sequence[IPNetwork],
    interrupted: bool,
) -> int:
    """Write the run's summary on ``err``; return the exit code."""
    submitted = [job.id for job in batch if job.id]
    where = f" Lines in {out_name}." if out_name else ""
    if len(submitted) > 3:
        ids = f"{len(submitted)} jobs in {db} (trio-batch jobs --db {db} lists them)"
    elif submitted:
        ids = f"job{plural(len(submitted))} in {db}: {' '.join(submitted)}"
    else:
        ids = f"no jobs in {db}"
    if writer is None:
        checked = f"{tracker.checked:,} of {len(targets):,} target{plural(len(targets))}"
        err.write(
            f"trio-batch: interrupted while checking the input ({checked} checked); "
            "nothing was submitted and no line was written.\n"
        )
        return EXIT_INTERRUPTED
    summary = f"{writer.done} done, {writer.failed} failed"
    of_targets = f"of {len(targets)} target{plural(len(targets))}"
    if interrupted and not submitted:
        err.write(
            f"trio-batch: interrupted before the first job was submitted; nothing was "
            f"submitted ({summary} {of_targets}: the refused ones).{where}\n"
        )
        return EXIT_INTERRUPTED
    if interrupted:
        err.write(
            f"trio-batch: interrupted; {summary} {of_targets}; the live jobs "
            f"were stopped (failed: interrupted).{where} {ids[0].upper()}{ids[1:]}. Run the "
            "same command again to finish: the jobs that finished are reused, not fetched "
            "again.\n"
        )
        return EXIT_INTERRUPTED
    counted = f"{len(targets)} target{plural(len(targets))}"
    err.write(f"trio-batch: {counted}: {summary}.{where} {ids[0].upper()}{ids[1:]}\n")
    reused = [job.id for job in batch if job.reused]
    if reused:
        err.write(_reused_note(reused, db, allow, failed=writer.failed > 0))
    return EXIT_OK if writer.failed == 0 else EXIT_FAILED


def _reused_note(
    reused: Sequence[str], db: str, allow: Sequence[IPNetwork], *, failed: bool
) -> str:
    """What the summary says when the engine gave back earlier jobs: nothing was fetched again.

    The ``retry`` command it suggests carries the run's ``--allow-net`` flags, so that it works
    as written for the same targets.
    """
    count = len(reused)
    flags = "".join(f" --allow-net {net}" for net in allow)
    which = reused[0] if count == 1 else f"{count} jobs"
    note = (
        f"trio-batch: reused {which} of an earlier identical run in {db}: "
        f"{'its' if count == 1 else 'their'} lines are the stored ones, nothing was fetched again."
    )
    if failed:
        note += (
            f" To fetch the failed targets again: trio-batch retry {reused[0]} --db {db}{flags}"
            f"{' (for each job)' if count > 1 else ''}; to fetch everything again: run --fresh."
        )
    return note + "\n"


def is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def open_for_writing(path: str, what: str) -> IO[str]:
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {what} {path}: {exc.strerror}") from None


def main(args: argparse.Namespace) -> int:
    """The ``run`` subcommand."""
    with contextlib.ExitStack() as files:
        try:
            targets = read_input(args.file, option_defaults(args))
            if not targets:
                raise UsageError(f"{args.file} has no URLs; write one URL a line")
            out_file = None
            if args.out != "-":
                out_file = files.enter_context(open_for_writing(args.out, "--out"))
            ids_file = None
            if args.ids:
                ids_file = files.enter_context(open_for_writing(args.ids, "--ids"))
        except UsageError as exc:
            sys.stderr.write(f"trio-batch run: {exc}\n")
            return EXIT_USAGE

        def out(line: str) -> None:
            stream = out_file if out_file is not None else sys.stdout
            stream.write(line)
            stream.flush()

        def on_submit(job_id: str) -> None:
            if ids_file is not None:
                ids_file.write(job_id + "\n")
                ids_file.flush()

        if args.server:
            return _run_on_server(args, targets, out, on_submit)
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
                    redirect_stdout=out_file is None and is_terminal(sys.stdout),
                    on_submit=on_submit,
                    out_name=args.out if out_file is not None else "",
                    fresh=args.fresh,
                    host_concurrency=args.host_concurrency,
                )
            )
        except UsageError as exc:
            sys.stderr.write(f"trio-batch run: {exc}\n")
            return EXIT_USAGE
        except KeyboardInterrupt:
            sys.stderr.write("trio-batch run: interrupted; nothing more was written\n")
            return EXIT_INTERRUPTED


def _run_on_server(
    args: argparse.Namespace,
    targets: Sequence[Target],
    out: Callable[[str], None],
    on_submit: Callable[[str], None],
) -> int:
    """``run --server``: the same lines, the jobs run by a server (``_remote.run_remote``).

    ``--fresh`` asks the server's fetcher not to answer from its response cache (``max_age``
    0); the server still reuses a job of the same key and the same targets within its ttl.
    """
    if args.fresh:
        targets = [fetched_again(t) for t in targets]
    try:
        return trio.run(run_remote, args, targets, out, on_submit)
    except (UsageError, RemoteProblem) as exc:
        sys.stderr.write(f"trio-batch run: {exc}\n")
        return exc.code if isinstance(exc, RemoteProblem) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("trio-batch run: interrupted; the server's jobs go on (cancel them)\n")
        return EXIT_INTERRUPTED
