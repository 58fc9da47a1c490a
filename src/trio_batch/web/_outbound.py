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

from ._guard import Network, Resolver, resolve_checked, system_resolver
from ._net import PinnedBackend, PinnedTransport


@final
class AddressRefused(Exception):
    """The host resolves to an address the guard refuses, or does not resolve.

    The message names neither the host nor its addresses (they must not reach a log).
    """


def guarded_transport(
    *,
    allow: Sequence[Network] = (),
    resolver: Resolver | None = None,
    max_connections: int = 8,
    ssl_context: ssl.SSLContext | None = None,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
) -> PinnedTransport:
    """An httpx transport that connects only to addresses the guard allows.

    Use it in an ``async with`` block (it owns a connection pool). Requests sent through it
    directly (``handle_async_request``) are not logged by httpx.
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
