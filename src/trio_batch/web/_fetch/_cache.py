"""The fetcher's response cache, kept in the engine's store (SPEC §6).

An entry holds the shaped content and its ``meta``, keyed by URL and options (``recover``
and ``max_age`` aside, since they change only what a failure does and which entry may answer)
and, for a ``restricted`` caller, by the caller's name: fleet callers share entries, a
restricted caller's entries are its own. The response's ``Cache-Control`` can shorten an
entry's life or keep it out of the cache; a target's ``max_age`` can refuse an entry older
than it asks (:func:`answers`), and ``max_age: 0`` skips the read (:func:`reads_cache`) while
its fetch still writes the entry for the next caller. The cache
is a help, never a failure, nor a wait: a store that cannot read or write it is logged and
skipped, and so is one that does not answer within :data:`CACHE_WAIT`.

Why each store call runs in a task of its own: a store's write is not cancellable once queued
(SQLite and PostgreSQL wait for its commit, or for ``call_timeout``: 30 s by default), so a
deadline around it in the fetch's own task would not end the wait. The fetch waits for that
task only ``CACHE_WAIT`` seconds, then cancels it and carries on: a read stops (PostgreSQL
cancels its query), a write that is queued lands or fails whole, as the store's transaction
decides (the store's ``cache_put`` replaces one entry and evicts in one transaction), and nothing is
half written. Such a task is a Trio *system* task: the fetcher has no nursery of its own to
hold it (its ``async with`` is a hand-rolled ``__aenter__``), the task catches every
``Exception`` (a system task's error would end the run), and at most :data:`MAX_LEFT_BEHIND`
reads and as many writes run on after their fetch stopped waiting; past that, the cache is
skipped at once. Closing the fetcher cancels the ones still running.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, cast, final

import outcome
import trio

from ..._errors import TargetError
from ..._model import Caller, Options, Result, Target
from ...stores._protocol import CacheEntry, ResponseCache as CacheStore

logger = logging.getLogger("trio_batch.web")

CACHE_WAIT: Final = 1.0
"""Seconds a fetch waits for the response cache's store: for the read, then for the write.

The cache is an optimisation: a healthy store answers a cache read or write in milliseconds
(an indexed read, one small transaction), while a fetch takes hundreds of milliseconds to
seconds. A store that has not answered in a second is stalled (a lock, an overloaded server),
and waiting on for it (up to PostgreSQL's ``call_timeout``, 30 s, each) would only make the
answer late: so a read is a miss after ``CACHE_WAIT`` and a write is left behind, and a
fetch through a stalled store costs at most about twice this."""

MAX_LEFT_BEHIND: Final = 8
"""Cache reads, and apart writes, that may still run after their fetch stopped waiting.

Past it the cache is skipped without a wait: a stalled store does not collect a task (and,
for a write, the entry's bytes) per fetch until it answers."""


def cache_ttl(cache_control: str, *, default: float, shared: bool) -> float | None:
    """Seconds to serve a response fresh by its ``Cache-Control`` (lower case), or None when it
    must not be kept: ``no-store``, or ``private`` for an entry that ``shared`` callers read.

    ``no-cache`` keeps it only for ``recover`` (fresh for 0 s); ``max-age`` may shorten
    ``default``, never lengthen it.
    """
    directives = {d.strip().split("=", 1)[0]: d.strip() for d in cache_control.split(",")}
    if "no-store" in directives:
        return None
    if "private" in directives and shared:
        return None
    if "no-cache" in directives:
        return 0.0
    if "max-age" in directives:
        value = directives["max-age"].partition("=")[2].strip().strip('"')
        if value.isdigit():
            return min(default, float(value))
    return default


def reads_cache(options: Options) -> bool:
    """Whether a fetch with ``options`` reads the cache: not with ``max_age: 0``, unless
    ``recover`` may serve the entry in place of a failed fetch."""
    return options.max_age != 0 or options.recover


def answers(entry: CacheEntry, now: float, max_age: int | None) -> bool:
    """Whether ``entry`` answers in place of a fetch: it is fresh, and younger than the target's
    ``max_age`` seconds if it gives one (0: never)."""
    if entry.expires_at <= now:
        return False
    return max_age is None or now - entry.stored_at < max_age


def from_cache(entry: CacheEntry, *, start: float, now: float, stale: TargetError | None) -> Result:
    """The cached result, its ``meta`` marked ``cached`` with its ``age``; ``stale`` (and the
    fetch's ``error``) when ``recover`` serves it in place of a failed fetch."""
    meta: dict[str, object] = json.loads(entry.meta_json)
    meta["cached"] = True
    meta["age"] = round(max(now - entry.stored_at, 0.0), 3)
    meta["elapsed"] = round(trio.current_time() - start, 3)
    if stale is not None:
        meta["stale"] = True
        meta["error"] = stale.msg
    return Result(entry.body.decode("utf-8", errors="replace"), meta)


@final
class ResponseCache:
    """Cache entries in ``store`` (None: no cache, every read misses and writes are dropped).

    Args:
        store: where entries live (``cache_get``/``cache_put``).
        ttl: seconds an entry is served fresh, at most.
        max_bytes: bytes the cache may hold; a bigger entry is not kept.
        restricted: whether a caller's entries are its own.
        wall_clock: unix time for ``stored_at``/``expires_at``.
        wait: seconds a read or a write is waited for (:data:`CACHE_WAIT`).
    """

    def __init__(
        self,
        store: CacheStore | None,
        *,
        ttl: float,
        max_bytes: int,
        restricted: Callable[[Caller], bool],
        wall_clock: Callable[[], float],
        wait: float = CACHE_WAIT,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._max_bytes = max_bytes
        self._restricted = restricted
        self._wall_clock = wall_clock
        self._wait = wait
        self._running: set[_Call] = set()
        self._left_behind: dict[str, set[_Call]] = {"read": set(), "write": set()}

    def key(self, caller: Caller, target: Target) -> str:
        """The entry's key: a hash of the URL, the options but ``recover`` and ``max_age``, and
        the owner."""
        options = target.options.to_json()
        options.pop("recover", None)
        options.pop("max_age", None)
        owner = caller.name if self._restricted(caller) else ""
        raw = json.dumps(
            {"url": target.url, "options": options, "owner": owner},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return "web:" + hashlib.sha256(raw.encode()).hexdigest()

    async def get(self, key: str) -> CacheEntry | None:
        """The entry, fresh or not; None when there is none, or the store fails or does not
        answer within :data:`CACHE_WAIT` (the read is then cancelled)."""
        store = self._store
        if store is None:
            return None
        result = await self._call("read", lambda: store.cache_get(key))
        try:
            return None if result is None else cast("CacheEntry | None", result.unwrap())
        except Exception as exc:
            logger.warning("web response cache read failed (%s)", type(exc).__name__)
            return None

    async def put(
        self,
        key: str,
        caller: Caller,
        content: str,
        meta: Mapping[str, object],
        cache_control: str,
    ) -> None:
        """Keep a fetched result, as its ``Cache-Control`` allows; a store failure is logged,
        and a write that takes longer than :data:`CACHE_WAIT` is left to the store (logged)."""
        store = self._store
        if store is None:
            return
        ttl = cache_ttl(cache_control, default=self._ttl, shared=not self._restricted(caller))
        body = content.encode()
        if ttl is None or len(body) > self._max_bytes:
            return
        now = self._wall_clock()
        entry = CacheEntry(
            body=body,
            meta_json=json.dumps(meta, separators=(",", ":"), ensure_ascii=False),
            stored_at=now,
            expires_at=now + ttl,
        )
        result = await self._call("write", lambda: store.cache_put(key, entry, self._max_bytes))
        try:
            if result is not None:
                result.unwrap()
        except Exception as exc:
            logger.warning("web response cache write failed (%s)", type(exc).__name__)

    def close(self) -> None:
        """Cancel the store calls still running (a write the store has queued still lands)."""
        for call in self._running:
            call.scope.cancel()

    async def _call(
        self, what: Literal["read", "write"], fn: Callable[[], Awaitable[object]]
    ) -> outcome.Outcome[object] | None:
        """``await fn()`` in a task of its own, waited for :data:`CACHE_WAIT` at most.

        Returns its outcome; None when it was skipped (too many left behind) or cancelled by
        :meth:`close`, or did not finish in time (then it is cancelled and left behind). Each
        skip and each call left behind is logged once, as a warning, with no URL or key.

        Cancellation: a cancelled fetch cancels its call too, and raises at once.
        """
        left = self._left_behind[what]
        if len(left) >= MAX_LEFT_BEHIND:
            await trio.lowlevel.checkpoint()
            logger.warning(
                "web response cache %s skipped: %d earlier ones are still waiting for the store",
                what,
                len(left),
            )
            return None
        call = _Call()
        self._running.add(call)
        trio.lowlevel.spawn_system_task(self._run, call, fn, left, name=f"web cache {what}")
        try:
            with trio.move_on_after(self._wait):
                await call.done.wait()
        except BaseException:
            self._leave(call, left)  # the fetch itself was cancelled
            raise
        if not call.done.is_set():
            self._leave(call, left)
            logger.warning(
                "web response cache %s took over %g s: %s",
                what,
                self._wait,
                "served as a miss" if what == "read" else "left to the store, not waited for",
            )
            return None
        return call.result

    def _leave(self, call: _Call, left: set[_Call]) -> None:
        call.waited = False
        call.scope.cancel()  # a read stops; a write that the store queued finishes on its own
        if not call.done.is_set():
            left.add(call)

    async def _run(
        self, call: _Call, fn: Callable[[], Awaitable[object]], left: set[_Call]
    ) -> None:
        try:
            with call.scope:
                call.result = outcome.Value(await fn())
        except Exception as exc:  # never out of a system task: it would end the run
            call.result = outcome.Error(exc)
        finally:
            self._running.discard(call)
            left.discard(call)
            call.done.set()
        if not call.waited and isinstance(call.result, outcome.Error):
            logger.debug(  # its fetch logged a warning already
                "a web response cache call left behind failed (%s)",
                type(call.result.error).__name__,
            )


@dataclass(eq=False, slots=True)
class _Call:
    """One store call of the cache, run in a system task."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    result: outcome.Outcome[object] | None = None
    """None until done, and after done if it was cancelled."""
    waited: bool = True
    """False once its fetch stopped waiting (a failure then is only logged at debug level)."""
