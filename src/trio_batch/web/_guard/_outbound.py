"""The guard for the service's own requests (webhook deliveries, SPEC §7): the fetcher's rules.

:func:`guarded_transport` is an httpx transport whose connections go only to addresses the
guard allows, as the fetcher's do (``_net``): the host is resolved once, every answer must be
public (or inside an ``allow`` network), and the connection goes to those checked addresses.
A refusal raises :class:`AddressRefused` before any connection is attempted. Check the URL's
text first with :func:`~trio_batch.web.precheck` (same ``allow``).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import final

import httpcore
import httpx

from ..._errors import Error
from ._check import Network, Resolver, resolve_checked, system_resolver
from ._net import PinnedBackend, PinnedTransport


@final
class AddressRefused(Error):
    """Raised by a :func:`guarded_transport` request whose host resolves to an address the
    guard refuses (private, loopback, link-local... and outside ``allow``), or does not
    resolve at all; no connection was attempted.

    The message names neither the host nor its addresses, so it may be logged as it is.
    """


def guarded_transport(
    *,
    allow: Sequence[Network] = (),
    resolver: Resolver | None = None,
    max_connections: int = 8,
    ssl_context: ssl.SSLContext | None = None,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
) -> httpx.AsyncBaseTransport:
    """An httpx transport that connects only to addresses the guard allows, as
    :class:`WebFetcher` does: for the service's own requests to URLs a caller chose (the
    webhook deliveries of ``trio_batch.http``).

    Each connection's host is resolved once; every address must be public or inside an
    ``allow`` network, or the request raises :class:`AddressRefused`; the connection then goes
    to those checked addresses, so a DNS answer that changes in between cannot redirect it.
    Check the URL's text first with :func:`precheck` (with the same ``allow``).

    Use it in an ``async with`` block (it owns a connection pool). Requests sent through it
    directly (``handle_async_request``) are not logged by httpx, so no URL reaches a log.

    Args:
        allow: networks whose addresses pass although they are not public (a test server, a
            service on the operator's own network).
        resolver: the DNS lookup; the system's (``getaddrinfo`` in a thread) by default.
        max_connections: connections open at once, over all hosts.
        ssl_context: the TLS settings; httpx's defaults (certifi roots) when None.
        network_backend: the httpcore backend the checked connections go through (tests);
            Trio's by default.
    """
    resolve = resolver or system_resolver
    networks = tuple(allow)

    async def check(host: str, port: int) -> tuple[str, ...]:
        checked = await resolve_checked(resolve, host, port, networks)
        if checked == ():
            raise AddressRefused("the host name does not resolve")
        if checked is None:
            raise AddressRefused("the host resolves to a private or otherwise non-public address")
        return checked

    backend = PinnedBackend(network_backend or httpcore.TrioBackend(), check)
    return PinnedTransport(backend, max_connections=max_connections, ssl_context=ssl_context)
