"""Storing a group of outcomes, and what the engine does when the store cannot take one.

A fetched outcome is not thrown away because the database was away for a moment. A store
outage (:func:`~trio_batch._errors.is_store_outage`: a timeout, a lost connection, a statement
cancelled by ``statement_timeout``, a lock) is tried again, after 0.5 s doubling up to 10 s,
until it lands or the engine begins to close. Its job stays live meanwhile (its cap stays taken:
it has not finished), and the acknowledgements after it wait, since they go in order. An
outcome the store refuses for what it holds (a value the database will not take) is stored once
more as a failed target that names the error, so that its job still ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from .._errors import is_store_outage
from .._model import TargetState
from .._util import backoff
from ..stores._protocol import FinishItem, Outcome, Store, Stored

RETRY_FIRST = 0.5
RETRY_MAX = 10.0


async def store_outcomes(
    store: Store,
    items: Sequence[FinishItem],
    wall: Callable[[], float],
    max_bytes: int,
    stopping: trio.Event,
    log: logging.Logger,
    *,
    failed: Callable[[Exception], None] | None = None,
) -> list[Stored | Exception]:
    """``store.finish_targets(items)``, an outage tried again until ``stopping`` is set.

    Returns one result per item, in order, as ``finish_targets`` does; an exception is left
    only for an outage that outlasted the engine, or an item refused even as a failure.
    ``failed`` is told of each outage as it happens (``/healthz`` reads it from the engine).
    """
    todo = list(items)
    results = await _finish(store, todo, wall(), max_bytes)
    replaced: set[int] = set()
    outages = 0
    while True:
        again: list[int] = []
        outage: Exception | None = None
        for i, result in enumerate(results):
            if not isinstance(result, Exception):
                continue
            if is_store_outage(result):
                outage = outage or result
                again.append(i)
            elif i not in replaced:
                replaced.add(i)
                job_id, idx, _ = todo[i]
                todo[i] = (job_id, idx, _unstorable(result))
                again.append(i)
        if not again or stopping.is_set():
            return results
        if outage is not None:
            if failed is not None:
                failed(outage)
            outages += 1
            wait = backoff(outages, RETRY_FIRST, RETRY_MAX)
            error = type(outage).__name__
            log.warning(
                "store finish_targets failed with %s; %d outcomes wait, next try in %.1f s",
                error,
                len(again),
                wait,
                extra={
                    "op": "finish_targets",
                    "error_type": error,
                    "job_id": todo[again[0]][0],
                    "outcomes": len(again),
                },
            )
            with trio.move_on_after(wait):
                await stopping.wait()
            if stopping.is_set():
                return results
        retried = await _finish(store, [todo[i] for i in again], wall(), max_bytes)
        for i, result in zip(again, retried, strict=True):
            results[i] = result


async def _finish(
    store: Store, items: list[FinishItem], now: float, max_bytes: int
) -> list[Stored | Exception]:
    try:
        return list(await store.finish_targets(items, now, max_bytes))
    except Exception as exc:
        return [exc] * len(items)


def _unstorable(exc: Exception) -> Outcome:
    return Outcome(
        TargetState.FAILED,
        error=f"the result could not be stored: the database refused it ({type(exc).__name__})",
        hint="try another mode or fewer options for this target; if it persists, tell the "
        "operator (the server log names the error)",
    )
