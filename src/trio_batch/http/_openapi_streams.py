"""The OpenAPI operations of SPEC §7's routes: the listing, the streams, retry and ``/ui``.

Kept beside ``_openapi`` (which it extends) so neither file outgrows one head; the shared
pieces (errors, the job id parameter, the schemas) come from there.
"""

from __future__ import annotations

from .._model import JobStatus, JSONValue, TargetState
from . import _openapi as base
from ._parse import MAX_INT

_JOB_WORDS = "|".join(["live", *(s.value for s in JobStatus)])
_STATES = "|".join(s.value for s in TargetState)

SCHEMAS: dict[str, JSONValue] = {
    "TargetEvent": {
        "type": "object",
        "description": "The data of a `target` event: a target ended.",
        "required": ["idx", "status"],
        "properties": {
            "idx": {"type": "integer", "minimum": 0},
            "status": {"type": "string", "enum": ["done", "failed"]},
        },
        "additionalProperties": False,
    },
    "Event": {
        "type": "object",
        "description": "One Server-Sent Event of `GET /v1/batch/{id}/events`.",
        "required": ["event", "id", "data"],
        "properties": {
            "event": {"type": "string", "enum": ["target", "end"]},
            "id": {
                "type": "string",
                "pattern": "^([0-9]+|end)$",
                "description": "A target's index, or `end`: send it back as Last-Event-ID.",
            },
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"oneOf": [base._ref("TargetEvent"), base._ref("Batch")]},
                "description": "JSON: `{idx, status}` for `target`, the summary for `end`.",
            },
        },
    },
    "JobList": {
        "type": "object",
        "required": ["jobs", "next"],
        "properties": {
            "jobs": {
                "type": "array",
                "items": base._ref("Batch"),
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


def _text(media_type: str, description: str) -> dict[str, JSONValue]:
    return {
        "description": description,
        "content": {media_type: {"schema": {"type": "string"}}},
    }


def list_jobs() -> dict[str, JSONValue]:
    return {
        "operationId": "listBatches",
        "summary": "Your batches, newest first, a page at a time",
        "description": "Does not move the jobs' expiry (reading a job does).",
        "parameters": [
            base._query(
                "status",
                "Only jobs in these statuses (comma-separated); `live` = queued and running.",
                {"type": "string", "pattern": f"^({_JOB_WORDS})(,({_JOB_WORDS}))*$"},
            ),
            base._query(
                "limit",
                "Jobs per page (default 50).",
                {"type": "integer", "minimum": 1, "maximum": 500},
            ),
            base._query(
                "before",
                "The `next` cursor of the previous page.",
                {"type": "string", "minLength": 1},
            ),
        ],
        "responses": {
            "200": base._json(base._ref("JobList"), "A page of jobs."),
            "400": base._error("A query parameter is invalid (`field` names it)."),
            "401": base._AUTH_401,
            "500": base._500,
            "503": base._503,
        },
    }


def results() -> dict[str, JSONValue]:
    return {
        "operationId": "streamResults",
        "summary": "The targets as NDJSON, streamed; with follow=1 as they finish",
        "description": "One line per target in input order: `{idx, url, status, error, hint, "
        "result}`. With `follow=1` a line is written once its target is done or failed, and "
        "the answer ends when the job is terminal. Reading moves the job's expiry.",
        "parameters": [
            base._query(
                "state",
                "Only targets in these states (comma-separated).",
                {"type": "string", "pattern": f"^({_STATES})(,({_STATES}))*$"},
            ),
            base._query(
                "after",
                "Start after this target index.",
                {"type": "integer", "minimum": 0, "maximum": MAX_INT},
            ),
            base._query(
                "follow",
                "1 to keep the answer open until the job is terminal.",
                {"type": "string", "enum": ["0", "1", "true", "false"]},
            ),
        ],
        "responses": {
            "200": _text("application/x-ndjson", "One JSON object per line, per target."),
            "400": base._error("A query parameter is invalid (`field` names it)."),
            "401": base._AUTH_401,
            "404": base._NO_JOB_404,
            "500": base._500,
            "503": base._503,
        },
    }


def events() -> dict[str, JSONValue]:
    return {
        "operationId": "streamEvents",
        "summary": "The job's progress as Server-Sent Events",
        "description": "`event: target` (data `{idx, status}`, id = the index) each time a "
        "target ends done or failed, in input order; then `event: end` (data = the summary, "
        "id `end`) and the stream closes. A comment line at least every 15 s. A job already "
        "terminal answers its target events and `end` at once. Reading moves the job's expiry.",
        "parameters": [
            {
                "name": "Last-Event-ID",
                "in": "header",
                "description": "Resume after this event id (a target index, or `end`).",
                "schema": {"type": "string", "pattern": "^([0-9]{1,10}|end)$"},
            }
        ],
        "responses": {
            "200": {
                "description": "The events. The schema is the one of each event, as "
                "OpenAPI 3.2's `itemSchema` has it (and schemathesis reads `schema`): its "
                "`event`, `id` and `data` (JSON).",
                "content": {"text/event-stream": {"schema": base._ref("Event")}},
            },
            "400": base._error("Last-Event-ID is not an id this stream sends."),
            "401": base._AUTH_401,
            "404": base._NO_JOB_404,
            "500": base._500,
            "503": base._503,
        },
    }


def ui() -> dict[str, JSONValue]:
    return {
        "operationId": "statusPage",
        "summary": "A page to watch your jobs (paste a key; it stays in the tab)",
        "security": [],
        "responses": {
            "200": _text("text/html", "The page: HTML with its script and style inline."),
            "500": base._500,
        },
    }


def retry() -> dict[str, JSONValue]:
    return {
        "operationId": "retryBatch",
        "summary": "Retry a finished batch's failed targets as a new batch",
        "description": "A new job of the same caller with exactly the targets that ended "
        "`failed`, same URLs and options, in input order; `retry_of` names the old job. A "
        "repeat returns the same new job (200, reused) while it may be reused. Caps apply. "
        "The body is optional: a `webhook` for the new job's events (the old job's is not "
        "carried over).",
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": base._ref("RetryIn")}},
        },
        "responses": {
            "200": base._json(base._ref("Retried"), "The same retry exists already: reused."),
            "202": base._json(base._ref("Retried"), "Accepted: a new job, queued."),
            "400": base._error(
                "A body that is not a JSON object, an unknown field, or a `webhook` that is "
                "malformed, fails the pre-check or has no caller secret (`field` names it)."
            ),
            "401": base._AUTH_401,
            "404": base._NO_JOB_404,
            "409": base._error(
                "The job is still queued or running, or none of its targets failed; "
                "`status` says which."
            ),
            "429": base._error("You have your maximum of live batches.", retry_after=True),
            "500": base._500,
            "503": base._error(
                f"The server has its maximum of live batches. {base._DATABASE}. "
                f"{base._SHUTTING_DOWN}.",
                retry_after=True,
            ),
        },
    }


def _retried() -> JSONValue:
    submitted = base._SCHEMAS["Submitted"]
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


def add_paths(paths: dict[str, JSONValue], schemas: dict[str, JSONValue]) -> None:
    """Add the operations above to an OpenAPI document's ``paths`` and ``schemas``."""
    submit = paths["/v1/batch"]
    assert isinstance(submit, dict)
    paths["/v1/batch"] = {**submit, "get": list_jobs()}
    paths["/v1/batch/{id}/results"] = {"parameters": [base._JOB_ID], "get": results()}
    paths["/v1/batch/{id}/events"] = {"parameters": [base._JOB_ID], "get": events()}
    paths["/v1/batch/{id}/retry"] = {"parameters": [base._JOB_ID], "post": retry()}
    paths["/ui"] = {"get": ui()}
    schemas.update(SCHEMAS)
    schemas["Retried"] = _retried()
    schemas["RetryIn"] = {
        "type": "object",
        "properties": {"webhook": base._ref("WebhookIn")},
        "additionalProperties": False,
    }
