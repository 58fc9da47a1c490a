"""Exceptions, as one small tree.

::

    Exception
    └── Error                      anything trio-batch raises on purpose
        ├── SubmitError            a submit was refused; nothing was stored
        │   ├── NotRetryable       a retry of a job still live, or of one with no failed target
        │   ├── NoTargets          the job has no targets
        │   ├── TooManyTargets     more than Config.targets_per_job
        │   ├── CallerBusy         this caller already has Config.jobs_per_caller live jobs
        │   └── Busy               the engine already has Config.jobs_total live jobs
        ├── TargetError            a fetch function's failure, with a hint for the agent
        ├── RetryLater             a fetch function's "only busy, try again"
        ├── StoreError             the store could not be used as asked (e.g. a second writer)
        ├── HostBlocked            a host kept answering 429/503 past its budget's block limit
        ├── (in trio_batch.web)    AddressRefused: a guarded request to a refused address
        ├── (in trio_batch.http)   KeysFileError: a bad keys file
        ├── (in the CLI)           SettingsError: a bad settings file or variable
        └── (in trio_batch.client) ClientError: an HTTP error answer of the API

Every message says what was wrong and how to fix it. ``TargetError.status`` is an HTTP status
carried by a core exception: a deliberate choice of the SPEC, so an agent sees the same status
from a batch target as from a single fetch; the engine itself never reads it.

Misuse of an object (a closed engine, store or fetcher) raises Trio's own
:class:`trio.ClosedResourceError`, and wrong argument types raise ``TypeError``/``ValueError``,
as in Trio: those are bugs to fix, not conditions to handle.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import final


class Error(Exception):
    """The root of every exception trio-batch raises on purpose: ``except trio_batch.Error``."""


class SubmitError(Error):
    """A submit was refused. Nothing was stored; the caller may change the request and retry."""

    retry_after: float | None = None
    """Seconds the server asked to wait (its ``Retry-After``) when ``trio_batch.client`` raised
    this for an HTTP answer; None when the engine raised it."""


@final
class NotRetryable(SubmitError):
    """A retry was refused: the job is still live, or none of its targets failed."""


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
class TargetError(Error):
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
class RetryLater(Error):
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
class StoreError(Error):
    """The store cannot be used as asked; the message says why and what to do instead."""


def is_store_outage(exc: BaseException) -> bool:
    """Whether a store call failed because the database is away or refused for now.

    That is a :class:`StoreError` (a timeout, a lost connection) or a driver's operational
    error: ``psycopg.OperationalError`` (a statement cancelled by ``statement_timeout``, a lock
    wait given up, a server shutting down) or ``sqlite3.OperationalError`` (locked, disk I/O).
    Such a call is worth trying again; an error of the data itself (a value the database
    refuses) is not. No driver is imported for this: one never loaded raised nothing.
    """
    kinds: tuple[type[BaseException], ...] = (StoreError,)
    if (psycopg := sys.modules.get("psycopg")) is not None:
        kinds += (psycopg.OperationalError,)
    if (sqlite3 := sys.modules.get("sqlite3")) is not None:
        kinds += (sqlite3.OperationalError,)
    return isinstance(exc, kinds)


def iter_chain(exc: BaseException, *, hidden: bool = False) -> Iterator[BaseException]:
    """``exc`` and the chain Python prints under it, entering exception groups, each once.

    The chain is ``__cause__``, else ``__context__`` unless ``raise ... from None`` hid it; a
    group's members come before the group's own chain. ``hidden=True`` also walks a context
    that ``from None`` hid: httpcore's pool re-raises a connection's error that way, and the TLS
    or socket error under it is still what went wrong.
    """
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            stack.append(current.__cause__)
        elif current.__context__ is not None and (hidden or not current.__suppress_context__):
            stack.append(current.__context__)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))


def find_retry_later(exc: BaseException) -> RetryLater | None:
    """The first ``RetryLater`` in ``exc``'s printed chain (see :func:`iter_chain`), if any."""
    return next((e for e in iter_chain(exc) if isinstance(e, RetryLater)), None)


def classify_failure(exc: BaseException) -> TargetError | RetryLater | None:
    """What a fetch function's exception means for its target.

    A ``TargetError`` fails the target with its message and hint; a ``RetryLater`` (raised, or
    in the chain) means busy; anything else (None) is an internal error. An exception group,
    as a fetch function that runs a nursery raises, is busy when every member is busy, fails
    with its first ``TargetError`` when every member is a ``TargetError`` or busy, and is an
    internal error when any member is anything else.
    """
    if isinstance(exc, BaseExceptionGroup):
        kinds = [classify_failure(e) for e in exc.exceptions]
        if any(k is None for k in kinds):
            return None
        target_errors = [k for k in kinds if isinstance(k, TargetError)]
        if target_errors:
            return target_errors[0]
        busy = [k for k in kinds if isinstance(k, RetryLater)]
        return max(busy, key=lambda b: b.after or 0.0)
    if isinstance(exc, TargetError):
        return exc
    return find_retry_later(exc)
