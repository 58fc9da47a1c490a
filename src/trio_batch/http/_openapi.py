"""The OpenAPI 3.1 document of the API, written by hand so it says exactly what the app does.

Every status code an operation can answer is listed; ``tests/http`` checks the app against it
(schemathesis) and checks that each route of the app is documented. What the model already
says is not typed again: the job-status and target-state enums come from ``JobStatus`` and
``TargetState``, and the ``Options`` properties from the fields of ``trio_batch.Options`` (via
the same table ``_parse`` checks requests with).
"""

from __future__ import annotations

import copy

from .._model import JobStatus, JSONValue, TargetState
from ._parse import MAX_INT, OPTION_TYPES

_JOB_STATUSES = [s.value for s in JobStatus]
_TARGET_STATES = [s.value for s in TargetState]
_JSON_TYPES: dict[type, str] = {str: "string", bool: "boolean", type(None): "null"}

_OPTION_DOCS = {
    "mode": "text (default), markdown, html or raw.",
    "question": "Return the passages that answer it.",
    "pages": "PDF page ranges, like `1-3,7`.",
    "grep": "A regular expression: matching lines only.",
    "jq": "A jq program for a JSON response.",
    "context": "Lines around grep matches; null = on when there is a question.",
    "recover": "On failure, serve the last cached copy, marked stale.",
}
"""One line per field of ``trio_batch.Options``; a new field without one fails at import."""


def _ref(name: str) -> dict[str, JSONValue]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: JSONValue, description: str, **extra: JSONValue) -> dict[str, JSONValue]:
    return {
        "description": description,
        "content": {"application/json": {"schema": schema}},
        **extra,
    }


def _error(
    description: str, *, retry_after: bool = False, auth: bool = False, schema: str = "Error"
) -> dict[str, JSONValue]:
    response = _json(_ref(schema), description)
    if retry_after:
        response["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before trying again.",
                "required": True,
                "schema": {"type": "string", "pattern": "^[0-9]+$"},
            }
        }
    if auth:
        response["headers"] = {
            "WWW-Authenticate": {
                "description": "The auth scheme: Bearer.",
                "required": True,
                "schema": {"type": "string"},
            }
        }
    return response


def _option(name: str, types: tuple[type, ...]) -> dict[str, JSONValue]:
    kinds = [_JSON_TYPES[t] for t in types]
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "description": _OPTION_DOCS[name]}


_OPTIONS: dict[str, JSONValue] = {
    "type": "object",
    "description": "Per-target options for the web fetcher (SPEC §6). Empty means default.",
    "properties": {name: _option(name, types) for name, types in OPTION_TYPES.items()},
    "additionalProperties": False,
}

_SCHEMAS: dict[str, JSONValue] = {
    "Error": {
        "type": "object",
        "description": "Every error answer. `field` names the input at fault when there is one.",
        "required": ["error", "hint"],
        "properties": {
            "error": {"type": "string", "description": "What was wrong."},
            "hint": {"type": "string", "description": "What to do about it."},
            "field": {
                "type": "string",
                "description": "The input at fault, like `targets[2].url` or `body`.",
            },
            "status": {
                "type": "string",
                "enum": _JOB_STATUSES,
                "description": "With 409: the job's status.",
            },
        },
        "additionalProperties": False,
    },
    "Options": _OPTIONS,
    "TargetIn": {
        "type": "object",
        "required": ["url"],
        "properties": {
            "url": {
                "type": "string",
                "minLength": 1,
                "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
                "description": "An absolute http(s) URL of a public host, at most 2,048 "
                "characters, without credentials.",
            },
            "options": _ref("Options"),
        },
        "additionalProperties": False,
    },
    "BatchIn": {
        "type": "object",
        "required": ["targets"],
        "properties": {
            "targets": {"type": "array", "items": _ref("TargetIn")},
            "webhook": _ref("WebhookIn"),
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
                "type": "string",
                "minLength": 1,
                "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
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
            "status": {"type": "string", "enum": _JOB_STATUSES},
            "targets_total": {"type": "integer", "minimum": 1},
            "expires_at": {
                "type": "number",
                "description": "Unix seconds after which a finished job may be gone (each read "
                "by its owner moves it).",
            },
            "links": _ref("Links"),
        },
        "additionalProperties": False,
    },
    "Counts": {
        "type": "object",
        "description": "Targets by state; the four always sum to targets_total.",
        "required": _TARGET_STATES,
        "properties": {s: {"type": "integer", "minimum": 0} for s in _TARGET_STATES},
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
            "status": {"type": "string", "enum": _TARGET_STATES},
            "error": {"type": "string"},
            "hint": {"type": "string"},
            "options": _ref("Options"),
            "started_at": {"type": ["number", "null"], "description": "When its last run began."},
            "finished_at": {"type": ["number", "null"], "description": "When it was stored."},
            "result": {"anyOf": [_ref("Result"), {"type": "null"}]},
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
            "status": {"type": "string", "enum": _JOB_STATUSES},
            "error": {"type": "string"},
            "targets_total": {"type": "integer", "minimum": 0},
            "counts": _ref("Counts"),
            "created_at": {"type": "number"},
            "updated_at": {"type": "number"},
            "expires_at": {"type": "number"},
            "links": _ref("Links"),
            "targets": {
                "type": "array",
                "items": _ref("TargetOut"),
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
        "properties": {"url": {"type": "string"}, "result": _ref("Result")},
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
}

# -- operations ---------------------------------------------------------------------------------

_JOB_ID: dict[str, JSONValue] = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The job id from the submit answer.",
    "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
}

_AUTH_401 = _error("Missing or unknown API key.", auth=True)
_SHUTTING_DOWN = "The server is shutting down"
_DATABASE = (
    "The database is unavailable, or did not answer within the deadline (`store_timeout`; a "
    "change may still be made, and repeating the request is safe)"
)
_503 = _error(f"{_DATABASE}. {_SHUTTING_DOWN}.", retry_after=True)
_500 = _error("Internal error (a bug); the log has its type.")
_NO_JOB_404 = _error("No such job, or it is another caller's.")


def _body(schema: str) -> dict[str, JSONValue]:
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


def _query(name: str, description: str, schema: JSONValue) -> dict[str, JSONValue]:
    return {"name": name, "in": "query", "description": description, "schema": schema}


def _link(operation_id: str, **parameters: JSONValue) -> dict[str, JSONValue]:
    """An OpenAPI link from the submit answer to an operation on the new job."""
    return {
        "operationId": operation_id,
        "parameters": {"id": "$response.body#/id", **parameters},
    }


def _submit_batch(kib: int) -> dict[str, JSONValue]:
    return {
        "operationId": "submitBatch",
        "summary": "Submit a batch of targets",
        "description": f"The body may be at most {kib} KiB. A repeat of a live or "
        "finished (done/partial) batch of the same caller with the same targets returns "
        "that job (200, reused) instead of a new one (202).",
        "requestBody": _body("BatchIn"),
        "responses": {
            "200": _json(_ref("Submitted"), "The same batch exists already: reused."),
            "202": _json(
                _ref("Submitted"),
                "Accepted: a new job, queued.",
                links={
                    "GetBatch": _link("getBatch"),
                    "CancelBatch": _link("cancelBatch"),
                    "StreamResults": _link("streamResults"),
                    "StreamEvents": _link("streamEvents"),
                    # OpenAPI 3.1 wants every link parameter a string: a
                    # runtime expression or a constant ("0" is the first target).
                    "GetTarget": _link("getTarget", idx="0"),
                },
            ),
            "400": _error(
                "Malformed JSON, an unknown field, a wrong type (`field` names it), a "
                "target URL failing the pre-check (`field` names its index), no "
                "targets, or a `webhook` that is malformed, fails the pre-check or has "
                "no caller secret (`field` names it)."
            ),
            "401": _AUTH_401,
            "413": _error(f"The body is over {kib} KiB, or there are too many targets."),
            "429": _error("You have your maximum of live batches.", retry_after=True),
            "500": _500,
            "503": _error(
                f"The server has its maximum of live batches. {_DATABASE}. {_SHUTTING_DOWN}.",
                retry_after=True,
            ),
        },
    }


def _get_batch() -> dict[str, JSONValue]:
    state = "|".join(_TARGET_STATES)
    return {
        "operationId": "getBatch",
        "summary": "A batch's summary, and with results=1 its targets",
        "description": "Reading moves the job's expiry (`expires_at`).",
        "parameters": [
            _query(
                "results",
                "1 to include the targets with their results.",
                {"type": "string", "enum": ["0", "1", "true", "false"]},
            ),
            _query(
                "state",
                "With results=1: only targets in these states (comma-separated).",
                {"type": "string", "pattern": f"^({state})(,({state}))*$"},
            ),
            _query(
                "offset",
                "With results=1: skip this many matching targets.",
                {"type": "integer", "minimum": 0, "maximum": MAX_INT},
            ),
            _query(
                "limit",
                "With results=1: at most this many targets.",
                {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            ),
        ],
        "responses": {
            "200": _json(_ref("Batch"), "The job."),
            "400": _error("A query parameter is invalid (`field` names it)."),
            "401": _AUTH_401,
            "404": _NO_JOB_404,
            "500": _500,
            "503": _503,
        },
    }


def _cancel_batch() -> dict[str, JSONValue]:
    return {
        "operationId": "cancelBatch",
        "summary": "Cancel a queued or running batch",
        "description": "The target in flight finishes; no other target starts.",
        "responses": {
            "200": _json(_ref("Batch"), "Cancelled: the job's summary."),
            "401": _AUTH_401,
            "404": _NO_JOB_404,
            "409": _error("The job is finished already; `status` says how."),
            "500": _500,
            "503": _503,
        },
    }


def _get_target() -> dict[str, JSONValue]:
    return {
        "operationId": "getTarget",
        "summary": "One target with its result",
        "responses": {
            "200": _json(_ref("TargetOut"), "The target."),
            "401": _AUTH_401,
            "404": _error("No such job or target, or it is another caller's job."),
            "500": _500,
            "503": _503,
        },
    }


def _health() -> dict[str, JSONValue]:
    return {
        "operationId": "health",
        "summary": "Liveness and readiness: the server is up and its database answers",
        "description": "Reads nothing but a job that does not exist, and writes nothing.",
        "security": [],
        "responses": {
            "200": _json(_ref("Health"), "The server is up and the database answers in time."),
            "500": _500,
            "503": _error(
                "Unhealthy: the database is unavailable or slow, or the server is shutting "
                "down; other requests get 503 meanwhile.",
                retry_after=True,
                schema="Unhealthy",
            ),
        },
    }


def _metrics() -> dict[str, JSONValue]:
    return {
        "operationId": "metrics",
        "summary": "Prometheus metrics (text format)",
        "security": [],
        "responses": {
            "200": {
                "description": "The metrics.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            "500": _500,
        },
    }


def _fetch_one(kib: int) -> dict[str, JSONValue]:
    return {
        "operationId": "fetchOne",
        "summary": "Fetch one target now",
        "description": "Answered synchronously by the same fetcher and fetch pool that "
        "batches use. A failed fetch answers with the status a single fetch gets "
        "(for example 404 or 502) and an error with a hint.",
        "requestBody": _body("TargetIn"),
        "responses": {
            "200": _json(_ref("Fetched"), "The target's result."),
            "400": _error(
                "Malformed JSON, unknown field, wrong type, or a URL failing the "
                "pre-check (`field` names it)."
            ),
            "401": _AUTH_401,
            "413": _error(f"The body is over {kib} KiB."),
            "4XX": _error("The fetch failed the way a client error would."),
            "500": _500,
            "503": _error(
                f"The fetch pool or the target is busy. The database is unavailable. "
                f"{_SHUTTING_DOWN}.",
                retry_after=True,
            ),
            "5XX": _error("The fetch failed upstream (for example 502 or 504)."),
        },
    }


def openapi_document(*, with_fetch: bool, max_body: int, retry_after: int) -> dict[str, JSONValue]:
    """The OpenAPI document of an app made by ``create_app`` with these arguments."""
    kib = max_body // 1024
    paths: dict[str, JSONValue] = {
        "/v1/batch": {"post": _submit_batch(kib)},
        "/v1/batch/{id}": {
            "parameters": [_JOB_ID],
            "get": _get_batch(),
            "delete": _cancel_batch(),
        },
        "/v1/batch/{id}/{idx}": {
            "parameters": [
                _JOB_ID,
                {
                    "name": "idx",
                    "in": "path",
                    "required": True,
                    "description": "The target's index in the batch, from 0.",
                    "schema": {"type": "integer", "minimum": 0},
                },
            ],
            "get": _get_target(),
        },
        "/healthz": {"get": _health()},
        "/metrics": {"get": _metrics()},
    }
    if with_fetch:
        paths["/v1/fetch"] = {"post": _fetch_one(kib)}
    schemas = dict(_SCHEMAS)
    from ._openapi_streams import add_paths  # it imports this module's pieces

    add_paths(paths, schemas)
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
        "paths": paths,
        "components": {
            "schemas": schemas,
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
    return copy.deepcopy(document)
