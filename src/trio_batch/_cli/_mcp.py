"""``trio-batch mcp``: the MCP tools on stdin/stdout, for an agent on this machine.

By default the tools run on an engine in this process, with the web fetcher, on a SQLite store
under the user's data directory (not the working folder, which an agent's client chooses):
``$XDG_DATA_HOME/trio-batch/mcp.sqlite`` (``~/.local/share/...``; ``~/Library/Application
Support/...`` on macOS, ``%LOCALAPPDATA%\\...`` on Windows). The settings are ``serve``'s: a
``--config`` TOML file, ``TRIO_BATCH_*`` variables, and the flags below. The caller is the local
user, one fixed name (``local``) of class ``fleet``, so a later process on the same store sees
the same jobs; that one user may have :data:`LOCAL_JOBS_PER_CALLER` live jobs unless a setting
says otherwise (``serve``'s default of one is for a server shared by many callers), and the
tools' hints name this command's flags, not ``serve``'s (:data:`LOCAL_HINTS`).

A second ``trio-batch mcp`` on the same store is refused with a message (SQLite has one writer);
for several agents at once, run one ``trio-batch serve`` and give each ``--server URL``: the
tools then call that server with ``--key`` and run no engine here.

SIGINT or SIGTERM (or the client closing stdin) stops it: the engine closes, its live jobs end
``failed``/``interrupted`` (or stay for ``--resume``), exit 0. A second signal stops at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import secrets
import signal
import sys
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from .._errors import StoreError, TargetError
from ._arguments import DEFAULT_SERVER
from ._output import EXIT_OK, EXIT_USAGE, UsageError, allow_net_hint, missing_extra
from ._remote import KEY_VARIABLE
from ._settings import CONFIG_ENV, ENV_PREFIX, Settings, SettingsError, load_settings
from ._signals import watch_signals
from ._store_messages import store_open_message

TOOL_NAMES = (
    "fetch",
    "batch_submit",
    "batch_status",
    "batch_results",
    "batch_cancel",
    "batch_retry",
    "map",
    "crawl",
)
"""The tools, as ``--help`` names them (without importing the SDK, which may be missing)."""

LOCAL_CALLER = "local"
"""The caller of ``trio-batch mcp`` without ``--server``: the user of this machine."""

LOCAL_JOBS_PER_CALLER = 4
"""Live jobs the local user may have when no setting says (``serve``'s default is 1).

One user on their own machine, through an agent that often submits a job, then another while
the first runs (a retry beside a new batch, say): refusing the second one (``caller_busy``)
helps nobody here, while the host budgets keep each site polite however many jobs run."""

_JOBS_VARIABLE = f"{ENV_PREFIX}JOBS_PER_CALLER"
_TOTAL_VARIABLE = f"{ENV_PREFIX}JOBS_TOTAL"

LOCAL_HINTS = {
    "caller_busy": "wait for one of your jobs to end (batch_status with wait) or cancel one "
    "(batch_cancel), then submit again; to allow more at once, add --jobs-per-caller N to "
    "trio-batch mcp's arguments in your MCP client's configuration",
    "busy": "wait for a job to end (batch_status with wait), then submit again; to allow more "
    f"at once, set {_TOTAL_VARIABLE}=N in trio-batch mcp's environment in your MCP client's "
    "configuration",
}
"""The tools' hints that name what ``trio-batch mcp`` offers, where the API's name ``serve``."""

_log = logging.getLogger("trio_batch.mcp")

_EPILOG = f"""\
Client configuration (Claude Desktop, Cursor, VS Code ...): the command `trio-batch` with the
arguments ["mcp"], or ["mcp", "--allow-net", "127.0.0.0/8"] to let it fetch pages of this
machine. Settings as for serve: --config FILE (or ${CONFIG_ENV}), {ENV_PREFIX}NAME variables,
then the flags. With --server URL the tools call that trio-batch serve with --key (or
${KEY_VARIABLE}) and no engine runs here. Tools, answers and errors: docs/mcp.md."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="the MCP tools on stdio, for a local agent (needs trio-batch[mcp])",
        description=f"Serve the {len(TOOL_NAMES)} MCP tools on stdin/stdout, over an engine "
        "in this process\n(or a running server with --server):\n" + ", ".join(TOOL_NAMES) + ".",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--db",
        metavar="PATH|DSN",
        default=None,
        help=f"where jobs are kept: a SQLite file, or a postgresql:// DSN (default {default_db()})",
    )
    parser.add_argument(
        "--allow-net",
        dest="allow_net",
        action="append",
        metavar="CIDR",
        default=None,
        help="let the fetcher reach this private network (repeatable), e.g. 127.0.0.0/8",
    )
    parser.add_argument(
        "--config", metavar="FILE", default=None, help="a TOML file of serve's settings"
    )
    parser.add_argument(
        "--jobs-per-caller",
        dest="jobs_per_caller",
        type=int,
        default=None,
        metavar="N",
        help="live (queued or running) jobs the agent may have at once; more is refused with "
        f"a hint (default {LOCAL_JOBS_PER_CALLER} here; also {_JOBS_VARIABLE}; with --server, "
        "the server's own setting holds)",
    )
    parser.add_argument(
        "--server",
        metavar="URL",
        help=f"call this trio-batch server instead of running an engine, e.g. {DEFAULT_SERVER}",
    )
    parser.add_argument(
        "--key", help=f"the API key for --server (default: the {KEY_VARIABLE} variable)"
    )
    parser.add_argument(
        "--answer-bytes",
        type=int,
        default=None,
        metavar="N",
        help="most bytes of one tool answer; longer content is cut, saying so (default 49152)",
    )
    parser.add_argument(
        "--log-level",
        dest="log_level",
        default=None,
        metavar="LEVEL",
        help="debug, info, warning or error, on stderr (default info)",
    )
    parser.set_defaults(func=main)


def default_db(environ: dict[str, str] | None = None, platform: str = sys.platform) -> str:
    """The default store: ``mcp.sqlite`` in the user's data directory for trio-batch."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    if platform == "win32":
        base = Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        base = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
    return str(base / "trio-batch" / "mcp.sqlite")


def _settings(args: argparse.Namespace) -> Settings:
    """serve's settings from the file, the environment and these flags; the store resolved.

    The store is ``--db``, else the file's or the environment's ``db``, else :func:`default_db`
    (never serve's ``./trio-batch.sqlite``: an agent's client picks the working folder).
    """
    flags = {
        "config": args.config,
        "db": args.db,
        "allow_net": args.allow_net,
        "log_level": args.log_level,
        "jobs_per_caller": args.jobs_per_caller,
    }
    settings = load_settings(flags)
    if args.db is None and settings.db == Settings().db:
        settings = dataclasses.replace(settings, db=default_db())
    if not _jobs_per_caller_given(args, os.environ):
        settings = dataclasses.replace(settings, jobs_per_caller=LOCAL_JOBS_PER_CALLER)
    return settings


def _jobs_per_caller_given(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """Whether a flag, a variable or the config file sets ``jobs_per_caller`` (which then holds).

    The file was read and checked by :func:`load_settings` already.
    """
    if args.jobs_per_caller is not None or _JOBS_VARIABLE in environ:
        return True
    path = args.config or environ.get(CONFIG_ENV)
    if not path:
        return False
    with open(path, "rb") as f:
        return "jobs_per_caller" in tomllib.load(f)


def main(args: argparse.Namespace) -> int:
    """The ``mcp`` subcommand."""
    try:
        from .._mcp import Tools  # noqa: F401 - the mcp extra, checked before anything starts
    except ModuleNotFoundError as exc:
        print(missing_extra("mcp", exc, "mcp"), file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = _settings(args)
        answer_bytes = _answer_bytes(args.answer_bytes)
    except (SettingsError, UsageError) as exc:
        print(f"trio-batch mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _setup_logging(settings.log_level)
    try:
        if args.server:
            trio.run(_serve_remote, str(args.server).rstrip("/"), _key(args), answer_bytes)
        else:
            trio.run(_serve_embedded, settings, answer_bytes)
    except UsageError as exc:
        print(f"trio-batch mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BaseException as exc:
        message = _start_up_message(settings, exc)
        if message is None:
            raise
        print(f"trio-batch mcp: {message}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _answer_bytes(value: int | None) -> int:
    from .._mcp import ANSWER_BYTES, MIN_ANSWER_BYTES

    if value is None:
        return ANSWER_BYTES
    if value < MIN_ANSWER_BYTES:
        raise UsageError(f"--answer-bytes must be at least {MIN_ANSWER_BYTES} (got {value})")
    return value


def _key(args: argparse.Namespace) -> str:
    key = args.key or os.environ.get(KEY_VARIABLE, "")
    if not key:
        raise UsageError(f"--server needs an API key: pass --key or set {KEY_VARIABLE}")
    return str(key)


def _start_up_message(settings: Settings, exc: BaseException) -> str | None:
    """One line for a store that cannot be opened (in use by another process, say), or None."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if not isinstance(exc, (StoreError, OSError)):
        return None
    if "://" in settings.db:
        return str(exc)
    message = store_open_message(settings.db, exc, flag="--db") or str(exc)
    return (
        f"{message}. For several agents on one store, run `trio-batch serve` on it and give "
        "each `trio-batch mcp --server URL`"
    )


def _setup_logging(level: str) -> None:
    """trio-batch's records to stderr (stdout is the protocol's)."""
    ours = logging.getLogger("trio_batch")
    if not ours.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        ours.addHandler(handler)
    ours.setLevel(level.upper())
    ours.propagate = False


@asynccontextmanager
async def _until_signal() -> AsyncIterator[trio.CancelScope]:
    """A cancel scope, not yet entered, that the first SIGINT or SIGTERM cancels.

    The body enters it around the serving alone, so the engine and the store close normally
    after it. A second signal cancels the whole block at once.
    """
    serving = trio.CancelScope()

    def stop(signum: int) -> None:
        _log.info("got %s: stopping", signal.Signals(signum).name)
        serving.cancel()

    with (
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        trio.CancelScope() as everything,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_signals, signals, stop, everything)
            yield serving
            nursery.cancel_scope.cancel()


async def _serve_remote(server: str, key: str, answer_bytes: int) -> None:
    from .._mcp import Tools, open_api, serve_stdio

    _log.info("MCP on stdio; the tools call the server that --server names")
    async with _until_signal() as serving, open_api(key=key, base_url=server) as api:
        with serving:
            await serve_stdio(Tools(answer_bytes=answer_bytes), api)


def _precheck(allow: list[str]) -> Callable[[str], None]:
    """The web pre-check of submitted URLs, its private-address hint naming ``--allow-net``."""
    import ipaddress

    from ..web import precheck

    networks = [ipaddress.ip_network(net) for net in allow]

    def check(url: str) -> None:
        try:
            precheck(url, allow=networks)
        except TargetError as exc:
            raise TargetError(
                exc.msg, hint=allow_net_hint(url, exc.msg, exc.hint), status=exc.status
            ) from None

    return check


async def _serve_embedded(settings: Settings, answer_bytes: int) -> None:
    """The tools over an engine of this process, until stdin closes or a signal comes."""
    import ipaddress

    from .._engine import open_engine
    from .._mcp import Tools, open_api, serve_stdio
    from ..http import KeyRecord, KeyRing, create_app, hash_key
    from ._run import open_web_fetch
    from ._service import open_store, store_description

    if "://" not in settings.db:
        Path(settings.db).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_urlsafe(32)  # in memory only: the local caller's, for in-process calls
    keys = KeyRing([KeyRecord(LOCAL_CALLER, "", "fleet", hash_key(key))])
    allow = [ipaddress.ip_network(net) for net in settings.allow_net]
    async with (
        _until_signal() as serving,
        open_store(settings) as store,
        open_web_fetch(
            store, allow, slots=settings.effective_fetch_slots, budget=settings.host_budget()
        ) as web,
        open_engine(store, web.fetch, settings.engine_config(), **web.politeness()) as engine,
    ):
        app = create_app(
            engine,
            keys,
            fetch=web.fetch,
            precheck=_precheck(list(settings.allow_net)),
            access_log_enabled=False,
            retry_after=settings.retry_after,
            store_timeout=settings.store_timeout,
            default_concurrency=settings.default_concurrency,
        )
        _log.info("MCP on stdio; the store: %s", store_description(settings))
        tools = Tools(answer_bytes=answer_bytes, hints=LOCAL_HINTS)
        with serving:
            async with open_api(key=key, app=app) as api:
                await serve_stdio(tools, api)
