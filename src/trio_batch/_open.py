"""Opening an engine: recover or resume what a process that is gone left, start the workers."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from ._config import Config
from ._engine import BatchEngine
from ._live import FetchFunc
from ._util import raise_single_exception_from_group
from .stores._protocol import ResumedJob, Store


@asynccontextmanager
async def open_engine(
    store: Store,
    fetch: FetchFunc,
    config: Config = Config(),  # noqa: B008 - Config is frozen
    *,
    logger: logging.Logger | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> AsyncIterator[BatchEngine]:
    """Open a :class:`BatchEngine` whose workers live until the block exits.

    On entry, live jobs left in the store by a process that is gone are failed
    (``interrupted``), or with ``Config.resume`` put back in the rotation (SPEC §7). On exit
    the engine is closed (see :meth:`BatchEngine.aclose`). An exception from the block comes
    out as itself, with its ``__cause__`` and ``__context__``, not wrapped in an exception
    group; two errors at once (the block's and a crashed worker's) come out as a group.

    Cancellation: cancelling the block cancels every fetch in flight; outcomes already fetched
    are still stored, and the live jobs end ``failed``/``interrupted`` (bounded by 5 seconds
    of store writes), or with ``Config.resume`` stay live for the next engine. A cancel during
    entry leaves nothing running.
    """
    if not callable(fetch):
        raise TypeError("fetch must be an async function (caller, target) -> Result")
    if not isinstance(config, Config):
        raise TypeError(f"config must be a trio_batch.Config (got {type(config).__name__})")
    log = logger if logger is not None else logging.getLogger("trio_batch")
    engine = BatchEngine._create(store, fetch, config, log, wall_clock)
    resumed: list[ResumedJob] = []
    if config.resume:
        resumed = await store.resume(wall_clock())
    elif recovered := await store.recover(wall_clock()):
        log.warning(
            "failed %d live jobs left by a process that is gone",
            len(recovered),
            extra={"jobs": len(recovered)},
        )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine._run)
            engine._resume(resumed)
            try:
                yield engine
            finally:
                await engine.aclose()
    except BaseExceptionGroup as group:
        raise_single_exception_from_group(group)
        raise
