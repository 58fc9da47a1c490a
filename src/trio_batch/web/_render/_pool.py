"""Rendered pages: a bounded pool of headless Chromium renderers behind the guarded proxy.

A single-page app answers ``Loading...`` until its scripts run, so a target that asks for
``render`` is loaded in a real browser and its DOM is taken once the page is ready. The browser
runs code a site wrote, so it is treated as untrusted work (docs/render.md):

- each renderer is one Chromium (``_browser``) in a process group of its own, with its own
  :class:`~trio_batch.web._render._proxy.GuardedProxy` (so a render's refusals are its own)
  and a fresh profile; each render runs in a fresh browser context (no cookie, storage or
  cache of another render), disposed at its end;
- a render has ``seconds`` in all: past it the renderer is killed (the whole group) and the
  next render starts a new one; its memory is watched (``memory`` bytes over the group) and a
  renderer over it is killed the same way; a crash ends only that render;
- at most ``workers`` renderers exist, each rendering one page at a time; more renders wait
  for one (their wait counts in their caller's deadline, not in ``seconds``);
- every request the browser makes goes through the guard and the host budget (the proxy); the
  target's own first request may run in the slot the engine holds for it (``slot``); with
  ``robots``, each is checked against its site's robots.txt before it is sent (``_page``, and
  the proxy for plain HTTP);
- ``headers`` go to the target's exact origin only (scheme, host and port): never to a
  subresource of another origin, and never after a redirect to another origin (each request
  is paused and given or stripped of them, ``Fetch.requestPaused``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

import trio

from ..._budget import HostBudget, HostSlot
from ..._errors import TargetError
from ..._util import raise_saving_context
from .._guard._check import Network, Resolver, check_url
from ._browser import (
    DEFAULT_CHROMIUM,
    Browser,
    chromium_missing_error,
    find_chromium,
    open_browser,
    sandbox_allowed,
)
from ._cdp import CdpClosed, CdpError
from ._page import (
    BlankPage,
    RenderedPage,
    close_blank_page,
    load_page,
    open_blank_page,
)
from ._proxy import GuardedProxy, RobotsCheck, open_guarded_proxy

MIN_MEMORY: Final = 256 * 2**20
"""Least ``memory`` a renderer may be given (an idle Chromium holds ~150 MiB here)."""
_RENDERS_PER_BROWSER: Final = 100
_PREPARE_SECONDS: Final = 10.0
_MESSAGE_BYTES_PER_CHAR: Final = 6
"""The most bytes one DOM character takes in the browser's JSON (``\\u0001``)."""


@final
@dataclass(frozen=True, slots=True)
class RenderPoolStatistics:
    """What a :class:`RenderPool` holds and has done."""

    renderers: int
    """Renderers (browsers) running now, busy or idle."""
    rendering: int
    """Renders in progress now."""
    renders: int
    """Renders that returned a page."""
    killed: int
    """Renderers killed at a limit (time, memory) or after a crash."""
    refused: int
    """Requests the guard refused, over all renders."""


@dataclass(eq=False)
class _Renderer:
    proxy: GuardedProxy
    browser: Browser
    scope: trio.CancelScope
    renders: int = 0
    broken: bool = False
    """Killed, or not to be trusted with another page (a limit, a crash, a cancel mid-page)."""
    spare: BlankPage | None = None
    """The next render's page, opened while the browser was idle."""
    preparing: trio.Event | None = None
    """Set when the spare being opened is ready (or failed)."""

    def close(self) -> None:
        self.browser.kill()
        self.scope.cancel()


@dataclass(frozen=True, slots=True)
class _Wait:
    selector: str | None
    max_wait: float | None
    seconds: float
    robots: RobotsCheck | None = None


@final
class RenderPool:
    """A bounded pool of headless Chromium renderers. Obtain one from :func:`open_render_pool`.

    :meth:`render` is the one call: it loads a URL in a fresh browser context, waits for the
    page to be ready, and returns its DOM as a :class:`RenderedPage`.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        executable: str | None,
        asked: str,
        workers: int,
        seconds: float,
        memory: int,
        allow: Sequence[Network],
        resolver: Resolver | None,
        budget: HostBudget | None,
        sandbox: bool,
        max_html_chars: int,
    ) -> None:
        self._nursery = nursery
        self._executable = executable
        self._asked = asked
        self._limiter = trio.CapacityLimiter(workers)
        self._seconds = seconds
        self._memory = memory
        self._allow = tuple(allow)
        self._resolver = resolver
        self._budget = budget
        self._sandbox = sandbox
        self._max_html = max_html_chars
        self._idle: list[_Renderer] = []
        self._live: set[_Renderer] = set()
        self._renders = 0
        self._killed = 0
        self._refused = 0
        self._closed = False

    @property
    def sandboxed(self) -> bool:
        """Whether the renderers run inside Chromium's sandbox (not as root: see docs)."""
        return self._sandbox

    def statistics(self) -> RenderPoolStatistics:
        return RenderPoolStatistics(
            renderers=len(self._live),
            rendering=self._limiter.borrowed_tokens,
            renders=self._renders,
            killed=self._killed,
            refused=self._refused,
        )

    async def render(
        self,
        url: str,
        *,
        wait_for: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_wait: float | None = None,
        slot: HostSlot | None = None,
        seconds: float | None = None,
        robots: RobotsCheck | None = None,
    ) -> RenderedPage:
        """Load ``url`` in a fresh browser context and return its DOM once it is ready.

        Ready means: the element ``wait_for`` (a CSS selector) exists, or, without it, the
        page has loaded and its network has been quiet for 500 ms (no request in flight).
        With ``max_wait`` (seconds) the DOM is taken as it is when that passes first
        (``settled=False``); without it a page that never gets ready runs into the pool's
        time limit.

        Args:
            url: an http or https URL (the guard's pre-check applies).
            wait_for: a CSS selector to wait for instead of network idle.
            headers: request headers for the target's exact origin only (``Cookie``,
                ``Authorization``, ``Accept-Language``...): never sent to another origin,
                nor after a redirect to one. Checking which names are allowed is the caller's.
            max_wait: the longest wait for the condition before the DOM is taken anyway.
            slot: the host-budget slot the caller already holds for ``url``'s host (the
                engine's, ``CURRENT_SLOT``): requests to that host run in it, one at a time.
            seconds: a shorter time limit for this render (what is left of the caller's own
                deadline); the pool's ``seconds`` when None or longer.
            robots: what robots.txt says of a URL (the fetcher's check); every request of the
                page is asked about first, and a disallowed one is never sent (None: robots.txt
                is not obeyed).

        Raises:
            TargetError: the URL is refused (400), Chromium is not installed (501), the
                navigation was refused by the guard (403) or failed (502), ``wait_for`` is not
                a valid selector (400), the page went over the time limit (504) or the memory
                limit (422), the browser crashed (502), or the DOM is over the size limit (413).
            trio.ClosedResourceError: the pool is closed.

        Cancellation: a cancelled render kills its renderer (it may be mid-page), so the next
        render starts a fresh one.
        """
        if self._closed:
            raise trio.ClosedResourceError("the RenderPool is closed")
        if self._executable is None:
            raise chromium_missing_error(self._asked)
        check_url(url, self._allow)
        clean = _checked_headers(headers or {})
        if max_wait is not None and not (math.isfinite(max_wait) and max_wait >= 0):
            raise ValueError(f"max_wait must be a finite number >= 0 (got {max_wait!r})")
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"seconds must be a finite number > 0 (got {seconds!r})")
        limit = self._seconds if seconds is None else min(seconds, self._seconds)
        async with self._limiter:
            renderer = await self._take()
            try:
                page = await self._render_in(
                    renderer, url, _Wait(wait_for, max_wait, limit, robots), clean, slot
                )
            except TargetError:
                raise  # the page's own failure: the browser is fine unless _render_in said not
            except BaseException:
                renderer.broken = True  # cancelled mid-page, or something unexpected
                raise
            finally:
                self._give_back(renderer)
        self._renders += 1
        return page

    async def _take(self) -> _Renderer:
        while self._idle:
            renderer = self._idle.pop()
            if renderer.browser.alive:
                return renderer
            self._discard(renderer)
        try:
            started: _Renderer = await self._nursery.start(self._run_renderer)
        except BaseExceptionGroup as group:
            # The launch error comes out of the nested nurseries of the proxy, the pipe and
            # the browser: raise it as itself when it is the only one.
            leaves = [e for e in _leaves(group) if not isinstance(e, trio.Cancelled)]
            if len(leaves) == 1:
                raise_saving_context(leaves[0])
            raise
        return started

    def _give_back(self, renderer: _Renderer) -> None:
        renderer.renders += 1
        if renderer.broken or not renderer.browser.alive:
            self._killed += 1
            self._discard(renderer)
        elif renderer.renders >= _RENDERS_PER_BROWSER:
            self._discard(renderer)
        else:
            renderer.preparing = trio.Event()
            self._nursery.start_soon(self._prepare, renderer, renderer.preparing)
            self._idle.append(renderer)

    async def _prepare(self, renderer: _Renderer, done: trio.Event) -> None:
        """Open the renderer's next blank page while it is idle (most of a render's fixed
        cost); a failure here leaves it to the render to open one."""
        try:
            with trio.move_on_after(_PREPARE_SECONDS):
                renderer.spare = await open_blank_page(renderer.browser.cdp)
        except (CdpClosed, CdpError):
            pass  # the browser is gone: the next render finds it dead and replaces it
        finally:
            done.set()

    async def _blank_page(self, renderer: _Renderer) -> BlankPage:
        if renderer.preparing is not None:
            await renderer.preparing.wait()
            renderer.preparing = None
        spare, renderer.spare = renderer.spare, None
        return spare or await open_blank_page(renderer.browser.cdp)

    def _discard(self, renderer: _Renderer) -> None:
        renderer.close()
        self._live.discard(renderer)

    async def _run_renderer(self, *, task_status: trio.TaskStatus[_Renderer]) -> None:
        assert self._executable is not None
        with trio.CancelScope() as scope:
            async with (
                open_guarded_proxy(
                    allow=self._allow, resolver=self._resolver, budget=self._budget
                ) as proxy,
                open_browser(
                    self._executable,
                    proxy_port=proxy.port,
                    memory=self._memory,
                    sandbox=self._sandbox,
                    max_message_bytes=_MESSAGE_BYTES_PER_CHAR * self._max_html + 2**20,
                ) as browser,
            ):
                renderer = _Renderer(proxy, browser, scope)
                self._live.add(renderer)
                task_status.started(renderer)
                await trio.sleep_forever()

    async def _render_in(
        self,
        renderer: _Renderer,
        url: str,
        wait: _Wait,
        headers: dict[str, str],
        slot: HostSlot | None,
    ) -> RenderedPage:
        stats = renderer.proxy.statistics()
        before, disallowed = stats.refused, stats.disallowed
        try:
            with renderer.proxy.holding(slot, wait.robots), trio.move_on_after(wait.seconds):
                blank = await self._blank_page(renderer)
                try:
                    page = await load_page(
                        blank,
                        url,
                        wait_for=wait.selector,
                        headers=headers,
                        max_wait=wait.max_wait,
                        max_html=self._max_html,
                        refused=lambda: renderer.proxy.statistics().refused - before,
                        robots=wait.robots,
                    )
                finally:
                    await close_blank_page(blank)
                proxied = renderer.proxy.statistics().disallowed - disallowed
                return dataclasses.replace(page, disallowed=page.disallowed + proxied)
            renderer.broken = True
            raise TargetError(
                f"the page did not finish rendering within {wait.seconds:g} s",
                hint="the page kept loading; ask with wait_for=SELECTOR for the part you need, "
                "or without render",
                status=504,
            )
        except (CdpClosed, CdpError):
            renderer.broken = True
            if renderer.browser.over_memory:
                raise self._over_memory() from None
            raise _crashed() from None
        except TargetError:
            if renderer.browser.over_memory or not renderer.browser.alive:
                renderer.broken = True
            if renderer.browser.over_memory:
                raise self._over_memory() from None
            raise
        finally:
            self._refused += renderer.proxy.statistics().refused - before

    def _over_memory(self) -> TargetError:
        return TargetError(
            f"the page used more than {self._memory / 2**20:.0f} MiB while rendering",
            hint="the page is too heavy to render here; ask for it without render",
            status=422,
        )


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _crashed() -> TargetError:
    return TargetError(
        "the browser crashed while rendering the page",
        hint="try again later, or ask for the page without render",
        status=502,
    )


def _checked_headers(headers: Mapping[str, str]) -> dict[str, str]:
    clean: dict[str, str] = {}
    for name, value in headers.items():
        if not (isinstance(name, str) and isinstance(value, str)):
            raise TargetError("header names and values must be strings", status=400)
        if not name or any(c in name for c in ":\r\n\0 ") or any(c in value for c in "\r\n\0"):
            raise TargetError(
                "a header name or value holds a line break, a NUL or (in the name) a colon",
                hint="send each header as a plain name and a one-line value",
                status=400,
            )
        clean[name] = value
    return clean


@contextlib.asynccontextmanager
async def open_render_pool(
    *,
    workers: int = 2,
    seconds: float = 30.0,
    memory: int = 1024 * 2**20,
    allow: Sequence[Network] = (),
    resolver: Resolver | None = None,
    budget: HostBudget | None = None,
    executable: str = DEFAULT_CHROMIUM,
    sandbox: bool | None = None,
    max_html_chars: int = 8 * 2**20,
) -> AsyncIterator[RenderPool]:
    """A :class:`RenderPool` for the block's life; every browser is killed when it ends.

    Opening starts no browser: the first render starts one (about 0.5 s here), and the pool
    keeps at most ``workers`` of them, each reused for up to 100 renders. A missing Chromium is
    not an error here (the service can run without rendering): each :meth:`RenderPool.render`
    then fails with a hint naming Debian's ``chromium`` package.

    Args:
        workers: renderers (browsers) at most, each rendering one page at a time
            (``render_workers``).
        seconds: one render's time limit, from navigation to DOM (``render_seconds``); past
            it the renderer is killed.
        memory: bytes one renderer's processes may hold together (``render_memory``; at least
            256 MiB); past it the renderer is killed.
        allow: networks the guard lets through although they are not public (the fetcher's).
        resolver: the DNS lookup (the fetcher's); the system's by default.
        budget: the host budget every request of a page takes (the fetcher's).
        executable: the browser to run; Debian's ``/usr/bin/chromium`` by default.
        sandbox: run Chromium's sandbox; None: whenever the machine allows it (not as root).
        max_html_chars: the largest serialized DOM returned (characters).

    Raises:
        ValueError: a setting is out of range; the message names it.
    """
    _check_settings(workers, seconds, memory, max_html_chars)
    use_sandbox = sandbox_allowed() if sandbox is None else sandbox
    async with trio.open_nursery() as nursery:
        pool = RenderPool(
            nursery,
            executable=find_chromium(executable),
            asked=executable,
            workers=workers,
            seconds=seconds,
            memory=memory,
            allow=allow,
            resolver=resolver,
            budget=budget,
            sandbox=use_sandbox,
            max_html_chars=max_html_chars,
        )
        try:
            yield pool
        finally:
            pool._closed = True
            for renderer in list(pool._live):
                renderer.close()
            nursery.cancel_scope.cancel("the render pool closed")


def _check_settings(workers: int, seconds: float, memory: int, max_html_chars: int) -> None:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"render_workers must be an integer >= 1 (got {workers!r})")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"render_seconds must be a finite number > 0 (got {seconds!r})")
    if not isinstance(memory, int) or memory < MIN_MEMORY:
        raise ValueError(f"render_memory must be at least {MIN_MEMORY} bytes (got {memory!r})")
    if max_html_chars < 1:
        raise ValueError(f"max_html_chars must be >= 1 (got {max_html_chars!r})")
