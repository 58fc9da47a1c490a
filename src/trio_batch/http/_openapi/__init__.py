"""The OpenAPI 3.1 document of the API, written by hand so it says exactly what the app does.

One module per part of the document: ``parts`` (the pieces every part is built from: references,
error answers, query parameters, the shared 401/404/500/503), ``schemas`` (the components: what
the API reads and answers), ``crawls`` (a crawl's request, progress and answer: components too),
``paths`` (one operation per route) and ``streams`` (the two streams of a job, whose operations
``paths`` lists). They import one another one way only (``paths``, ``schemas`` and ``crawls``
from ``parts``, ``crawls`` from ``schemas``, ``paths`` from ``streams``), and only public names.
"""

from __future__ import annotations

import copy

from ..._model import JSONValue
from .crawls import CRAWL_SCHEMAS
from .paths import paths
from .schemas import SCHEMAS


def openapi_document(
    *,
    with_fetch: bool,
    max_body: int,
    retry_after: int,
    with_map: bool = False,
    targets_per_job: int | None = None,
    max_concurrency: int | None = None,
    max_crawl_pages: int | None = None,
) -> dict[str, JSONValue]:
    """The OpenAPI document of an app made by ``create_app`` with these arguments, and the
    engine's caps on a submit (``targets_per_job``, ``max_concurrency``) and a crawl
    (``max_concurrency``, ``max_crawl_pages``) when given."""
    document: dict[str, JSONValue] = {
        "openapi": "3.1.0",
        "info": {
            "title": "trio-batch",
            "version": "1",
            "description": "Batch fetches for agents: submit targets, list, poll, stream results "
            "and events, cancel. JSON everywhere. 429 and 503 carry Retry-After (default "
            f"{retry_after} s).",
        },
        "security": [{"bearer": []}],
        "paths": paths(kib=max_body // 1024, with_fetch=with_fetch, with_map=with_map),
        "components": {
            "schemas": {**SCHEMAS, **CRAWL_SCHEMAS},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A key from `trio-batch keys add NAME`.",
                }
            },
        },
    }

    # A fresh copy: the caller may change it without touching the shared parts of the next one.
    document = copy.deepcopy(document)
    if targets_per_job is not None:
        _batch_property(document, "targets")["maxItems"] = targets_per_job
    if max_concurrency is not None:
        _batch_property(document, "concurrency")["maximum"] = max_concurrency
        _batch_property(document, "concurrency", "CrawlIn")["maximum"] = max_concurrency
    if max_crawl_pages is not None:
        limit = _batch_property(document, "limit", "CrawlIn")
        limit["maximum"] = max_crawl_pages
        default = limit["default"]
        assert isinstance(default, int)
        limit["default"] = min(default, max_crawl_pages)
    return document


def _batch_property(
    document: dict[str, JSONValue], name: str, schema: str = "BatchIn"
) -> dict[str, JSONValue]:
    """The schema of ``schema``'s (``BatchIn``'s) property ``name`` in ``document``, to change."""
    found: JSONValue = document
    for key in ("components", "schemas", schema, "properties", name):
        assert isinstance(found, dict)
        found = found[key]
    assert isinstance(found, dict)
    return found
