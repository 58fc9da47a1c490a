"""The access log and the request metrics, labelled by route template and never by URL."""

from __future__ import annotations

import logging
import re
from typing import final

import trio
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..metrics import PrometheusMetrics
from ._stopping import Stopping

CALLER_KEY = "trio_batch.caller"
"""The ASGI scope key where authentication leaves the caller's name for the access log."""

access_log = logging.getLogger("trio_batch.http.access")
_CONVERTOR = re.compile(r"\{(\w+):\w+\}")  # "{idx:int}" -> "{idx}" in route labels


@final
class Observe:
    """ASGI wrapper: the access log line and the request metrics, by route template."""

    def __init__(
        self,
        app: ASGIApp,
        routes: list[BaseRoute],
        metrics: PrometheusMetrics,
        log: bool,
        *,
        stopping: Stopping | None = None,
    ) -> None:
        self.app = app
        self.stopping = stopping
        """Set by :func:`~trio_batch.http.serve` when shutdown begins: streams end then."""
        self.routes = routes
        self.metrics = metrics
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = trio.current_time()
        status = 500
        template = self._template(scope)

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            seconds = trio.current_time() - t0
            method = str(scope.get("method", "")).upper()
            self.metrics.observe_request(method, template, status, seconds)
            if self.log:
                access_log.info(
                    "%s %s %d %.1fms %s",
                    method,
                    template,
                    status,
                    seconds * 1000,
                    scope.get(CALLER_KEY) or "-",
                    extra={
                        "method": method,
                        "route": template,
                        "status": status,
                        "duration_ms": round(seconds * 1000, 3),
                        "caller": scope.get(CALLER_KEY) or "",
                    },
                )

    def _template(self, scope: Scope) -> str:
        partial = None
        for r in self.routes:
            match, _ = r.matches(scope)
            if match == Match.FULL:
                return _CONVERTOR.sub(r"{\1}", str(getattr(r, "path", "unmatched")))
            if match == Match.PARTIAL and partial is None:
                partial = _CONVERTOR.sub(r"{\1}", str(getattr(r, "path", "unmatched")))
        return partial or "unmatched"
