"""The operations of the API, one function per route, and the ``paths`` they make up.

Every status code an operation can answer is listed; ``tests/http`` checks the app against it
(schemathesis) and checks that each route of the app is documented. The streams of a job (NDJSON
results and Server-Sent Events) are in ``streams``.
"""

from __future__ import annotations

from ..._model import JobStatus, JSONValue
from .._listing import CURSOR_PATTERN
from .._parse import MAX_INT
from .parts import (
    AUTH_401,
    DATABASE,
    INTERNAL_500,
    JOB_ID,
    NO_JOB_404,
    SHUTTING_DOWN,
    TARGET_STATES,
    UNAVAILABLE_503,
    error,
    json_answer,
    link,
    query,
    ref,
    request_body,
    text_answer,
)
from .streams import stream_events, stream_results

_JOB_WORDS = "|".join(["live", *(s.value for s in JobStatus)])
"""What the listing's ``status`` accepts: every job status, and ``live`` for queued and running."""


def _job_links() -> dict[str, JSONValue]:
    """The links from a new job's answer to the routes that follow it (a batch's or a crawl's)."""
    return {
        "GetBatch": link("getBatch"),
        "CancelBatch": link("cancelBatch"),
        "StreamResults": link("streamResults"),
        "StreamEvents": link("streamEvents"),
    }


def _submit_batch(kib: int) -> dict[str, JSONValue]:
    """``POST /v1/batch``: ``kib`` is the largest body, as ``create_app``'s ``max_body`` sets it."""
    return {
        "operationId": "submitBatch",
        "summary": "Submit a batch of targets",
        "description": f"The body may be at most {kib} KiB. A repeat of a live or "
        "finished (done/partial) batch of the same caller with the same targets returns "
        "that job (200, reused) instead of a new one (202).",
        "requestBody": request_body("BatchIn"),
        "responses": {
            "200": json_answer(ref("Submitted"), "The same batch exists already: reused."),
            "202": json_answer(
                ref("Submitted"),
                "Accepted: a new job, queued.",
                links={
                    **_job_links(),
                    # OpenAPI 3.1 wants every link parameter a string: a
                    # runtime expression or a constant ("0" is the first target).
                    "GetTarget": link("getTarget", idx="0"),
                },
            ),
            "400": error(
                "Malformed JSON, an unknown field, a wrong type (`field` names it), a "
                "target URL failing the pre-check (`field` names its index), no "
                "targets, or a `webhook` that is malformed, fails the pre-check or has "
                "no caller secret (`field` names it)."
            ),
            "401": AUTH_401,
            "413": error(f"The body is over {kib} KiB, or there are too many targets."),
            "429": error("You have your maximum of live batches.", retry_after=True),
            "500": INTERNAL_500,
            "503": error(
                f"The server has its maximum of live batches. {DATABASE}. {SHUTTING_DOWN}.",
                retry_after=True,
            ),
        },
    }


def _submit_crawl(kib: int) -> dict[str, JSONValue]:
    """``POST /v1/crawl`` (issue 38): a job whose targets grow; answered as a submit is."""
    return {
        "operationId": "submitCrawl",
        "summary": "Crawl a site: a job whose targets grow by following links",
        "description": f"The body may be at most {kib} KiB. The job is read, streamed, "
        "cancelled and retried with the batch routes; its answers carry `crawl`. A repeat of "
        "the same crawl of the same caller returns that job (200, reused) instead of a new "
        "one (202).",
        "requestBody": request_body("CrawlIn"),
        "responses": {
            "200": json_answer(ref("Crawled"), "The same crawl exists already: reused."),
            "202": json_answer(
                ref("Crawled"),
                "Accepted: a new job, queued.",
                links=_job_links(),
            ),
            "400": error(
                "Malformed JSON, an unknown field, a wrong type or a value out of range "
                "(`limit` over the server's max_crawl_pages among them), a URL failing the "
                "pre-check, a credential header, sitemaps the server cannot read, or a "
                "malformed `webhook` (`field` names it)."
            ),
            "401": AUTH_401,
            "413": error(f"The body is over {kib} KiB."),
            "429": error("You have your maximum of live batches.", retry_after=True),
            "500": INTERNAL_500,
            "503": error(
                f"The server has its maximum of live batches. {DATABASE}. {SHUTTING_DOWN}.",
                retry_after=True,
            ),
        },
    }


def _list_batches() -> dict[str, JSONValue]:
    """``GET /v1/batch``: the caller's jobs, a page at a time (``_listing``)."""
    return {
        "operationId": "listBatches",
        "summary": "Your batches, newest first, a page at a time",
        "description": "Does not move the jobs' expiry (reading a job does).",
        "parameters": [
            query(
                "status",
                "Only jobs in these statuses (comma-separated); `live` = queued and running.",
                {"type": "string", "pattern": f"^({_JOB_WORDS})(,({_JOB_WORDS}))*$"},
            ),
            query(
                "limit",
                "Jobs per page (default 50).",
                {"type": "integer", "minimum": 1, "maximum": 500},
            ),
            query(
                "before",
                "The `next` cursor of the previous page, as it was.",
                {"type": "string", "pattern": CURSOR_PATTERN},
            ),
        ],
        "responses": {
            "200": json_answer(ref("JobList"), "A page of jobs."),
            "400": error("A query parameter is invalid (`field` names it)."),
            "401": AUTH_401,
            "500": INTERNAL_500,
            "503": UNAVAILABLE_503,
        },
    }


def _get_batch() -> dict[str, JSONValue]:
    """``GET /v1/batch/{id}``: a job's summary, and a page of its targets."""
    state = "|".join(TARGET_STATES)
    return {
        "operationId": "getBatch",
        "summary": "A batch's summary, and with results=1 its targets",
        "description": "Reading moves the job's expiry (`expires_at`).",
        "parameters": [
            query(
                "results",
                "1 to include the targets with their results.",
                {"type": "string", "enum": ["0", "1", "true", "false"]},
            ),
            query(
                "state",
                "With results=1: only targets in these states (comma-separated).",
                {"type": "string", "pattern": f"^({state})(,({state}))*$"},
            ),
            query(
                "offset",
                "With results=1: skip this many matching targets.",
                {"type": "integer", "minimum": 0, "maximum": MAX_INT},
            ),
            query(
                "limit",
                "With results=1: at most this many targets.",
                {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            ),
        ],
        "responses": {
            "200": json_answer(ref("Batch"), "The job."),
            "400": error("A query parameter is invalid (`field` names it)."),
            "401": AUTH_401,
            "404": NO_JOB_404,
            "500": INTERNAL_500,
            "503": UNAVAILABLE_503,
        },
    }


def _cancel_batch() -> dict[str, JSONValue]:
    """``DELETE /v1/batch/{id}``."""
    return {
        "operationId": "cancelBatch",
        "summary": "Cancel a queued or running batch",
        "description": "The target in flight finishes; no other target starts.",
        "responses": {
            "200": json_answer(ref("Batch"), "Cancelled: the job's summary."),
            "401": AUTH_401,
            "404": NO_JOB_404,
            "409": error("The job is finished already; `status` says how."),
            "500": INTERNAL_500,
            "503": UNAVAILABLE_503,
        },
    }


def _get_target() -> dict[str, JSONValue]:
    """``GET /v1/batch/{id}/{idx}``."""
    return {
        "operationId": "getTarget",
        "summary": "One target with its result",
        "responses": {
            "200": json_answer(ref("TargetOut"), "The target."),
            "401": AUTH_401,
            "404": error("No such job or target, or it is another caller's job."),
            "500": INTERNAL_500,
            "503": UNAVAILABLE_503,
        },
    }


def _retry_batch() -> dict[str, JSONValue]:
    """``POST /v1/batch/{id}/retry``: a finished job's failed targets as a new job."""
    return {
        "operationId": "retryBatch",
        "summary": "Retry a finished batch's failed targets as a new batch",
        "description": "A new job of the same caller with the targets that ended `failed` "
        "and those an interrupted or cancelled job left unfinished (`pending`, `running`), "
        "same URLs and options, in input order; `retry_of` names the old job. A "
        "repeat returns the same new job (200, reused) while it may be reused. Caps apply. "
        "The body is optional: a `webhook` for the new job's events (the old job's is not "
        "carried over).",
        "requestBody": {
            "required": False,
            "content": {
                "application/json": {"schema": {"anyOf": [ref("RetryIn"), {"type": "null"}]}}
            },
        },
        "responses": {
            "200": json_answer(ref("Retried"), "The same retry exists already: reused."),
            "202": json_answer(ref("Retried"), "Accepted: a new job, queued."),
            "400": error(
                "A body that is not a JSON object, an unknown field, or a `webhook` that is "
                "malformed, fails the pre-check or has no caller secret (`field` names it)."
            ),
            "401": AUTH_401,
            "404": NO_JOB_404,
            "409": error(
                "The job is still queued or running, or every target of it is done; "
                "`status` says which."
            ),
            "429": error("You have your maximum of live batches.", retry_after=True),
            "500": INTERNAL_500,
            "503": error(
                f"The server has its maximum of live batches. {DATABASE}. {SHUTTING_DOWN}.",
                retry_after=True,
            ),
        },
    }


def _me() -> dict[str, JSONValue]:
    """``GET /v1/me``: who the key is, for the status page and for scripts."""
    return {
        "operationId": "me",
        "summary": "Who this key is: its caller's name, workspace and class",
        "description": "Reads no database. Never answers the key or its hash.",
        "responses": {
            "200": json_answer(ref("Me"), "The key's caller."),
            "401": AUTH_401,
            "500": INTERNAL_500,
        },
    }


def _health() -> dict[str, JSONValue]:
    """``GET /healthz``: open to all, as a load balancer asks it."""
    return {
        "operationId": "health",
        "summary": "Liveness and readiness: the server is up and its database answers",
        "description": "Reads nothing but a job that does not exist, and writes nothing.",
        "security": [],
        "responses": {
            "200": json_answer(ref("Health"), "The server is up and the database answers in time."),
            "500": INTERNAL_500,
            "503": error(
                "Unhealthy: the database is unavailable or slow, or the server is shutting "
                "down; other requests get 503 meanwhile.",
                retry_after=True,
                schema="Unhealthy",
            ),
        },
    }


def _metrics() -> dict[str, JSONValue]:
    """``GET /metrics``: open to all, as Prometheus scrapes it."""
    return {
        "operationId": "metrics",
        "summary": "Prometheus metrics (text format)",
        "security": [],
        "responses": {
            "200": {
                "description": "The metrics.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            "500": INTERNAL_500,
        },
    }


def _fetch_one(kib: int) -> dict[str, JSONValue]:
    """``POST /v1/fetch``, which exists only when ``create_app`` is given a fetch function."""
    return {
        "operationId": "fetchOne",
        "summary": "Fetch one target now",
        "description": "Answered synchronously by the same fetcher and fetch pool that "
        "batches use. A failed fetch answers with the status a single fetch gets "
        "(for example 404 or 502) and an error with a hint.",
        "requestBody": request_body("TargetIn"),
        "responses": {
            "200": json_answer(ref("Fetched"), "The target's result."),
            "400": error(
                "Malformed JSON, unknown field, wrong type, or a URL failing the "
                "pre-check (`field` names it)."
            ),
            "401": AUTH_401,
            "413": error(f"The body is over {kib} KiB."),
            "4XX": error("The fetch failed the way a client error would."),
            "500": INTERNAL_500,
            "503": error(
                f"The fetch pool or the target is busy. The database is unavailable. "
                f"{SHUTTING_DOWN}.",
                retry_after=True,
            ),
            "5XX": error("The fetch failed upstream (for example 502 or 504)."),
        },
    }


def _map_site(kib: int) -> dict[str, JSONValue]:
    """``POST /v1/map``, which exists only when ``create_app`` has a map (the web fetcher's)."""
    return {
        "operationId": "mapSite",
        "summary": "A site's URLs, from its sitemaps and its start page's links",
        "description": "Reads the start page (its links), robots.txt (its `Sitemap:` lines), "
        "those sitemaps or else /sitemap.xml, index files and gzip, through the same guard, "
        "fetch pool and host budgets as fetches. Bounded in URLs, bytes, documents, depth "
        "of indexes and time: a bound that is reached answers the URLs found so far with "
        "`complete` false and a note.",
        "requestBody": request_body("MapIn"),
        "responses": {
            "200": json_answer(ref("SiteMap"), "The site's URLs."),
            "400": error(
                "Malformed JSON, an unknown field, a wrong type, a `limit` out of range, or "
                "a URL failing the pre-check (`field` names it)."
            ),
            "401": AUTH_401,
            "413": error(f"The body is over {kib} KiB."),
            "4XX": error(
                "The guard refused the site's address (403), or the start page failed the "
                "way a client error would and no URL was found."
            ),
            "500": INTERNAL_500,
            "503": error(
                f"The fetch pool or the site is busy and no URL was found. {SHUTTING_DOWN}.",
                retry_after=True,
            ),
            "5XX": error("The start page failed upstream and no URL was found."),
        },
    }


def _status_page() -> dict[str, JSONValue]:
    """``GET /ui``: open to all; the page asks for the key itself."""
    return {
        "operationId": "statusPage",
        "summary": "A page to watch your jobs (paste a key; it stays in the tab)",
        "security": [],
        "responses": {
            "200": text_answer("text/html", "The page: HTML with its script and style inline."),
            "500": INTERNAL_500,
        },
    }


def paths(*, kib: int, with_fetch: bool, with_map: bool = False) -> dict[str, JSONValue]:
    """The document's ``paths``: every route of an app made with ``max_body`` of ``kib`` KiB."""
    target_index: dict[str, JSONValue] = {
        "name": "idx",
        "in": "path",
        "required": True,
        "description": "The target's index in the batch, from 0.",
        "schema": {"type": "integer", "minimum": 0},
    }

    routes: dict[str, JSONValue] = {
        "/v1/batch": {"post": _submit_batch(kib), "get": _list_batches()},
        "/v1/crawl": {"post": _submit_crawl(kib)},
        "/v1/batch/{id}": {
            "parameters": [JOB_ID],
            "get": _get_batch(),
            "delete": _cancel_batch(),
        },
        "/v1/batch/{id}/{idx}": {"parameters": [JOB_ID, target_index], "get": _get_target()},
        "/healthz": {"get": _health()},
        "/metrics": {"get": _metrics()},
    }
    if with_fetch:
        routes["/v1/fetch"] = {"post": _fetch_one(kib)}

    # After the fetch route, so the document's order is the one it always had.
    routes["/v1/batch/{id}/results"] = {"parameters": [JOB_ID], "get": stream_results()}
    routes["/v1/batch/{id}/events"] = {"parameters": [JOB_ID], "get": stream_events()}
    routes["/v1/batch/{id}/retry"] = {"parameters": [JOB_ID], "post": _retry_batch()}
    routes["/v1/me"] = {"get": _me()}
    routes["/ui"] = {"get": _status_page()}
    if with_map:
        routes["/v1/map"] = {"post": _map_site(kib)}
    return routes
