"""The crawl's component schemas: ``POST /v1/crawl``'s body (``CrawlIn``), a crawl's progress
in its job's answers (``Crawl``) and the answer to a crawl (``Crawled``, a submit's answer and
the progress).

Their bounds come from ``trio_batch._crawl`` and the words of ``scope`` and ``sitemaps`` from the
route's reader (``_crawl_input``), so the document cannot drift from what the route checks.
"""

from __future__ import annotations

from ..._config import DEFAULT_CONCURRENCY
from ..._crawl import MAX_DEPTH, MAX_PATTERN_CHARS, MAX_PATTERNS, SKIP_REASONS
from ..._model import JSONValue
from .._crawl_input import SCOPES, SITEMAP_USES
from .parts import ref
from .schemas import OPTIONS, SCHEMAS, URL

_PATTERNS: dict[str, JSONValue] = {
    "type": "array",
    "maxItems": MAX_PATTERNS,
    "items": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS},
}
CRAWL_SCHEMAS: dict[str, JSONValue] = {}
"""The crawl's schemas: its request, its progress object and its answer."""

CRAWL_SCHEMAS["CrawlIn"] = {
    "type": "object",
    "description": "A crawl: a job whose targets grow by following links from `url` (see "
    "docs/crawl.md). Unknown fields are a 400.",
    "required": ["url"],
    "example": {"url": "https://example.org/docs/", "limit": 100, "scope": "prefix"},
    "properties": {
        "url": {
            **URL,
            "description": "The start page (depth 0): an absolute http(s) URL on a public host.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10_000,
            "default": 100,
            "description": "Pages to store done (failed pages are recorded, not counted); at "
            "most the server's max_crawl_pages (10,000 by default): over it, a 400.",
        },
        "max_depth": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_DEPTH,
            "default": 3,
            "description": "Links followed from the start page: 0 is the start page alone, 1 "
            "the start page and its links.",
        },
        "scope": {
            "enum": list(SCOPES),
            "default": "host",
            "description": "Where links may go: the start page's host (`www.` is another "
            "host), its registrable domain, or a path prefix.",
        },
        "prefix": {
            "type": "string",
            "maxLength": MAX_PATTERN_CHARS,
            "description": "With scope prefix: the path prefix (empty: the start page's "
            "directory). With another scope, a 400.",
        },
        "include": {
            **_PATTERNS,
            "description": "Globs on the path (and ?query): a page must match one (`*` within "
            "a segment, `**` across).",
        },
        "exclude": {
            **_PATTERNS,
            "description": "Globs on the path: a page matching one is skipped.",
        },
        "sitemaps": {
            "enum": list(SITEMAP_USES),
            "default": "skip",
            "description": "The site's sitemaps as seeds: skip them, include them with the "
            "start page, or only them.",
        },
        "concurrency": {
            "type": "integer",
            "minimum": 1,
            "default": DEFAULT_CONCURRENCY,
            "description": "Pages fetched at once, each within its host's budget (at most the "
            "server's max_concurrency). Left out: the server's default_concurrency.",
        },
        "options": {
            **OPTIONS,
            "description": "A target's options, applied to every page (robots on unless they "
            "say otherwise); no Cookie or Authorization header (a 400).",
        },
        "webhook": ref("WebhookIn"),
    },
    "additionalProperties": False,
}
CRAWL_SCHEMAS["Crawl"] = {
    "type": "object",
    "description": "A crawl's progress, in the answers of a job that is one (a batch's have "
    "no `crawl`): its bounds, pages stored done, and the URLs it did not follow, by reason.",
    "required": ["limit", "max_depth", "done", "skipped"],
    "properties": {
        "limit": {"type": "integer", "minimum": 1},
        "max_depth": {"type": "integer", "minimum": 0},
        "done": {"type": "integer", "minimum": 0},
        "skipped": {
            "type": "object",
            "required": list(SKIP_REASONS),
            "properties": {reason: {"type": "integer", "minimum": 0} for reason in SKIP_REASONS},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


def _crawled(submitted: JSONValue) -> JSONValue:
    """The answer to a crawl: the submit's answer (``submitted``) with its ``crawl`` always."""
    assert isinstance(submitted, dict)
    required = submitted["required"]
    assert isinstance(required, list)
    return {
        **submitted,
        "description": "The answer to a crawl: a submit's answer and the crawl's object.",
        "required": [*required, "crawl"],
    }


CRAWL_SCHEMAS["Crawled"] = _crawled(SCHEMAS["Submitted"])
