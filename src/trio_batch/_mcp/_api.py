"""The tools' one way to the engine: the HTTP API, called with the caller's own key.

Every tool is a request of the HTTP API (SPEC §5 and §7), so the MCP server has the API's
guard, caps, keys, isolation and error answers without a second copy of any of them. Where the
API runs decides the transport, never the tools:

- ``trio-batch mcp``: an app of :func:`trio_batch.http.create_app` over an engine in this
  process, called in-process through ``httpx.ASGITransport`` with the local caller's key;
- ``trio-batch mcp --server URL``: a running ``serve``, over the network, with ``--key``;
- ``serve``'s ``/mcp``: the app that took the MCP request, in-process, with the bearer key the
  MCP request carried (the caller is the key's, on every request).

An error answer becomes :class:`ApiFailure`, carrying the answer's ``error``, ``hint``,
``code`` and ``field`` word for word, which the tools hand back as a tool error.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import final

import httpx
from starlette.types import ASGIApp

from .._model import JSONValue

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
    try:
        data = response.json()
    except ValueError:
        data = None
    body = data if isinstance(data, dict) else {}
    retry_after = response.headers.get("retry-after", "").strip()

    def text(name: str) -> str | None:
        value = body.get(name)
        return value if isinstance(value, str) else None

    return ApiFailure(
        response.status_code,
        text("error") or f"the API answered {response.status_code}",
        text("hint") or "",
        code=text("code") or "",
        field=text("field"),
        retry_after=int(retry_after) if retry_after.isdigit() else None,
        job_status=text("status"),
    )


@final
class Api:
    """Requests of the HTTP API as one caller; each answer's JSON, or :class:`ApiFailure`."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

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
            )
        except httpx.TransportError as exc:
            raise ApiFailure(
                0,
                f"could not reach the trio-batch server ({type(exc).__name__})",
                "check that the server runs and that --server names it; then call the tool again",
                code="unreachable",
            ) from None
        if response.status_code >= 400:
            raise failure_from(response)
        data = response.json()
        if not isinstance(data, dict):  # pragma: no cover - every API answer is an object
            raise ApiFailure(502, "the API answered something that is not a JSON object")
        return data


@contextlib.asynccontextmanager
async def open_api(
    *, key: str, app: ASGIApp | None = None, base_url: str | None = None, seconds: float = 60.0
) -> AsyncIterator[Api]:
    """An :class:`Api` of the caller whose key is ``key``: in-process on ``app``, or remote.

    Give exactly one of ``app`` (an app of ``create_app``, called in-process) and ``base_url``
    (a running ``serve``). ``seconds`` bounds each request: the API's own calls answer within
    its ``store_timeout``, and a single fetch within the fetcher's deadline.
    """
    if (app is None) == (base_url is None):
        raise TypeError("open_api needs exactly one of app= and base_url=")
    transport = (
        httpx.ASGITransport(app=app, raise_app_exceptions=False) if app is not None else None
    )
    async with httpx.AsyncClient(
        base_url=base_url if base_url is not None else _INTERNAL_BASE,
        transport=transport,
        headers={"Authorization": f"Bearer {key}"},
        timeout=seconds,
        # In-process calls must not pick up a proxy from the environment (nor pay for one).
        trust_env=app is None,
    ) as http:
        yield Api(http)
