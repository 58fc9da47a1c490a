"""The small pieces every part of the OpenAPI document is built from.

References, JSON and text answers, error answers (with their ``Retry-After`` or
``WWW-Authenticate`` header), query parameters, and the answers many operations share: 401 for
a missing key, 404 for a job that is not the caller's, 500 and 503. The enums come from the
model, so a new job status or target state reaches the document without being typed again.
"""

from __future__ import annotations

from ..._model import JobStatus, JSONValue, TargetState

JOB_STATUSES = [s.value for s in JobStatus]
"""Every job status, as a job's ``status`` spells it."""

TARGET_STATES = [s.value for s in TargetState]
"""Every target state, as a target's ``status`` spells it."""


def ref(name: str) -> dict[str, JSONValue]:
    """A reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def json_answer(schema: JSONValue, description: str, **extra: JSONValue) -> dict[str, JSONValue]:
    """An answer with a JSON body of ``schema``; ``extra`` adds keys such as ``links``."""
    return {
        "description": description,
        "content": {"application/json": {"schema": schema}},
        **extra,
    }


def text_answer(media_type: str, description: str) -> dict[str, JSONValue]:
    """An answer whose body is text of ``media_type`` (NDJSON, HTML)."""
    return {
        "description": description,
        "content": {media_type: {"schema": {"type": "string"}}},
    }


def error(
    description: str, *, retry_after: bool = False, auth: bool = False, schema: str = "Error"
) -> dict[str, JSONValue]:
    """An error answer; ``retry_after`` and ``auth`` add the header such an answer carries."""
    response = json_answer(ref(schema), description)

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


def request_body(schema: str) -> dict[str, JSONValue]:
    """A required JSON request body of the component schema ``schema``."""
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


def query(name: str, description: str, schema: JSONValue) -> dict[str, JSONValue]:
    """A query parameter."""
    return {"name": name, "in": "query", "description": description, "schema": schema}


def link(operation_id: str, **parameters: JSONValue) -> dict[str, JSONValue]:
    """An OpenAPI link from the submit answer to an operation on the new job."""
    return {
        "operationId": operation_id,
        "parameters": {"id": "$response.body#/id", **parameters},
    }


JOB_ID: dict[str, JSONValue] = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The job id from the submit answer.",
    "schema": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
}
"""The ``{id}`` path parameter of every route on one job."""

SHUTTING_DOWN = "The server is shutting down"
DATABASE = (
    "The database is unavailable, or did not answer within the deadline (`store_timeout`; a "
    "change may still be made, and repeating the request is safe)"
)
"""Why any route that reads or writes the store may answer 503."""

AUTH_401 = error("Missing or unknown API key.", auth=True)
UNAVAILABLE_503 = error(f"{DATABASE}. {SHUTTING_DOWN}.", retry_after=True)
INTERNAL_500 = error("Internal error (a bug); the log has its type.")
NO_JOB_404 = error("No such job, or it is another caller's.")
