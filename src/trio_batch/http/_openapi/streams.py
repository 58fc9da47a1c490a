"""The OpenAPI operations of a job's two streams: NDJSON results and Server-Sent Events.

Both are long answers whose body is not one JSON document, so their schemas say what a line or
an event holds (``Event`` in ``schemas``); what they share with the other routes (the errors,
the job id) comes from ``parts``.
"""

from __future__ import annotations

from ..._model import JSONValue, TargetState
from .._parse import MAX_INT
from .parts import (
    AUTH_401,
    INTERNAL_500,
    NO_JOB_404,
    UNAVAILABLE_503,
    error,
    query,
    ref,
    text_answer,
)

_STATES = "|".join(s.value for s in TargetState)
"""What ``state`` accepts: target states, comma-separated."""


def stream_results() -> dict[str, JSONValue]:
    """``GET /v1/batch/{id}/results``: the targets as NDJSON, and with ``follow=1`` as they end."""
    return {
        "operationId": "streamResults",
        "summary": "The targets as NDJSON, streamed; with follow=1 as they finish",
        "description": "One line per target in input order: `{idx, url, status, error, hint, "
        "result}`. With `follow=1` a line is written once its target is done or failed, and "
        "the answer ends when the job is terminal. Reading moves the job's expiry.",
        "parameters": [
            query(
                "state",
                "Only targets in these states (comma-separated).",
                {"type": "string", "pattern": f"^({_STATES})(,({_STATES}))*$"},
            ),
            query(
                "after",
                "Start after this target index.",
                {"type": "integer", "minimum": 0, "maximum": MAX_INT},
            ),
            query(
                "follow",
                "1 to keep the answer open until the job is terminal.",
                {"type": "string", "enum": ["0", "1", "true", "false"]},
            ),
        ],
        "responses": {
            "200": text_answer("application/x-ndjson", "One JSON object per line, per target."),
            "400": error("A query parameter is invalid (`field` names it)."),
            "401": AUTH_401,
            "404": NO_JOB_404,
            "500": INTERNAL_500,
            "503": UNAVAILABLE_503,
        },
    }


def stream_events() -> dict[str, JSONValue]:
    """``GET /v1/batch/{id}/events``: the job's progress as Server-Sent Events (``_stream``)."""
    return {
        "operationId": "streamEvents",
        "summary": "The job's progress as Server-Sent Events",
        "description": "`event: target` (data `{idx, url, status, error, hint}`, never the "
        "content; id = the index) each time a target ends done or failed, in input order; "
        "`event: waiting` (data `{idx, reason, until}`, no id) when the next target begins to "
        "wait for its host's budget (docs/politeness.md); "
        "then `event: end` (data = the summary, id `end`) and the stream closes; a "
        "reconnect with `Last-Event-ID: end` gets 204 (no more reconnects). A comment line at "
        "least every 15 s. A job already terminal answers its target events and `end` at "
        "once. Reading moves the job's expiry.",
        "parameters": [
            {
                "name": "Last-Event-ID",
                "in": "header",
                "description": "Resume after this event id (a target index, or `end`); empty "
                "is no id, as a browser that read none sends nothing.",
                "schema": {"type": "string", "pattern": "^([0-9]{1,10}|end)?$"},
            }
        ],
        "responses": {
            "200": {
                "description": "The events. The schema is the one of each event, as "
                "OpenAPI 3.2's `itemSchema` has it (and schemathesis reads `schema`): its "
                "`event`, `id` and `data` (JSON).",
                "content": {"text/event-stream": {"schema": ref("Event")}},
            },
            "204": {
                "description": "Last-Event-ID is `end`: the stream ended already, nothing "
                "more will come (a browser's EventSource stops reconnecting)."
            },
            "400": error("Last-Event-ID is not an id this stream sends."),
            "401": AUTH_401,
            "404": NO_JOB_404,
            "500": INTERNAL_500,
            "503": UNAVAILABLE_503,
        },
    }
