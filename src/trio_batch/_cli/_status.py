"""``trio-batch status ID`` and ``trio-batch results ID``: read a job, locally or from a server.

Locally they open the SQLite store read-only (``--db``), so they work while a ``run`` or a
``serve`` writes it. With ``--server URL`` they ask the HTTP API instead, with the key from
``--key`` or ``TRIO_BATCH_KEY``.

``status`` prints the job's summary as JSON; ``results`` prints one JSON line per target in
input order (``idx, url, status, error, hint, result``), like ``run``. Exit codes: 0 found,
1 no such job, 2 a usage error (no database, no key, server unreachable, key refused).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import IO, Any

import trio

from .._errors import StoreError
from .._model import Snapshot, TargetState
from ..stores import SQLiteStore
from ._arguments import DEFAULT_SERVER, add_db_argument
from ._catalog import iso, resolve_id
from ._output import UsageError, dump_line, target_line
from ._remote import RemoteProblem, follow_local, print_results

EXIT_OK, EXIT_MISSING, EXIT_USAGE = 0, 1, 2
_ID_LENGTH = 32  # the engine's job ids: 32 hex digits
_PAGE = 500  # targets asked for per request when reading results from a server


class _Problem(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, help_text in (
        ("status", "print a job's summary as JSON"),
        ("results", "print a job's targets as JSON lines, in input order"),
    ):
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        parser.add_argument(
            "id",
            metavar="ID",
            help="the job id, or its first characters if no other job's id starts with them "
            "(--db only; a server needs the whole id)",
        )
        add_db_argument(parser)
        parser.add_argument(
            "--server",
            metavar="URL",
            help=f"read from a trio-batch server instead, e.g. {DEFAULT_SERVER}",
        )
        parser.add_argument(
            "--key", help="the API key for --server (default: the TRIO_BATCH_KEY variable)"
        )
        if name == "results":
            parser.add_argument(
                "--state",
                choices=[s.value for s in TargetState],
                help="only the targets in this state",
            )
            parser.add_argument(
                "--follow",
                action="store_true",
                help="print each target's line once it is done or failed, in input order, "
                "until the job ends (a server streams them as they land; a --db file is read "
                "again every 0.5 s)",
            )
        parser.set_defaults(func=functools.partial(main, name))


def summary(snap: Snapshot) -> dict[str, Any]:
    """The job's summary, in the shape of the HTTP API's ``GET /v1/batch/{id}``."""
    counts = {state.value: 0 for state in TargetState}
    for target in snap.targets:
        counts[target.status.value] += 1
    job = snap.job
    return {
        "id": job.id,
        "status": job.status.value,
        "error": job.error,
        "targets_total": job.targets_total,
        "counts": counts,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


def with_iso_times(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with an ISO 8601 UTC time beside each epoch-seconds field (``*_at_iso``)."""
    out: dict[str, Any] = {}
    for name, value in summary.items():
        out[name] = value
        if name.endswith("_at") and isinstance(value, int | float) and value:
            out[f"{name}_iso"] = iso(float(value))
    return out


async def _local_job_id(args: argparse.Namespace) -> str | None:
    """The job ``args.id`` names in the ``--db`` file (maybe by a prefix); None if no job.

    Raises:
        _Problem: the file does not exist, or the prefix names several jobs.
    """
    if not await trio.Path(args.db).exists():
        raise _Problem(
            f"{args.db} does not exist; pass the store with --db, or a server with --server",
            EXIT_USAGE,
        )
    try:
        return await resolve_id(args.db, args.id)
    except UsageError as exc:
        raise _Problem(str(exc), EXIT_USAGE) from None


async def _local(command: str, args: argparse.Namespace, out: IO[str]) -> None:
    job_id = await _local_job_id(args)
    snap = None
    if job_id is not None:
        async with SQLiteStore.open(args.db, readonly=True) as store:
            snap = await store.snapshot(job_id)
    if snap is None:
        raise _Problem(f"no job {args.id} in {args.db} (trio-batch jobs lists them)", EXIT_MISSING)
    if command == "status":
        out.write(json.dumps(with_iso_times(summary(snap)), indent=2) + "\n")
        return
    for target in snap.targets:
        if args.state is None or target.status.value == args.state:
            out.write(dump_line(target_line(target.idx, target)))


async def _remote(command: str, args: argparse.Namespace, out: IO[str]) -> None:
    try:
        import httpx
    except ModuleNotFoundError:
        raise _Problem("--server needs httpx: pip install 'trio-batch[web]'", EXIT_USAGE) from None
    key = args.key or os.environ.get("TRIO_BATCH_KEY", "")
    if not key:
        raise _Problem("--server needs an API key: pass --key or set TRIO_BATCH_KEY", EXIT_USAGE)
    base = args.server.rstrip("/")
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:

        async def get(params: dict[str, str | int]) -> dict[str, Any]:
            try:
                response = await client.get(f"/v1/batch/{args.id}", params=params)
            except httpx.HTTPError as exc:
                raise _Problem(
                    f"cannot reach {base} ({type(exc).__name__}); is the server running?",
                    EXIT_USAGE,
                ) from None
            if response.status_code == 404:
                whole = " (a server needs the whole id)" if len(args.id) < _ID_LENGTH else ""
                raise _Problem(f"no job {args.id} for this key on {base}{whole}", EXIT_MISSING)
            if response.status_code == 401:
                raise _Problem(f"{base} refused the key; check --key or TRIO_BATCH_KEY", EXIT_USAGE)
            if response.status_code != 200:
                raise _Problem(
                    f"{base} answered {response.status_code}: {response.text[:200]}", EXIT_USAGE
                )
            data: dict[str, Any] = response.json()
            return data

        if command == "status":
            out.write(json.dumps(with_iso_times(await get({})), indent=2) + "\n")
            return
        offset = 0
        while True:
            params: dict[str, str | int] = {"results": 1, "offset": offset, "limit": _PAGE}
            if args.state:
                params["state"] = args.state
            page = await get(params)
            targets: list[dict[str, Any]] = page.get("targets", [])
            for target in targets:
                out.write(dump_line({k: target.get(k) for k in _LINE_FIELDS}))
            offset += len(targets)
            if not targets or offset >= int(page.get("targets_total", 0)):
                return


_LINE_FIELDS = ("idx", "url", "status", "error", "hint", "result")


async def _follow(command: str, args: argparse.Namespace, out: IO[str]) -> None:
    """``results --follow``: each line as its target lands, from a server or a --db file."""

    def write(line: str) -> None:
        out.write(line)
        out.flush()

    if args.server:
        try:
            await print_results(args, write, follow=True)
        except RemoteProblem as exc:
            raise _Problem(str(exc), exc.code) from None
        except UsageError as exc:
            raise _Problem(str(exc), EXIT_USAGE) from None
        return
    job_id = await _local_job_id(args)
    if job_id is None or not await follow_local(args.db, job_id, args.state, write):
        raise _Problem(f"no job {args.id} in {args.db} (trio-batch jobs lists them)", EXIT_MISSING)


def main(command: str, args: argparse.Namespace) -> int:
    """The ``status`` and ``results`` subcommands."""
    follow = command == "results" and args.follow
    reader = _follow if follow else _remote if args.server else _local
    try:
        trio.run(reader, command, args, sys.stdout)
    except _Problem as exc:
        sys.stderr.write(f"trio-batch {command}: {exc}\n")
        return exc.code
    except StoreError as exc:
        sys.stderr.write(f"trio-batch {command}: {exc}\n")
        return EXIT_USAGE
    return EXIT_OK
