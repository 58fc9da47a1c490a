"""Fixtures of the web fetcher tests: a local HTTP site and a local HTTPS one.

What tests import is in ``support.py`` (fake DNS, PDFs, mock transports, pages) and
``tests/support.py`` (the local site itself).
"""

from __future__ import annotations

import functools
import ssl

import pytest
import trio
import trustme

from tests.support import LocalSite, serve_site
from tests.web.support import TlsServer


@pytest.fixture
async def server(nursery: trio.Nursery) -> LocalSite:
    """A local HTTP site on 127.0.0.1, stopped when the test ends."""
    return await serve_site(nursery)


@pytest.fixture
async def tls_server(nursery: trio.Nursery) -> TlsServer:
    """An HTTPS server on 127.0.0.1 with a certificate for secure.example (test CA)."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("secure.example").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    local = LocalSite()
    listeners: list[trio.SSLListener[trio.SocketStream]] = await nursery.start(
        functools.partial(
            trio.serve_ssl_over_tcp, local.handle, 0, server_context, host="127.0.0.1"
        )
    )
    tcp = listeners[0].transport_listener
    assert isinstance(tcp, trio.SocketListener)
    local.port = tcp.socket.getsockname()[1]
    return TlsServer(local, client_context)
