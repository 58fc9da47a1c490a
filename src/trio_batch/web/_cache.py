"""The fetcher's response cache, kept in the engine's store (SPEC §6).

An entry holds the shaped content and its ``meta``, keyed by URL and options (``recover``
aside, since it changes only what a failure does) and, for a ``restricted`` caller, by the
caller's name: fleet callers share entries, a restricted caller's entries are its own. The
response's ``Cache-Control`` can shorten an entry's life or keep it out of the cache. The cache
is a help, never a failure: a store that cannot read or write it is logged and skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import final

import trio

from .._errors import TargetError
from .._model import Caller, Result, Target
from ..stores._protocol import CacheEntry, Store

logger = logging.getLogger("trio_batch.web")


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
    """

    def __init__(
        self,
        store: Store | None,
        *,
        ttl: float,
        max_bytes: int,
        restricted: Callable[[Caller], bool],
        wall_clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._max_bytes = max_bytes
        self._restricted = restricted
        self._wall_clock = wall_clock

    def key(self, caller: Caller, target: Target) -> str:
        """The entry's key: a hash of the URL, the options but ``recover``, and the owner."""
        options = target.options.to_json()
        options.pop("recover", None)
        owner = caller.name if self._restricted(caller) else ""
        raw = json.dumps(
            {"url": target.url, "options": options, "owner": owner},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return "web:" + hashlib.sha256(raw.encode()).hexdigest()

    async def get(self, key: str) -> CacheEntry | None:
        """The entry, fresh or not; None when there is none or the store fails."""
        if self._store is None:
            return None
        try:
            return await self._store.cache_get(key)
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
        """Keep a fetched result, as its ``Cache-Control`` allows; a store failure is logged."""
        if self._store is None:
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
        try:
            await self._store.cache_put(key, entry, self._max_bytes)
        except Exception as exc:
            logger.warning("web response cache write failed (%s)", type(exc).__name__)
