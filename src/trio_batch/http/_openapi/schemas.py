"""The component schemas of the OpenAPI document: what the API reads and what it answers.

What the model already says is not typed again: the job-status and target-state enums come from
``JobStatus`` and ``TargetState`` (through ``parts``), and the ``Options`` properties from the
fields of ``trio_batch.Options`` (via the same table ``_parse`` checks requests with).
"""

from __future__ import annotations

from ..._config import DEFAULT_CONCURRENCY
from ..._headers import ALLOWED_HEADERS, MAX_HEADER_CHARS
from ..._model import JSONValue
from .._errors import CODES
from .._parse import OPTION_TYPES
from .parts import JOB_STATUSES, TARGET_STATES, ref

_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    bool: "boolean",
    type(None): "null",
}

URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://"
    r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(:[1-9][0-9]{0,3})?"
    r"([/?#][^\s\\\x00-\x1f\x7f]*)?$"
)
"""An absolute http(s) URL with a host name (not a literal address) and no credentials: the
URLs a schema can tell from the ones the guard refuses (a private address, ``localhost``, a
name that resolves to one: those are 400, or 403 when fetched, whatever the document says)."""

URL: dict[str, JSONValue] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 2048,
    "pattern": URL_PATTERN,
}

_OPTION_DOCS = {
    "mode": "text (default), markdown, html or raw.",
    "question": "Return the passages that answer it.",
    "pages": "PDF page ranges, like `1-3,7`.",
    "grep": "A regular expression: matching lines only.",
    "jq": "A jq program for a JSON response.",
    "context": "Lines around grep matches; null = on when there is a question.",
    "recover": "On failure, serve the last cached copy, marked stale.",
    "robots": "Obey the site's robots.txt (a disallowed URL fails without a request); null = "
    "the server's robots setting.",
    "headers": "Request headers: Accept, Accept-Language, Authorization, Cookie, Referer and "
    "User-Agent (appended to ours), names in any case; any other is a 400. Cookie and "
    "Authorization go to the target's exact origin only (never after a redirect to another), "
    "bypass the response cache, and are never stored or shown: answers show `<secret>`.",
    "render": "Load the page in a headless Chromium and shape the DOM its scripts built (for "
    "single-page apps that answer `Loading...`). Every request the page makes goes through the "
    "same guard; not cached; not with jq, pages or recover. meta says `rendered` and `settled`.",
    "wait_for": "With render: a CSS selector to wait for (at most 1,024 characters, one line) "
    "instead of the network going quiet; an invalid selector is a 400.",
    "formats": "Several shapes of one fetch: the first of markdown, text, html (the cleaned "
    "main content, or the cleaned page with main_content false) or raw is the content, each "
    "other one goes in `meta.formats`; links gives "
    "`meta.links` ({url, text, internal}: absolute, deduplicated), metadata `meta.metadata` "
    "(title, description, lang, canonical, og:*, twitter:*, dates; a PDF's document info). "
    "Each at most once; not with a different mode.",
    "main_content": "HTML only: text, markdown and the html format are the page's main content "
    "(the article or main element, or the best-scored block of text; navigation, headers, "
    "footers, sidebars, related, share and comment blocks, banners left out). false = the "
    "whole page, as before this option existed.",
    "max_age": "Seconds: the oldest copy from the response cache this target takes instead of "
    "a fetch (Firecrawl's maxAge, in seconds); 0 always fetches (and refreshes the cache); "
    "null = the server's cache life (5 minutes, or less if the page's Cache-Control says). "
    "`meta.cached` and `meta.age` say what was served.",
}
"""One line per field of ``trio_batch.Options``; a new field without one fails at import."""


def _any_case(name: str) -> str:
    """A pattern of ``name`` in any case: ``[Aa][Cc]...``."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in name)


_HEADERS: dict[str, JSONValue] = {  # a name twice in two cases is the server's 400 alone
    "type": "object",
    "maxProperties": len(ALLOWED_HEADERS),
    "propertyNames": {"pattern": f"^({'|'.join(_any_case(n) for n in ALLOWED_HEADERS)})$"},
    "additionalProperties": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_HEADER_CHARS,
        "pattern": "^[\\x21-\\x7e]([\\x20-\\x7e\\t]*[\\x21-\\x7e])?$",
        "description": "One line of visible ASCII, no blank at either end.",
    },
    "description": _OPTION_DOCS["headers"],
}


_FORMATS: dict[str, JSONValue] = {
    "type": "array",
    "items": {
        "type": "string",
        "enum": ["markdown", "text", "html", "raw", "links", "metadata"],
    },
    "maxItems": 6,
    "uniqueItems": True,
    "description": _OPTION_DOCS["formats"],
}
"""``trio_batch.web._extract._options.FORMATS`` (``tests/web/test_formats.py`` holds them equal)."""


def _option(name: str, types: tuple[type, ...]) -> dict[str, JSONValue]:
    """The property of one field of ``Options``: its JSON types and its line of ``_OPTION_DOCS``."""
    if name == "headers":
        return _HEADERS
    if name == "formats":
        return _FORMATS
    kinds = [_JSON_TYPES[t] for t in types]
    option: dict[str, JSONValue] = {
        "type": kinds[0] if len(kinds) == 1 else kinds,
        "description": _OPTION_DOCS[name],
    }
    if name == "mode":
        option["enum"] = ["", "text", "markdown", "html", "raw"]
    if int in types:  # max_age: seconds
        option["minimum"] = 0
    return option


OPTIONS: dict[str, JSONValue] = {
    "type": "object",
    "description": "Per-target options for the web fetcher (SPEC §6). Empty means default.",
    "properties": {name: _option(name, types) for name, types in OPTION_TYPES.items()},
    "additionalProperties": False,
}


def _event(name: str, ident: str | None, data: str) -> dict[str, JSONValue]:
    """One kind of Server-Sent Event: its name, its id's pattern (None: it has no id), and
    the component its JSON ``data`` holds."""
    properties: dict[str, JSONValue] = {
        "event": {"type": "string", "const": name},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": ref(data),
        },
    }
    if ident is None:  # no id line: a client's Last-Event-ID stays the last target's
        return {
            "type": "object",
            "required": ["event", "data"],
            "properties": properties,
            "not": {"required": ["id"]},
        }
    properties["id"] = {"type": "string", "pattern": ident}
    return {"type": "object", "required": ["event", "id", "data"], "properties": properties}


SCHEMAS: dict[str, JSONValue] = {
    "Error": {
        "type": "object",
        "description": "Every error answer. `field` names the input at fault when there is one.",
        "required": ["error", "hint", "code"],
        "properties": {
            "error": {"type": "string", "description": "What was wrong."},
            "hint": {"type": "string", "description": "What to do about it."},
            "code": {
                "type": "string",
                "enum": list(CODES),
                "description": "What was wrong, for programs: it stays when `error`'s words "
                "change (an addition to SPEC §5's error body).",
            },
            "field": {
                "type": "string",
                "description": "The input at fault, like `targets[2].url` or `body`.",
            },
            "status": {
                "type": "string",
                "enum": JOB_STATUSES,
                "description": "With 409: the job's status.",
            },
        },
        "additionalProperties": False,
    },
    "Options": OPTIONS,
    "TargetIn": {
        "type": "object",
        "required": ["url"],
        "properties": {
            "url": {
                **URL,
                "description": "An absolute http(s) URL of a public host, at most 2,048 "
                "characters, without credentials.",
            },
            "options": ref("Options"),
        },
        "additionalProperties": False,
        "example": {"url": "https://example.org/", "options": {"mode": "markdown"}},
    },
    "BatchIn": {
        "type": "object",
        "required": ["targets"],
        "example": {
            "targets": [
                "https://example.org/",
                {"url": "https://example.org/about", "options": {"formats": ["text", "links"]}},
            ],
            "concurrency": 2,
        },
        "properties": {
            "targets": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "anyOf": [
                        {**URL, "description": "A URL alone: a target without options."},
                        ref("TargetIn"),
                    ]
                },
            },
            "webhook": ref("WebhookIn"),
            "robots": {
                "type": ["boolean", "null"],
                "description": "Obey each site's robots.txt for every target of the job that "
                "does not say otherwise in its options; null or absent: the server's robots "
                "setting.",
            },
            "concurrency": {
                "type": "integer",
                "minimum": 1,
                "default": DEFAULT_CONCURRENCY,
                "description": "Targets of this job fetched at once, still started in order "
                "and each within its host's budget (at most the server's max_concurrency, 8 "
                "by default). Left out: the server's default_concurrency "
                f"({DEFAULT_CONCURRENCY} unless its operator set another). 1 fetches them one "
                "after another. A repeat that asks for another concurrency is a new job.",
            },
        },
        "additionalProperties": False,
    },
    "WebhookIn": {
        "type": "object",
        "description": "Where to POST the job's events, signed as Standard Webhooks do with the "
        "caller's secret (`trio-batch keys secret NAME`); retried for up to an hour.",
        "required": ["url"],
        "properties": {
            "url": {
                **URL,
                "description": "An absolute http(s) URL of a public host (a target's checks).",
            },
            "events": {
                "type": "array",
                "minItems": 1,
                "items": {"enum": ["target", "end"]},
                "default": ["end"],
                "description": "`target`: each target that ends; `end`: the job's end.",
            },
        },
        "additionalProperties": False,
    },
    "Links": {
        "type": "object",
        "required": ["self", "results", "stream", "events"],
        "properties": {
            "self": {"type": "string"},
            "results": {"type": "string", "description": "The targets as one JSON answer."},
            "stream": {"type": "string", "description": "The targets as NDJSON (streamed)."},
            "events": {"type": "string", "description": "The job's Server-Sent Events."},
        },
        "additionalProperties": False,
    },
    "Submitted": {
        "type": "object",
        "required": ["id", "reused", "status", "targets_total", "expires_at", "links"],
        "properties": {
            "id": {"type": "string"},
            "reused": {"type": "boolean"},
            "status": {"type": "string", "enum": JOB_STATUSES},
            "targets_total": {"type": "integer", "minimum": 1},
            "expires_at": {
                "type": "number",
                "description": "Unix seconds after which a finished job may be gone (each read "
                "by its owner moves it).",
            },
            "links": ref("Links"),
            "crawl": ref("Crawl"),
        },
        "additionalProperties": False,
    },
    "Counts": {
        "type": "object",
        "description": "Targets by state; the four always sum to targets_total.",
        "required": TARGET_STATES,
        "properties": {s: {"type": "integer", "minimum": 0} for s in TARGET_STATES},
        "additionalProperties": False,
    },
    "Result": {
        "type": "object",
        "required": ["content", "meta"],
        "properties": {
            "content": {"type": "string"},
            "meta": {"type": "object", "description": "The rest of the fetcher's envelope."},
        },
        "additionalProperties": False,
    },
    "TargetOut": {
        "type": "object",
        "required": ["idx", "url", "status", "error", "hint", "options", "result"],
        "properties": {
            "idx": {"type": "integer", "minimum": 0},
            "url": {"type": "string"},
            "status": {"type": "string", "enum": TARGET_STATES},
            "error": {"type": "string"},
            "hint": {"type": "string"},
            "options": ref("Options"),
            "started_at": {"type": ["number", "null"], "description": "When its last run began."},
            "finished_at": {"type": ["number", "null"], "description": "When it was stored."},
            "waiting": {
                "type": "object",
                "description": "Present on a pending target that waits for its host's budget "
                "(docs/politeness.md): why, and until when (Unix seconds; null while it waits "
                "for a slot to free). Waiting is not failing.",
                "required": ["reason", "until"],
                "properties": {
                    "reason": {"type": "string", "enum": ["host_busy", "backoff", "crawl_delay"]},
                    "until": {"type": ["number", "null"]},
                },
                "additionalProperties": False,
            },
            "result": {"anyOf": [ref("Result"), {"type": "null"}]},
        },
        "additionalProperties": False,
    },
    "Batch": {
        "type": "object",
        "description": "A job's summary; with `results=1` also its targets (a page of them).",
        "required": [
            "id",
            "status",
            "error",
            "targets_total",
            "counts",
            "created_at",
            "updated_at",
            "expires_at",
            "links",
        ],
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": JOB_STATUSES},
            "error": {"type": "string"},
            "targets_total": {"type": "integer", "minimum": 0},
            "counts": ref("Counts"),
            "created_at": {"type": "number"},
            "updated_at": {"type": "number"},
            "expires_at": {"type": "number"},
            "links": ref("Links"),
            "crawl": ref("Crawl"),
            "targets": {
                "type": "array",
                "items": ref("TargetOut"),
                "description": "Only with results=1: the page of matching targets, in order.",
            },
            "targets_matched": {
                "type": "integer",
                "minimum": 0,
                "description": "Only with results=1: targets that match `state`.",
            },
            "next_offset": {
                "type": ["integer", "null"],
                "description": "Only with results=1: the offset of the next page, or null.",
            },
        },
        "additionalProperties": False,
    },
    "Fetched": {
        "type": "object",
        "required": ["url", "result"],
        "properties": {"url": {"type": "string"}, "result": ref("Result")},
        "additionalProperties": False,
    },
    "Health": {
        "type": "object",
        "required": ["status", "live_jobs", "inflight_targets"],
        "properties": {
            "status": {"type": "string", "enum": ["ok"]},
            "live_jobs": {"type": "integer", "minimum": 0},
            "inflight_targets": {"type": "integer", "minimum": 0},
        },
        "additionalProperties": False,
    },
    "Unhealthy": {
        "type": "object",
        "description": "The database did not answer a read, or the writes of the API did not "
        "finish, within the deadline (`store_timeout`); or the server is shutting down.",
        "required": ["status", "error", "hint", "live_jobs", "inflight_targets"],
        "properties": {
            "status": {"type": "string", "enum": ["unhealthy"]},
            "error": {"type": "string", "description": "What is wrong."},
            "hint": {"type": "string", "description": "What it means for callers."},
            "live_jobs": {"type": "integer", "minimum": 0},
            "inflight_targets": {"type": "integer", "minimum": 0},
        },
        "additionalProperties": False,
    },
    "Me": {
        "type": "object",
        "description": "The caller a key belongs to (`GET /v1/me`).",
        "required": ["name", "workspace", "class"],
        "properties": {
            "name": {"type": "string", "description": "The caller's name in the keys file."},
            "workspace": {"type": "string"},
            "class": {
                "type": "string",
                "enum": ["fleet", "restricted"],
                "description": "`fleet` shares the response cache; `restricted` has its own.",
            },
        },
        "additionalProperties": False,
    },
    "TargetEvent": {
        "type": "object",
        "description": "The data of a `target` event (SSE and webhook alike): a target ended. "
        "Never its content: read that from the results.",
        "required": ["idx", "url", "status", "error", "hint"],
        "properties": {
            "idx": {"type": "integer", "minimum": 0},
            "url": {"type": "string", "description": "The target's URL, as submitted."},
            "status": {"type": "string", "enum": ["done", "failed"]},
            "error": {"type": "string", "description": "Why it failed; empty when done."},
            "hint": {"type": "string", "description": "What to do about it; may be empty."},
        },
        "additionalProperties": False,
    },
    "Event": {
        "description": "One Server-Sent Event of `GET /v1/batch/{id}/events`: `target` (id = "
        "its index) and `end` (id `end`), to send back as Last-Event-ID; `waiting` has no id.",
        "oneOf": [
            _event("target", "^[0-9]+$", "TargetEvent"),
            _event("waiting", None, "Waiting"),
            _event("end", "^end$", "Batch"),
        ],
    },
    "Waiting": {
        "type": "object",
        "description": "The data of a `waiting` event: the next target waits for its host's "
        "budget (docs/politeness.md); `until` is when it may go (Unix seconds), null while it "
        "waits for a slot to free.",
        "required": ["idx", "reason", "until"],
        "properties": {
            "idx": {"type": "integer", "minimum": 0},
            "reason": {"type": "string", "enum": ["host_busy", "backoff", "crawl_delay"]},
            "until": {"type": ["number", "null"]},
        },
        "additionalProperties": False,
    },
    "JobList": {
        "type": "object",
        "required": ["jobs", "next"],
        "properties": {
            "jobs": {
                "type": "array",
                "items": ref("Batch"),
                "description": "The caller's jobs, newest first (summaries, without targets).",
            },
            "next": {
                "type": ["string", "null"],
                "description": "Pass as `before` for the next page; null on the last page.",
            },
        },
        "additionalProperties": False,
    },
}


def _retried(submitted: JSONValue) -> JSONValue:
    """The answer to a retry: the submit's answer (``submitted``) and the job it retries."""
    assert isinstance(submitted, dict)
    required = submitted["required"]
    properties = submitted["properties"]
    assert isinstance(required, list)
    assert isinstance(properties, dict)

    return {
        **submitted,
        "description": "The answer to a retry: a submit's answer and the job it retries.",
        "required": [*required, "retry_of"],
        "properties": {**properties, "retry_of": {"type": "string"}},
    }


SCHEMAS["Retried"] = _retried(SCHEMAS["Submitted"])
SCHEMAS["RetryIn"] = {
    "type": "object",
    "properties": {"webhook": ref("WebhookIn")},
    "additionalProperties": False,
    "example": {"webhook": {"url": "https://hooks.example.org/trio-batch", "events": ["end"]}},
}
SCHEMAS["MapIn"] = {
    "type": "object",
    "description": "The site to map: its start page, how many URLs at most, which hosts.",
    "required": ["url"],
    "example": {"url": "https://example.org/", "limit": 100},
    "properties": {
        "url": {
            **URL,
            "description": "The site's start page: an absolute http(s) URL on a public host.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10_000,
            "default": 1_000,
            "description": "The most URLs answered.",
        },
        "same_host": {
            "type": "boolean",
            "default": True,
            "description": "Keep the start page's host only (and the host it redirects to); "
            "false keeps every host the sitemaps and links name. Sitemaps that robots.txt "
            "names are read on any host (cross-submission); their URLs are filtered the same.",
        },
        "robots": {
            "type": "boolean",
            "description": "Check every document the map reads (and each redirect hop) "
            "against its site's robots.txt; a disallowed one is a note. Leave it out for the "
            "server's robots setting.",
        },
    },
    "additionalProperties": False,
}
SCHEMAS["SiteMap"] = {
    "type": "object",
    "description": "A site's URLs: the start page, its sitemaps' URLs, then its links; "
    "deduplicated, without fragments, one a line ready for `trio-batch run -`.",
    "required": ["urls", "complete", "notes"],
    "properties": {
        "urls": {"type": "array", "items": {"type": "string"}, "maxItems": 10_000},
        "complete": {
            "type": "boolean",
            "description": "False when a bound (the limit, bytes, documents, index depth, "
            "time) ended the map early or a source could not be read; `notes` says which.",
        },
        "notes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "What was cut or skipped, in words.",
        },
    },
    "additionalProperties": False,
}
