"""Fakes for testing code that uses trio-batch: a scripted fetch function, and an ASGI
lifespan runner for driving the HTTP app in-process.

``MemoryStore`` doubles as the store fake. ::

    fetch = ScriptedFetch(duration=1.0)
    fetch.script("https://a.example/", RetryLater(), Result("ok"))
    async with open_engine(MemoryStore(), fetch) as engine:
        ...
    assert fetch.calls == ["https://a.example/", "https://a.example/"]
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, final

import trio

from ._model import Caller, Result, Target

__all__ = ["ScriptedFetch", "asgi_lifespan"]


@final
class ScriptedFetch:
    """A fetch function whose outcomes are scripted per URL.

    Each call of a URL takes the next scripted outcome: a ``Result`` is returned, an exception
    is raised. A URL with no outcome left returns ``Result(f"content of {url}")``. Every call
    first sleeps ``duration`` seconds (Trio's clock, so free under the mock clock), then waits
    for the URL's gate if one was set with :meth:`hold`.
    """

    def __init__(self, *, duration: float = 0.0) -> None:
        self.duration = duration
        self.calls: list[str] = []
        """URLs in the order their fetches started."""
        self.finished: list[str] = []
        """URLs in the order their fetches returned or raised."""
        self.callers: list[Caller] = []
        self.running = 0
        self.max_running = 0
        self._scripts: dict[str, deque[Result | BaseException]] = defaultdict(deque)
        self._gates: dict[str, trio.Event] = {}
        self._durations: dict[str, float] = {}

    def script(self, url: str, *outcomes: Result | BaseException) -> None:
        """Append outcomes for the next calls of ``url``."""
        self._scripts[url].extend(outcomes)

    def set_duration(self, url: str, seconds: float) -> None:
        """Make calls of ``url`` take ``seconds`` instead of the default duration."""
        self._durations[url] = seconds

    def hold(self, url: str) -> trio.Event:
        """Make calls of ``url`` wait until the returned event is set."""
        gate = self._gates[url] = trio.Event()
        return gate

    async def __call__(self, caller: Caller, target: Target) -> Result:
        url = target.url
        self.calls.append(url)
        self.callers.append(caller)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await trio.sleep(self._durations.get(url, self.duration))
            if (gate := self._gates.get(url)) is not None:
                await gate.wait()
            script = self._scripts.get(url)
            next_outcome = script.popleft() if script else Result(f"content of {url}")
        finally:
            self.running -= 1
            self.finished.append(url)
        if isinstance(next_outcome, BaseException):
            raise next_outcome
        return next_outcome


@asynccontextmanager
async def asgi_lifespan(app: Callable[..., Awaitable[None]]) -> AsyncIterator[None]:
    """Run an ASGI app's lifespan as a server does: startup before the block, shutdown after.

    httpx's ``ASGITransport`` sends no lifespan events, and ``trio_batch.http.create_app`` runs
    its store calls in a nursery of its lifespan: drive such an app in-process inside this block.

    Raises:
        RuntimeError: the app reported that its startup or shutdown failed.
    """
    to_app, inbox = trio.open_memory_channel[dict[str, Any]](2)
    started, stopped = trio.Event(), trio.Event()

    async def send(message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind.endswith(".failed"):
            raise RuntimeError(f"lifespan {kind}: {message.get('message', '')}")
        (started if kind == "lifespan.startup.complete" else stopped).set()

    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, inbox.receive, send)
        await to_app.send({"type": "lifespan.startup"})
        await started.wait()
        try:
            yield
        finally:
            await to_app.send({"type": "lifespan.shutdown"})
            await stopped.wait()
