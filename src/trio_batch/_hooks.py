"""Calling the metrics hooks so that a broken hook cannot hurt the engine."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec, final

from ._config import Hooks

P = ParamSpec("P")


@final
class SafeHooks:
    """The hooks of a ``Hooks``, each switched off after its first exception.

    The first exception of a hook is logged (hook name and exception type, never the payload);
    the hook is then dropped so a broken observer cannot flood the log or slow the engine.
    """

    __slots__ = (
        "_log",
        "claimed",
        "depth",
        "evicted",
        "inflight",
        "job",
        "job_seconds",
        "retry",
        "target",
        "turn",
        "waited",
    )

    def __init__(self, hooks: Hooks, log: logging.Logger) -> None:
        self._log = log
        self.job = self._guard("job", hooks.job)
        self.target = self._guard("target", hooks.target)
        self.job_seconds = self._guard("job_seconds", hooks.job_seconds)
        self.depth = self._guard("depth", hooks.depth)
        self.inflight = self._guard("inflight", hooks.inflight)
        self.retry = self._guard("retry", hooks.retry)
        self.evicted = self._guard("evicted", hooks.evicted)
        self.claimed = self._guard("claimed", hooks.claimed)
        self.waited = self._guard("waited", hooks.waited)
        self.turn = self._guard("turn", hooks.turn)

    def _guard(self, name: str, fn: Callable[P, None] | None) -> Callable[P, None] | None:
        if fn is None:
            return None
        hook = fn

        def call(*args: P.args, **kwargs: P.kwargs) -> None:
            try:
                hook(*args, **kwargs)
            except Exception as exc:
                setattr(self, name, None)
                self._log.error(
                    "hook %s raised %s; it is switched off",
                    name,
                    type(exc).__name__,
                    extra={"hook": name, "error_type": type(exc).__name__},
                )

        return call
