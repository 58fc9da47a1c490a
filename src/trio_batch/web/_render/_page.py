"""One render in one browser context: navigate, wait until the page is ready, take its DOM.

The pool (``_render``) hands each render a :class:`BlankPage`: a fresh browser context with one
blank page whose events are on. :func:`load_page` navigates it, follows its events (lifecycle,
network, crashes, paused requests), waits for the condition (a CSS selector, or network idle:
loaded and no request in flight for ``IDLE_SECONDS``), and serializes the DOM.
:func:`close_blank_page` disposes of the context, which closes its pages, cookies, storage,
cache and connections.

Headers are added here. Each request is paused (``Fetch.requestPaused``) and continued with the
target's headers when it goes to the target's exact origin (scheme, host, port), and without
any credential header otherwise, including one the browser carried over a redirect.

robots.txt too (``robots``): every request of the page, of its frames (those in other
processes too: child targets are attached as they start) and of its dedicated workers is
paused and checked first; a disallowed one fails (``BlockedByClient``) before it leaves the
browser. Navigations of the page itself are paused always: past :data:`MAX_DOCUMENTS`
(a refresh or script loop), another is cancelled and the page stays as it is.

Network idle counts the requests of the documents on screen: a request of a document that
was replaced (a refresh, a navigation) or of a frame that went away (a frame that moved to
another process, a refused subframe) is no longer waited for, as its end is never reported.
"""

from __future__ import annotations

import contextlib
import json
import math
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, final

import trio

from ..._errors import TargetError
from ..._util import raise_single_exception_from_group
from ._cdp import CdpClosed, CdpConnection, CdpError, Message
from ._proxy import REFUSED_HEADER, RobotsCheck

CREDENTIALS: Final = frozenset({"cookie", "authorization"})
IDLE_SECONDS: Final = 0.5
"""How long the network must stay quiet for a page to count as ready (without ``wait_for``)."""
MAX_DOCUMENTS: Final = 6
"""Documents the page may load in its main frame: the target's and five more (meta refreshes,
script navigations, as many as redirects a fetch follows); a navigation past them is cancelled
and the DOM is taken as it is."""
_POLL_SECONDS: Final = 0.1
_DISPOSE_SECONDS: Final = 5.0


@final
@dataclass(frozen=True, slots=True)
class RenderedPage:
    """The DOM of a page after its scripts ran, as the browser serialized it."""

    html: str
    """``<!DOCTYPE html>`` (when the page has one) and the root element's outer HTML."""
    url: str
    """The address the page ended at (after redirects and script navigations)."""
    status: int
    """The HTTP status of the page's main document (0 when the browser did not report one)."""
    settled: bool
    """Whether the wait condition was met; False when ``max_wait`` passed first and the DOM was
    taken as it was."""
    refused: int
    """Requests of the page the guard refused (each answered 403 by the proxy)."""
    disallowed: int = 0
    """Requests of the page robots.txt disallowed (never sent), with ``robots`` on."""


@dataclass
class _PageState:
    """What the page's events told so far."""

    frame: str = ""
    """The main frame's id (the target's)."""
    loader: str = ""
    """The main frame's current document (its loader id)."""
    loaded: set[str] = field(default_factory=set)
    """Documents whose load event fired (events may come before the navigation's answer)."""
    statuses: dict[str, int] = field(default_factory=dict)
    """The HTTP status of each main-frame document."""
    refused: set[str] = field(default_factory=set)
    """Main-frame documents that are the proxy's refusal."""
    in_flight: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Requests of the page sent and not yet finished or failed: their frame and document."""
    documents: int = 0
    """Documents the main frame has begun (``init``), the target's included."""
    disallowed: int = 0
    """Requests robots.txt disallowed."""
    disallowed_rule: str = ""
    """The rule that disallowed a document of the main frame (a redirect of the target)."""
    changed: trio.Event = field(default_factory=trio.Event)
    failure: str = ""

    def forget(self, frame: str, keep: str | None = None) -> None:
        """Stop waiting for ``frame``'s requests (but those of its document ``keep``)."""
        stale = [r for r, (f, loader) in self.in_flight.items() if f == frame and loader != keep]
        for request in stale:
            del self.in_flight[request]

    def touch(self) -> None:
        """Wake whoever waits for the network to be quiet."""
        self.changed.set()
        self.changed = trio.Event()

    async def wait_network_idle(self) -> None:
        """Return once the document has loaded and no request has been in flight for
        ``IDLE_SECONDS`` (Playwright's ``networkidle``: WebSockets do not count)."""
        while True:
            changed = self.changed
            if self.loader in self.loaded and not self.in_flight:
                with trio.move_on_after(IDLE_SECONDS) as quiet:
                    await changed.wait()
                if quiet.cancelled_caught:
                    return
            else:
                await changed.wait()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    try:
        port = parts.port or default
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


@dataclass(eq=False)
class BlankPage:
    """A fresh browser context holding one blank page with its events on: ready for a URL.

    Opening one costs most of a render's fixed time (a new renderer process starts), so the pool
    opens the next one while a browser is idle.
    """

    cdp: CdpConnection
    context_id: str
    target_id: str
    session: str
    events: trio.MemoryReceiveChannel[Message]


async def open_blank_page(cdp: CdpConnection) -> BlankPage:
    """A new browser context (its own cookies, storage, cache; downloads denied) with one
    blank page, attached, with its page, lifecycle and network events on.

    Raises:
        CdpClosed, CdpError: the browser went away or refused.
    """
    context = await cdp.call("Target.createBrowserContext", {"disposeOnDetach": True})
    context_id = str(context.get("browserContextId", ""))
    try:
        await cdp.call(
            "Browser.setDownloadBehavior", {"behavior": "deny", "browserContextId": context_id}
        )
        target = await cdp.call(
            "Target.createTarget", {"url": "about:blank", "browserContextId": context_id}
        )
        target_id = str(target.get("targetId", ""))
        attached = await cdp.call("Target.attachToTarget", {"targetId": target_id, "flatten": True})
        session = str(attached.get("sessionId", ""))
        page = BlankPage(cdp, context_id, target_id, session, cdp.events(session))
        await _enable(cdp, session)
    except BaseException:
        if trio.current_effective_deadline() != -math.inf:
            await _dispose(cdp, context_id)
        raise
    return page


async def close_blank_page(page: BlankPage) -> None:
    """Dispose of the page's browser context (unless the caller is cancelled: its browser is
    then killed, as it may be stuck in the page)."""
    page.cdp.forget(page.session)
    if trio.current_effective_deadline() != -math.inf:
        await _dispose(page.cdp, page.context_id)


async def load_page(
    blank: BlankPage,
    url: str,
    *,
    wait_for: str | None,
    headers: dict[str, str],
    max_wait: float | None,
    max_html: int,
    refused: Callable[[], int],
    robots: RobotsCheck | None = None,
) -> RenderedPage:
    """Navigate ``blank`` to ``url``, wait for it to be ready, and serialize its DOM.

    ``headers`` go to ``url``'s exact origin only; ``refused`` counts the proxy's refusals since
    the render began; ``robots`` (None: robots.txt is not obeyed) is asked about every request
    of the page before it is sent.

    Raises:
        TargetError: refused (403: by the guard, or by robots.txt for a redirect of the
            target), navigation failed (502), invalid selector (400), DOM too large (413).
        CdpClosed, CdpError: the page's renderer crashed or the browser went away.
    """
    state = _PageState(frame=blank.target_id)
    page = _Page(blank.cdp, blank.session, headers, _origin(url), state, robots)
    await page.call("Fetch.enable", {"patterns": page.patterns()})
    if robots is not None:
        await page.call("Target.setAutoAttach", _AUTO_ATTACH)
    return await _load(page, blank.events, url, wait_for, max_wait, max_html, refused)


_AUTO_ATTACH: Final[Message] = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True}


async def _dispose(cdp: CdpConnection, context_id: str) -> None:
    """Close a page's browser context (its pages, cookies, storage, cache, connections)."""
    with (
        trio.move_on_after(_DISPOSE_SECONDS, shield=True) as disposing,
        contextlib.suppress(CdpClosed, CdpError),
    ):
        await cdp.call("Target.disposeBrowserContext", {"browserContextId": context_id})
    if disposing.cancelled_caught:  # a browser that hangs is not given another page
        cdp.abandon("the browser did not dispose of a page's context")


@dataclass
class _Page:
    cdp: CdpConnection
    session: str
    headers: dict[str, str]
    origin: tuple[str, str, int | None]
    state: _PageState = field(default_factory=_PageState)
    robots: RobotsCheck | None = None
    children: set[str] = field(default_factory=set)
    """Sessions of the attached frames and workers (their events come with the page's)."""

    async def call(self, method: str, params: Message | None = None) -> Message:
        return await self.cdp.call(method, params, session=self.session)

    def patterns(self) -> list[Message]:
        """The requests to pause: every one with headers or robots, else documents only."""
        if self.headers or self.robots is not None:
            return [{"urlPattern": "*"}]
        return [{"urlPattern": "*", "resourceType": "Document"}]


async def _load(
    page: _Page,
    events: trio.MemoryReceiveChannel[Message],
    url: str,
    wait_for: str | None,
    max_wait: float | None,
    max_html: int,
    refused: Callable[[], int],
) -> RenderedPage:
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_follow_events, page, events, nursery)
            settled = await _navigate_and_wait(page, url, wait_for, max_wait, refused)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise
    finally:
        for child in page.children:
            page.cdp.forget(child)
    if page.state.failure:
        raise CdpClosed(page.state.failure)
    if page.state.loader in page.state.refused:
        raise _refused_error()
    html, final_url = await _snapshot(page, max_html)
    if final_url.startswith("chrome-error:"):
        _check_navigation(page, {"errorText": "the page's own navigation failed"}, refused())
    return RenderedPage(
        html=html,
        url=final_url,
        status=page.state.statuses.get(page.state.loader, 0),
        settled=settled,
        refused=refused(),
        disallowed=page.state.disallowed,
    )


async def _navigate_and_wait(
    page: _Page,
    url: str,
    wait_for: str | None,
    max_wait: float | None,
    refused: Callable[[], int],
) -> bool:
    """Navigate and wait for the condition; whether it was met before ``max_wait``."""
    navigated = await page.call("Page.navigate", {"url": url})
    _check_navigation(page, navigated, refused())
    page.state.loader = str(navigated.get("loaderId", ""))
    with trio.move_on_after(math.inf if max_wait is None else max_wait):
        if wait_for is not None:
            await _wait_selector(page, wait_for)
        else:
            await page.state.wait_network_idle()
        return True
    return False


async def _enable(cdp: CdpConnection, session: str) -> None:
    """Turn on the page's events, the commands sent at once (each waits on the new renderer
    process starting up)."""
    commands: list[tuple[str, Message | None]] = [
        ("Page.enable", None),
        ("Page.setLifecycleEventsEnabled", {"enabled": True}),
        ("Network.enable", None),
    ]

    async def call(method: str, params: Message | None) -> None:
        await cdp.call(method, params, session=session)

    try:
        async with trio.open_nursery() as nursery:
            for method, params in commands:
                nursery.start_soon(call, method, params)
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise


def _refused_error() -> TargetError:
    return TargetError(
        "the page's address, or one it redirected to, resolves to a private or otherwise "
        "non-public address",
        hint="only public web addresses can be fetched; the operator can allow this network",
        status=403,
    )


def _check_navigation(page: _Page, navigated: Message, refused: int) -> None:
    error = navigated.get("errorText")
    if not error:
        return
    if page.state.disallowed_rule:
        raise TargetError(
            "the page redirects to a URL that robots.txt disallows for trio-batch "
            f"({page.state.disallowed_rule})",
            hint="the site asks crawlers not to fetch this path: fetch a page it allows, "
            "or ask its operator",
            status=403,
        )
    if refused:
        raise _refused_error()
    raise TargetError(
        f"the browser could not load the page ({error})",
        hint="check that the address works; the site may be down",
        status=502,
    )


async def _follow_events(
    page: _Page, events: trio.MemoryReceiveChannel[Message], nursery: trio.Nursery
) -> None:
    """Keep the page's state from its events; a crash or a lost channel ends the render.

    A paused request is handled in a task of its own (asking robots.txt may take a request),
    so the events go on meanwhile."""
    state = page.state
    async for event in events:
        method = event.get("method")
        params = event.get("params")
        if not isinstance(params, dict):
            continue
        session = str(event.get("sessionId", page.session))
        if method == "Fetch.requestPaused":
            nursery.start_soon(_continue_request, page, params, session)
        elif method == "Target.attachedToTarget":
            nursery.start_soon(_attached, page, params)
        elif session != page.session:
            continue  # a child's other events (its frame's lifecycle is the page's too)
        elif method == "Page.lifecycleEvent":
            _on_lifecycle(state, params)
        elif method == "Page.frameDetached":
            state.forget(str(params.get("frameId", "")))
            state.touch()
        elif method == "Network.responseReceived":
            _on_response(state, params)
        elif method in _NETWORK_EVENTS:
            _on_network(state, method, params)
        elif method in ("Inspector.targetCrashed", "Inspector.detached"):
            break
    state.failure = "the page's renderer crashed or went away"
    nursery.cancel_scope.cancel()


_NETWORK_EVENTS: Final = frozenset(
    {"Network.requestWillBeSent", "Network.loadingFinished", "Network.loadingFailed"}
)


def _on_lifecycle(state: _PageState, params: dict[str, object]) -> None:
    frame = str(params.get("frameId", ""))
    name = params.get("name")
    loader = str(params.get("loaderId", ""))
    if name == "init":  # a new document: the frame's older ones' requests end unreported
        state.forget(frame, keep=loader)
    if frame != state.frame:
        return
    if name == "init":
        state.documents += 1
        if state.loader:  # a later navigation (a script's, a refresh)
            state.loader = loader
    elif name == "load":
        state.loaded.add(loader)
    state.touch()


def _on_network(state: _PageState, method: object, params: dict[str, object]) -> None:
    request = str(params.get("requestId", ""))
    if method == "Network.requestWillBeSent":
        state.in_flight[request] = (str(params.get("frameId", "")), str(params.get("loaderId", "")))
    else:
        state.in_flight.pop(request, None)
    state.touch()


def _on_response(state: _PageState, params: dict[str, object]) -> None:
    if params.get("type") != "Document" or params.get("frameId") != state.frame:
        return
    response = params.get("response")
    loader = str(params.get("loaderId", ""))
    if isinstance(response, dict):
        status = response.get("status")
        state.statuses[loader] = int(status) if isinstance(status, int | float) else 0
        headers = response.get("headers")
        if isinstance(headers, dict) and any(
            str(k).lower() == REFUSED_HEADER.lower() and v == "guard" for k, v in headers.items()
        ):
            state.refused.add(loader)


async def _attached(page: _Page, params: dict[str, object]) -> None:
    """A frame in another process or a worker started: pause its requests as the page's
    (robots.txt), attach its own children, then let it run."""
    session = params.get("sessionId")
    if not isinstance(session, str):
        return
    page.children.add(session)
    page.cdp.share(session, page.session)
    with contextlib.suppress(CdpError, CdpClosed):
        commands: tuple[tuple[str, Message], ...] = (
            ("Fetch.enable", {"patterns": page.patterns()}),
            ("Target.setAutoAttach", _AUTO_ATTACH),
        )
        async with trio.open_nursery() as nursery:
            for method, message in commands:
                nursery.start_soon(_quietly, page.cdp, method, message, session)
        await page.cdp.call("Runtime.runIfWaitingForDebugger", None, session=session)


async def _quietly(cdp: CdpConnection, method: str, params: Message, session: str) -> None:
    """A command a target may not support (a worker has no Target domain): its error is
    dropped."""
    with contextlib.suppress(CdpError):
        await cdp.call(method, params, session=session)


async def _continue_request(page: _Page, params: dict[str, object], session: str) -> None:
    """Let a paused request go on, or stop it: a navigation of the page past
    :data:`MAX_DOCUMENTS`, or a URL robots.txt disallows (with ``robots``). It goes on with
    the target's headers when it goes to the target's exact origin, and without any
    credential header otherwise (one carried over a redirect)."""
    request = params.get("request")
    if not isinstance(request, dict):
        return
    url = str(request.get("url", ""))
    main = (
        session == page.session
        and params.get("resourceType") == "Document"
        and params.get("frameId") == page.state.frame
    )
    if main and page.state.documents >= MAX_DOCUMENTS:
        await _fail(page, params, session, "Aborted")  # the page stays as it is
        return
    if page.robots is not None and (rule := await page.robots(url)) is not None:
        page.state.disallowed += 1
        if main:  # a redirect of the target (the render fails), or a later navigation
            page.state.disallowed_rule = page.state.disallowed_rule or rule
        await _fail(page, params, session, "Aborted" if main else "BlockedByClient")
        return
    continued: Message = {"requestId": params.get("requestId")}
    headers = _headers_for(page, url, request.get("headers"))
    if headers is not None:
        continued["headers"] = [{"name": k, "value": v} for k, v in headers.items()]
    with contextlib.suppress(CdpError):
        await page.cdp.call("Fetch.continueRequest", continued, session=session)


def _headers_for(page: _Page, url: str, sent: object) -> dict[str, str] | None:
    """The headers a request goes on with: the target's for its exact origin, none of ours
    (and no credential) elsewhere; None to leave them as the browser made them (always when
    the target has no headers of its own)."""
    if not page.headers:
        return None
    current = {str(k): str(v) for k, v in sent.items()} if isinstance(sent, dict) else {}
    ours = {name.lower() for name in page.headers}
    if _origin(url) == page.origin:
        return {k: v for k, v in current.items() if k.lower() not in ours} | page.headers
    if any(k.lower() in CREDENTIALS | ours for k in current):
        return {k: v for k, v in current.items() if k.lower() not in CREDENTIALS | ours}
    return None


async def _fail(page: _Page, params: dict[str, object], session: str, reason: str) -> None:
    with contextlib.suppress(CdpError):
        await page.cdp.call(
            "Fetch.failRequest",
            {"requestId": params.get("requestId"), "errorReason": reason},
            session=session,
        )


async def _wait_selector(page: _Page, selector: str) -> None:
    expression = f"document.querySelector({json.dumps(selector)}) !== null"
    while True:
        answer = await page.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}
        )
        if "exceptionDetails" in answer:
            raise TargetError(
                "wait_for is not a valid CSS selector",
                hint="write a selector such as #content or main article",
                status=400,
            )
        result = answer.get("result")
        if isinstance(result, dict) and result.get("value") is True:
            return
        await trio.sleep(_POLL_SECONDS)


_SNAPSHOT: Final = """(() => {
  const root = document.documentElement;
  const html = (document.doctype ? "<!DOCTYPE " + document.doctype.name + ">" : "")
    + (root ? root.outerHTML : "");
  return html.length > LIMIT ? {large: html.length, url: location.href}
                             : {html: html, url: location.href};
})()"""


async def _snapshot(page: _Page, max_html: int) -> tuple[str, str]:
    """The page's serialized DOM and its address; over ``max_html`` characters a 413."""
    answer = await page.call(
        "Runtime.evaluate",
        {"expression": _SNAPSHOT.replace("LIMIT", str(max_html)), "returnByValue": True},
    )
    result = answer.get("result")
    value = result.get("value") if isinstance(result, dict) else None
    if not isinstance(value, dict):
        raise CdpClosed("the page's DOM could not be read")
    if "large" in value:
        raise TargetError(
            f"the rendered page is {value['large']:,} characters; the limit is {max_html:,}",
            hint="ask for the page without render, or for a smaller page",
            status=413,
        )
    return str(value.get("html", "")), str(value.get("url", ""))
