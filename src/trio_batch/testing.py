"""Fakes for testing code that uses trio-batch: a scripted fetch function.

``MemoryStore`` doubles as the store fake. ::

    fetch = ScriptedFetch(duration=1.0)
    fetch.script("https://a.example/", RetryLater(), Result("ok"))
    async with open_engine(MemoryStore(), fetch) as engine:
        ...
    assert fetch.calls == ["https://a.example/", "https://a.example/"]
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import final

import trio

from ._model import Caller, Result, Target

__all__ = ["ScriptedFetch"]


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
