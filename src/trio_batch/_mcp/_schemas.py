"""The tools' input schemas, built from the OpenAPI document's own components (one source).

A target (``TargetIn``), its options (``Options``) and a webhook (``WebhookIn``) are the very
schemas ``/openapi.json`` serves, which ``trio_batch.http`` builds from ``trio_batch.Options``:
a new option reaches the API, its document and every MCP tool at once. Their references are
rewritten from ``#/components/schemas/X`` to the JSON Schema form ``#/$defs/X``, and each tool
schema carries the definitions it reaches. What is the MCP server's own (a job id, a cursor, a
page size, how long to wait) is written here, with the limits the tools enforce.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Final, cast

from .._model import JSONValue
from ..http import MAX_BODY, openapi_document

_REF = "#/components/schemas/"

MAX_WAIT: Final = 300.0
"""Longest ``wait`` of ``batch_submit`` and ``batch_status``, in seconds."""
MAX_LIMIT: Final = 100
"""Largest ``limit`` of ``batch_results``; the byte cap may make a page smaller still."""
DEFAULT_LIMIT: Final = 10
"""``batch_results``' page size when ``limit`` is left out."""


def _components() -> dict[str, JSONValue]:
    document = openapi_document(with_fetch=True, with_map=True, max_body=MAX_BODY, retry_after=5)
    components = document["components"]
    assert isinstance(components, dict)
    schemas = components["schemas"]
    assert isinstance(schemas, dict)
    return dict(schemas)


_COMPONENTS = _components()


def _rewritten(node: JSONValue, reached: set[str]) -> JSONValue:
    """``node`` with each OpenAPI reference made a ``$defs`` one; the names go in ``reached``."""
    if isinstance(node, Mapping):
        out: dict[str, JSONValue] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
                name = value.removeprefix(_REF)
                reached.add(name)
                out[key] = f"#/$defs/{name}"
            else:
                out[key] = _rewritten(value, reached)
        return out
    if isinstance(node, list):
        return [_rewritten(item, reached) for item in node]
    return node


def ref(name: str) -> dict[str, JSONValue]:
    """A reference to the OpenAPI component ``name``, which :func:`tool_schema` defines."""
    return {"$ref": _REF + name}


def tool_schema(properties: Mapping[str, JSONValue], required: list[str]) -> dict[str, JSONValue]:
    """A tool's input schema: an object of ``properties``, with the ``$defs`` they reach."""
    reached: set[str] = set()
    schema = _rewritten(
        {
            "type": "object",
            "properties": dict(properties),
            "required": list(required),
            "additionalProperties": False,
        },
        reached,
    )
    defs: dict[str, JSONValue] = {}
    pending = sorted(reached)
    while pending:
        name = pending.pop()
        if name in defs:
            continue
        found: set[str] = set()
        defs[name] = _rewritten(copy.deepcopy(_COMPONENTS[name]), found)
        pending.extend(sorted(found - set(defs)))
    result = cast("dict[str, JSONValue]", schema)
    if defs:
        result["$defs"] = dict(sorted(defs.items()))
    return result


def _property(component: str, name: str) -> JSONValue:
    """The schema of property ``name`` of the OpenAPI component ``component``."""
    schema = _COMPONENTS[component]
    assert isinstance(schema, Mapping)
    properties = schema["properties"]
    assert isinstance(properties, Mapping)
    return copy.deepcopy(properties[name])


def _url_schema() -> JSONValue:
    return _property("TargetIn", "url")


JOB_ID: dict[str, JSONValue] = {
    "type": "string",
    "minLength": 1,
    "pattern": "^[^/]+$",
    "description": "The job id that batch_submit or batch_retry answered.",
}

WAIT: dict[str, JSONValue] = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_WAIT,
    "default": 0,
    "description": "Seconds to wait for the job to end before answering (at most "
    f"{MAX_WAIT:g}); meanwhile progress notifications report targets ended of the total, if "
    "you asked for progress. 0 answers at once. The answer is the job's status either way: "
    "if it is still queued or running, call batch_status again.",
}

FETCH = tool_schema(
    {
        "url": _url_schema(),
        "options": {
            **ref("Options"),
            "description": "How to shape the page. Leave out for readable text.",
        },
    },
    ["url"],
)

SUBMIT = tool_schema(
    {
        "targets": {
            "type": "array",
            "minItems": 1,
            "description": "The pages to fetch, in order: a URL, or {url, options}. A batch "
            "has at most the targets the server allows (the error says how many): split "
            "bigger lists.",
            "items": {"anyOf": [_url_schema(), ref("TargetIn")]},
        },
        "webhook": ref("WebhookIn"),
        "concurrency": _property("BatchIn", "concurrency"),
        "wait": WAIT,
    },
    ["targets"],
)

STATUS = tool_schema({"id": JOB_ID, "wait": WAIT}, ["id"])

RESULTS = tool_schema(
    {
        "id": JOB_ID,
        "cursor": {
            "type": "string",
            "pattern": "^[0-9]{1,10}$",
            "description": "The next_cursor of the previous answer; leave out for the first "
            "page. Pass the same state again with it.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "default": DEFAULT_LIMIT,
            "description": "Most targets in the page; a page holds fewer when their content "
            "would pass the answer's byte cap.",
        },
        "state": {
            "type": "string",
            "pattern": "^(pending|running|done|failed)(,(pending|running|done|failed))*$",
            "description": "Only targets in these states, comma-separated: `failed` lists "
            "what went wrong, with a hint each.",
        },
    },
    ["id"],
)

CANCEL = tool_schema({"id": JOB_ID}, ["id"])

RETRY = tool_schema({"id": JOB_ID, "webhook": ref("WebhookIn")}, ["id"])

MAP = tool_schema(
    {
        "url": _url_schema(),
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10_000,
            "default": 1_000,
            "description": "The most URLs answered (the answer's byte cap may cut it further).",
        },
        "same_host": {
            "type": "boolean",
            "default": True,
            "description": "Keep the start page's host only; false keeps every host.",
        },
    },
    ["url"],
)


def _crawl_property(name: str, description: str) -> JSONValue:
    """Property ``name`` of ``POST /v1/crawl``'s body (its type and bounds, one copy), told
    as an agent needs it."""
    schema = _property("CrawlIn", name)
    assert isinstance(schema, dict)
    return {**schema, "description": description}


CRAWL = tool_schema(
    {
        "url": _url_schema(),
        "limit": {  # no maximum: the server's cap is its operator's (the API names it)
            "type": "integer",
            "minimum": 1,
            "default": 100,
            "description": "Pages to store done, exactly: the crawl ends when it has them (or "
            "runs out of links). Failed pages are listed but do not count. At most the "
            "server's cap (10,000 unless its operator set another).",
        },
        "max_depth": _crawl_property(
            "max_depth",
            "How many links deep to follow: 0 is the start page alone, 1 the start page and "
            "its links.",
        ),
        "scope": _crawl_property(
            "scope",
            "Where links may go: host = the start page's host only (www. is another host), "
            "domain = any host of its registrable domain, prefix = the start page's host under "
            "a path prefix (prefix; left out: the start URL's directory).",
        ),
        "prefix": _crawl_property(
            "prefix", "The path a prefix-scoped crawl stays under, like /docs/."
        ),
        "include": _crawl_property(
            "include",
            "Path globs a page must match one of (* = any characters but /, ** = any "
            "characters), like /docs/**. Left out: every path in scope.",
        ),
        "exclude": _crawl_property("exclude", "Path globs no page may match, like **/print/**."),
        "sitemaps": _crawl_property(
            "sitemaps",
            "The site's sitemaps: include = their pages are start pages too, only = fetch "
            "their pages and follow no link, skip = links alone.",
        ),
        "concurrency": _property("BatchIn", "concurrency"),
        "options": {
            **ref("Options"),
            "description": "How to shape every page, as a batch target's options. robots.txt "
            "is obeyed unless robots is false.",
        },
        "webhook": ref("WebhookIn"),
        "wait": WAIT,
    },
    ["url"],
)
