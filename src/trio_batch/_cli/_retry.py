"""``trio-batch retry JOB``: fetch again the targets a job did not get, as a new linked job.

With ``--db`` (the default) the new job runs here, through a local engine and the web fetcher
with ``run``'s fetch flags (``--allow-net``, ``--workers``), and its lines are written as they
land, in the new job's order. With ``--server URL`` the server runs it (``POST
/v1/batch/{id}/retry``), and the command prints the new job's id and how to follow it.

Either way it is the engine's retry (SPEC §7): the new job has the targets that failed (and
those an interrupted or cancelled job left unfinished, where the engine includes them), with
their options and order, and ``retry_of`` names the old job. Exit codes: 0 every target of the
new job done (``--server``: the retry was accepted), 1 some failed or no such job, 2 a usage
error or nothing to retry, 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

import trio

from .._config import Config
from .._engine import BatchEngine, open_engine
from .._errors import Busy, CallerBusy, NotRetryable
from .._model import Caller, TargetState
from ._arguments import DEFAULT_SERVER, add_allow_net_argument, add_db_argument, positive_int
from ._catalog import resolve_id
from ._output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    cli_hint,
    dump_line,
    target_line,
)
from ._remote import (
    RemoteProblem,
    add_server_arguments,
    client_error_type,
    explain,
    remote_client,
)
from ._store_messages import open_cli_store

EXIT_MISSING = 1


class _Problem(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "retry",
        help="fetch a job's failed targets again, as a new linked job",
        description=(
            "Make a new job of the targets of JOB that failed (and, where the engine includes "
            "them, those an interrupted or cancelled job left unfinished), linked to JOB by "
            "retry_of. With --db it runs here, with run's fetch flags, and writes one JSON line "
            "per target of the new job; with --server the server runs it."
        ),
        epilog=(
            "Exit status: 0 every target done (--server: the retry was accepted), 1 some "
            "failed or no such job, 2 usage error or nothing to retry, 130 interrupted."
        ),
    )
    parser.add_argument(
        "id",
        metavar="JOB",
        help="the job id, or its first characters if no other job's id starts with them "
        "(--db only; a server needs the whole id)",
    )
    add_db_argument(parser, readonly=False)
    parser.add_argument(
        "--workers", type=positive_int, default=4, metavar="N", help="engine workers (4)"
    )
    add_allow_net_argument(parser)
    add_server_arguments(parser, DEFAULT_SERVER)
    parser.set_defaults(func=main)


async def _retry_local(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    """Run the retry of ``args.id`` in the ``--db`` store; write its lines; the exit code."""
    from ._run import open_web_fetch

    if not await trio.Path(args.db).exists():
        raise _Problem(f"{args.db} does not exist; pass the store with --db", EXIT_USAGE)
    job_id = await resolve_id(args.db, args.id)
    if job_id is None:
        raise _Problem(f"no job {args.id} in {args.db} (trio-batch jobs lists them)", EXIT_MISSING)
    config = Config(workers=args.workers, max_workers=args.workers, jobs_per_caller=1)
    async with (
        open_cli_store(args.db, server_flag=True) as store,
        open_web_fetch(store, args.allow_net, slots=args.workers) as web,
        open_engine(store, web.fetch, config, **web.politeness()) as engine,
    ):
        old = await engine.job(job_id)
        if old is None:
            raise _Problem(f"no job {args.id} in {args.db}", EXIT_MISSING)
        try:
            sub = await engine.retry(Caller(old.caller), "fleet", job_id)
        except NotRetryable as exc:
            raise _Problem(f"job {job_id} has nothing to retry: {exc}", EXIT_USAGE) from None
        except (CallerBusy, Busy) as exc:
            message = f"{exc}; wait for the live jobs of {args.db} to end"
            raise _Problem(message, EXIT_USAGE) from None
        if sub is None:
            raise _Problem(f"no job {args.id} in {args.db}", EXIT_MISSING)
        sys.stderr.write(
            f"trio-batch retry: {'reused' if sub.reused else 'new'} job {sub.id} "
            f"(retry of {job_id}) in {args.db}\n"
        )
        failed = await _write_lines(engine, sub.id, out)
    return EXIT_FAILED if failed else EXIT_OK


async def _write_lines(engine: BatchEngine, job_id: str, out: Callable[[str], None]) -> int:
    """Write the job's lines in order as its targets are stored, until it ends; count failed."""
    after, failed = -1, 0
    with engine.watch(job_id) as watch:
        while True:
            job = await engine.job(job_id)
            for target in await engine.targets(job_id, after=after, limit=1000):
                if target.status not in (TargetState.DONE, TargetState.FAILED):
                    break
                line = target_line(target.idx, target)
                line["hint"] = cli_hint(target.url, target.error, target.hint)
                out(dump_line(line))
                failed += target.status is TargetState.FAILED
                after = target.idx
            if job is None or (not job.status.live and after + 1 >= job.targets_total):
                return failed
            await watch.wait()


async def _retry_remote(args: argparse.Namespace) -> int:
    """Ask ``args.server`` to retry ``args.id``; print the new job and how to follow it."""
    ClientError = client_error_type()

    try:
        async with remote_client(args) as client:
            sub = await client.retry(args.id)
    except ClientError as exc:
        raise explain(exc, args.server, args.id) from None
    except (CallerBusy, Busy) as exc:
        raise RemoteProblem(f"{exc}; try again in {exc.retry_after:.0f} s", EXIT_USAGE) from None
    sys.stdout.write(dump_line({"id": sub.id, "reused": sub.reused, "retry_of": args.id}))
    sys.stderr.write(
        f"trio-batch retry: follow it with: trio-batch results {sub.id} --server {args.server} "
        "--follow\n"
    )
    return EXIT_OK


def main(args: argparse.Namespace) -> int:
    """The ``retry`` subcommand."""

    def out(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    reader = _retry_remote if args.server else functools.partial(_retry_local, out=out)
    try:
        code: int = trio.run(reader, args)
    except (_Problem, RemoteProblem) as exc:
        sys.stderr.write(f"trio-batch retry: {exc}\n")
        return exc.code
    except UsageError as exc:
        sys.stderr.write(f"trio-batch retry: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("trio-batch retry: interrupted\n")
        return EXIT_INTERRUPTED
    return code
