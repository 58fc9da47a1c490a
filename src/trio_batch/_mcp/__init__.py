"""The MCP room: an MCP server over the HTTP API, for agents (``pip install 'trio-batch[mcp]'``).

Eight tools (``fetch``, ``batch_submit``, ``batch_status``, ``batch_results``, ``batch_cancel``,
``batch_retry``, ``map``, ``crawl``; ``_tools``), each a request of the HTTP API as the calling
agent's caller, so the API's guard, caps, keys and isolation hold as they are (``_api``, over
one pool per door and :mod:`trio_batch.client`'s error reader and events stream; in-process
answers stream through ``_inprocess``); their input schemas come from the OpenAPI document's
components (``_schemas``); every answer fits a byte cap (``_cap``); the SDK's server and its two
transports are in ``_server``: :func:`serve_stdio` for ``trio-batch mcp`` and
:class:`McpEndpoint` for ``/mcp`` on ``serve``. See docs/mcp.md.
"""

from __future__ import annotations

from ._api import (
    Api as Api,
    ApiFailure as ApiFailure,
    open_api as open_api,
    open_http as open_http,
)
from ._cap import ANSWER_BYTES as ANSWER_BYTES, MIN_ANSWER_BYTES as MIN_ANSWER_BYTES
from ._server import (
    McpEndpoint as McpEndpoint,
    build_server as build_server,
    serve_stdio as serve_stdio,
)
from ._tools import SERVER_HINTS as SERVER_HINTS, TOOLS as TOOLS, Tools as Tools

__all__ = [
    "ANSWER_BYTES",
    "MIN_ANSWER_BYTES",
    "SERVER_HINTS",
    "TOOLS",
    "Api",
    "ApiFailure",
    "McpEndpoint",
    "Tools",
    "build_server",
    "open_api",
    "open_http",
    "serve_stdio",
]
