"""The tools' one way to the engine: the HTTP API, called with the caller's own key.

Every tool is a request of the HTTP API (SPEC §5 and §7), so the MCP server has the API's
guard, caps, keys, isolation and error answers without a second copy of any of them. Where the
API runs decides the transport, never the tools:

- ``trio-batch mcp``: an app of :func:`trio_batch.http.create_app` over an engine in this
  process, called in-process through ``httpx.ASGITransport`` with the local caller's key;
- ``trio-batch mcp --server URL``: a running ``serve``, over the network, with ``--key``;
- ``serve``'s ``/mcp``: the app that took the MCP request, in-process, with the bearer key the
  MCP request carried (the caller is the key's, on every request).

Each door opens one ``httpx.AsyncClient`` for its whole lifetime (:func:`open_http`) and an
:class:`Api` is that pool and one caller's key, sent on each request: a tool call costs no
client and no connection of its own. A job is waited for by following its events
(``GET /v1/batch/{id}/events``) with :mod:`trio_batch.client`'s resuming stream.

An error answer becomes :class:`ApiFailure`, carrying the answer's ``error``, ``hint``,
``code`` and ``field`` word for word (read by :class:`trio_batch.client`'s one reader of an
error answer), which the tools hand back as a tool error.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Self, final

import httpx
from starlette.types import ASGIApp

from .._model import JSONValue
from ..client._async import client_on
from ..client._errors import ClientError, ErrorBody
from ..client._types import BatchEvent
from ._inprocess import open_in_process

_INTERNAL_BASE = "http://trio-batch.internal"
"""The base URL of in-process calls: never resolved, only the path reaches the app."""


@final
class ApiFailure(Exception):
    """An error answer of the API (or none: ``status`` 0), as a tool error shows it."""

    def __init__(
        self,
        status: int,
        error: str,
        hint: str = "",
        *,
        code: str = "",
        field: str | None = None,
        retry_after: int | None = None,
        job_status: str | None = None,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.hint = hint
        self.code = code
        self.field = field
        self.retry_after = retry_after
        self.job_status = job_status

    @classmethod
    def of(cls, answer: ErrorBody) -> Self:
        """The failure of an error answer, its words kept as the API wrote them."""
        return cls(
            answer.status,
            answer.error,
            answer.hint,
            code=answer.code,
            field=answer.field,
            retry_after=answer.retry_after,
            job_status=answer.job_status,
        )

    def body(self) -> dict[str, JSONValue]:
        """The tool error's JSON: ``error``, ``hint``, ``code``, and what else the answer said."""
        body: dict[str, JSONValue] = {"error": self.error, "hint": self.hint, "code": self.code}
        if self.field is not None:
            body["field"] = self.field
        if self.job_status is not None:
            body["status"] = self.job_status
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        if self.status:
            body["http_status"] = self.status
        return body


def failure_from(response: httpx.Response) -> ApiFailure:
    """The :class:`ApiFailure` of an error answer, its words kept as the API wrote them."""
    return ApiFailure.of(ErrorBody.of(response))


def _unreachable(kind: str) -> ApiFailure:
    return ApiFailure(
        0,
        f"could not reach the trio-batch server ({kind})",
        "check that the server runs and that --server names it; then call the tool again",
        code="unreachable",
    )


def _stream_failure(exc: ClientError) -> ApiFailure:
    """An events stream's :class:`ClientError` as the tools' failure (status 0: unreachable)."""
    if exc.status == 0:
        return _unreachable(type(exc.__cause__).__name__)
    wait = None if exc.retry_after is None else int(exc.retry_after)
    return ApiFailure.of(
        ErrorBody(exc.status, exc.error, exc.hint, exc.code, exc.field, None, wait)
    )


@final
class Api:
    """Requests of the HTTP API as one caller; each answer's JSON, or :class:`ApiFailure`.

    ``http`` is the door's pool, open for the door's lifetime; ``key`` goes on each request.
    """

    def __init__(self, http: httpx.AsyncClient, key: str) -> None:
        self._http = http
        self._headers = {"Authorization": f"Bearer {key}"}
        self._client = client_on(http, key)

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: JSONValue = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, JSONValue]:
        """``method path`` with the JSON ``body``; the answer's JSON object.

        Raises:
            ApiFailure: an error answer (its status, error, hint, code and field), or no
                answer at all (status 0: the server cannot be reached).
        """
        try:
            response = await self._http.request(
                method,
                path,
                json=body,
                params=dict(params) if params else None,
                headers=self._headers,
            )
        except httpx.TransportError as exc:
            raise _unreachable(type(exc).__name__) from None
        if response.status_code >= 400:
            raise failure_from(response)
        data = response.json()
        if not isinstance(data, dict):  # pragma: no cover - every API answer is an object
            raise ApiFailure(502, "the API answered something that is not a JSON object")
        return data

    @contextlib.asynccontextmanager
    async def events(self, job_id: str) -> AsyncIterator[AsyncIterator[BatchEvent]]:
        """The job's ``target`` events as its targets end, then its ``end`` (its summary).

        :mod:`trio_batch.client`'s stream: a connection that breaks is resumed after the last
        event read. Leaving the block closes it.

        Raises:
            ApiFailure: the API refused the stream (an unknown job: ``not_found``), or could
                not be reached.
        """
        try:
            async with self._client.events(job_id, waiting=False) as stream:
                yield stream
        except ClientError as exc:
            raise _stream_failure(exc) from None


@contextlib.asynccontextmanager
async def open_http(
    *, app: ASGIApp | None = None, base_url: str | None = None, seconds: float = 60.0
) -> AsyncIterator[httpx.AsyncClient]:
    """The pool a door's :class:`Api` objects share: in-process on ``app``, or remote.

    Give exactly one of ``app`` (an app of ``create_app``, called in-process, its answers
    streamed: ``_inprocess``) and ``base_url`` (a running ``serve``). ``seconds`` bounds each
    request: the API's own calls answer within its ``store_timeout``, and a single fetch within
    the fetcher's deadline (an events stream's reads are not bounded: the API sends a comment
    at least every 15 s).
    """
    if (app is None) == (base_url is None):
        raise TypeError("open_http needs exactly one of app= and base_url=")
    async with contextlib.AsyncExitStack() as stack:
        transport = None if app is None else await stack.enter_async_context(open_in_process(app))
        http = httpx.AsyncClient(
            base_url=base_url if base_url is not None else _INTERNAL_BASE,
            transport=transport,
            timeout=seconds,
            # In-process calls must not pick up a proxy from the environment (nor pay for one).
            trust_env=app is None,
        )
        async with http:
            yield http


@contextlib.asynccontextmanager
async def open_api(
    *, key: str, app: ASGIApp | None = None, base_url: str | None = None, seconds: float = 60.0
) -> AsyncIterator[Api]:
    """An :class:`Api` of the caller whose key is ``key``, on a pool of its own (:func:`open_http`).

    For a door with one caller for its lifetime (``trio-batch mcp``).
    """
    async with open_http(app=app, base_url=base_url, seconds=seconds) as http:
        yield Api(http, key)
