"""Engine settings and metrics hooks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

DEFAULT_CONCURRENCY: Final = 4
"""A job's ``concurrency`` when a submit through a door (the HTTP API, the Python client, MCP,
``run --server``) does not say: ``serve --default-concurrency``'s default. The engine's own
``submit`` keeps SPEC's 1. Four, not one, because what keeps a site safe is its host's budget
(2 requests in flight a host by default, ``Retry-After`` obeyed), not a job's concurrency: a
job of four hosts then fetches them at once instead of one page after another, and a job of
one host still sends it at most its budget. Fairness between callers stays the rotation's: the
workers take turns over the live jobs one target at a time, whatever each job's concurrency."""


@final
@dataclass(frozen=True, slots=True)
class Hooks:
    """Observers for metrics; any ``None`` costs nothing.

    A hook runs synchronously in the engine's task, so it must be quick. A hook that raises is
    logged once (its exception type, never its payload) and switched off; the engine carries on.

    ``retry``, ``evicted`` and ``claimed`` extend SPEC §2: ``retry(wait_seconds)`` once per busy
    retry, ``evicted(jobs)`` after finished jobs were evicted for ``Config.max_bytes``, and
    ``claimed(turns, taken_over)`` after the engine claimed turns of a fleet's rotation
    (``PostgresStore``): ``taken_over`` of them were claims of another instance that had
    expired, so their targets are fetched again.
    """

    job: Callable[[str], None] | None = None
    target: Callable[[BaseException | None, float, int], None] | None = None
    job_seconds: Callable[[float], None] | None = None
    depth: Callable[[int], None] | None = None
    inflight: Callable[[int], None] | None = None
    retry: Callable[[float], None] | None = None
    evicted: Callable[[int], None] | None = None
    claimed: Callable[[int, int], None] | None = None
    waited: Callable[[str], None] | None = None
    """Called with the reason (``host_busy``, ``backoff``, ``crawl_delay``) each time the
    rotation passes a job over because its next target's host is at its budget."""
    turn: Callable[[str, float], None] | None = None
    """Called as a worker takes a job's turn with the job's caller class (``fleet`` or
    ``restricted``) and the seconds the job waited for it since it entered the rotation
    (waits for its host included): the queue wait a caller feels."""


@final
@dataclass(frozen=True, slots=True)
class Config:
    """How much the engine admits and keeps. See SPEC §2 for each field.

    Raises:
        ValueError: a field is not positive; the message names the field and the value.
    """

    ttl: float = 24 * 3600
    targets_per_job: int = 32
    jobs_per_caller: int = 1
    jobs_total: int = 8
    workers: int = 1
    max_workers: int = 2
    max_bytes: int = 64 * 2**20
    retry_wait: float = 2.0
    retry_for: float = 600.0
    max_concurrency: int = 8
    """The most targets of one job a submit may ask to run at once (``concurrency``)."""
    max_crawl_pages: int = 10_000
    """The most pages a crawl may ask to store (its ``limit``)."""
    hooks: Hooks = Hooks()
    resume: bool = False
    """Resume the live jobs a process that is gone left in the store, instead of failing them
    (SPEC §7); on a shared store, also adopt those of instances that stop later."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name == "resume":
                if not isinstance(self.resume, bool):
                    raise TypeError(f"Config.resume must be True or False (got {self.resume!r})")
                continue
            if f.name == "hooks":
                if not isinstance(self.hooks, Hooks):
                    raise TypeError(
                        f"Config.hooks must be a Hooks (got {type(self.hooks).__name__})"
                    )
                continue
            value = getattr(self, f.name)
            kind = int if f.type == "int" else float
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Config.{f.name} must be a number (got {value!r})")
            if kind is int and not isinstance(value, int):
                raise TypeError(f"Config.{f.name} must be a whole number (got {value!r})")
            if not value > 0:
                raise ValueError(f"Config.{f.name} must be > 0 (got {value!r})")

    @property
    def effective_workers(self) -> int:
        """``workers``, clamped to ``max_workers``."""
        return min(self.workers, self.max_workers)
