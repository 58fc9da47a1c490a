"""The web fetcher: a ``FetchFunc`` for real pages, safe, bounded and shaped for agents.

This module holds :class:`WebFetcher`, its pools and the redirect loop. What a failure tells
the agent is in ``_errors``, the response cache in ``_cache``, the URL and address guard in
``_guard``, the pinned connections in ``_net``, reading a response (its head, its redirect,
its body) in ``_response``, what robots.txt allows in ``_robots``, the submit-time option
checks in ``_options``, shaping in ``_shape`` (``question`` in ``_question``) and the worker
processes it runs in, in ``_isolate``; rendered pages (``render``) in ``_rendered``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from types import TracebackType
from typing import Final, TypeVar, final

import httpcore
import httpx
import trio

from ..._budget import CURRENT_SLOT, DEFAULT_BLOCK_LIMIT, HostBlocked, HostBudget, HostSlot
from ..._crawl import REDIRECT_SCOPE
from ..._errors import RetryLater, TargetError
from ..._headers import SECRETS, has_secrets, is_secret
from ..._model import Caller, Options, Result, Target
from ..._util import raise_single_exception_from_group
from ...stores._protocol import ResponseCache as CacheStore
from .._extract._isolate import ShapeLimits, Shaper, open_shaper, warms_up
from .._extract._options import validate_options
from .._guard._check import (
    Checked,
    Network,
    Resolver,
    check_url,
    redact_url,
    resolve_checked,
    system_resolver,
)
from .._guard._errors import (
    BUSY_STATUSES,
    busy_error,
    map_transport_errors,
    timeout_error,
)
from .._guard._limits import FairPool
from .._guard._net import PINS, PinnedBackend, PinnedTransport
from .._render._browser import DEFAULT_CHROMIUM
from .._render._rendered import Renders, RenderSettings, rendered_meta
from ._cache import ResponseCache, answers, from_cache, reads_cache
from ._notes import count_wait, counting_waits, render_hint, waited_meta
from ._response import (
    LOCATION,
    REDIRECTS,
    Download,
    Refused,
    hide_location,
    next_hop,
    read_page,
    read_robots,
)
from ._robots import ROBOTS_REDIRECTS, RobotsCache, RobotsVerdict, obey

logger = logging.getLogger("trio_batch.web")

T = TypeVar("T")

_SCOPES_KEPT: Final = 4096
"""URLs whose budget scope is remembered (the engine asks for a job's next target's scope
each time its rotation tries the job: 4.4 times a target on the real-page bench)."""
DEFAULT_USER_AGENT: Final = "trio-batch/0.1 (batch web fetcher for agents)"
_ACCEPT: Final = (
    "text/html,application/xhtml+xml,application/json;q=0.9,application/pdf;q=0.9,"
    "text/*;q=0.8,*/*;q=0.5"
)


class _NoCookies(httpx.Cookies):
    """A cookie jar that keeps nothing: :meth:`extract_cookies` reads no ``Set-Cookie``.

    httpx reads every response's ``Set-Cookie`` into its client's jar, building urllib's
    request and response twins first (the URL parsed again): 0.1 ms a response on a 2-core
    machine (bench.fleet, instant pages), for a jar whose policy refused every cookie anyway.
    """

    def __init__(self) -> None:
        super().__init__(CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])))

    def extract_cookies(self, response: httpx.Response) -> None:
        """Keep no cookie of ``response``."""


class _CookielessClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` that never keeps a cookie: one client serves every caller, and
    a site's cookies must never reach the next one (a caller sends its own in
    ``options.headers``)."""

    _no_cookies: Final = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        """The jar: always empty."""
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        """Ignored: this client keeps no cookie."""


@final
@dataclass(frozen=True, slots=True)
class WebFetcherStatistics:
    """A snapshot of a :class:`WebFetcher`'s pool, for debugging and metrics."""

    in_flight: int
    """Fetches holding a pool slot now."""
    waiting: int
    """Fetches waiting for a pool slot."""
    pool_size: int
    """Most fetches in flight at once (the ``pool_size`` setting)."""
    callers: int
    """Callers with a fetch in flight or waiting."""


def _origin(checked: Checked) -> tuple[str, str, int]:
    return checked.url.scheme, checked.host, checked.port


@dataclass(frozen=True, slots=True)
class _Sent:
    """A target's own request headers: all of them for its exact origin (scheme, host and
    port), and without its credentials for every hop from the first one to another origin."""

    given: Mapping[str, str]
    """The target's headers as the caller gave them (credentials opened), for the checks."""
    origin: dict[str, str]
    elsewhere: dict[str, str]


_NONE_SENT: Final = _Sent({}, {}, {})


class LeftScope(Exception):
    """A redirect out of a crawl's scope, not followed (``trio_batch._crawl.REDIRECT_SCOPE``):
    the page's answer is the redirect itself, its ``Location`` in ``meta["redirect"]``."""

    def __init__(self, status: int, page: Checked, location: Checked, redirects: int) -> None:
        super().__init__("a redirect out of the crawl's scope")
        self.status = status
        self.page = page
        self.location = location
        self.redirects = redirects

    def result(self, elapsed: float, robots_meta: Mapping[str, object]) -> Result:
        """The redirect as a page with no content."""
        meta: dict[str, object] = {
            "url": redact_url(str(self.page.url)),
            "status": self.status,
            "redirect": redact_url(str(self.location.url)),
            "redirects": self.redirects,
            "elapsed": elapsed,
            "cached": False,
            **robots_meta,
        }
        return Result("", meta)


@final
class WebFetcher:
    """A fetch function for real web pages (SPEC §6), used as ``fetch=`` of the engine.

    ::

        async with WebFetcher(store=store) as fetch:
            async with open_engine(store, fetch) as engine:
                ...

    Every call checks the URL (:func:`precheck`), serves a fresh cached copy if there is one
    (and it is younger than the target's ``max_age``),
    takes a slot of the per-caller pool and of the global pool, resolves the host once and
    refuses it unless every address is allowed, connects to those checked addresses only,
    follows at most ``max_redirects`` redirects (each checked the same way), reads at most
    ``max_bytes`` of body, all within ``timeout`` seconds of Trio's clock; then it shapes the
    body as the target's options ask: in a worker process with a CPU-time and a memory limit
    (killed and replaced when it goes over), or, when that is cheap and bounded whatever the
    body says (plain text, JSON without jq), in a thread.

    Args:
        store: where the response cache lives (``cache_get``/``cache_put``); None, no cache.
            Each cache read and write is waited for ``CACHE_WAIT`` (1 s) at most: a read that
            takes longer is a miss, a write that takes longer is left to the store (logged).
        timeout: seconds for one fetch: DNS, connect, redirects and body (``trio.fail_after``).
        max_bytes: most body bytes read (after decompression), counted while streaming.
        max_redirects: most redirects followed.
        user_agent: the ``User-Agent`` header.
        pool_size: most fetches in flight at once, over all callers.
        per_caller: most fetches in flight at once for one caller (by name), whether or not
            others wait; None (the default): no cap of its own, a caller alone may use the
            whole pool, and while callers wait each slot that comes free goes to the waiting
            caller that holds fewest.
        slot_wait: seconds to wait for a pool slot before raising ``RetryLater``.
        resolver: ``async (host, port) -> [ip, ...]``; the system's resolver by default.
        allow: networks the guard lets through although they are not public (e.g. loopback
            for a local demo).
        transport: an httpx transport to use instead of the network (tests); the guard still
            resolves and checks every hop, but the transport decides where requests go.
        network_backend: the httpcore backend the checked connections go through (tests that
            record connection attempts); Trio's by default.
        ssl_context: the TLS settings, e.g. to trust a private CA; httpx's defaults (certifi
            roots, host name checks) when None. The fetcher itself never turns checks off.
        cache_ttl: seconds a cached response is served fresh (less if ``Cache-Control``
            ``max-age`` says so).
        cache_max_bytes: bytes the response cache may hold; the oldest entries go first.
        restricted: whether a caller is ``restricted``: its cache entries are its own. Fleet
            callers share one cache.
        max_retry_after: the most seconds of an upstream ``Retry-After`` that is honoured.
        wall_clock: unix time for cache timestamps and HTTP-date ``Retry-After`` values.
        shape_workers: worker processes that shape bodies (jq, grep, HTML, PDF, long
            ``question``s), so at most this many at once. A caller alone may use them all;
            while callers wait, each worker that comes free goes to the waiting caller that
            holds fewest, so a caller waits for one shaping job at most. The first starts with
            the first fetch that may need one (``shape_warm``), not when a body is in hand.
        shape_cpu_seconds: CPU seconds one target's shaping may use (and twice that plus 5 s
            of wall time); over it, the worker is killed and the target fails (422).
        shape_memory: bytes of address space of each shaping worker (at least 256 MiB); a
            target that needs more fails (422).
        shape_warm: start a shaping worker when the first fetch that may need one begins,
            beside its download (a worker takes 0.3-2 s to start); False: each starts when a
            body first needs it.
        budget: the host budget every request of this fetcher takes (a target's first request
            runs in the slot the engine took for it, see :meth:`scope`); None: no budget.
        robots: obey each site's robots.txt (RFC 9309) unless a target's ``Options.robots``
            says otherwise: a disallowed URL fails (403) without a request, a ``Crawl-delay``
            spaces the host through ``budget`` (docs/politeness.md).
        render_workers: headless browsers for targets with ``Options.render`` (docs/render.md),
            none before the first render; each renders one page at a time; a render that finds
            them all busy for ``slot_wait`` raises ``RetryLater``.
        render_seconds: one render's time limit, from navigation to DOM (the fetch's own
            ``timeout`` does not apply to a render); past it the browser is killed (504).
        render_memory: bytes one browser's processes may hold together (at least 256 MiB);
            past it the browser is killed (422).
        render_executable: the Chromium to run (Debian's ``/usr/bin/chromium``); when it is
            missing, each render fails (501) with a hint naming the package.

    Raises:
        ValueError: a non-positive number (or a ``shape_memory`` under 256 MiB), naming the
            setting.
    """

    def __init__(
        self,
        *,
        store: CacheStore | None = None,
        timeout: float = 30.0,
        max_bytes: int = 10 * 2**20,
        max_redirects: int = 5,
        user_agent: str = DEFAULT_USER_AGENT,
        pool_size: int = 8,
        per_caller: int | None = None,
        slot_wait: float = 1.0,
        resolver: Resolver | None = None,
        allow: Sequence[Network] = (),
        transport: httpx.AsyncBaseTransport | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
        cache_ttl: float = 300.0,
        cache_max_bytes: int = 32 * 2**20,
        restricted: Callable[[Caller], bool] = lambda caller: False,
        max_retry_after: float = 120.0,
        wall_clock: Callable[[], float] = time.time,
        shape_workers: int = 2,
        shape_cpu_seconds: float = 10.0,
        shape_memory: int = 2**30,
        shape_warm: bool = True,
        budget: HostBudget | None = None,
        robots: bool = False,
        render_workers: int = 2,
        render_seconds: float = 30.0,
        render_memory: int = 2**30,
        render_executable: str = DEFAULT_CHROMIUM,
    ) -> None:
        for name, value in (
            ("timeout", timeout),
            ("max_bytes", max_bytes),
            ("pool_size", pool_size),
            ("per_caller", 1 if per_caller is None else per_caller),
            ("slot_wait", slot_wait),
            ("cache_ttl", cache_ttl),
            ("cache_max_bytes", cache_max_bytes),
            ("max_retry_after", max_retry_after),
        ):
            if not value > 0:
                raise ValueError(f"WebFetcher {name} must be > 0 (got {value!r})")
        if max_redirects < 0:
            raise ValueError(f"WebFetcher max_redirects must be >= 0 (got {max_redirects!r})")
        self._store = store
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._max_redirects = max_redirects
        self._user_agent = user_agent
        self._pool_size = pool_size
        self._slot_wait = slot_wait
        self._resolver: Resolver = resolver or system_resolver
        self._allow = tuple(allow)
        self._transport = transport
        self._network_backend = network_backend
        self._ssl_context = ssl_context
        self._cache = ResponseCache(
            store,
            ttl=cache_ttl,
            max_bytes=cache_max_bytes,
            restricted=restricted,
            wall_clock=wall_clock,
        )
        self._max_retry_after = max_retry_after
        self._wall_clock = wall_clock
        self._budget = budget
        self._robots = RobotsCache(self._robots_get)
        self._obey_robots_by_default = robots
        self._scopes: dict[str, str | None] = {}
        self._pool = FairPool(pool_size, cap=per_caller)
        self._per_caller = per_caller
        self._warm = shape_warm
        self._shape_limits = ShapeLimits(shape_workers, shape_cpu_seconds, shape_memory)
        self._shaper: Shaper | None = None
        self._renders = Renders(
            RenderSettings(render_workers, render_seconds, render_memory, render_executable),
            user_agent=user_agent,
            slot_wait=slot_wait,
            max_bytes=max_bytes,
            max_retry_after=max_retry_after,
            wall_clock=wall_clock,
        )
        self._stack = contextlib.AsyncExitStack()
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    # -- lifetime ---------------------------------------------------------------------------------

    async def __aenter__(self) -> WebFetcher:
        """Open the connection pool; a fetcher is entered once, in one ``async with`` block.

        Cancellation: entering opens no connection (the first fetch does) and starts no
        process (the first job that needs a shaping worker does, the first render a browser),
        so there is nothing for a cancel to leave half open.

        Raises:
            trio.ClosedResourceError: the fetcher was open before and is closed now.
            RuntimeError: the fetcher is open already (entered in an outer block).
        """
        if self._closed:
            raise trio.ClosedResourceError(
                "this WebFetcher is closed, and a fetcher is entered only once; "
                "make a new one with `async with WebFetcher(...) as fetch:`"
            )
        if self._client is not None:
            raise RuntimeError(
                "this WebFetcher is open already; enter it in one `async with` block only"
            )
        transport = self._transport or PinnedTransport(
            PinnedBackend(self._network_backend or httpcore.TrioBackend(), self._check_host),
            max_connections=self._pool_size,
            ssl_context=self._ssl_context,
        )
        client = _CookielessClient(
            transport=transport,
            follow_redirects=False,
            trust_env=False,  # no proxies from the environment: they would bypass the guard
            timeout=httpx.Timeout(self._timeout),
            headers={"User-Agent": self._user_agent, "Accept": _ACCEPT},
            event_hooks={"response": [hide_location]},
        )
        async with contextlib.AsyncExitStack() as stack:
            self._shaper = await stack.enter_async_context(open_shaper(self._shape_limits))
            renders = self._renders
            await renders.open(allow=self._allow, resolver=self._resolver, budget=self._budget)
            stack.push_async_callback(renders.aclose)
            await stack.enter_async_context(client)
            self._stack = stack.pop_all()
        self._client = client
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the fetcher: :meth:`aclose`, with the same guarantees under cancellation."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; closing again does nothing.

        Calls and ``async with`` after this raise :class:`trio.ClosedResourceError`. Fetches
        still in flight are not waited for, so close the fetcher after them: with the engine's
        block inside the fetcher's, the engine has cancelled its fetches by then. Cache reads
        and writes left behind (over ``CACHE_WAIT``) are cancelled; a queued write still lands.

        Shaping workers end too: closing waits for jobs still running in them (each within its
        wall time, ``2 * shape_cpu_seconds + 5``), then ends the idle ones; a worker that does
        not end cleanly is logged and killed, never raised.

        Cancellation: the fetcher is closed even if this raises :class:`trio.Cancelled`: it is
        marked closed before the first checkpoint, httpcore shields the closing of pooled
        connections, and trio-parallel shields the end of its workers, so none is left open.
        """
        client, self._client = self._client, None
        self._closed = True
        self._shaper = None
        self._cache.close()
        if client is None:
            await trio.lowlevel.checkpoint()
            return
        await self._stack.aclose()

    def statistics(self) -> WebFetcherStatistics:
        """The pool's state now."""
        stats = self._pool.statistics()
        return WebFetcherStatistics(
            in_flight=stats.held,
            waiting=stats.waiting,
            pool_size=self._pool_size,
            callers=stats.callers,
        )

    # -- the fetch function -------------------------------------------------------------------

    def scope(self, target: Target) -> str | None:
        """The budget scope of ``target``: its host and port, as the fetcher connects to them.

        Give it to :func:`~trio_batch.open_engine` (``scope=``) with the same
        :class:`~trio_batch.HostBudget` as this fetcher's ``budget``. A URL the guard refuses
        has no scope (None): it fails without a request.
        """
        url = target.url
        if url in self._scopes:  # asked again each time the rotation tries the job
            return self._scopes[url]
        try:
            found: str | None = check_url(url, self._allow).scope
        except TargetError:
            found = None
        if len(self._scopes) >= _SCOPES_KEPT:
            self._scopes.clear()
        self._scopes[url] = found
        return found

    async def fetch_one(self, caller: Caller, target: Target) -> Result:
        """Fetch one target now, through the same pools and cache (``POST /v1/fetch``).

        The same as calling the fetcher. A ``RetryLater`` (upstream 429/503 or a full pool)
        reaches the caller, whose API answers it with 429/503 and ``Retry-After``.
        """
        return await self(caller, target)

    async def __call__(self, caller: Caller, target: Target) -> Result:
        """Fetch ``target`` for ``caller`` and shape it as its options ask.

        Returns:
            The content, with ``meta``: ``url`` (final, redacted), ``status``,
            ``content_type``, ``bytes``, ``elapsed``, ``redirects``, ``mode``, ``cached``, and
            what the options add (``title``, ``page_count``/``pages``, ``matches``,
            ``passages``/``paragraphs``, ``jq_results``; ``stale``/``age``/``error`` when
            ``recover`` served an old copy); ``waited`` (``{"seconds"}``) when the fetch
            waited for a host's slot, and ``hint`` when an HTML page's text is tiny and it has
            scripts (try ``render``).

        Raises:
            RetryLater: the site answered 429 or 503 (``after`` = its ``Retry-After``, capped),
                or no pool slot came free within ``slot_wait``.
            TargetError: anything else; ``status`` is what a single fetch would answer and
                ``hint`` says what the agent can do.
            trio.ClosedResourceError: the fetcher is closed (its ``async with`` block ended).
            RuntimeError: the fetcher was never opened (use ``async with``).

        Cancellation: a cancelled call is abandoned and raises :class:`trio.Cancelled`: the
        slots it held or waited for are given back, and a request in flight is dropped with its
        connection (httpcore closes, and never reuses, a connection cancelled mid-exchange).
        Shaping in a worker process is killed at once (the worker is replaced); shaping in a
        thread (cheap and short, see ``docs/web.md``) is not abandoned, so a cancel that
        arrives then takes effect when the thread is done. Nothing is cached for a cancelled
        call, unless the cancel arrives after the store began writing the entry (whether a
        store's write can be cancelled is the store's contract); a cache read or write that
        the store has not finished within ``CACHE_WAIT`` (1 s) is not waited for either, and
        is cancelled as far as the store allows (``_cache``). The engine cancels its
        fetches only when it closes (or its block is cancelled), and stores no outcome for a
        cancelled fetch.
        """
        client = self._client
        if client is None:
            if self._closed:
                raise trio.ClosedResourceError(
                    "this WebFetcher is closed; fetch inside its `async with` block, "
                    "or make a new one"
                )
            raise RuntimeError(
                "the WebFetcher is not open; use `async with WebFetcher(...) as fetch:`"
            )
        await trio.lowlevel.checkpoint()
        start = trio.current_time()
        options = target.options
        sent = self._sent(caller, target)  # a credential that does not open: 410, no request
        validate_options(
            dataclasses.replace(options, headers=sent.given) if sent.given else options
        )
        checked = check_url(target.url, self._allow)
        if options.render:  # never cached: its page's Cache-Control is not known (docs/web.md)
            return await self._rendered(caller, target, checked, sent, start)
        # A target with credentials neither reads nor writes the shared cache.
        key = None if has_secrets(options.headers) else self._cache.key(caller, target)
        cached = None if key is None or not reads_cache(options) else await self._cache.get(key)
        now = self._wall_clock()
        if cached is not None and answers(cached, now, options.max_age):
            return from_cache(cached, start=start, now=now, stale=None)
        with counting_waits() as waits:  # for its hosts' slots (_slot): meta.waited
            robots_meta = await self._robots_for(target, checked)
            obeys = self._obeys_robots(options)
            try:
                download = await self._warming_if_first(
                    options,
                    functools.partial(self._fetch_network, client, caller, checked, sent, obeys),
                )
            except Refused as refused:
                logger.debug("web fetch refused by the guard")
                raise refused.error from None
            except LeftScope as left:
                return left.result(round(trio.current_time() - start, 3), robots_meta)
            except TargetError as error:
                logger.debug("web fetch failed: status=%d", error.status)
                if options.recover and cached is not None:
                    return from_cache(cached, start=start, now=self._wall_clock(), stale=error)
                raise
        shaper = self._shaper
        assert shaper is not None  # set with the client
        _requests_done()
        content, extra = await shaper.run(caller.name, download.body, options)
        meta: dict[str, object] = {
            "url": redact_url(download.body.url),
            "status": download.status,
            "content_type": download.body.content_type,
            "bytes": len(download.body.data),
            "elapsed": round(trio.current_time() - start, 3),
            "redirects": download.redirects,
            "cached": False,
            **robots_meta,
            **extra,
            **render_hint(download.body, content, options),
        }
        # Shaping in a thread ignores a cancel until it is done: honour it before caching.
        await trio.lowlevel.checkpoint_if_cancelled()
        if key is not None:
            await self._cache.put(key, caller, content, meta, download.cache_control)
        meta.update(waited_meta(waits))  # this fetch's, not a later cache hit's
        logger.debug(
            "web fetch done: status=%d bytes=%d redirects=%d",
            download.status,
            len(download.body.data),
            download.redirects,
        )
        return Result(content, meta)

    def _sent(self, caller: Caller, target: Target) -> _Sent:
        """The target's request headers, its credentials opened from what the HTTP API stored
        (``trio_batch._headers.SECRETS``: sealed with the secrets key, or held in this
        process's memory); a ``User-Agent`` comes after ours.

        Raises:
            TargetError: a credential that does not open here (410, with a hint).
        """
        if not target.options.headers:
            return _NONE_SENT
        given = SECRETS.unseal(caller.name, target.options.headers, url=target.url)
        headers = dict(given)
        if "User-Agent" in headers:
            headers["User-Agent"] = f"{self._user_agent} {headers['User-Agent']}"
        return _Sent(given, headers, {k: v for k, v in headers.items() if not is_secret(k)})

    # -- network ----------------------------------------------------------------------------------

    def _obeys_robots(self, options: Options) -> bool:
        """Whether a target with ``options`` obeys robots.txt: its ``robots``, else the
        fetcher's default (``robots=``)."""
        return self._obey_robots_by_default if options.robots is None else options.robots

    async def _robots_for(self, target: Target, checked: Checked) -> dict[str, object]:
        """:meth:`_obey_robots` when the target (or, by default, this fetcher) obeys robots.txt."""
        return await self._obey_robots(checked) if self._obeys_robots(target.options) else {}

    async def warm(self) -> None:
        """Start a shaping worker now, instead of beside the first fetch that may need one.

        A service calls this as it starts (``trio-batch serve`` does): its first page then
        waits for no worker, and the worker's start (a Python interpreter and the shaping
        imports: 0.2-0.3 s of CPU) does not fall amid the load it came for, where on a busy
        machine it is CPU taken from the requests. The first fetch afterwards starts no
        other; the rest of the workers start when jobs first need them, as always.

        Raises:
            trio.ClosedResourceError: the fetcher is closed.
            RuntimeError: the fetcher is not open.

        Cancellation: a worker still starting is killed; the next fetch that may need one
        starts it as if this had not been called.
        """
        shaper = self._shaper
        if shaper is None:
            if self._closed:
                raise trio.ClosedResourceError("this WebFetcher is closed")
            raise RuntimeError("the WebFetcher is not open; warm it inside its `async with`")
        warm, self._warm = self._warm, False
        try:
            await shaper.warm()
        except BaseException:
            self._warm = warm
            raise

    async def _warming_if_first(self, options: Options, work: Callable[[], Awaitable[T]]) -> T:
        """``work()``; for the first fetch that may need a shaping worker, while one starts.

        The call waits for the worker (this call's body is shaped in it; a body that needs none
        waits once), so nothing outlives the call; a cancel kills the worker still starting.
        """
        shaper = self._shaper
        assert shaper is not None  # set with the client
        if not (self._warm and warms_up(options)):
            return await work()
        self._warm = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(shaper.warm)
                return await work()
        except BaseExceptionGroup as group:
            raise_single_exception_from_group(group)
            raise

    @contextlib.asynccontextmanager
    async def _fetch_slot(self, caller: Caller) -> AsyncIterator[None]:
        """Hold a slot of the fetch pool for ``caller``, waited for ``slot_wait`` at most.

        Raises:
            RetryLater: no slot came free in time.
        """
        pool = self._pool
        with trio.move_on_after(self._slot_wait) as waited:
            await pool.acquire(caller.name)
        if waited.cancelled_caught:
            capped = self._per_caller is not None and pool.held(caller.name) >= self._per_caller
            which = "this caller's fetch slots are" if capped else "the fetch pool is"
            raise RetryLater(f"{which} all in use")
        try:
            yield
        finally:
            pool.release(caller.name)

    async def _fetch_network(
        self,
        client: httpx.AsyncClient,
        caller: Caller,
        checked: Checked,
        sent: _Sent,
        robots: bool,
    ) -> Download:
        """Take the pool slots, then download within the deadline (each redirect hop checked
        against its host's robots.txt with ``robots``)."""
        async with self._fetch_slot(caller):
            try:
                with trio.fail_after(self._timeout):
                    return await self._download(
                        client, checked, self._read, sent, robots=robots, scoped=True
                    )
            except trio.TooSlowError:
                raise timeout_error(self._timeout) from None

    # -- rendered pages (docs/render.md) ----------------------------------------------------------

    async def _rendered(
        self, caller: Caller, target: Target, checked: Checked, sent: _Sent, start: float
    ) -> Result:
        """A target with ``render``: robots.txt as for any target, a slot of the fetch pool,
        the page in a browser whose every request goes through the guard and the host budget
        (``_rendered``), then its DOM shaped as HTML. Nothing of it is cached."""
        robots_meta = await self._robots_for(target, checked)
        robots = self._robots_refusal if self._obeys_robots(target.options) else None
        load = functools.partial(self._renders.load, caller.name, target, sent.origin, robots)
        async with self._fetch_slot(caller):
            body, page = await self._warming_if_first(target.options, load)
        shaper = self._shaper
        assert shaper is not None  # set with the client
        _requests_done()
        content, extra = await shaper.run(caller.name, body, target.options)
        meta: dict[str, object] = {
            **rendered_meta(body, page),
            "elapsed": round(trio.current_time() - start, 3),
            "cached": False,
            **robots_meta,
            **extra,
        }
        return Result(content, meta)

    async def _download(
        self,
        client: httpx.AsyncClient,
        first: Checked,
        read: Callable[[httpx.Response, Checked, int], Awaitable[T]],
        sent: _Sent = _NONE_SENT,
        *,
        robots: bool = False,
        max_redirects: int | None = None,
        redirected_past: Callable[[httpx.Response], T] | None = None,
        scoped: bool = False,
    ) -> T:
        """Follow redirects through the guard, each hop in its host's budget; ``read`` reads
        the final answer (the page's :meth:`_read`, or robots.txt's). The target's headers
        (``sent``) go with each hop, its credentials only until a hop leaves its origin.

        With ``robots``, each hop after the first is checked against its own host's
        robots.txt before it is requested (the first is the caller's to check). Past
        ``max_redirects`` (the fetcher's by default) a redirect fails, unless
        ``redirected_past`` answers for it (robots.txt reads that as unavailable). A page's
        download (``scoped``) follows no redirect out of a crawl's scope (``REDIRECT_SCOPE``):
        :class:`LeftScope` answers for it."""
        most = self._max_redirects if max_redirects is None else max_redirects
        pins: dict[tuple[str, int], tuple[str, ...]] = {}
        token = PINS.set(pins)
        try:
            current = first
            headers = sent.origin
            for hop in range(most + 1):
                if _origin(current) != _origin(first):
                    headers = sent.elsewhere  # and so for every later hop, back home too
                if hop and robots:
                    await self._obey_robots(current, hop=True)
                pins[(current.host, current.port)] = await self._addresses(current, hop)
                slot = await self._slot(current)
                try:
                    with map_transport_errors(port=current.port, timeout=self._timeout):
                        request = client.build_request("GET", current.url, headers=headers)
                        response = await client.send(request, stream=True)
                except BaseException:
                    if slot is not None:
                        slot.release()
                    raise
                if slot is not None:  # the engine releases its own slot, with the outcome
                    slot.release(
                        rate_limited=response.status_code in BUSY_STATUSES,
                        retry_after=self._retry_after(response),
                    )
                try:
                    with map_transport_errors(port=current.port, timeout=self._timeout):
                        location = response.headers.get(LOCATION)
                        if response.status_code in REDIRECTS and location:
                            if hop >= most and redirected_past is not None:
                                return redirected_past(response)
                            going = next_hop(
                                current, location, hop, max_redirects=most, allow=self._allow
                            )
                            stays = REDIRECT_SCOPE.get() if scoped else None
                            if stays is not None and not stays(str(going.url)):
                                raise LeftScope(response.status_code, current, going, hop + 1)
                            current = going
                            continue
                        return await read(response, current, hop)
                finally:
                    await response.aclose()
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            PINS.reset(token)

    async def _obey_robots(self, checked: Checked, *, hop: bool = False) -> dict[str, object]:
        """Refuse a URL the site's robots.txt disallows (with ``robots=True``); space its host
        by its ``Crawl-delay``. Returns what the result's ``meta`` says of a capped delay.

        The URL is checked as it is sent (``checked.url``: dot segments resolved, escaped as
        on the wire), not as it was written. ``hop``: it is where a redirect leads.

        Raises:
            TargetError: disallowed (403, quoting the rule), or the file stayed unreachable
                past the host's block limit (503).
            RetryLater: the file is unreachable for now: the host is backed off as for a 503.
        """
        verdict = await self._verdict(checked)
        block_limit = self._budget.block_limit if self._budget is not None else DEFAULT_BLOCK_LIMIT
        return obey(verdict, block_limit=block_limit, hop=hop)

    async def _verdict(self, checked: Checked) -> RobotsVerdict:
        """robots.txt's verdict on ``checked.url``; its ``Crawl-delay`` goes to the budget."""
        verdict = await self._robots.check(str(checked.url))
        if verdict.crawl_delay and self._budget is not None:
            self._budget.set_crawl_delay(checked.scope, verdict.crawl_delay)
        return verdict

    async def _robots_verdict(self, url: str) -> RobotsVerdict:
        """What robots.txt says of ``url`` (fetching its origin's file through the guard and
        the host budget if it is not cached), and its ``Crawl-delay`` given to the budget: the
        check of a rendered page's requests (:meth:`_robots_refusal`).

        Raises:
            TargetError: the URL is not one the guard accepts (400/403).
            ValueError: the URL is not http(s).
        """
        return await self._verdict(check_url(url, self._allow))

    async def _robots_refusal(self, url: str) -> str | None:
        """Why robots.txt stops ``url``, a request of a rendered page (the rule, or that the
        file cannot be read now, which disallows everything: RFC 9309 §2.3.1.4); None when
        it may go, or when robots.txt has no say (``data:``, an address the guard refuses:
        the proxy refuses that)."""
        try:
            verdict = await self._robots_verdict(url)
        except (TargetError, ValueError):
            return None
        except RetryLater:
            return "robots.txt could not be read"
        if verdict.unreachable:
            return "robots.txt could not be read"
        return None if verdict.allowed else verdict.rule or "Disallow"

    async def _robots_get(self, url: str) -> tuple[int, bytes]:
        """GET a robots.txt through the guard and its host's budget (not the fetch pool):
        the status and at most ``MAX_ROBOTS_BYTES + 1`` bytes, redirects followed (at least
        five, RFC 9309 §2.3.1.2; past them, the last 3xx status, read as unavailable)."""
        client = self._client
        if client is None:
            raise trio.ClosedResourceError("the WebFetcher is closed")
        checked = check_url(url, self._allow)
        with trio.fail_after(self._timeout):
            return await self._download(
                client,
                checked,
                read_robots,
                max_redirects=max(self._max_redirects, ROBOTS_REDIRECTS),
                redirected_past=lambda response: (response.status_code, b""),
            )

    async def _slot(self, current: Checked) -> HostSlot | None:
        """A slot of the hop's host in the budget, unless the engine holds one for it already.

        Every request takes its host's budget, whatever its door (a target of a job, ``/v1/fetch``,
        a redirect to another host): None means the request runs in the engine's slot (or
        there is no budget). Waiting for a slot is bounded by the host's ``block_limit``.

        Raises:
            RetryLater: the host stayed blocked (429/503 answers) past the block limit.
        """
        budget = self._budget
        if budget is None:
            return None
        scope = current.scope
        held = CURRENT_SLOT.get()
        if held is not None and held.scope == scope:
            return None
        try:
            slot = await budget.acquire(scope)
        except HostBlocked as blocked:
            raise RetryLater(str(blocked)) from None
        count_wait(slot.waited)  # meta.waited
        return slot

    def _retry_after(self, response: httpx.Response) -> float | None:
        if response.status_code not in BUSY_STATUSES:
            return None
        return busy_error(
            response.status_code,
            response.headers.get("retry-after"),
            now=self._wall_clock(),
            cap=self._max_retry_after,
        ).after

    async def _addresses(self, current: Checked, hop: int) -> tuple[str, ...]:
        """The checked addresses to connect to for this hop's host."""
        if current.literal is not None:
            return (str(current.literal),)
        addresses = await self._check_host(current.host, current.port, hop=hop)
        return addresses

    async def _check_host(self, host: str, port: int, *, hop: int = 0) -> tuple[str, ...]:
        """Resolve ``host`` once and check every answer.

        Raises:
            Refused: an answer is not allowed (status 403).
            TargetError: the name does not resolve (status 502).
        """
        checked = await resolve_checked(self._resolver, host, port, self._allow)
        if checked == ():
            raise TargetError(
                "the host name does not resolve" + (" (after a redirect)" if hop else ""),
                hint="check the spelling of the host; the site may be gone",
                status=502,
            )
        if checked is None:
            where = "the page redirects to a host that" if hop else "the host name"
            raise Refused(
                TargetError(
                    f"{where} resolves to a private or otherwise non-public address",
                    hint="only public web addresses can be fetched; the operator can allow "
                    "this network",
                    status=403,
                )
            )
        return checked

    async def _read(self, response: httpx.Response, current: Checked, hop: int) -> Download:
        return await read_page(
            response,
            current,
            hop,
            max_bytes=self._max_bytes,
            now=self._wall_clock(),
            cap=self._max_retry_after,
        )


def _requests_done() -> None:
    """A target's requests are done (its body is in): give the engine's host slot back now.

    Shaping asks nothing of the host, and a slot held through it let one site's pages be
    shaped no more than ``host_concurrency`` at a time, each waiting for the one before to be
    shaped before its download could start (a file of one site as text ran at 0.7x the pages/s
    of raw). The engine's own release after the fetch does nothing then.
    """
    held = CURRENT_SLOT.get()
    if held is not None:
        held.release()
