"""The ``trio-batch serve`` service: store, web fetcher, engine and API, until a signal.

This is process policy (signal handlers, exit codes), so it lives with the CLI; the library
part is :func:`trio_batch.http.serve` and :func:`trio_batch.http.create_app`.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import trio

from .._engine import BatchEngine, FetchFunc, open_engine
from .._errors import StoreError, TargetError, classify_failure
from .._headers import SECRETS
from .._model import Caller, Result, Target
from .._sealing import MAKE_KEY, SealingKeys, read_key_file
from .._util import plural
from ..http import KeyRing, PrecheckFunc, create_app, load_keys, open_deliveries, serve
from ..metrics import PrometheusMetrics
from ..stores import ServiceStore, SQLiteStore
from ._output import operator_hint
from ._settings import Settings
from ._signals import watch_signals

if TYPE_CHECKING:
    from .._mcp import McpEndpoint

_log = logging.getLogger("trio_batch.http")


@contextlib.asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[ServiceStore]:
    """The store ``settings.db`` names: a ``postgresql://`` DSN, or a SQLite file path.

    A PostgreSQL store gets the ``pg_*`` settings; a SQLite store has none of them.

    Raises:
        StoreError: the store cannot be opened (the message says why).
    """
    db = settings.db
    if _is_postgres(settings):
        try:
            from ..stores import PostgresStore
        except ImportError as exc:
            raise StoreError(
                "--db is a PostgreSQL DSN but the PostgreSQL store is not installed: "
                "pip install 'trio-batch[postgres]'"
            ) from exc
        async with PostgresStore.open(
            with_statement_timeout(db, settings.pg_statement_timeout),
            instance_timeout=settings.pg_instance_timeout,
            heartbeat=settings.pg_heartbeat or None,
            pool_size=settings.pg_pool_size,
            schema=settings.pg_schema,
            call_timeout=settings.pg_call_timeout,
            connect_timeout=settings.pg_connect_timeout,
            claim_timeout=settings.pg_claim_timeout,
            synchronous_commit=settings.pg_synchronous_commit,
        ) as pg:
            yield pg
    else:
        async with SQLiteStore.open(db) as sqlite:
            yield sqlite


def with_statement_timeout(dsn: str, seconds: float) -> str:
    """``dsn`` with ``-c statement_timeout=...`` added to its ``options`` (``seconds`` > 0).

    The options the DSN has already are kept; the setting comes last, so it wins over a
    ``statement_timeout`` in them. With ``seconds == 0`` the DSN is returned as it is.

    Raises:
        StoreError: the DSN cannot be parsed (the message does not repeat it: it may hold a
            password).
    """
    if not seconds:
        return dsn
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise StoreError(
            "--db is not a valid PostgreSQL DSN: use postgresql://USER@HOST:PORT/DATABASE"
        ) from None
    milliseconds = max(1, round(seconds * 1000))
    options = f"{params.get('options') or ''} -c statement_timeout={milliseconds}".strip()
    return make_conninfo("", **{**params, "options": options})


@contextlib.asynccontextmanager
async def _open_fetcher(
    settings: Settings, store: ServiceStore, keys: KeyRing
) -> AsyncIterator[tuple[FetchFunc, dict[str, Any]]]:
    """serve's web fetcher (hinting at its flags) and ``open_engine``'s budget and crawl
    arguments."""
    from ..web import WebFetcher, WebSiteGuide

    def restricted(caller: Caller) -> bool:
        record = keys.by_hash(caller.key_sha256)
        return record is None or record.caller_class == "restricted"

    # The engine runs at most `workers` fetches at once, so a pool bigger than that keeps
    # slots free for POST /v1/fetch while every worker is busy.
    budget = settings.host_budget()
    fetcher = WebFetcher(
        store=store,
        budget=budget,
        robots=settings.robots,
        allow=_networks(settings),
        restricted=restricted,
        pool_size=settings.effective_fetch_slots,
        shape_workers=settings.shape_workers,
        shape_cpu_seconds=settings.shape_cpu_seconds,
        shape_memory=settings.shape_memory,
        render_workers=settings.render_workers,
        render_seconds=settings.render_seconds,
        render_memory=settings.render_memory,
    )
    async with fetcher as fetch:
        await fetch.warm()  # the service's first page waits for no shaping worker's start
        politeness = {"budget": budget, "scope": fetch.scope, "site_guide": WebSiteGuide(fetch)}
        yield serve_hints(fetch), politeness


def serve_hints(fetch: FetchFunc) -> FetchFunc:
    """``fetch``, its refusals of a private address hinting at serve's ``--allow-net``.

    The web fetcher's hint asks "the operator" to allow the network, in no program's words;
    under ``trio-batch serve`` the operator's remedy is a flag, and the caller reading the
    hint is often the operator (a server on their own machine), so the hint names it.
    """

    async def fetch_hinted(caller: Caller, target: Target) -> Result:
        try:
            return await fetch(caller, target)
        except Exception as exc:
            kind = classify_failure(exc)
            if not isinstance(kind, TargetError):
                raise
            hint = operator_hint(target.url, kind.msg, kind.hint)
            if hint == kind.hint:
                raise
            raise TargetError(kind.msg, hint=hint, status=kind.status) from exc

    # The fetcher stays reachable (``__wrapped__``): the app maps sites over it (POST /v1/map).
    return functools.update_wrapper(fetch_hinted, fetch, assigned=(), updated=())


async def run_service(
    settings: Settings,
    *,
    fetch: FetchFunc | None = None,
    precheck: PrecheckFunc | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The ``trio-batch serve`` service: store, fetcher, engine and API, until SIGINT/SIGTERM.

    On the first SIGINT or SIGTERM the server stops accepting, lets requests in flight finish
    (at most ``graceful_timeout`` seconds), then the engine closes (live jobs become
    ``failed``/``interrupted``) and this returns. A second signal stops at once.

    ``fetch`` and ``precheck`` replace the web fetcher and its pre-check (for tests).

    Raises:
        KeysFileError: the keys file is missing or malformed.
        SecretsKeyFileError: the secrets key file is missing, malformed or writable by others.
    """
    keys = load_keys(settings.keys)
    if not len(keys):
        _log.warning("the keys file has no keys: every request will get 401")
    if fetch is None:
        _log_allowed_networks(settings)
    _log.info("the store: %s", store_description(settings))
    metrics = PrometheusMetrics()
    config = settings.engine_config(hooks=metrics.hooks())
    with (
        SECRETS.keyed(_sealing_keys(settings)),
        trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
    ):
        async with open_store(settings) as store, contextlib.AsyncExitStack() as stack:
            politeness: dict[str, Any] = {}
            if fetch is None:
                web, politeness = await stack.enter_async_context(
                    _open_fetcher(settings, store, keys)
                )
                fetch = web
                metrics.watch_budget(politeness["budget"])
                if precheck is None:
                    precheck = _web_precheck(settings)
            async with (
                open_engine(store, fetch, config, **politeness) as engine,
                open_deliveries(store, engine, keys, allow=_networks(settings), metrics=metrics),
            ):
                await _serve_engine(
                    settings, engine, keys, fetch, precheck, metrics, signals, task_status
                )
    _log.info("stopped")


def _sealing_keys(settings: Settings) -> SealingKeys | None:
    """The keys of ``--secrets-key-file``, said in the log; None (said too, for a fleet).

    Raises:
        SecretsKeyFileError: the file cannot be used (the message names it, and the line).
    """
    if not settings.secrets_key_file:
        if _is_postgres(settings):
            _log.info(
                "no --secrets-key-file: a target's Cookie and Authorization wait in the memory "
                "of the instance that admitted it, and fail (410) on any other; give every "
                "instance the same file (`%s`) to send them from any",
                MAKE_KEY,
            )
        return None
    keys = read_key_file(settings.secrets_key_file)
    _log.info(
        "credentials are stored sealed (AES-SIV): %s holds %d key%s, the first seals",
        settings.secrets_key_file,
        len(keys),
        plural(len(keys)),
    )
    return keys


def _is_postgres(settings: Settings) -> bool:
    return settings.db.startswith(("postgresql://", "postgres://"))


def store_description(settings: Settings) -> str:
    """Which store ``serve`` uses, for its start-up log: never a DSN's host, user or password.

    A SQLite store is its absolute path (``run`` beside a server must not write the same file:
    the line says which one it is); a PostgreSQL store is only its schema.
    """
    if _is_postgres(settings):
        return f"PostgreSQL, schema {settings.pg_schema}"
    return f"SQLite {os.path.abspath(settings.db)}"


def _log_allowed_networks(settings: Settings) -> None:
    # The operator's remedy for "private address" refusals, where the operator reads: the log.
    if settings.allow_net:
        _log.info(
            "the fetcher reaches public addresses and %d allowed private network%s "
            "(--allow-net / TRIO_BATCH_ALLOW_NET)",
            len(settings.allow_net),
            plural(len(settings.allow_net)),
        )
    else:
        _log.info(
            "the fetcher reaches public addresses only and refuses private ones. To "
            "allow a private network, pass --allow-net CIDR (repeatable) or set "
            "TRIO_BATCH_ALLOW_NET, e.g. --allow-net 10.0.0.0/8"
        )


def _networks(settings: Settings) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(net) for net in settings.allow_net]


def _web_precheck(settings: Settings) -> Callable[[str], None]:
    from ..web import precheck

    allow = _networks(settings)

    def check(url: str) -> None:
        try:
            precheck(url, allow=allow)
        except TargetError as exc:
            hint = operator_hint(url, exc.msg, exc.hint)
            if hint == exc.hint:
                raise
            raise TargetError(exc.msg, hint=hint, status=exc.status) from None

    return check


def _mcp_mounts() -> dict[str, McpEndpoint]:
    """``/mcp``, the MCP server (docs/mcp.md), when the ``mcp`` extra is installed."""
    try:
        from .._mcp import McpEndpoint
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("trio_batch."):
            raise
        _log.info("no MCP server at /mcp: pip install 'trio-batch[mcp]' for one")
        return {}
    return {"/mcp": McpEndpoint()}


async def _serve_engine(
    settings: Settings,
    engine: BatchEngine,
    keys: KeyRing,
    fetch: FetchFunc,
    precheck: PrecheckFunc | None,
    metrics: PrometheusMetrics,
    signals: AsyncIterator[int],
    task_status: trio.TaskStatus[int],
) -> None:
    app = create_app(
        engine,
        keys,
        fetch=fetch,
        precheck=precheck,
        metrics=metrics,
        retry_after=settings.retry_after,
        access_log_enabled=settings.access_log,
        store_timeout=settings.store_timeout,
        mounts=_mcp_mounts(),
        cors_origins=settings.cors_origin,
        default_concurrency=settings.default_concurrency,
    )
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:

        async def run_server(task_status: trio.TaskStatus[int]) -> None:
            await serve(
                app,
                host=settings.host,
                port=settings.port,
                shutdown_trigger=shutdown.wait,
                graceful_timeout=settings.graceful_timeout,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # the server is done: stop watching for signals

        def stop(signum: int) -> None:
            _log.info(
                "got %s: finishing requests in flight, then stopping", signal.Signals(signum).name
            )
            shutdown.set()

        nursery.start_soon(watch_signals, signals, stop, nursery.cancel_scope)
        port: int = await nursery.start(run_server)
        _log.info(
            "serving the trio-batch API on %s port %d (%d worker%s)",
            settings.host,
            port,
            settings.workers,
            plural(settings.workers),
            extra={"port": port},
        )
        task_status.started(port)
    _log.info("server stopped; closing the engine")
