"""Connections that go to the checked address: a pinning network backend and its transport.

The fetcher resolves a host once, checks every answer, and records the checked addresses in a
context variable (``PINS``) for the current task. The connection pool's network backend reads
them and connects to those addresses only, so a second DNS answer can never swap in another one
(DNS rebinding). TLS still gets the host name for SNI and certificate checks, because httpcore
keeps the origin's host and passes it to ``start_tls``. A host with no pin (which the fetcher
never sends) is resolved and checked by the backend itself.
"""

from __future__ import annotations

import contextvars
import ssl
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType

import httpcore
import httpx
import trio

PINS: contextvars.ContextVar[dict[tuple[str, int], tuple[str, ...]]] = contextvars.ContextVar(
    "trio_batch_web_pins"
)
"""Checked addresses per (host, port), set by the fetcher in the task that sends the request."""

Checker = Callable[[str, int], Awaitable[tuple[str, ...]]]


@typing.final
class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to checked addresses; everything else goes through ``inner``."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, check: Checker) -> None:
        self._inner = inner
        self._check = check

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = PINS.get({}).get((host, port))
        if addresses is None:
            addresses = await self._check(host, port)
        error: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                error = exc
        raise error or httpcore.ConnectError("no address to connect to")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the web fetcher never connects to unix sockets")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


def _to_httpx(exc: Exception) -> Exception:
    """The httpx exception for an httpcore one (same name), as httpx's own transport maps."""
    mapped = getattr(httpx, type(exc).__name__, None)
    if isinstance(mapped, type) and issubclass(mapped, httpx.TransportError):
        return mapped(str(exc))
    return httpx.TransportError(str(exc))


def _is_httpcore(exc: Exception) -> bool:
    return type(exc).__module__.startswith("httpcore")


@typing.final
class _MappedStream(httpx.AsyncByteStream):
    """A response body stream whose httpcore errors surface as httpx errors."""

    def __init__(self, stream: typing.AsyncIterable[bytes]) -> None:
        self._stream = stream
        self._iterator: typing.AsyncIterator[bytes] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._iterator is None:
            self._iterator = self._stream.__aiter__()
        try:
            return await self._iterator.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            if _is_httpcore(exc):
                raise _to_httpx(exc) from exc
            raise

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


@typing.final
class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose connections go to checked addresses."""

    def __init__(
        self,
        backend: httpcore.AsyncNetworkBackend,
        *,
        max_connections: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=5.0,
            network_backend=backend,
        )

    async def __aenter__(self) -> PinnedTransport:
        await self._pool.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self._pool.__aexit__(exc_type, exc_value, traceback)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            if _is_httpcore(exc):
                raise _to_httpx(exc) from exc
            raise
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_MappedStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
