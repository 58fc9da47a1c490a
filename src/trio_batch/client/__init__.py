"""A client for the trio-batch HTTP API (SPEC §7), on httpx: Trio, asyncio, or blocking.

::

    from trio_batch.client import open_client

    async with open_client("http://127.0.0.1:8080", key) as client:
        sub = await client.submit(["https://example.org/"])
        async for line in client.results(sub.id, follow=True):
            print(line["idx"], line["status"])

The same code runs under ``trio.run`` and ``asyncio.run``: it waits and shields through AnyIO
(which httpx itself runs on), never through one loop's own calls. For a script without an event
loop, :class:`BlockingClient` has the same methods, blocking::

    with BlockingClient("http://127.0.0.1:8080", key) as client:
        sub = client.submit(["https://example.org/"])
        print(client.wait(sub.id)["status"])

HTTP error answers become exceptions, chosen by the answer's ``code`` (never by its words): a
refused submit raises the engine's own :class:`~trio_batch.SubmitError` subclasses
(``CallerBusy``, ``Busy``, ``TooManyTargets``, ``NoTargets``) with ``retry_after`` set from the
answer's ``Retry-After``; anything else raises :class:`ClientError` with the status, the
answer's ``code``, ``error`` and ``hint``. A server that cannot be reached is a
:class:`ClientError` with status 0. A client used after its ``async with`` block has ended
raises :class:`trio.ClosedResourceError` (whatever the loop: it is only an exception class).
Needs ``httpx`` (``pip install 'trio-batch[web]'`` has it); ``import trio_batch`` does not
load this module.

The package's rooms: ``_async`` (:class:`BatchClient` and its resuming streams), ``_blocking``
(the portal twin), ``_types`` (the answers' shapes) and ``_errors`` (the one reader of an error
answer, which the MCP tools share).
"""

from __future__ import annotations

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._async import BatchClient, EventStream, ResultStream, open_client
from ._blocking import BlockingClient, BlockingStream
from ._errors import ClientError
from ._types import (
    BatchEvent,
    BatchSummary,
    Counts,
    CrawlProgress,
    Links as Links,
    ResultBody,
    SiteMap as SiteMap,
    TargetEvent,
    TargetLine,
    WaitingEvent as WaitingEvent,
)

__all__ = [
    "BatchClient",
    "BatchEvent",
    "BatchSummary",
    "BlockingClient",
    "BlockingStream",
    "ClientError",
    "Counts",
    "CrawlProgress",
    "EventStream",
    "ResultBody",
    "ResultStream",
    "TargetEvent",
    "TargetLine",
    "open_client",
]

_fixup_module_metadata(__name__, globals())
# The shapes the public ones are made of (a summary's links, map's answer, a waiting event):
# importable from here, and saying so, though only reached through the names above.
_fixup_module_metadata(__name__, {**globals(), "__all__": ["Links", "SiteMap", "WaitingEvent"]})
del _fixup_module_metadata
