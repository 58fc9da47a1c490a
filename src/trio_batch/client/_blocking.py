"""The blocking twin: :class:`BlockingClient`, the async client run in a thread's event loop.

Each call hands one coroutine of a :class:`~._async.BatchClient` to AnyIO's blocking portal and
waits for it, so the answers, errors and resuming are the async client's, not a copy of them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Self, TypeVar, final

import anyio.from_thread
import httpx
import trio

from .._model import Submitted, Target
from ._async import BatchClient, open_client
from ._types import BatchEvent, BatchSummary, SiteMap, TargetLine

T = TypeVar("T")
_U = TypeVar("_U")


@final
class BlockingStream(Iterator[T]):
    """A stream of :class:`BlockingClient` (``results``, ``events``, ``jobs``), read blocking.

    Each ``next`` runs one step of the async stream in the client's event loop thread. Leave it
    early with ``with`` (or :meth:`close`): that closes the connection at once.
    """

    def __init__(self, portal: anyio.from_thread.BlockingPortal, stream: AsyncIterator[T]) -> None:
        self._portal = portal
        self._stream = stream

    def __iter__(self) -> BlockingStream[T]:
        return self

    def __next__(self) -> T:
        try:
            return self._portal.call(self._stream.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Close the connection; the iterator then ends. Closing twice is harmless."""
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            self._portal.call(aclose)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@final
class BlockingClient:
    """The blocking twin of :func:`open_client`, for scripts without an event loop.

    ``with BlockingClient(server, key) as client:`` gives the methods of :class:`BatchClient`,
    each blocking until its answer: ``submit``, ``crawl``, ``status``, ``jobs``, ``results``,
    ``events``, ``target``, ``cancel``, ``retry``, ``wait``, ``map``. Each stream is a
    :class:`BlockingStream`. The block runs one event loop in a thread of its own (AnyIO's
    blocking portal, on asyncio) with one
    :class:`BatchClient` in it, so the answers, errors and resuming are exactly the async
    client's. Outside the block every call raises :class:`trio.ClosedResourceError`. Do not
    use it from inside a running event loop: there, use :func:`open_client`.
    """

    def __init__(
        self,
        server: str,
        key: str,
        *,
        request_timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._open = functools.partial(
            open_client, server, key, request_timeout=request_timeout, transport=transport
        )
        self._stack: contextlib.ExitStack | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._client: BatchClient | None = None

    def __enter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError("this BlockingClient is already open; use one `with` at a time")
        with contextlib.ExitStack() as stack:
            portal = stack.enter_context(anyio.from_thread.start_blocking_portal("asyncio"))
            client = stack.enter_context(portal.wrap_async_context_manager(self._open()))
            self._stack = stack.pop_all()
        self._portal, self._client = portal, client
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        self._portal = self._client = None
        if stack is not None:
            stack.close()

    def _call(self, fn: Callable[[BatchClient], Awaitable[_U]]) -> _U:
        """Run ``fn(client)`` in the loop's thread and wait for it."""
        portal, client = self._open_parts()

        async def step() -> _U:
            return await fn(client)

        return portal.call(step)

    def _stream(self, make: Callable[[BatchClient], AsyncIterator[_U]]) -> BlockingStream[_U]:
        portal, client = self._open_parts()
        return BlockingStream(portal, make(client))

    def _open_parts(self) -> tuple[anyio.from_thread.BlockingPortal, BatchClient]:
        if self._portal is None or self._client is None:
            raise trio.ClosedResourceError(
                "this BlockingClient is not open; use it inside "
                "`with BlockingClient(server, key) as client:`"
            )
        return self._portal, self._client

    def submit(
        self,
        targets: Sequence[Target | str],
        *,
        webhook: Mapping[str, object] | None = None,
        concurrency: int | None = None,
    ) -> Submitted:
        """:meth:`BatchClient.submit`, blocking."""
        return self._call(lambda c: c.submit(targets, webhook=webhook, concurrency=concurrency))

    def crawl(
        self,
        url: str,
        *,
        limit: int | None = None,
        max_depth: int | None = None,
        scope: str | None = None,
        prefix: str | None = None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        sitemaps: str | None = None,
        concurrency: int | None = None,
        options: Mapping[str, object] | None = None,
        webhook: Mapping[str, object] | None = None,
    ) -> Submitted:
        """:meth:`BatchClient.crawl`, blocking."""
        return self._call(
            lambda c: c.crawl(
                url,
                limit=limit,
                max_depth=max_depth,
                scope=scope,
                prefix=prefix,
                include=include,
                exclude=exclude,
                sitemaps=sitemaps,
                concurrency=concurrency,
                options=options,
                webhook=webhook,
            )
        )

    def status(self, job_id: str) -> BatchSummary:
        """:meth:`BatchClient.status`, blocking."""
        return self._call(lambda c: c.status(job_id))

    def jobs(
        self, *, status: str | Sequence[str] | None = None, page_size: int = 100
    ) -> BlockingStream[BatchSummary]:
        """:meth:`BatchClient.jobs`, as a blocking iterator (pages fetched as it is read)."""
        return self._stream(lambda c: c.jobs(status=status, page_size=page_size))

    def results(
        self,
        job_id: str,
        *,
        state: str | Sequence[str] | None = None,
        follow: bool = False,
        after: int | None = None,
    ) -> BlockingStream[TargetLine]:
        """:meth:`BatchClient.results`, as a blocking iterator; use it in ``with``."""
        return self._stream(lambda c: c.results(job_id, state=state, follow=follow, after=after))

    def events(self, job_id: str, *, waiting: bool = True) -> BlockingStream[BatchEvent]:
        """:meth:`BatchClient.events`, as a blocking iterator; use it in ``with``."""
        return self._stream(lambda c: c.events(job_id, waiting=waiting))

    def target(self, job_id: str, idx: int) -> dict[str, object]:
        """:meth:`BatchClient.target`, blocking."""
        return self._call(lambda c: c.target(job_id, idx))

    def map(self, url: str, *, limit: int = 1000, same_host: bool = True) -> SiteMap:
        """:meth:`BatchClient.map`, blocking."""
        return self._call(lambda c: c.map(url, limit=limit, same_host=same_host))

    def cancel(self, job_id: str) -> bool:
        """:meth:`BatchClient.cancel`, blocking."""
        return self._call(lambda c: c.cancel(job_id))

    def retry(self, job_id: str, *, webhook: Mapping[str, object] | None = None) -> Submitted:
        """:meth:`BatchClient.retry`, blocking."""
        return self._call(lambda c: c.retry(job_id, webhook=webhook))

    def wait(self, job_id: str) -> BatchSummary:
        """:meth:`BatchClient.wait`, blocking until the job is terminal."""
        return self._call(lambda c: c.wait(job_id))
