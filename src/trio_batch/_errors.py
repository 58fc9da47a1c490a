"""Exceptions, as one small tree.

::

    Exception
    ├── SubmitError            a submit was refused; nothing was stored
    │   ├── NoTargets          the job has no targets
    │   ├── TooManyTargets     more than Config.targets_per_job
    │   ├── CallerBusy         this caller already has Config.jobs_per_caller live jobs
    │   └── Busy               the engine already has Config.jobs_total live jobs
    ├── TargetError            a fetch function's failure, with a hint for the agent
    ├── RetryLater             a fetch function's "only busy, try again"
    └── StoreError             the store could not be used as asked (e.g. a second writer)

Every message says what was wrong and how to fix it.
"""

from __future__ import annotations

from typing import final


class SubmitError(Exception):
    """A submit was refused. Nothing was stored; the caller may change the request and retry."""


@final
class NoTargets(SubmitError):
    """The job has no targets."""


@final
class TooManyTargets(SubmitError):
    """The job has more targets than ``Config.targets_per_job``."""


@final
class CallerBusy(SubmitError):
    """This caller already has ``Config.jobs_per_caller`` live jobs."""


@final
class Busy(SubmitError):
    """The engine already has ``Config.jobs_total`` live jobs."""


@final
class TargetError(Exception):
    """A target failed in a way an agent can act on.

    ``status`` is the HTTP status the same failure would get from a single fetch; the engine
    stores ``msg`` and ``hint`` and passes the error to ``Hooks.target``, which may read it.
    """

    def __init__(self, msg: str, *, hint: str = "", status: int = 502) -> None:
        super().__init__(msg)
        self.msg = msg
        self.hint = hint
        self.status = status

    def __str__(self) -> str:
        return self.msg

    def __repr__(self) -> str:
        return f"TargetError({self.msg!r}, hint={self.hint!r}, status={self.status})"


@final
class RetryLater(Exception):
    """The target was only busy (rate limited); the engine tries it again later.

    A fetch function raises it, or raises any exception whose ``__cause__``/``__context__``
    chain holds one. ``after`` (seconds), when set, is the least wait the target asked for
    (for example an upstream ``Retry-After``); the engine waits
    ``max(Config.retry_wait, after)``.
    """

    def __init__(self, msg: str = "busy", *, after: float | None = None) -> None:
        super().__init__(msg)
        self.after = after


@final
class StoreError(Exception):
    """The store cannot be used as asked; the message says why and what to do instead."""


def find_retry_later(exc: BaseException) -> RetryLater | None:
    """The ``RetryLater`` in ``exc`` or its cause/context chain, if any.

    The chain is the one Python prints: ``raise ... from None`` hides the context.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, RetryLater):
            return current
        seen.add(id(current))
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:
            current = None
        else:
            current = current.__context__
    return None
