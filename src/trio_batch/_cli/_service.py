"""The ``trio-batch serve`` service: store, web fetcher, engine and API, until a signal.

This is process policy (signal handlers, exit codes), so it lives with the CLI; the library
part is :func:`trio_batch.http.serve` and :func:`trio_batch.http.create_app`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
from collections.abc import AsyncIterator, Callable

import trio

from .._engine import BatchEngine, FetchFunc, open_engine
from .._errors import StoreError
from .._model import Caller
from ..http import KeyRing, PrecheckFunc, Settings, create_app, load_keys, serve
from ..metrics import PrometheusMetrics
from ..stores import SQLiteStore, Store
from ._signals import watch_signals

_log = logging.getLogger("trio_batch.http")


@contextlib.asynccontextmanager
async def open_store(db: str) -> AsyncIterator[Store]:
    """The store ``db`` names: a ``postgresql://`` DSN, or a SQLite file path."""
    if db.startswith(("postgresql://", "postgres://")):
        try:
            from ..stores import PostgresStore
        except ImportError as exc:
            raise StoreError(
                "--db is a PostgreSQL DSN but the PostgreSQL store is not installed: "
                "pip install 'trio-batch[postgres]'"
            ) from exc
        async with PostgresStore.open(db) as pg:
            yield pg
    else:
        async with SQLiteStore.open(db) as sqlite:
            yield sqlite


@contextlib.asynccontextmanager
async def _open_fetcher(
    settings: Settings, store: Store, keys: KeyRing
) -> AsyncIterator[FetchFunc]:
    from ..web import WebFetcher

    def restricted(caller: Caller) -> bool:
        record = keys.by_hash(caller.key_sha256)
        return record is None or record.caller_class == "restricted"

    # The engine runs at most `workers` fetches at once, so a pool bigger than that keeps
    # slots free for POST /v1/fetch while every worker is busy.
    fetcher = WebFetcher(
        store=store,
        allow=_networks(settings),
        restricted=restricted,
        pool_size=settings.effective_fetch_slots,
    )
    async with fetcher as fetch:
        yield fetch


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
    """
    keys = load_keys(settings.keys)
    if not len(keys):
        _log.warning("the keys file has no keys: every request will get 401")
    metrics = PrometheusMetrics()
    config = settings.engine_config(hooks=metrics.hooks())
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_store(settings.db) as store, contextlib.AsyncExitStack() as stack:
            if fetch is None:
                fetch = await stack.enter_async_context(_open_fetcher(settings, store, keys))
                if precheck is None:
                    precheck = _web_precheck(settings)
            async with open_engine(store, fetch, config) as engine:
                await _serve_engine(
                    settings, engine, keys, fetch, precheck, metrics, signals, task_status
                )
    _log.info("stopped")


def _networks(settings: Settings) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(net) for net in settings.allow_net]


def _web_precheck(settings: Settings) -> Callable[[str], None]:
    from ..web import precheck

    allow = _networks(settings)

    def check(url: str) -> None:
        precheck(url, allow=allow)

    return check


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
            "serving the trio-batch API on %s port %d (%d workers)",
            settings.host,
            port,
            settings.workers,
            extra={"port": port},
        )
        task_status.started(port)
    _log.info("server stopped; closing the engine")
