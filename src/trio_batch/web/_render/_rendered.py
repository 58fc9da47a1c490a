"""Targets with ``render``: the web fetcher's browsers, and what a rendered page becomes.

:class:`Renders` holds the fetcher's :class:`~trio_batch.web._render._pool.RenderPool` (opened
with the fetcher, no browser started until the first render) and hands out its browsers fairly
between callers. The pool's nursery lives in a Trio system task of its own, not in the task that
entered the fetcher: a nursery held open from ``__aenter__`` to ``aclose`` would break an
``aclose`` called inside a cancel scope ("cancel scope stack corrupted").

:meth:`Renders.load` renders one target's page and returns its DOM as an HTML
:class:`~trio_batch.web._extract._shape.Body` for the fetcher's shaper, with the page's HTTP
status mapped to the errors a plain fetch raises for it (docs/render.md).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final, final

import trio

from ..._budget import CURRENT_SLOT, HostBudget
from ..._errors import RetryLater, TargetError
from ..._model import Target
from .._extract._shape import Body
from .._guard._check import Network, Resolver, redact_url
from .._guard._errors import BUSY_STATUSES, busy_error, status_error, too_large
from .._guard._limits import FairPool
from ._browser import DEFAULT_CHROMIUM
from ._page import RenderedPage
from ._pool import MIN_MEMORY, RenderPool, open_render_pool
from ._proxy import RobotsCheck

logger = logging.getLogger("trio_batch.web")

_CLOSE_SECONDS: Final = 10.0
"""Longest wait for the pool to kill its browsers when the fetcher closes."""


@final
@dataclass(frozen=True, slots=True)
class RenderSettings:
    """The fetcher's ``render_*`` arguments."""

    workers: int = 2
    seconds: float = 30.0
    memory: int = 2**30
    executable: str = DEFAULT_CHROMIUM

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"WebFetcher render_workers must be >= 1 (got {self.workers!r})")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(
                f"WebFetcher render_seconds must be a finite number > 0 (got {self.seconds!r})"
            )
        if isinstance(self.memory, bool) or not isinstance(self.memory, int):
            raise ValueError(f"WebFetcher render_memory must be bytes (got {self.memory!r})")
        if self.memory < MIN_MEMORY:
            raise ValueError(
                f"WebFetcher render_memory must be at least {MIN_MEMORY} bytes "
                f"(got {self.memory!r})"
            )


def time_left() -> float | None:
    """Seconds to the caller's own deadline (``POST /v1/fetch``'s), if it has one."""
    left = trio.current_effective_deadline() - trio.current_time()
    return left if math.isfinite(left) and left > 0 else None


@final
class Renders:
    """The browsers of one fetcher: at most ``settings.workers`` renders at once, lent fairly
    (while callers wait, a browser that comes free goes to the one that holds fewest)."""

    def __init__(
        self,
        settings: RenderSettings,
        *,
        user_agent: str,
        slot_wait: float,
        max_bytes: int,
        max_retry_after: float,
        wall_clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._slots = FairPool(settings.workers)
        self._user_agent = user_agent
        self._slot_wait = slot_wait
        self._max_bytes = max_bytes
        self._max_retry_after = max_retry_after
        self._wall_clock = wall_clock
        self._pool: RenderPool | None = None
        self._closing = trio.Event()
        self._closed = trio.Event()

    async def open(
        self, *, allow: Sequence[Network], resolver: Resolver, budget: HostBudget | None
    ) -> None:
        """Open the render pool, in a system task (it starts no browser: the first render
        does); :meth:`aclose` closes it."""
        s = self._settings
        pool = functools.partial(
            open_render_pool,
            workers=s.workers,
            seconds=s.seconds,
            memory=s.memory,
            allow=allow,
            resolver=resolver,
            budget=budget,
            executable=s.executable,
            max_html_chars=self._max_bytes,
        )
        opened = trio.Event()
        trio.lowlevel.spawn_system_task(self._own, pool, opened, name="trio_batch render pool")
        with trio.CancelScope(shield=True):  # opening the pool awaits nothing that blocks
            await opened.wait()

    async def _own(
        self, pool: Callable[[], AbstractAsyncContextManager[RenderPool]], opened: trio.Event
    ) -> None:
        try:
            async with pool() as self._pool:
                opened.set()
                await self._closing.wait()
        except Exception as exc:  # a system task must not raise: renders fail from now on
            logger.warning("the render pool failed: %s", type(exc).__name__)
        finally:
            self._pool = None
            opened.set()
            self._closed.set()

    async def aclose(self) -> None:
        """Close the pool (its browsers are killed), waited for even when the caller is
        cancelled (``_CLOSE_SECONDS`` at most)."""
        self._pool = None
        self._closing.set()
        with trio.move_on_after(_CLOSE_SECONDS, shield=True):
            await self._closed.wait()

    async def load(
        self,
        caller: str,
        target: Target,
        headers: Mapping[str, str],
        robots: RobotsCheck | None = None,
    ) -> tuple[Body, RenderedPage]:
        """Render ``target``'s page in a browser (waiting ``slot_wait`` at most for a free one)
        and return its DOM as an HTML body, with the page it came from.

        ``headers`` (the target's own, credentials unsealed, any ``User-Agent`` after ours)
        go to the target's exact origin only (``_page``), with our ``User-Agent`` when it has
        none. The render waits for ``wait_for`` (or network idle); its time limit is
        ``render_seconds``, or what is left of the caller's own deadline when that is less.
        ``robots`` (the fetcher's check, when the target obeys robots.txt) is asked about
        every request of the page before it is sent.

        Raises:
            RetryLater: no browser came free within ``slot_wait``, or the page answered 429 or
                503 (the proxy has pushed its host back already).
            TargetError: the render failed (see ``RenderPool.render``: 400, 403, 413, 422,
                501, 502, 504), the page's status is an error a fetch would raise, or its DOM
                is over ``max_bytes`` as UTF-8 (413).
            trio.ClosedResourceError: the fetcher is closed.
        """
        pool = self._pool
        if pool is None:
            raise trio.ClosedResourceError("the WebFetcher is closed")
        with trio.move_on_after(self._slot_wait) as waited:
            await self._slots.acquire(caller)
        if waited.cancelled_caught:
            raise RetryLater("the browsers are all in use")
        sent = {"User-Agent": self._user_agent, **headers}
        try:
            page = await pool.render(
                target.url,
                wait_for=target.options.wait_for or None,
                headers=sent,
                slot=CURRENT_SLOT.get(),
                seconds=time_left(),
                robots=robots,
            )
            self._check_status(page.status)
            data = page.html.encode("utf-8", "replace")  # a DOM string may hold a surrogate
            if len(data) > self._max_bytes:
                raise too_large(len(data), limit=self._max_bytes, mime="text/html")
        except TargetError as error:
            logger.debug("web render failed: status=%d", error.status)
            raise
        finally:
            self._slots.release(caller)
        logger.debug("web render done: status=%d bytes=%d", page.status, len(data))
        return Body(data, "text/html", "utf-8", page.url), page

    def _check_status(self, status: int) -> None:
        """Raise what a fetch raises for a final ``status`` (0: the browser told none)."""
        if status in BUSY_STATUSES:
            raise busy_error(status, None, now=self._wall_clock(), cap=self._max_retry_after)
        error = status_error(status) if status else None
        if error is not None:
            raise error


def rendered_meta(body: Body, page: RenderedPage) -> dict[str, object]:
    """What a rendered result's ``meta`` says of its page: no ``redirects`` (the browser
    follows them, and a script may navigate), but ``rendered``, ``settled`` (whether the wait
    condition was met), ``refused`` (the page's requests the guard turned away) and, when
    robots.txt stopped any, ``disallowed`` (the page's requests never sent)."""
    meta: dict[str, object] = {
        "url": redact_url(page.url),
        "status": page.status,
        "content_type": body.content_type,
        "bytes": len(body.data),
        "rendered": True,
        "settled": page.settled,
        "refused": page.refused,
    }
    if page.disallowed:
        meta["disallowed"] = page.disallowed
    return meta
