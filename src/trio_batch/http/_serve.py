"""Serving the app with hypercorn's Trio worker, behind the lingering close of ``_linger``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import cast

import trio
from starlette.types import ASGIApp

from ._linger import LingeringClose
from ._observe import Observe

_log = logging.getLogger("trio_batch.http")


async def serve(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    graceful_timeout: float = 10.0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an ASGI ``app`` (from :func:`create_app`) on ``host:port`` until shut down.

    Reports the bound port with ``task_status.started(port)``, so ``port=0`` picks a free one.
    When ``shutdown_trigger`` returns, the server stops accepting connections, gives requests
    in flight up to ``graceful_timeout`` seconds to finish, and returns. Streams of an app from
    :func:`create_app` (``results?follow=1``, ``events``) end at once instead: an events stream
    ends properly (a client resumes it elsewhere with ``Last-Event-ID``), a followed NDJSON
    body stops without its end, so the client knows it is incomplete. Cancelling it stops
    at once. It handles no signals itself: its caller decides when to stop.

    An answer sent before the request body was read (a 413 for a body over the cap, a 401)
    says ``Connection: close``, and the rest of the body is read and discarded (at most
    16 MiB, for at most 5 s) before the connection closes, so the client reads the answer
    instead of a connection reset.
    """
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve as hypercorn_serve
    from hypercorn.typing import ASGIFramework

    config = HypercornConfig()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = graceful_timeout
    config.accesslog = None  # the app writes its own access log, without query strings
    config.errorlog = logging.getLogger("trio_batch.http.server")
    config.include_server_header = False

    trigger = shutdown_trigger
    stopping = app.stopping if isinstance(app, Observe) else None  # create_app's outermost layer
    if trigger is not None and stopping is not None:
        outer = trigger

        async def stop_streams_too() -> None:
            await outer()
            stopping.set()  # long streams (follow, events) end now, not at graceful_timeout

        trigger = stop_streams_too

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        await hypercorn_serve(
            cast("ASGIFramework", LingeringClose(app)),
            config,
            shutdown_trigger=trigger,
            task_status=task_status,
        )

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(run)
        bound = int(binds[0].rsplit(":", 1)[1])
        task_status.started(bound)
