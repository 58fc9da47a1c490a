"""The commands' ``--server URL`` side: the same output, through ``trio_batch.client``.

``results --server`` streams ``GET /v1/batch/{id}/results`` (``--follow``: as targets land),
``jobs --server`` walks ``GET /v1/batch``, ``run --server`` submits the file in jobs of
``--job-size`` targets and prints each line as it lands, in input order. The key comes from
``--key`` or the ``TRIO_BATCH_KEY`` environment variable, never from a file the command writes,
and is never printed.
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, cast

import trio

from .._errors import Busy, CallerBusy, SubmitError
from .._model import JSONValue, Target, TargetState
from ..stores import SQLiteStore
from ._output import EXIT_FAILED, EXIT_OK, UsageError, dump_line, target_line

if TYPE_CHECKING:
    from ..client import BatchClient, BatchSummary

KEY_VARIABLE = "TRIO_BATCH_KEY"
_ID_LENGTH = 32


class RemoteProblem(Exception):
    """A failure to print as ``trio-batch COMMAND: message`` with exit ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def add_server_arguments(
    parser: argparse.ArgumentParser, default_server: str, *, instead: str = "--db"
) -> None:
    """``--server URL`` and ``--key``, as ``status`` and ``results`` have them; ``instead``
    says what the server replaces (``map`` has no ``--db``)."""
    parser.add_argument(
        "--server",
        metavar="URL",
        help=f"use a trio-batch server instead of {instead}, e.g. {default_server}",
    )
    parser.add_argument(
        "--key", help=f"the API key for --server (default: the {KEY_VARIABLE} variable)"
    )


@asynccontextmanager
async def remote_client(args: argparse.Namespace) -> AsyncIterator[BatchClient]:
    """A client of ``args.server`` with the key of ``--key`` or ``TRIO_BATCH_KEY``.

    Raises:
        UsageError: no key, or httpx is not installed.
    """
    try:
        from ..client import open_client
    except ModuleNotFoundError:
        raise UsageError("--server needs httpx: pip install 'trio-batch[web]'") from None
    key = getattr(args, "key", None) or os.environ.get(KEY_VARIABLE, "")
    if not key:
        raise UsageError(f"--server needs an API key: pass --key or set {KEY_VARIABLE}")
    async with open_client(str(args.server).rstrip("/"), key) as client:
        yield client


def client_error_type() -> type[Exception]:
    """``trio_batch.client.ClientError``, imported when a command first talks to a server.

    Raises:
        UsageError: httpx (the ``web`` extra) is not installed; the one line says so.
    """
    try:
        from ..client import ClientError
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("trio_batch."):
            raise
        raise UsageError("--server needs httpx: pip install 'trio-batch[web]'") from None
    return ClientError


def explain(exc: Exception, server: str, job_id: str = "") -> RemoteProblem:
    """A client error as the message and exit code the commands print."""
    from ..client import ClientError

    if isinstance(exc, ClientError):
        if exc.status == 0:
            return RemoteProblem(f"cannot reach {server}; is the server running?", 2)
        if exc.status == 401:
            return RemoteProblem(f"{server} refused the key; check --key or {KEY_VARIABLE}", 2)
        if exc.status == 404 and job_id:
            whole = " (a server needs the whole id)" if len(job_id) < _ID_LENGTH else ""
            return RemoteProblem(f"no job {job_id} for this key on {server}{whole}", 1)
        hint = f" ({exc.hint})" if exc.hint else ""
        return RemoteProblem(f"{server} answered {exc.status}: {exc.error}{hint}", 2)
    return RemoteProblem(str(exc), 2)


async def print_results(
    args: argparse.Namespace, out: Callable[[str], None], *, follow: bool
) -> None:
    """``results --server``: every line (``--follow``: as each target lands)."""
    ClientError = client_error_type()

    try:
        async with (
            remote_client(args) as client,
            client.results(args.id, state=args.state, follow=follow) as lines,
        ):
            async for line in lines:
                out(dump_line(cast("dict[str, JSONValue]", line)))
    except ClientError as exc:
        raise explain(exc, args.server, args.id) from None


async def print_jobs(args: argparse.Namespace) -> list[BatchSummary]:
    """``jobs --server``: every job of the key, newest first."""
    ClientError = client_error_type()

    try:
        async with remote_client(args) as client:
            return [job async for job in client.jobs()]
    except ClientError as exc:
        raise explain(exc, args.server) from None


async def run_remote(
    args: argparse.Namespace,
    targets: Sequence[Target],
    out: Callable[[str], None],
    on_submit: Callable[[str], None],
) -> int:
    """``run --server``: submit ``targets`` in jobs and print every line in input order.

    At most ``--jobs`` jobs are live at once (a refusal for a cap waits its ``Retry-After``),
    each fetching ``--workers`` of its targets at once (its ``concurrency``; each host still
    within the server's budget); each job's lines are followed as its targets land, and
    printed as soon as every line before them in the input is.

    Returns:
        0 when every target is done, else 1.
    """
    client_error_type()  # httpx is installed (else a usage error saying what to install)

    size = int(args.job_size)
    concurrency = int(args.workers)
    chunks = [list(targets[i : i + size]) for i in range(0, len(targets), size)]
    pending: list[list[str]] = [[] for _ in chunks]
    finished = [False] * len(chunks)
    printed = 0  # every chunk before this one is printed whole
    failed = False

    def flush() -> None:
        nonlocal printed
        while printed < len(chunks):
            for line in pending[printed]:
                out(line)
            pending[printed].clear()
            if not finished[printed]:
                return
            printed += 1

    async def one(client: BatchClient, n: int, limiter: trio.CapacityLimiter) -> None:
        nonlocal failed
        async with limiter:
            while True:
                try:
                    sub = await client.submit(chunks[n], concurrency=concurrency)
                    break
                except (CallerBusy, Busy) as exc:
                    await trio.sleep(exc.retry_after or 1.0)
            on_submit(sub.id)
            async with client.results(sub.id, follow=True) as lines:
                async for line in lines:
                    failed = failed or line["status"] != "done"
                    shown = {**cast("dict[str, JSONValue]", line), "idx": n * size + line["idx"]}
                    pending[n].append(dump_line(shown))
                    flush()
            summary = await client.status(sub.id)
            failed = failed or summary["counts"]["done"] != summary["targets_total"]
            finished[n] = True
            flush()

    try:
        async with remote_client(args) as client, trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(max(1, int(args.jobs)))
            for n in range(len(chunks)):
                nursery.start_soon(one, client, n, limiter)
    except BaseExceptionGroup as group:
        problem = _first_problem(group, args.server)
        if problem is None:
            raise
        raise problem from None
    return EXIT_FAILED if failed else EXIT_OK


def _first_problem(group: BaseExceptionGroup[BaseException], server: str) -> RemoteProblem | None:
    """What ``run --server`` says of a failed job: its first refusal or client error (one
    job's failure cancels the others); None when there is neither."""
    from ..client import ClientError

    found = group.subgroup((SubmitError, ClientError))
    if found is None:
        return None
    first = found.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    if isinstance(first, SubmitError):
        return RemoteProblem(f"{server} refused the batch: {first}", 2)
    assert isinstance(first, ClientError)
    if first.field == "concurrency":  # the server allows fewer at once than --workers
        return RemoteProblem(
            f"{server} refused --workers as a job's concurrency: {first.error}; "
            "pass a smaller --workers",
            2,
        )
    return explain(first, server)


_ENDED = (TargetState.DONE, TargetState.FAILED)

LOCAL_POLL_SECONDS = 0.5
"""How often ``results --follow --db`` reads the file: another process's engine writes it, so
nothing can wake this one (the server's ``follow`` wakes on its engine instead)."""


async def follow_local(db: str, job_id: str, state: str | None, out: Callable[[str], None]) -> bool:
    """``results --follow`` on a SQLite file: print each target's line once it is finished, in
    input order, until the job is terminal; a bounded poll of the read-only file.

    Returns:
        False when there is no such job.
    """
    wanted = [
        s for s in (TargetState.DONE, TargetState.FAILED) if state is None or s.value == state
    ]
    after = -1
    async with SQLiteStore.open(db, readonly=True) as store:
        while True:
            job = await store.read_job(job_id)
            if job is None:
                return False
            while wanted:  # a target once it and every one before it ended (concurrency)
                found = await store.read_targets(job_id, after, 500, None)
                ended = list(itertools.takewhile(lambda t: t.status in _ENDED, found))
                for target in ended:
                    if target.status in wanted:
                        out(dump_line(target_line(target.idx, target)))
                    after = target.idx
                if len(ended) < 500:
                    break
            if not job.status.live:
                return True
            await trio.sleep(LOCAL_POLL_SECONDS)
