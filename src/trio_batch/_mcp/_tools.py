"""The eight tools: what each asks the HTTP API, and how its answer is shaped for a model.

Each tool is one or a few requests of the API (``_api``) as the calling agent's own caller, so
the guard, the caps, the keys and each caller's isolation are the API's, and so is every error:
an error answer comes back as a tool error with the API's ``error``, ``hint`` and ``code``
(:class:`~._api.ApiFailure`). What is the MCP server's own: arguments checked before a
request is made (a job id, a cursor, a page size, a wait), the byte cap on every answer
(``_cap``), waiting for a job with progress notifications (by following its events, never by
polling), a ``next`` line in each job answer saying which tool to call next, and hints that
name what the door the agent came through offers (:data:`SERVER_HINTS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, cast, final

import trio

from .._model import JSONValue
from . import _schemas as schemas
from ._api import Api, ApiFailure
from ._cap import ANSWER_BYTES, MIN_ANSWER_BYTES, encode, fit_page, fit_result

Progress = Callable[[float, float, str], Awaitable[None]]
"""Reports progress of the tool call: (targets ended, targets in all, a line for people)."""

_TERMINAL = frozenset({"done", "partial", "failed", "cancelled"})
_DROPPED = ("links",)
"""Fields of the API's job answers that are HTTP paths, not for a model: left out."""


@final
@dataclass(frozen=True, slots=True)
class Tool:
    """One tool as ``tools/list`` shows it: name, description for a model, input schema."""

    name: str
    description: str
    input_schema: dict[str, JSONValue]
    read_only: bool
    """Whether the tool changes nothing (a hint to the client: it may call it freely)."""


_OPTIONS_HELP = (
    "Options (all optional): mode = text (readable text of HTML, the default), markdown, html "
    "or raw; grep = a regular expression, only matching lines (context = true adds the lines "
    "around them); question = the passages of the page that answer it; pages = PDF pages like "
    "1-3,7; jq = a jq program for a JSON response; recover = true serves the last cached copy "
    "(marked stale) when the fetch fails; render = true loads the page in a headless browser "
    "first (for pages built by scripts; wait_for = a CSS selector to wait for). Narrow a long "
    "page with grep, question or pages rather than reading it whole."
)
_ERRORS_HELP = (
    "On error the answer is a tool error with error (what went wrong), hint (what to do) and "
    "code; follow the hint."
)

_WAIT_FOR_ONE = (
    "wait for one of your jobs to end (batch_status with wait) or cancel one (batch_cancel), "
    "then submit again"
)
SERVER_HINTS: Final = {
    "caller_busy": f"{_WAIT_FOR_ONE}; the server's operator can raise the limit with "
    "trio-batch serve --jobs-per-caller N",
}
"""The hints of the tools on a server (``/mcp``, ``trio-batch mcp --server``) that say more than
the API's for an error ``code``: the tool to call rather than the request to make. Another door
gives its own (``trio-batch mcp``'s name its own flags)."""

TOOLS: Final = (
    Tool(
        "fetch",
        "Fetch one web page now and answer its content, shaped for reading. Use it for a "
        "page or two; for more, use batch_submit (fairer, and it keeps the results). "
        f"{_OPTIONS_HELP} The URL must be http(s) on a public host, at most 2,048 "
        "characters; private and loopback addresses are refused unless the server allows "
        "them. A long answer is cut to fit (content_cut says so). "
        f"{_ERRORS_HELP} A refused URL or a bad option is a 400 naming it; a page that "
        "failed answers its own status (404, 502 ...) with a hint.",
        schemas.FETCH,
        read_only=True,
    ),
    Tool(
        "batch_submit",
        "Submit many pages as one batch job, fetched politely in order while other callers' "
        "jobs take turns. Answers the job id at once (wait = seconds to wait for the end, "
        "with progress notifications). Then call batch_status to see how far it is and "
        "batch_results to read the pages. The same targets submitted again answer the same "
        "job (reused = true). Each target is a URL or {url, options}. concurrency = how many "
        "of its pages are fetched at once (left out: the server's default, 4 unless set; each "
        "site still gets only its polite share): raise it for pages spread over many sites. "
        f"{_OPTIONS_HELP} "
        f"{_ERRORS_HELP} Too many targets: split them; you or the server have as many live "
        "jobs as allowed (caller_busy, busy): wait for one to end (batch_status with wait) "
        "or cancel one, then submit again; a refused URL names its index, like targets[2].url.",
        schemas.SUBMIT,
        read_only=False,
    ),
    Tool(
        "batch_status",
        "How far a batch job is: its status (queued, running, done, partial, failed, "
        "cancelled) and its targets counted by state. wait = seconds to wait for the job to "
        "end first, reporting progress notifications meanwhile. The answer's next says what "
        f"to call next. {_ERRORS_HELP} A job that is not yours, or gone, is not_found.",
        schemas.STATUS,
        read_only=True,
    ),
    Tool(
        "batch_results",
        "Read a batch job's targets in input order, a page at a time: each with idx, url, "
        "status, error and hint (for a failed one) and result (content and meta, for a done "
        "one). Pass next_cursor back as cursor for the next page; next_cursor is null after "
        "the last target there is now (a running job gets more: ask again later). state = "
        "failed lists only the failures. Long content is cut to fit the answer (content_cut "
        f"says so; fetch that URL with grep or question to narrow it). {_ERRORS_HELP}",
        schemas.RESULTS,
        read_only=True,
    ),
    Tool(
        "batch_cancel",
        "Cancel a queued or running batch job: the page being fetched finishes, no other "
        "starts. Answers the job's status. A job that has ended already is a not_cancellable "
        f"error saying how it ended. {_ERRORS_HELP}",
        schemas.CANCEL,
        read_only=False,
    ),
    Tool(
        "batch_retry",
        "Run again the targets of an ended batch job that failed (and those a cancelled or "
        "interrupted job left unfinished), as a new job with the same URLs and options. "
        "Answers the new job's id (retry_of names the old one); then use batch_status and "
        "batch_results on the new id. A job still running, or one whose every target is "
        f"done, is a not_retryable error. {_ERRORS_HELP}",
        schemas.RETRY,
        read_only=False,
    ),
    Tool(
        "map",
        "List a site's URLs (its sitemaps: those robots.txt names, else /sitemap.xml, index "
        "files, gzip; and its start page's links): the start page first, deduplicated, on the "
        "start page's host unless same_host is false, at most limit. Then pass the ones you "
        "need to batch_submit. complete = false means a bound cut the list (notes says which). "
        f"{_ERRORS_HELP} A refused URL or a bad limit is a 400 naming it.",
        schemas.MAP,
        read_only=True,
    ),
    Tool(
        "crawl",
        "Crawl a site: fetch its start page, then the pages its links lead to (and theirs, up "
        "to max_depth links deep), as one batch job that ends with exactly limit pages stored "
        "done (or fewer, when no link is left). Use it when you have a site rather than a list "
        "of URLs, or need more than one level of links; use map then batch_submit to choose "
        "the URLs yourself. Links stay on the start page's host unless scope says domain or "
        "prefix; include and exclude are path globs like /docs/**; sitemaps = include starts "
        "from the site's sitemaps too. A page reached under several URLs is fetched once, and "
        "robots.txt is obeyed. options shape every page, as batch_submit's do. Answers the "
        "job id at once (wait = seconds to wait for the end, with progress); then the batch "
        "tools work on it: batch_status shows its crawl (pages done of limit, links skipped "
        "by reason), batch_results reads the pages (meta.crawl: each page's depth and the "
        "page that found it), batch_cancel stops it. "
        f"{_ERRORS_HELP} A limit over the server's cap names the cap: ask for fewer pages.",
        schemas.CRAWL,
        read_only=False,
    ),
)
"""Every tool, in the order ``tools/list`` shows them."""

BY_NAME: Final = {tool.name: tool for tool in TOOLS}


def bad_argument(field: str, error: str, hint: str) -> ApiFailure:
    """The tool error of an argument the MCP server checks itself (before any request)."""
    return ApiFailure(0, error, hint, code="bad_request", field=field)


def _check_names(tool: Tool, args: Mapping[str, JSONValue]) -> None:
    """Refuse an argument the tool does not have (its schema allows no others)."""
    known = tool.input_schema.get("properties")
    names = set(known) if isinstance(known, Mapping) else set()
    unknown = sorted(set(args) - names)
    if unknown:
        shown = unknown[0][:64]
        raise bad_argument(
            shown,
            f"{shown} is not an argument of {tool.name}; its arguments: {', '.join(sorted(names))}",
            "remove it",
        )


# The longest job id the HTTP API takes (a job id is 32 hex digits; past 64 it answers 404).
_MAX_ID_CHARS: Final = 64


def _job_id(args: Mapping[str, JSONValue]) -> str:
    value = args.get("id")
    if (
        not isinstance(value, str)
        or not value
        or len(value) > _MAX_ID_CHARS
        or "/" in value
        or not value.isprintable()
    ):
        raise bad_argument(
            "id",
            "id must be the job id string that batch_submit or batch_retry answered",
            "pass the id exactly as it was answered",
        )
    return value


def _wait(args: Mapping[str, JSONValue]) -> float:
    value = args.get("wait", 0)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_argument("wait", "wait must be a number of seconds", "pass 0 to answer at once")
    if not 0 <= value <= schemas.MAX_WAIT:
        raise bad_argument(
            "wait",
            f"wait must be from 0 to {schemas.MAX_WAIT:g} seconds (got {value:g})",
            f"wait at most {schemas.MAX_WAIT:g} s at a time, then call batch_status again",
        )
    return float(value)


def _limit(args: Mapping[str, JSONValue]) -> int:
    value = args.get("limit", schemas.DEFAULT_LIMIT)
    if value is None:
        return schemas.DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= schemas.MAX_LIMIT:
        raise bad_argument(
            "limit",
            f"limit must be a whole number from 1 to {schemas.MAX_LIMIT}",
            f"leave it out for pages of {schemas.DEFAULT_LIMIT}",
        )
    return value


def _cursor(args: Mapping[str, JSONValue]) -> int:
    value = args.get("cursor")
    if value is None or value == "":
        return 0
    if not isinstance(value, str) or not value.isdigit() or len(value) > 10:
        raise bad_argument(
            "cursor",
            "cursor must be the next_cursor string of a previous batch_results answer",
            "leave it out for the first page",
        )
    return int(value)


_CRAWL_FIELDS: Final = tuple(
    k for k in cast("dict[str, object]", schemas.CRAWL["properties"]) if k not in ("url", "wait")
)
"""The crawl tool's arguments that are fields of ``POST /v1/crawl``'s body, as they are."""


def _next_step(job: Mapping[str, JSONValue]) -> str:
    """What to call next for a job in this state: the answer's ``next`` line."""
    status = job.get("status")
    job_id = job.get("id")
    if status in ("queued", "running"):
        return (
            f"the job is {status}: call batch_status with wait to wait for it, or "
            "batch_results to read the targets that have ended"
        )
    if status == "done":
        return "every target is done: read them with batch_results"
    if status in ("partial", "failed"):
        return (
            "some targets failed: batch_results with state=failed lists why (with hints); "
            f"batch_retry {job_id} runs the failed ones again"
        )
    if status == "cancelled":
        return "the job was cancelled: batch_results shows what ended; batch_retry runs the rest"
    return ""


def _job_answer(job: Mapping[str, JSONValue], **extra: JSONValue) -> dict[str, JSONValue]:
    answer = {k: v for k, v in job.items() if k not in _DROPPED}
    answer.update(extra)
    answer["next"] = _next_step(answer)
    return answer


def _ended(job: Mapping[str, JSONValue]) -> tuple[int, int]:
    """How far the job is: (targets ended, targets in all); a crawl's (pages done, limit)."""
    crawl = job.get("crawl")
    if isinstance(crawl, Mapping):
        done, limit = crawl.get("done"), crawl.get("limit")
        if isinstance(done, int) and isinstance(limit, int):
            return done, limit
    counts = job.get("counts")
    total = job.get("targets_total")
    if not isinstance(counts, Mapping) or not isinstance(total, int):
        return 0, 0
    done, failed = counts.get("done", 0), counts.get("failed", 0)
    return (done if isinstance(done, int) else 0) + (
        failed if isinstance(failed, int) else 0
    ), total


@final
class Tools:
    """The tools' handlers over an :class:`Api`, each answer at most ``answer_bytes``."""

    def __init__(
        self, *, answer_bytes: int = ANSWER_BYTES, hints: Mapping[str, str] = SERVER_HINTS
    ) -> None:
        if answer_bytes < MIN_ANSWER_BYTES:
            raise ValueError(
                f"answer_bytes must be at least {MIN_ANSWER_BYTES} (got {answer_bytes})"
            )
        self.answer_bytes = answer_bytes
        self.hints = dict(hints)
        """The hint of a tool error by its ``code``, where the door says better than the API."""

    async def call(
        self, name: str, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> str:
        """The text answer of tool ``name``.

        Raises:
            ApiFailure: the call failed; its body is the tool error.
        """
        handlers = {
            "fetch": self._fetch,
            "batch_submit": self._submit,
            "batch_status": self._status,
            "batch_results": self._results,
            "batch_cancel": self._cancel,
            "batch_retry": self._retry,
            "map": self._map,
            "crawl": self._crawl,
        }
        handler = handlers.get(name)
        if handler is None:
            raise bad_argument(
                "name",
                f"there is no tool {name[:64]!r}",
                f"call one of {', '.join(t.name for t in TOOLS)}",
            )
        _check_names(BY_NAME[name], args)
        try:
            answer = await handler(args, api, progress)
        except ApiFailure as exc:
            exc.hint = self.hints.get(exc.code, exc.hint)
            raise
        text = encode(answer)
        if len(text.encode("utf-8")) > self.answer_bytes:  # pragma: no cover - fit_* keep it
            raise ApiFailure(
                0,
                "the answer would be over the answer's byte cap",
                "ask for less: a smaller limit, or options that narrow the page",
                code="answer_too_large",
            )
        return text

    async def _fetch(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        body: dict[str, JSONValue] = {"url": args.get("url")}
        if args.get("options") is not None:
            body["options"] = args["options"]
        answer = await api.call("POST", "/v1/fetch", body=body)
        return fit_result(answer, self.answer_bytes)

    async def _submit(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        targets = args.get("targets")
        if isinstance(targets, list):
            targets = [{"url": t} if isinstance(t, str) else t for t in targets]
        body: dict[str, JSONValue] = {"targets": targets}
        for name in ("webhook", "concurrency"):
            if args.get(name) is not None:
                body[name] = args[name]
        wait = _wait(args)
        submitted = await api.call("POST", "/v1/batch", body=body)
        if not wait:
            return _job_answer(submitted)
        job = await self._wait_for(api, str(submitted["id"]), wait, progress)
        return _job_answer(job, reused=submitted.get("reused", False))

    async def _crawl(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        # The API checks every field (and the server's caps), its errors naming the field.
        body: dict[str, JSONValue] = {"url": args.get("url")}
        body.update({k: args[k] for k in _CRAWL_FIELDS if args.get(k) is not None})
        wait = _wait(args)
        submitted = await api.call("POST", "/v1/crawl", body=body)
        if not wait:
            return _job_answer(submitted)
        job = await self._wait_for(api, str(submitted["id"]), wait, progress)
        return _job_answer(job, reused=submitted.get("reused", False))

    async def _status(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        job_id, wait = _job_id(args), _wait(args)
        return _job_answer(await self._wait_for(api, job_id, wait, progress))

    async def _wait_for(
        self, api: Api, job_id: str, seconds: float, progress: Progress
    ) -> dict[str, JSONValue]:
        """The job's summary once it has ended, or after ``seconds``; progress meanwhile.

        Reads the summary, then follows the job's events (``GET /v1/batch/{id}/events``, the
        same for an in-process engine and a remote server): each ``target`` event is one more
        target ended, reported as progress, and the ``end`` event carries the final summary,
        answered as the job ends. When ``seconds`` pass first, the summary is read again. The
        count reported never goes back, and the last one reported is the answer's.
        """
        deadline = trio.current_time() + seconds
        job = await api.call("GET", f"/v1/batch/{job_id}")
        if not seconds:
            return job
        crawl = isinstance(job.get("crawl"), Mapping)
        report = _Reporter(progress, "pages done" if crawl else "targets ended")
        await report(_ended(job))
        if job.get("status") in _TERMINAL:
            return job
        with trio.move_on_after(deadline - trio.current_time()):
            async with api.events(job_id) as events:
                ended = 0  # the events start at the first target: each one ended
                async for event in events:
                    if event.event == "end":
                        job = cast("dict[str, JSONValue]", event.data)
                        await report(_ended(job))
                        return job
                    # A crawl counts its pages done (of its limit), not the targets ended.
                    if not crawl or event.data.get("status") == "done":
                        ended += 1
                    await report((ended, _ended(job)[1]))
        job = await api.call("GET", f"/v1/batch/{job_id}")
        await report(_ended(job))
        return job

    async def _results(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        job_id, offset, limit = _job_id(args), _cursor(args), _limit(args)
        params = {"results": "1", "offset": str(offset), "limit": str(limit)}
        state = args.get("state")
        if state is not None:
            if not isinstance(state, str):
                raise bad_argument(
                    "state", "state must be a string like failed or done,failed", "leave it out"
                )
            params["state"] = state
        job = await api.call("GET", f"/v1/batch/{job_id}", params=params)

        raw = job.get("targets")
        items = [_result_item(t) for t in (raw if isinstance(raw, list) else [])]
        head: dict[str, JSONValue] = {
            k: job[k] for k in ("id", "status", "targets_total", "counts") if k in job
        }
        page, kept = fit_page(head, items, self.answer_bytes)
        more = job.get("next_offset")
        if kept < len(items):
            page["next_cursor"] = str(offset + kept)
            page["note"] = (
                f"this page holds {kept} of the {len(items)} targets asked for, to stay under "
                "the answer's byte cap: call again with next_cursor for the rest"
            )
        else:
            page["next_cursor"] = str(more) if isinstance(more, int) else None
        if page["next_cursor"] is None and job.get("status") not in _TERMINAL:
            page["next"] = "the job is still running: ask again later for the targets to come"
        return page

    async def _cancel(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        return _job_answer(await api.call("DELETE", f"/v1/batch/{_job_id(args)}"))

    async def _map(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        body: dict[str, JSONValue] = {"url": args.get("url")}
        for name in ("limit", "same_host"):
            if args.get(name) is not None:
                body[name] = args[name]
        answer = await api.call("POST", "/v1/map", body=body)
        return _fit_map(answer, self.answer_bytes)

    async def _retry(
        self, args: Mapping[str, JSONValue], api: Api, progress: Progress
    ) -> dict[str, JSONValue]:
        job_id = _job_id(args)
        webhook = args.get("webhook")
        body: JSONValue = None if webhook is None else {"webhook": webhook}
        return _job_answer(await api.call("POST", f"/v1/batch/{job_id}/retry", body=body))


@final
class _Reporter:
    """Progress of a wait: (targets ended, targets in all), reported when it moves forward.

    The events count the targets in input order, so with a job that runs several at once they
    may count fewer than the summary did: the count reported only ever grows.
    """

    def __init__(self, progress: Progress, counted: str = "targets ended") -> None:
        self._progress = progress
        self._counted = counted
        self._reported: tuple[int, int] | None = None

    async def __call__(self, ended: tuple[int, int]) -> None:
        done, total = ended
        if self._reported is not None:
            done = max(done, self._reported[0])
        if (done, total) != self._reported:
            self._reported = (done, total)
            await self._progress(done, total, f"{done} of {total} {self._counted}")


def _fit_map(answer: dict[str, JSONValue], most: int) -> dict[str, JSONValue]:
    """A map's answer cut to ``most`` bytes: the first URLs that fit, and a note saying so."""
    urls = answer.get("urls")
    if not isinstance(urls, list) or len(encode(answer).encode("utf-8")) <= most:
        return answer
    kept: list[JSONValue] = []
    size = len(encode({**answer, "urls": []}).encode("utf-8")) + 200
    for url in urls:
        size += len(encode(url).encode("utf-8")) + 1
        if size > most:
            break
        kept.append(url)
    notes = answer.get("notes")
    return {
        **answer,
        "urls": kept,
        "complete": False,
        "notes": [
            *(notes if isinstance(notes, list) else []),
            f"{len(kept)} of {len(urls)} URLs fit the answer: ask for a smaller limit",
        ],
    }


def _result_item(target: JSONValue) -> dict[str, JSONValue]:
    """A target as ``batch_results`` shows it: without its options and times."""
    if not isinstance(target, Mapping):
        return {}
    return {
        k: target[k] for k in ("idx", "url", "status", "error", "hint", "result") if k in target
    }
