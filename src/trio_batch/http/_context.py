"""What every route needs: the app's context (:class:`Ctx`) and authentication."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import final

from starlette.requests import Request

from .._engine import BatchEngine, FetchFunc
from ..metrics import PrometheusMetrics
from ._crawls import KnownBatches
from ._deadline import StoreCalls
from ._errors import ApiError, retry_after_header
from ._keys import KeyRecord, KeyRing
from ._observe import CALLER_KEY
from ._parse import OptionsCheckFunc, PrecheckFunc
from ._stopping import Stopping

KEEPALIVE_SECONDS = 15.0
"""Longest silence of an events stream: then it writes a comment line (SPEC §7)."""


@final
@dataclass(frozen=True, slots=True)
class Ctx:
    engine: BatchEngine
    keys: KeyRing
    fetch: FetchFunc | None
    precheck: PrecheckFunc
    check_options: OptionsCheckFunc | None
    metrics: PrometheusMetrics
    ttl: float
    retry_after: int
    max_body: int
    wall_clock: Callable[[], float]
    calls: StoreCalls
    default_concurrency: int = 1
    """A submit's ``concurrency`` when its body does not say (``create_app``'s)."""
    keepalive: float = KEEPALIVE_SECONDS
    stopping: Stopping = field(default_factory=Stopping)
    """Set when the server begins to shut down: streams end then, not at the grace timeout."""
    batches: KnownBatches = field(default_factory=KnownBatches)
    """Job ids known not to be crawls: their answers need no ``crawl`` read (``_crawls``)."""

    def busy_headers(self, after: float | None = None) -> dict[str, str]:
        """``Retry-After``: ``after`` rounded up to a whole second (at least 1), or the default."""
        return retry_after_header(self.retry_after if after is None else max(1, math.ceil(after)))


def authenticate(ctx: Ctx, request: Request) -> KeyRecord:
    """The caller whose bearer key the request carries.

    Raises:
        ApiError: 401 (with ``WWW-Authenticate``) without a key or with an unknown one.
    """
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    record = ctx.keys.lookup(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
    if record is None:
        raise ApiError(
            401,
            "missing or unknown API key" if header else "missing API key",
            "send the header 'Authorization: Bearer <key>'; an operator makes keys with "
            "'trio-batch keys add NAME'",
            headers={"WWW-Authenticate": 'Bearer realm="trio-batch"'},
        )
    request.scope[CALLER_KEY] = record.name
    return record
