"""``trio-batch serve``: the HTTP API (SPEC §5) over an engine, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import errno
import logging
import re
import sys

from ._output import missing_extra
from ._settings import (
    CONFIG_ENV,
    ENV_PREFIX,
    Settings,
    SettingsError,
    add_arguments,
    load_settings,
)
from ._store_messages import store_open_message

_EPILOG = f"""\
Every setting can also come from a TOML config file (--config FILE or ${CONFIG_ENV}; names
with underscores, e.g. max_bytes = 1000000) or an environment variable ({ENV_PREFIX}NAME, e.g.
{ENV_PREFIX}PORT=9000). Flags win over the environment, which wins over the file. An invalid
value stops start-up with a message naming the setting.

A database that is down, or slower than --store-timeout, gets 503 with Retry-After (never a
hung request), and GET /healthz answers 503 "unhealthy". The --pg-* settings apply only to a
postgresql:// --db (docs/postgres.md).

SIGINT/SIGTERM: stop accepting, let requests in flight finish (--graceful-timeout), close the
engine (live jobs become failed/interrupted), exit 0. A second signal stops at once.
API reference: docs/http.md, or GET /openapi.json on the running server."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the batch HTTP API (needs trio-batch[server])",
        description="Serve the batch HTTP API: callers with a key from `trio-batch keys add` "
        "submit batches, poll them, read results and cancel them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args)
    except SettingsError as exc:
        print(f"trio-batch serve: {exc}", file=sys.stderr)
        return 2
    try:
        import trio

        from .._errors import StoreError
        from .._sealing import SecretsKeyFileError
        from ..http import KeysFileError
        from ._service import run_service
    except ModuleNotFoundError as exc:
        print(missing_extra("serve", exc, "server"), file=sys.stderr)
        return 2
    _setup_logging(settings.log_level)
    try:
        trio.run(run_service, settings)
    except BaseException as exc:
        # Start-up failures come out of nurseries wrapped in exception groups.
        cause = _start_up_error(exc, (KeysFileError, SecretsKeyFileError, StoreError, OSError))
        if cause is None:
            raise
        print(f"trio-batch serve: {_start_up_message(settings, cause)}", file=sys.stderr)
        return 2
    return 0


def _start_up_message(settings: Settings, cause: BaseException) -> str:
    """One line for a start-up failure: what failed (the database, or the port), what to do."""
    local_db = "://" not in settings.db
    if local_db:
        message = store_open_message(settings.db, cause, flag="--db (or TRIO_BATCH_DB)")
        if message is not None and (not isinstance(cause, OSError) or cause.filename):
            return message
    if isinstance(cause, OSError) and not cause.filename:
        where = f"{settings.host} port {settings.port}"
        if cause.errno == errno.EADDRINUSE:
            return (
                f"cannot listen on {where}: the port is in use (another server?); stop it, or "
                "pass another --port (or TRIO_BATCH_PORT), or --port 0 for any free port"
            )
        if cause.errno == errno.EACCES:
            return (
                f"cannot listen on {where}: permission denied; ports below 1024 need "
                "privileges, pass --port 8080 or another port above 1023"
            )
        if cause.errno == errno.EADDRNOTAVAIL:
            return (
                f"cannot listen on {where}: {settings.host} is not an address of this "
                "machine; pass --host 127.0.0.1 (or 0.0.0.0 for every interface)"
            )
        return f"cannot listen on {where}: {cause.strerror or cause}; check --host and --port"
    if isinstance(cause, OSError):
        return (
            f"cannot open {cause.filename}: {cause.strerror or cause}; check --db "
            f"({_safe_db(settings.db)}) and --keys"
        )
    return str(cause)


def _start_up_error(
    exc: BaseException, types: tuple[type[BaseException], ...]
) -> BaseException | None:
    """The single error of one of ``types`` inside ``exc`` (unwrapping groups), or None."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, types) else None


def _safe_db(db: str) -> str:
    """The db setting without a password (a DSN may hold one)."""
    if "://" not in db:
        return db
    scheme, _, rest = db.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if "@" in rest else db


_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_DRIVER = "psycopg"
# A %-placeholder of a logging template ("%s", "%r", "%(name)s", "%5.1f", ...), or "%%".
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa%]")


def _setup_logging(level: str) -> None:
    """Send serve's records, and the database driver's, to stderr in serve's one format.

    ``trio_batch`` logs at ``level`` (``--log-level``). The driver's loggers (``psycopg`` and
    its children, such as ``psycopg.pool``) log at WARNING or ``level`` if higher, through a
    handler of their own whose :class:`_DriverFormatter` cuts each message down so that it
    cannot carry a host or a DSN. Neither logger propagates, so no record reaches the root
    logger or Python's last-resort handler and none is printed twice. Calling this again only
    sets the levels.
    """
    ours = logging.getLogger("trio_batch")
    if not ours.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        ours.addHandler(handler)
    ours.setLevel(level.upper())
    ours.propagate = False
    driver = logging.getLogger(_DRIVER)
    if not any(isinstance(h.formatter, _DriverFormatter) for h in driver.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_DriverFormatter(_FORMAT))
        driver.addHandler(handler)
    driver.setLevel(max(logging.WARNING, ours.level))
    driver.propagate = False


class _DriverFormatter(logging.Formatter):
    """Serve's format for the driver's records, each cut down to a summary that names no host.

    The driver's messages put what happened before the first ": " and the details after it
    (``"error connecting in %r: %s"``, then the driver's error, which names the host and the
    port). The summary is the message *template* up to its first ": ", filled with
    :func:`_safe_arg` of its arguments: numbers and our own pool's name (``trio-batch-...``)
    as they are, any other string as "...", any other object as ``<ClassName>`` (a connection's
    repr names its host). So ``error connecting in 'trio-batch-trio_batch'`` keeps what failed
    and where in trio-batch, and never a value the driver took from the DSN. Tracebacks and
    stacks are left out, as their exception messages may name the host. What to do about a
    database that cannot be reached is said by serve's own messages, not the driver's.
    """

    def format(self, record: logging.LogRecord) -> str:
        summary = logging.makeLogRecord(record.__dict__)
        summary.msg = _summary(record)
        summary.args = None
        summary.exc_info = summary.exc_text = summary.stack_info = None
        return super().format(summary)


def _summary(record: logging.LogRecord) -> str:
    """The driver record's template up to its first ": ", with only safe arguments filled in."""
    if not isinstance(record.msg, str):
        return f"<{type(record.msg).__name__}>"
    head = record.msg.split(": ", 1)[0]
    args = record.args if isinstance(record.args, tuple) else ()
    wanted = sum(1 for m in _PLACEHOLDER.finditer(head) if m.group() != "%%")
    try:
        return head % tuple(_safe_arg(arg) for arg in args[:wanted])
    except (TypeError, ValueError, KeyError):
        return _PLACEHOLDER.sub(lambda m: "%" if m.group() == "%%" else "...", head)


class _Shown:
    """An argument as the summary shows it, under both ``%s`` and ``%r``."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__


def _safe_arg(arg: object) -> object:
    """``arg`` if it cannot name a host (a number, our pool's name), else a stand-in for it."""
    if isinstance(arg, int | float) or (isinstance(arg, str) and arg.startswith("trio-batch-")):
        return arg
    return _Shown("..." if isinstance(arg, str) else f"<{type(arg).__name__}>")
