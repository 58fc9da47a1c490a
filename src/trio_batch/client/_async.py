"""The async client: :class:`BatchClient` over one httpx connection pool, and its streams.

A stream (:class:`ResultStream`, :class:`EventStream`) is an answer read line by line that
resumes where it broke off: the results after the last line read, the events with
``Last-Event-ID``. Waits and shields go through AnyIO, never one loop's own calls, so all of it
runs under Trio and asyncio alike (the blocking twin runs it on asyncio, in a thread).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Literal, Self, TypeVar, cast, final

import anyio
import httpx
import trio

from .._model import Submitted, Target
from .._util import NoPublicConstructor, backoff
from ._errors import ClientError, error_from, unreachable
from ._types import BatchEvent, BatchSummary, SiteMap, TargetLine

T = TypeVar("T")


class _Restarting(Exception):
    """A resumed stream found the server answering 503 (restarting, or its database is away)."""


class _Resuming(AsyncIterator[T]):
    """A streamed answer read line by line, resumed where it broke off (up to 5 times in a row).

    Only a stream that has begun is resumed: when the first request fails, that is the error.
    A resumed request that finds the server restarting (503) is tried again too. Each try waits
    1 s, 2 s, 4 s, ... up to 10 s, less a random share of up to half (``_util.backoff``). Leave it
    early with ``async with`` or :meth:`aclose`: that closes the connection at once.
    """

    _RETRIES = 5
    _FIRST_WAIT = 1.0
    _LONGEST_WAIT = 10.0
    _JITTER = 0.5
    """Share of a wait taken off at random: followers of one server that broke together (it
    restarted) then come back spread over a moment, not all in the same millisecond."""

    def __init__(self, client: BatchClient, path: str) -> None:
        self._client = client
        self._path = path
        self._response: httpx.Response | None = None
        self._lines: AsyncIterator[str] | None = None
        self._finished = False
        self._failures = 0
        self._begun = False

    def _request(self) -> tuple[dict[str, str], dict[str, str]]:
        raise NotImplementedError

    def _feed(self, line: str) -> T | None:
        raise NotImplementedError

    async def _open(self) -> AsyncIterator[str]:
        self._client._check_open()
        params, headers = self._request()
        http = self._client._http
        # A follower may wait long for the next line: its reads are never bounded.
        bounds = http.timeout
        request = http.build_request(
            "GET",
            self._path,
            params=params,
            headers={**self._client._headers, **headers},
            timeout=httpx.Timeout(
                connect=bounds.connect, read=None, write=bounds.write, pool=bounds.pool
            ),
        )
        response = await http.send(request, stream=True)
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            if response.status_code == 503 and self._begun:
                raise _Restarting
            raise error_from(response)
        self._begun = True
        self._response = response
        self._lines = response.aiter_lines()
        return self._lines

    def __aiter__(self) -> _Resuming[T]:
        return self

    async def __anext__(self) -> T:
        while not self._finished:
            try:
                lines = self._lines if self._lines is not None else await self._open()
                line = await anext(lines)
            except StopAsyncIteration:
                if self._whole():
                    break
                await self._again(None)  # ended before its end: a server shutting down
                continue
            except (httpx.TransportError, _Restarting) as exc:
                await self._again(exc)
                continue
            except BaseException:
                await self.aclose()
                raise
            item = self._feed(line)
            if item is not None:
                self._failures = 0
                return item
        await self.aclose()
        raise StopAsyncIteration

    def _whole(self) -> bool:
        """Whether a body that ended properly is the whole answer (else it is resumed)."""
        return True

    async def _again(self, exc: Exception | None) -> None:
        """After a break: wait, then the loop asks again; or give up with a ClientError."""
        await self._close_response()
        self._failures += 1
        if not self._begun or self._failures > self._RETRIES:
            await self.aclose()
            if isinstance(exc, httpx.TransportError):
                raise unreachable(exc) from exc
            raise ClientError(
                503,
                "the stream kept breaking off before its end",
                "the server is restarting or unavailable; try again later",
            )
        await anyio.sleep(
            backoff(self._failures, self._FIRST_WAIT, self._LONGEST_WAIT, jitter=self._JITTER)
        )

    async def _close_response(self) -> None:
        response, self._response = self._response, None
        lines, self._lines = self._lines, None
        with anyio.CancelScope(shield=True):
            if response is not None:
                await response.aclose()
            if lines is not None:
                # httpx's line reader is a stack of generators that do not close each other;
                # read on to the end the closed response gives them, so none is left to the GC.
                with anyio.move_on_after(1), contextlib.suppress(Exception):
                    async for _ in lines:
                        pass

    async def aclose(self) -> None:
        """Close the connection; the iterator then ends. Closing twice is harmless."""
        self._finished = True
        await self._close_response()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@final
class ResultStream(_Resuming[TargetLine]):
    """The lines of ``GET /v1/batch/{id}/results`` (see :meth:`BatchClient.results`)."""

    def __init__(
        self, client: BatchClient, job_id: str, state: str | None, follow: bool, after: int | None
    ) -> None:
        super().__init__(client, f"/v1/batch/{job_id}/results")
        self._params = {"follow": "1" if follow else "0"}
        if state:
            self._params["state"] = state
        self._after = after

    def _request(self) -> tuple[dict[str, str], dict[str, str]]:
        params = dict(self._params)
        if self._after is not None:
            params["after"] = str(self._after)
        return params, {}

    def _feed(self, line: str) -> TargetLine | None:
        if not line.strip():
            return None
        item = cast("TargetLine", json.loads(line))
        self._after = item["idx"]  # a resumed request starts after the last line read
        return item


@final
class EventStream(_Resuming[BatchEvent]):
    """The events of ``GET /v1/batch/{id}/events`` (see :meth:`BatchClient.events`)."""

    def __init__(self, client: BatchClient, job_id: str, *, waiting: bool = True) -> None:
        super().__init__(client, f"/v1/batch/{job_id}/events")
        self._waiting = waiting
        self._last: str | None = None
        self._fields: dict[str, str] = {}

    def _request(self) -> tuple[dict[str, str], dict[str, str]]:
        self._fields = {}
        return {}, ({} if self._last is None else {"Last-Event-ID": self._last})

    def _whole(self) -> bool:
        return False  # a stream that closes before its `end` event is resumed (as SSE says)

    def _feed(self, line: str) -> BatchEvent | None:
        if line.startswith(":"):
            return None
        if line:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            self._fields[name] = (
                self._fields[name] + "\n" + value if name in self._fields else value
            )
            return None
        fields, self._fields = self._fields, {}
        if "data" not in fields:
            return None
        event = fields.get("event", "message")
        if event not in ("target", "waiting", "end") or (event == "waiting" and not self._waiting):
            return None
        if "id" in fields:
            self._last = fields["id"]
        if event == "end":
            self._finished = True  # the server closes now; do not resume
        data = json.loads(fields["data"])
        kind = cast("Literal['target', 'waiting', 'end']", event)
        return BatchEvent(fields.get("id", ""), kind, data)


@final
class BatchClient(metaclass=NoPublicConstructor):
    """The API's calls, over one connection pool. Obtain one from :func:`open_client`."""

    _factory = "trio_batch.client.open_client()"

    def __init__(self, http: httpx.AsyncClient, headers: Mapping[str, str] | None = None) -> None:
        self._http = http
        self._headers = dict(headers or {})
        """Sent on each request, beside ``http``'s own (a key, when ``http`` serves several)."""
        self._closed = False

    def _check_open(self) -> None:
        """Raise :class:`trio.ClosedResourceError` once the client's block has ended."""
        if self._closed:
            raise trio.ClosedResourceError(
                "this BatchClient's open_client() block has ended; use the client inside "
                "`async with open_client(...) as client:`"
            )

    async def _call(
        self, method: str, path: str, *, json_body: object = None, params: Mapping[str, str] = {}
    ) -> httpx.Response:
        self._check_open()
        try:
            response = await self._http.request(
                method, path, json=json_body, params=dict(params) or None, headers=self._headers
            )
        except httpx.TransportError as exc:
            raise unreachable(exc) from exc
        if response.status_code >= 400:
            raise error_from(response)
        return response

    async def submit(
        self,
        targets: Sequence[Target | str],
        *,
        webhook: Mapping[str, object] | None = None,
        concurrency: int | None = None,
    ) -> Submitted:
        """Submit a batch: ``Target`` objects or plain URLs. A repeat returns the same job.

        ``concurrency`` is how many of the job's targets may be fetched at once, still started
        in order and each within its host's budget: from 1 to the server's ``max_concurrency``
        (8 by default). None sends none, and the server's default applies. A repeat that asks
        for another concurrency is a new job.

        Raises:
            NoTargets, TooManyTargets, CallerBusy, Busy: refused (``retry_after`` set for the
                last two).
            ClientError: any other error answer (a URL failing the pre-check, or a
                ``concurrency`` the server does not allow: 400 naming it).
        """
        items = [t.to_json() if isinstance(t, Target) else {"url": t} for t in targets]
        body: dict[str, object] = {"targets": items}
        if webhook is not None:
            body["webhook"] = dict(webhook)
        if concurrency is not None:
            body["concurrency"] = concurrency
        data = (await self._call("POST", "/v1/batch", json_body=body)).json()
        return Submitted(str(data["id"]), bool(data["reused"]))

    async def crawl(
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
        """Crawl a site from ``url`` (``POST /v1/crawl``): a job whose targets grow by
        following links, read, streamed, waited for and cancelled as a batch is; its
        :meth:`status` carries ``crawl`` (a :class:`CrawlProgress`). A repeat returns the
        same job.

        Each argument left None (or empty) is not sent, and the server's default applies:
        ``limit`` pages stored (100; at most the server's ``max_crawl_pages``), ``max_depth``
        (3; 0 is the start page alone), ``scope`` (``"host"``, ``"domain"`` or
        ``"prefix"`` with its ``prefix``), ``include``/``exclude`` path globs, ``sitemaps``
        (``"skip"``, ``"include"`` or ``"only"``), ``concurrency`` (the server's
        ``default_concurrency``), ``options`` (a target's options as JSON, for every page)
        and ``webhook`` (as :meth:`submit`'s). docs/crawl.md says what each does.

        Raises:
            CallerBusy, Busy: a cap is full (``retry_after`` set).
            NoTargets: ``sitemaps="only"`` and no sitemap page in scope.
            ClientError: any other refusal (400 naming the field, with a hint).
        """
        body: dict[str, object] = {"url": url}
        given: dict[str, object | None] = {
            "limit": limit,
            "max_depth": max_depth,
            "scope": scope,
            "prefix": prefix,
            "include": list(include) or None,
            "exclude": list(exclude) or None,
            "sitemaps": sitemaps,
            "concurrency": concurrency,
            "options": None if options is None else dict(options),
            "webhook": None if webhook is None else dict(webhook),
        }
        body.update({name: value for name, value in given.items() if value is not None})
        data = (await self._call("POST", "/v1/crawl", json_body=body)).json()
        return Submitted(str(data["id"]), bool(data["reused"]))

    async def status(self, job_id: str) -> BatchSummary:
        """The job's summary (``GET /v1/batch/{id}``); a 404 is a :class:`ClientError`."""
        return cast("BatchSummary", (await self._call("GET", f"/v1/batch/{job_id}")).json())

    def jobs(
        self, *, status: str | Sequence[str] | None = None, page_size: int = 100
    ) -> AsyncIterator[BatchSummary]:
        """Every job of this key, newest first: ``async for job in client.jobs():``.

        Pages are fetched as the loop needs them. ``status``: ``"live"`` or statuses like
        ``["done", "partial"]``.
        """
        self._check_open()
        params = {"limit": str(page_size)}
        if status is not None:
            params["status"] = status if isinstance(status, str) else ",".join(status)
        return _Pages(self, params)

    def results(
        self,
        job_id: str,
        *,
        state: str | Sequence[str] | None = None,
        follow: bool = False,
        after: int | None = None,
    ) -> ResultStream:
        """The job's targets in input order, streamed as they are read (NDJSON).

        ``follow=True`` waits for each target to finish and ends when the job is terminal.
        A connection that breaks is resumed after the last line read. Use it in ``async with``
        (or call ``aclose``) to stop early.
        """
        self._check_open()
        chosen = state if isinstance(state, str) or state is None else ",".join(state)
        return ResultStream(self, job_id, chosen, follow, after)

    def events(self, job_id: str, *, waiting: bool = True) -> EventStream:
        """The job's events, resumed with Last-Event-ID if cut: ``target`` as each target
        ends, ``waiting`` when the next target begins to wait for its host (``waiting=False``
        leaves those out), then ``end``."""
        self._check_open()
        return EventStream(self, job_id, waiting=waiting)

    async def target(self, job_id: str, idx: int) -> dict[str, object]:
        """One target with its options, times and result (``GET /v1/batch/{id}/{idx}``).

        A pending target that waits for its host's budget carries ``waiting``, a
        :class:`WaitingEvent` without ``idx`` (``{"reason", "until"}``). An unknown job or
        index is a :class:`ClientError` with status 404.
        """
        data: dict[str, object] = (await self._call("GET", f"/v1/batch/{job_id}/{idx}")).json()
        return data

    async def map(self, url: str, *, limit: int = 1000, same_host: bool = True) -> SiteMap:
        """A site's URLs from its sitemaps and its start page's links (``POST /v1/map``).

        At most ``limit`` (1 to 10,000) URLs, the start page first; ``same_host=False`` keeps
        every host. Feed them to :meth:`submit` (in batches the server allows).

        Raises:
            ClientError: a bad ``url`` or ``limit`` (400 naming it), a refused address (403),
                the start page's failure when no URL was found, a busy site or pool (503 with
                ``retry_after``), or a server without a map (404).
        """
        body = {"url": url, "limit": limit, "same_host": same_host}
        return cast("SiteMap", (await self._call("POST", "/v1/map", json_body=body)).json())

    async def cancel(self, job_id: str) -> bool:
        """Cancel a live job: True; False for a finished or unknown job (as the engine does)."""
        try:
            await self._call("DELETE", f"/v1/batch/{job_id}")
        except ClientError as exc:
            if exc.code in ("not_found", "not_cancellable"):
                return False
            raise
        return True

    async def retry(self, job_id: str, *, webhook: Mapping[str, object] | None = None) -> Submitted:
        """A new job with the failed targets of a finished one, and the targets an interrupted
        or cancelled one left unfinished (``POST /v1/batch/{id}/retry``).

        A repeat returns the same new job (``reused``). A job still live, or one whose every
        target is done, is a :class:`ClientError` with status 409; an unknown job 404.
        ``webhook`` is the new job's, as :meth:`submit`'s (the old job's is not carried over).

        Raises:
            CallerBusy, Busy: a cap is full; ``retry_after`` says when to try again.
            ClientError: any other refusal, with its status, error and hint.
        """
        body = None if webhook is None else {"webhook": dict(webhook)}
        data = (await self._call("POST", f"/v1/batch/{job_id}/retry", json_body=body)).json()
        return Submitted(str(data["id"]), bool(data["reused"]))

    async def wait(self, job_id: str) -> BatchSummary:
        """Wait until the job is terminal (following its events) and return its summary."""
        async with self.events(job_id) as stream:
            async for event in stream:
                if event.event == "end":
                    return cast("BatchSummary", event.data)
        return await self.status(job_id)  # the stream ended without end: read it


@final
class _Pages(AsyncIterator[BatchSummary]):
    def __init__(self, client: BatchClient, params: dict[str, str]) -> None:
        self._client = client
        self._params = params
        self._page: list[BatchSummary] = []
        self._next: str | None = None
        self._started = False

    def __aiter__(self) -> _Pages:
        return self

    async def __anext__(self) -> BatchSummary:
        while not self._page:
            if self._started and self._next is None:
                raise StopAsyncIteration
            params = dict(self._params)
            if self._next is not None:
                params["before"] = self._next
            data = (await self._client._call("GET", "/v1/batch", params=params)).json()
            self._started = True
            self._page = list(data["jobs"])
            self._next = data["next"]
        return self._page.pop(0)


@asynccontextmanager
async def open_client(
    base_url: str,
    key: str,
    *,
    request_timeout: float = 30.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncIterator[BatchClient]:
    """A :class:`BatchClient` for the server at ``base_url``, sending ``key`` as the Bearer.

    ``request_timeout`` bounds connecting and each request; a stream's reads are not bounded (a
    follower may wait long for the next target). ``transport`` replaces httpx's (tests). After
    the block, every call of the client raises :class:`trio.ClosedResourceError`.
    """
    http = httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=httpx.Timeout(request_timeout, read=None),
        transport=transport,
    )
    async with http:
        client = BatchClient._create(http)
        try:
            yield client
        finally:
            client._closed = True


def client_on(http: httpx.AsyncClient, key: str) -> BatchClient:
    """A :class:`BatchClient` on ``http``, which its owner keeps open, sending ``key`` as the
    Bearer on each request.

    For trio-batch's MCP tools, whose endpoint keeps one connection pool for its lifetime and
    calls the API with each request's own key: the client costs no connection of its own.
    """
    return BatchClient._create(http, {"Authorization": f"Bearer {key}"})
