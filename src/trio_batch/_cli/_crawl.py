"""``trio-batch crawl URL``: crawl a site from URL through a local engine, JSON lines out.

A crawl is one job whose targets grow by the links its pages find (docs/crawl.md): the engine
keeps its frontier and visited set in the SQLite store ``--db``, so its ``--limit`` is exact and
a stored page is never fetched again. One JSON line per page goes to stdout (or ``--out``) as
soon as it and every page found before it are stored, in the format of ``run``'s lines
(``idx`` is the page's place in the crawl). With ``--server`` the crawl runs on a server
(``POST /v1/crawl``) and its lines are followed from there.

Exit codes: 0 the crawl ended with every page done, 1 some pages failed (or none was found), 2 a
usage error, 130 interrupted (Ctrl-C: with ``--resume`` the crawl stays in ``--db`` for the next
``--resume`` to carry on; without, it ends ``failed``/``interrupted``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Sequence
from typing import IO, cast

import trio

from .._config import Config
from .._crawl import MAX_DEPTH, MAX_PATTERN_CHARS, MAX_PATTERNS, SKIP_REASONS, CrawlSpec
from .._crawl_rules import CrawlRules
from .._engine import BatchEngine
from .._errors import Busy, CallerBusy, NoTargets
from .._headers import SECRETS
from .._model import Caller, JSONValue, Options, Submitted, TargetStatus
from .._util import plural
from ..stores import ServiceStore
from ._arguments import (
    DEFAULT_SERVER,
    IPNetwork,
    add_allow_net_argument,
    add_db_argument,
    add_progress_argument,
    positive_int,
)
from ._lines import StoredLines
from ._option_flags import add_option_arguments, option_defaults
from ._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    allow_net_hint,
    dump_line,
)
from ._progress import JobView, ProgressMode, ProgressTracker, show_progress
from ._remote import (
    RemoteProblem,
    add_server_arguments,
    client_error_type,
    explain,
    remote_client,
)
from ._run import (
    CALLER,
    FetchFactory,
    fresh_caller,
    interruptible,
    is_terminal,
    open_cli_engine,
    open_for_writing,
    precheck_func,
    waking_config,
    web_fetch_factory,
)
from ._store_messages import open_cli_store

DEFAULT_LIMIT = 100
DEFAULT_MAX_DEPTH = 3
DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_CRAWL_PAGES = Config().max_crawl_pages
_READ_PAGE = 100  # a crawl's targets read at once to write their lines (most are pending)
_FLUSH_SECONDS = 30.0  # writing the stored lines after an interrupt: bounded, never stuck
_WAKE_SECONDS = 1.0  # the longest the loop waits for a change before it looks again
_FLUSH_EVERY = 0.05  # the shortest time between two reads of the stored lines (a busy crawl
# stores a page every few milliseconds: its lines are written in batches, still at once to a
# reader)


# -- the flags ----------------------------------------------------------------------------------


def _depth(value: str) -> int:
    """A ``--max-depth``: 0 (the start page alone) to :data:`MAX_DEPTH`."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_DEPTH:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 0 (the start page alone) to {MAX_DEPTH} (got {value!r})"
        )
    return number


def _glob(value: str) -> str:
    """An ``--include``/``--exclude`` pattern: a glob on the URL's whole path (and query)."""
    if not value or len(value) > MAX_PATTERN_CHARS:
        raise argparse.ArgumentTypeError(
            f"a pattern is 1 to {MAX_PATTERN_CHARS} characters long (got {len(value)})"
        )
    if not value.startswith(("/", "*")):
        raise argparse.ArgumentTypeError(
            f"{value[:40]!r} never matches: a pattern matches the URL's whole path from its "
            "first /, e.g. /docs/** or **/print/** (* any characters but /, ** any characters)"
        )
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "crawl",
        help="crawl a site from a URL, following its links; JSON lines out",
        description=(
            "Crawl a site from URL through a local engine and the web fetcher: fetch the start "
            "page, follow the links each page finds (in scope, deduplicated, traps bounded, "
            "robots.txt obeyed) until --limit pages are stored done or nothing is left to "
            "fetch. The crawl is one job in the SQLite file --db; one JSON line per page is "
            "written as it is stored, in the order the pages were found: idx, url, status, "
            "error, hint, result (its meta.crawl says the page's depth and the page that "
            "found it). See docs/crawl.md."
        ),
        epilog=(
            "Exit status: 0 every page done, 1 some pages failed (or nothing to crawl), 2 usage "
            "error, 130 interrupted (Ctrl-C: with --resume the crawl stays in --db, and the same "
            "command with --resume carries on without fetching a stored page again)."
        ),
    )
    parser.add_argument("url", metavar="URL", help="the start page (depth 0)")
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help=f"stop after N pages stored done ({DEFAULT_LIMIT}); failed pages do not count, "
        "and the crawl never stores more",
    )
    parser.add_argument(
        "--max-depth",
        type=_depth,
        metavar="N",
        help=f"follow links at most N clicks from the start page ({DEFAULT_MAX_DEPTH}; 1: the "
        f"start page and its links; at most {MAX_DEPTH})",
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="N",
        help=f"pages fetched at once ({DEFAULT_CONCURRENCY}), within the host's budget "
        "(--host-concurrency)",
    )
    parser.add_argument(
        "--scope",
        choices=["host", "domain", "prefix"],
        help="where links may lead: the start page's host (default; www. is another host), "
        "its registrable domain (every subdomain), or a path prefix (--prefix)",
    )
    parser.add_argument(
        "--prefix",
        metavar="PATH",
        help="with --scope prefix (which it implies): the path the crawl stays under, e.g. "
        "/docs/ (default: the start page's directory)",
    )
    parser.add_argument(
        "--include",
        type=_glob,
        action="append",
        default=[],
        metavar="GLOB",
        help="fetch only pages whose path matches one of these globs (repeatable), e.g. "
        "/docs/** (* any characters but /, ** any characters)",
    )
    parser.add_argument(
        "--exclude",
        type=_glob,
        action="append",
        default=[],
        metavar="GLOB",
        help="never fetch pages whose path matches one of these globs (repeatable), e.g. "
        "**/print/**",
    )
    parser.add_argument(
        "--sitemaps",
        choices=["include", "skip", "only"],
        help="the site's sitemaps as seeds: skip them (default), include their pages beside "
        "the start page, or start from them only",
    )
    add_option_arguments(parser, crawl=True)
    parser.add_argument(
        "--host-concurrency",
        type=positive_int,
        default=2,
        metavar="N",
        help="requests to one host (and port) in flight at once (2); raise it only for a site "
        "that you know takes more",
    )
    parser.add_argument(
        "--max-crawl-pages",
        type=positive_int,
        default=DEFAULT_MAX_CRAWL_PAGES,
        metavar="N",
        help=f"the largest --limit this command takes ({DEFAULT_MAX_CRAWL_PAGES:,}), a guard "
        "against a typo; raise it for a larger crawl (with --server, the server's cap holds)",
    )
    add_allow_net_argument(parser)
    add_db_argument(parser, readonly=False)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="carry on a crawl that a killed or interrupted crawl --resume left in --db (no "
        "stored page fetched again, the limit kept), and leave this one there if it stops",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="a new crawl fetching every page again (never from a response cache), even where "
        "an identical earlier crawl in --db would be reused",
    )
    parser.add_argument(
        "--out", metavar="FILE", default="-", help="write the JSON lines here (default stdout)"
    )
    add_progress_argument(parser)
    add_server_arguments(parser, DEFAULT_SERVER, instead="--db (POST /v1/crawl)")
    parser.set_defaults(func=main)


def crawl_spec(args: argparse.Namespace) -> CrawlSpec:
    """The crawl the flags ask for, checked as the engine will check it.

    Raises:
        UsageError: a flag the crawl cannot take; the message names it and what to write.
    """
    scope = args.scope
    if args.prefix is not None:
        if scope not in (None, "prefix"):
            raise UsageError(
                f"--prefix is for --scope prefix, not --scope {scope}; drop one of them"
            )
        scope = "prefix"
    for flag, patterns in (("--include", args.include), ("--exclude", args.exclude)):
        if len(patterns) > MAX_PATTERNS:
            raise UsageError(f"{flag} is given {len(patterns)} times; at most {MAX_PATTERNS}")
    if args.resume and args.fresh:
        raise UsageError("--resume carries on a crawl and --fresh starts a new one; pass one")
    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    if args.server is None and limit > args.max_crawl_pages:
        raise UsageError(
            f"--limit {limit:,} is over --max-crawl-pages {args.max_crawl_pages:,}; pass a "
            f"smaller --limit, or --max-crawl-pages {limit} for a crawl that large"
        )
    options = Options.from_json(option_defaults(args))
    if args.fresh and options.max_age is None:
        options = dataclasses.replace(options, max_age=0)
    spec = CrawlSpec(
        args.url,
        limit=limit,
        max_depth=DEFAULT_MAX_DEPTH if args.max_depth is None else args.max_depth,
        scope=scope or "host",
        prefix=args.prefix or "",
        include=tuple(args.include),
        exclude=tuple(args.exclude),
        sitemaps=args.sitemaps or "skip",
        options=options,
        concurrency=DEFAULT_CONCURRENCY if args.concurrency is None else args.concurrency,
    )
    try:
        CrawlRules(spec)
    except ValueError:
        raise UsageError(
            f"{args.url[:100]!r} cannot be crawled: write an http or https URL with a host and "
            "no user@ part, at most 2,048 characters, e.g. https://example.org/docs/"
        ) from None
    return spec


# -- the crawl ----------------------------------------------------------------------------------


def _sealed(caller: Caller, spec: CrawlSpec) -> CrawlSpec:
    """``spec`` with its credentials (``Cookie``, ``Authorization``) held in this process's
    memory and a reference in their place, so that ``--db`` never stores a secret (as ``run``)."""
    if not spec.options.headers:
        return spec
    headers = SECRETS.seal(caller.name, spec.options.headers, url=spec.url)
    return dataclasses.replace(spec, options=dataclasses.replace(spec.options, headers=headers))


@dataclasses.dataclass
class _Crawled:
    """What the summary says of a crawl."""

    job_id: str = ""
    reused: bool = False
    resumed: bool = False
    """The crawl was a live one that a stopped process left in ``--db`` (``--resume``)."""
    status: str = ""
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)


async def run_crawl(
    spec: CrawlSpec,
    *,
    db: str,
    out: Callable[[str], None],
    err: IO[str],
    allow: Sequence[IPNetwork] = (),
    progress: ProgressMode = "auto",
    fetch_factory: FetchFactory | None = None,
    handle_sigint: bool = True,
    redirect_stdout: bool = False,
    resume: bool = False,
    fresh: bool = False,
    host_concurrency: int = 2,
    max_crawl_pages: int = DEFAULT_MAX_CRAWL_PAGES,
    out_name: str = "",
) -> int:
    """Crawl ``spec`` on the SQLite store ``db`` and write each page's line with ``out`` as it
    is stored; return the exit code.

    ``fetch_factory(store, allow)`` opens the fetch function (the web fetcher by default, with
    its site guide for robots.txt and sitemaps). ``resume``: the engine carries on the crawls
    a stopped process left in ``db`` (this one among them when it is the same crawl), and leaves
    this one there if it stops. ``fresh``: a new crawl even where an identical one in ``db``
    would be reused (``spec``'s ``max_age`` is the caller's to set).

    Raises:
        UsageError: the store cannot be opened, the start URL is refused, or the engine
            refuses the crawl (the message says what to change).
    """
    if fetch_factory is None:
        fetch_factory = web_fetch_factory(
            workers=spec.concurrency,
            host_concurrency=host_concurrency,
            cache=spec.options.recover,
        )
        refused = precheck_func(allow)(spec.url)
        if refused is not None:
            hint = allow_net_hint(spec.url, refused.msg, refused.hint)
            raise UsageError(f"the start page is refused: {refused.msg} ({hint})")
    tracker = ProgressTracker(total=spec.limit)
    tracker.phase = "submitting"
    config, changed = waking_config(
        tracker,
        workers=spec.concurrency,
        max_workers=spec.concurrency,
        max_concurrency=max(spec.concurrency, Config().max_concurrency),
        max_crawl_pages=max(max_crawl_pages, spec.limit),
        resume=resume,
    )
    caller = fresh_caller() if fresh else CALLER
    crawled = _Crawled()
    writer: StoredLines | None = None
    async with (
        interruptible(handle_sigint) as scope,
        show_progress(tracker, None, stream=err, mode=progress, redirect_stdout=redirect_stdout),
        open_cli_store(db, server_flag=True) as store,
    ):
        try:
            async with open_cli_engine(store, fetch_factory, allow, config, tracker) as engine:
                submitted = await _submit(engine, caller, _sealed(caller, spec))
                crawled.job_id, crawled.reused = submitted.id, submitted.reused
                if submitted.reused:
                    row = await engine.job(submitted.id)
                    crawled.resumed = row is not None and row.status.live
                writer = StoredLines(out, submitted.id)
                view = tracker.add_job(submitted.id, "crawl", spec.limit, polled=False)
                tracker.phase = "running"
                await _follow(engine, writer, view, changed)
        finally:
            # After an interrupt the engine has stopped the crawl (or left it for --resume);
            # write what was stored, even while being cancelled, but not forever.
            if writer is not None:
                with trio.move_on_after(_FLUSH_SECONDS, shield=True):
                    await _finish(store, writer, crawled)
    return _summary(err, spec, crawled, writer, db, out_name, scope.cancelled_caught, resume)


async def _submit(engine: BatchEngine, caller: Caller, spec: CrawlSpec) -> Submitted:
    """Admit the crawl; the engine's refusals in the words of the command line."""
    try:
        return await engine.crawl(caller, "fleet", spec)
    except NoTargets as exc:
        raise _NothingToCrawl(str(exc)) from None
    except (CallerBusy, Busy):
        raise UsageError(
            f"--db holds too many live jobs to start a crawl ({engine.config.jobs_per_caller} "
            "at most); let them end (trio-batch jobs --db lists them), or pass another --db"
        ) from None
    except ValueError as exc:
        raise UsageError(f"the crawl is refused: {exc}") from None


class _NothingToCrawl(Exception):
    """The crawl has no page to fetch (``--sitemaps only`` and no sitemap page in scope)."""


async def _follow(
    engine: BatchEngine,
    writer: StoredLines,
    view: JobView,
    changed: Callable[[], trio.Event],
) -> None:
    """Write the crawl's lines as its pages are stored, until it ends."""
    read = functools.partial(_read, engine)
    while True:
        next_flush = trio.current_time() + _FLUSH_EVERY
        event = changed()
        row = await engine.job(writer.job_id)
        await writer.flush(read)
        view.done, view.failed = writer.done, writer.failed
        if row is None or not row.status.live:
            view.status = "gone" if row is None else row.status.value
            return
        view.status = row.status.value
        with trio.move_on_after(_WAKE_SECONDS):
            await event.wait()
        await trio.sleep_until(next_flush)


async def _read(engine: BatchEngine, job_id: str, after: int) -> list[TargetStatus]:
    return await engine.targets(job_id, after=after, limit=_READ_PAGE)


async def _finish(store: ServiceStore, writer: StoredLines, crawled: _Crawled) -> None:
    """Write the lines stored since the last flush; read the crawl's end for the summary."""

    async def read(job_id: str, after: int) -> list[TargetStatus]:
        return await store.read_targets(job_id, after, _READ_PAGE, None)

    await writer.flush(read)
    job = await store.read_job(writer.job_id)
    crawled.status = "" if job is None else job.status.value
    info = await store.crawl_info(writer.job_id)
    if info is not None:
        crawled.skipped = {r: int(info.skipped.get(r, 0)) for r in SKIP_REASONS}


def _summary(
    err: IO[str],
    spec: CrawlSpec,
    crawled: _Crawled,
    writer: StoredLines | None,
    db: str,
    out_name: str,
    interrupted: bool,
    resume: bool,
) -> int:
    """Write the crawl's summary on ``err``; return the exit code."""
    where = f" Lines in {out_name}." if out_name else ""
    if writer is None:
        err.write("trio-batch crawl: interrupted before the crawl started; nothing was fetched.\n")
        return EXIT_INTERRUPTED
    pages = (
        f"{writer.done} page{plural(writer.done)} done, {writer.failed} failed "
        f"(limit {spec.limit:,})"
    )
    job = f"Job {crawled.job_id} in {db}."
    if interrupted:
        if resume:
            then = (
                "the crawl stays in --db: the same command with --resume carries on "
                "(no stored page is fetched again)"
            )
        else:
            then = (
                "the crawl was stopped (failed: interrupted); to carry on after a stop, crawl "
                "with --resume"
            )
        err.write(f"trio-batch crawl: interrupted; {pages}; {then}.{where} {job}\n")
        return EXIT_INTERRUPTED
    skipped = ", ".join(f"{n:,} {reason}" for reason, n in crawled.skipped.items() if n)
    skipped_text = f"; skipped: {skipped}" if skipped else ""
    err.write(f"trio-batch crawl: {pages}{skipped_text}.{where} {job}\n")
    if crawled.resumed:
        err.write(
            f"trio-batch crawl: carried on the crawl left in {db}: no page it had stored was "
            "fetched again.\n"
        )
    elif crawled.reused:
        err.write(
            f"trio-batch crawl: reused an identical crawl in {db}: its lines are the stored "
            "ones, nothing was fetched again (--fresh crawls again).\n"
        )
    return EXIT_OK if crawled.status == "done" else EXIT_FAILED


# -- the command --------------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    """The ``crawl`` subcommand."""
    with contextlib.ExitStack() as files:
        try:
            spec = crawl_spec(args)
            out_file = None
            if args.out != "-":
                out_file = files.enter_context(open_for_writing(args.out, "--out"))
        except UsageError as exc:
            sys.stderr.write(f"trio-batch crawl: {exc}\n")
            return EXIT_USAGE

        def out(line: str) -> None:
            stream = out_file if out_file is not None else sys.stdout
            stream.write(line)
            stream.flush()

        if args.server:
            return _crawl_on_server(args, spec, out)
        try:
            return trio.run(
                functools.partial(
                    run_crawl,
                    spec,
                    db=args.db,
                    out=out,
                    err=sys.stderr,
                    allow=args.allow_net,
                    progress=args.progress,
                    redirect_stdout=out_file is None and is_terminal(sys.stdout),
                    resume=args.resume,
                    fresh=args.fresh,
                    host_concurrency=args.host_concurrency,
                    max_crawl_pages=args.max_crawl_pages,
                    out_name=args.out if out_file is not None else "",
                )
            )
        except UsageError as exc:
            sys.stderr.write(f"trio-batch crawl: {exc}\n")
            return EXIT_USAGE
        except _NothingToCrawl as exc:
            sys.stderr.write(f"trio-batch crawl: {exc}\n")
            return EXIT_FAILED
        except KeyboardInterrupt:
            sys.stderr.write("trio-batch crawl: interrupted; nothing more was written\n")
            return EXIT_INTERRUPTED


# -- --server -----------------------------------------------------------------------------------


def _crawl_on_server(args: argparse.Namespace, spec: CrawlSpec, out: Callable[[str], None]) -> int:
    """``crawl --server``: the crawl runs on the server, its lines are followed from there."""
    try:
        return trio.run(crawl_remote, args, spec, out)
    except (UsageError, RemoteProblem) as exc:
        sys.stderr.write(f"trio-batch crawl: {exc}\n")
        return exc.code if isinstance(exc, RemoteProblem) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("trio-batch crawl: interrupted; the server's crawl goes on (cancel it)\n")
        return EXIT_INTERRUPTED


async def crawl_remote(
    args: argparse.Namespace, spec: CrawlSpec, out: Callable[[str], None]
) -> int:
    """Submit the crawl with ``client.crawl`` (only the flags given: the server's defaults
    hold for the rest) and print each page's line as it lands.

    Returns:
        0 when the crawl ended done, else 1.
    """
    ClientError = client_error_type()
    options = cast("dict[str, object]", spec.options.to_json())
    try:
        async with remote_client(args) as client:
            submitted = await client.crawl(
                spec.url,
                limit=args.limit,
                max_depth=args.max_depth,
                scope=spec.scope if (args.scope or args.prefix is not None) else None,
                prefix=args.prefix,
                include=spec.include,
                exclude=spec.exclude,
                sitemaps=args.sitemaps,
                concurrency=args.concurrency,
                options=options or None,
            )
            sys.stderr.write(f"trio-batch crawl: job {submitted.id} on {args.server}\n")
            async with client.results(submitted.id, follow=True) as lines:
                async for line in lines:
                    out(dump_line(cast("dict[str, JSONValue]", line)))
            summary = await client.status(submitted.id)
    except ClientError as exc:
        raise explain(exc, args.server) from None
    return EXIT_OK if summary["status"] == "done" else EXIT_FAILED
