"""The ``trio-batch`` command line: one module a subcommand, each with ``register()``.

Exit codes: 0 success, 1 the work ran but some of it failed, 2 a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module defines register(subparsers) and sets a `func(args) -> int` default on its parser.
# A module whose optional dependencies are missing still registers, and its func says what to
# install.
SUBCOMMANDS = ("demo", "run", "status", "jobs", "timeline", "serve", "keys")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-batch",
        description="Fair, durable batch jobs on Trio: run batches, serve the HTTP API, demo.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"trio_batch._cli._{name}")
        except ModuleNotFoundError as exc:
            if not exc.name or not exc.name.startswith("trio_batch._cli."):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # A bare `trio-batch`: the help, on stderr, and the exit status of a usage error.
        parser.print_help(sys.stderr)
        return 2
    code: int = args.func(args)
    return code


def entry() -> None:
    sys.exit(main())
