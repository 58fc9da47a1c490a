"""The ``trio-batch`` command line: one module a subcommand, each with ``register()``.

Exit codes: 0 success, 1 the work ran but some of it failed, 2 a usage error, 141 the reader of
the output went away (``trio-batch results ID | head -1``: the status a shell reports for a
command that SIGPIPE ended, without a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

# Each module defines register(subparsers) and sets a `func(args) -> int` default on its parser.
# A module whose optional dependencies are missing still registers, and its func says what to
# install.
SUBCOMMANDS = (
    "demo",
    "run",
    "retry",
    "status",
    "jobs",
    "timeline",
    "serve",
    "keys",
    "mcp",
    "map",
    "crawl",
)


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


SHAPING_HERE = ("run", "crawl", "demo")
"""Subcommands that shape pages in this process (without ``--server``): they start the
shaping workers' fork server before importing the rest (:func:`main`)."""


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    remote = any(word == "--server" or word.startswith("--server=") for word in arguments)
    if arguments[:1] and arguments[0] in SHAPING_HERE and not remote:
        # The server's Python start and imports (0.1 s) overlap the subcommands' imports
        # (0.26 s) on another core, where the first page to shape waited for them.
        from ..web import start_shaping

        start_shaping()
    parser = build_parser()
    args = parser.parse_args(arguments)
    if args.command is None:
        # A bare `trio-batch`: the help, on stderr, and the exit status of a usage error.
        parser.print_help(sys.stderr)
        return 2
    code: int = args.func(args)
    return code


def entry() -> None:
    try:
        code = main()
        sys.stdout.flush()  # the last lines may still be buffered: a closed pipe shows here
    except BaseException as exc:
        if not _closed_pipe(exc):
            raise
        code = _after_closed_pipe()
    sys.exit(code)


EXIT_CLOSED_PIPE = 128 + getattr(signal, "SIGPIPE", 13)


def _closed_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is a write to a closed pipe, alone or as the only kind in a group."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_closed_pipe(inner) for inner in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _after_closed_pipe() -> int:
    """End quietly after the reader of our output went away, as ``head`` expects of a writer.

    Python ignores SIGPIPE, so the write raised instead of ending the process. Pointing stdout
    and stderr at the null device keeps the interpreter's last flush from reporting the same
    closed pipe again; the status is the one a shell shows for a command SIGPIPE ended.
    """
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(null, stream.fileno())
        except (AttributeError, OSError, ValueError):
            continue
    os.close(null)
    return EXIT_CLOSED_PIPE
