"""``trio-batch jobs``: list the jobs of a local store, with their status and counts.

It reads the SQLite file read-only (see ``_catalog``), so it works while a ``run`` or ``serve``
writes it. With ``--server URL`` it lists the key's jobs from the HTTP API (``GET /v1/batch``,
newest first) instead, with the key from ``--key`` or ``TRIO_BATCH_KEY``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import IO

import trio

from ._arguments import DEFAULT_SERVER, add_db_argument
from ._catalog import JobRow, iso, list_jobs
from ._output import EXIT_OK, EXIT_USAGE, UsageError
from ._remote import RemoteProblem, add_server_arguments, print_jobs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "jobs",
        help="list the jobs of a local store with their status and counts",
        description=(
            "List the jobs of a SQLite store, oldest first: id, caller, status, done/total, "
            "failed, and when each was created and last updated (UTC). The store is read "
            "read-only, so this works while a run or serve writes it."
        ),
    )
    add_db_argument(parser)
    parser.add_argument(
        "--json", action="store_true", help="one JSON object a line instead of a table"
    )
    add_server_arguments(parser, DEFAULT_SERVER)
    parser.set_defaults(func=main)


def job_json(row: JobRow) -> dict[str, object]:
    """A job's line for ``--json``: the fields of ``status``, ISO times beside epoch seconds."""
    return {
        "id": row.id,
        "caller": row.caller,
        "status": row.status,
        "error": row.error,
        "targets_total": row.targets_total,
        "counts": row.counts,
        "created_at": row.created_at,
        "created_at_iso": iso(row.created_at),
        "updated_at": row.updated_at,
        "updated_at_iso": iso(row.updated_at),
    }


def print_table(rows: Sequence[JobRow], out: IO[str]) -> None:
    """The jobs as an aligned table, one line each, with a header."""
    headers = ("id", "caller", "status", "done", "failed", "created", "updated")
    table = [
        (
            row.id,
            row.caller,
            row.status + (f" ({row.error})" if row.error else ""),
            f"{row.counts['done']}/{row.targets_total}",
            str(row.counts["failed"]),
            iso(row.created_at)[:19].replace("T", " "),
            iso(row.updated_at)[:19].replace("T", " "),
        )
        for row in rows
    ]
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
    for line in [headers, *table]:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n")


def main(args: argparse.Namespace) -> int:
    """The ``jobs`` subcommand."""
    try:
        rows = trio.run(_remote_rows, args) if args.server else trio.run(list_jobs, args.db)
    except UsageError as exc:
        sys.stderr.write(f"trio-batch jobs: {exc}\n")
        return EXIT_USAGE
    except RemoteProblem as exc:
        sys.stderr.write(f"trio-batch jobs: {exc}\n")
        return exc.code
    if args.json:
        for row in rows:
            sys.stdout.write(json.dumps(job_json(row)) + "\n")
    elif rows:
        print_table(rows, sys.stdout)
    else:
        sys.stderr.write(f"trio-batch jobs: no jobs in {args.server or args.db}\n")
    return EXIT_OK


async def _remote_rows(args: argparse.Namespace) -> list[JobRow]:
    """The key's jobs from ``--server``, as rows (the caller is the key's: not in a summary)."""
    return [
        JobRow(
            id=job["id"],
            caller="",
            status=job["status"],
            error=job["error"],
            targets_total=job["targets_total"],
            counts={
                "pending": job["counts"]["pending"],
                "running": job["counts"]["running"],
                "done": job["counts"]["done"],
                "failed": job["counts"]["failed"],
            },
            created_at=job["created_at"],
            updated_at=job["updated_at"],
        )
        for job in await print_jobs(args)
    ]
