"""Reading requests: the body, the targets in it, and the query parameters.

Each check fails with a 400 (413 for a body too big) whose ``field`` names the input at fault,
like ``targets[2].options.mode``, and whose ``hint`` says what to send instead. The options'
names and JSON types come from ``trio_batch.Options`` itself, so the API, its OpenAPI document
and the engine cannot drift.

JSON may carry any string, including a lone surrogate (``"\\ud800"``), which is not Unicode
text: it cannot be encoded, so it could not be hashed, stored or even echoed in an answer. A
name the body sends is echoed escaped (:func:`shown`), and a string value that is not valid text
is refused with a 400 naming its field, before anything else reads it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import typing
from collections.abc import Callable, Mapping

from starlette.requests import Request

from .._errors import TargetError
from .._headers import SECRETS, header_refusal
from .._model import Options, Target, TargetState
from ._errors import ApiError, not_found

PrecheckFunc = Callable[[str], None]
"""Checks a target URL before it is accepted; raises ``TargetError`` (status 400) if it fails."""
OptionsCheckFunc = Callable[[Options], None]
"""Checks a target's options; raises ``TargetError`` (status 400) if they are not usable."""

MAX_BODY = 256 * 1024
"""Largest request body, in bytes, counted while it is read."""
MAX_INT = 2**31 - 1
"""Largest ``offset`` or ``limit``, and target index."""
MAX_ID_CHARS = 64
"""Longest job id in a path: the ids this server hands out are 32 hex characters; a longer
one names no job (404) and never reaches the store."""

_HINTS = typing.get_type_hints(Options, localns={"Mapping": Mapping})  # headers' type
_ARRAYS = {"headers": (dict,), "formats": (list,)}
"""Options whose JSON is a container: headers an object of strings, formats an array of them."""
OPTION_TYPES: dict[str, tuple[type, ...]] = {
    f.name: _ARRAYS.get(f.name) or typing.get_args(_HINTS[f.name]) or (_HINTS[f.name],)
    for f in dataclasses.fields(Options)
}
"""Each option's name and the Python types its JSON value may have (``bool | None``: both)."""

_JSON_WORDS: dict[type, tuple[str, ...]] = {
    str: ("a string",),
    int: ("a whole number",),
    bool: ("true", "false"),
    type(None): ("null",),
    dict: ("an object",),
    list: ("an array of strings",),
}


def _wanted(types: tuple[type, ...]) -> str:
    words = [word for t in types for word in _JSON_WORDS[t]]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


_OPTION_WANTED = {name: _wanted(types) for name, types in OPTION_TYPES.items()}
_OPTION_EXAMPLES = {
    "formats": '["markdown", "links"]',
    "headers": '{"Accept-Language": "en"}',
    "robots": "true",
    "render": "true",
    "recover": "true",
    "context": "true",
    "wait_for": '"#content"',
    "mode": '"markdown"',
    "question": '"what does it cost?"',
    "grep": '"price"',
    "jq": '".items[0]"',
    "pages": '"1-3"',
    "max_age": "0",
}
"""An example value of each option, for the hint of a value of the wrong type."""


def _option_hint(name: str) -> str:
    example = _OPTION_EXAMPLES.get(name)
    if example is None:
        return f"send {_OPTION_WANTED[name]}, or leave {name} out"
    return f"send {_OPTION_WANTED[name]}, such as {example}, or leave {name} out"


def path_id(request: Request) -> str:
    """The job id in the request's path.

    Raises:
        ApiError: 404 for an id longer than any this server gives (:data:`MAX_ID_CHARS`).
    """
    job_id: str = request.path_params["id"]
    if len(job_id) > MAX_ID_CHARS:
        raise not_found()
    return job_id


async def read_json(request: Request, max_body: int, *, optional: bool = False) -> object:
    """The request's JSON body, read up to ``max_body`` bytes; with ``optional``, None for none.

    Raises:
        ApiError: 413 when the body is bigger (by ``Content-Length`` or as counted), 400 when it
            is not JSON (``NaN`` and ``Infinity`` included).
    """
    too_big = ApiError(
        413,
        f"the body is over {max_body // 1024} KiB",
        "send fewer targets per request, or split the batch",
        field="body",
    )
    length = request.headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > max_body:
        raise too_big
    body = bytearray()
    async with contextlib.aclosing(request.stream()) as stream:
        async for chunk in stream:
            body += chunk
            if len(body) > max_body:
                raise too_big
    if optional and not body.strip():
        return None
    try:
        data: object = json.loads(bytes(body), parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            f"the body is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            'send a JSON object like {"targets": [{"url": "https://example.org/"}]}',
            field="body",
        ) from None
    except (ValueError, RecursionError):
        raise ApiError(
            400,
            "the body is not valid JSON (bad encoding, a number too long, or nested too deep)",
            "send UTF-8 JSON",
            field="body",
        ) from None
    return data


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not allowed")


_SHOWN_CHARS = 64


def shown(name: str) -> str:
    """A name from the request as an answer may quote it: at most 64 characters, and
    JSON-escaped (``\\ud800``, ``\\n``) unless it is printable text."""
    short = name if len(name) <= _SHOWN_CHARS else name[:_SHOWN_CHARS] + "..."
    return short if short.isprintable() else json.dumps(short)[1:-1]


def check_text(field: str, value: str) -> None:
    """Refuse a string that is not valid Unicode text: a lone surrogate such as ``\\ud800``.

    Raises:
        ApiError: 400 naming ``field``; the value is never quoted.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(
            400,
            f"{field} is not valid Unicode text: character {exc.start + 1} is a lone surrogate",
            "send the text as UTF-8; a \\uD800-\\uDFFF escape in JSON must be one half of a "
            "surrogate pair",
            field=field,
        ) from None


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def parse_target(item: object, where: str, *, bare: bool = False) -> Target:
    """The target ``{"url", "options"}`` at ``where`` (``body`` or ``targets[i]``); with
    ``bare``, a URL string alone too (a target without options)."""
    if bare and isinstance(item, str):
        if not item:
            raise ApiError(
                400,
                f"{where} is an empty string",
                "give every target an absolute http(s) URL",
                field=where,
            )
        check_text(where, item)
        return Target(item)
    if not isinstance(item, dict):
        shape = (
            'a URL string or an object like {"url": "https://..."}'
            if bare
            else ('an object like {"url": "https://..."}')
        )
        raise ApiError(
            400,
            f"{where} must be {shape} (got {_type_name(item)})",
            'send {"url": "https://example.org/", "options": {...}}'
            + (", or the URL string alone" if bare else ""),
            field=where,
        )
    for name in item:
        if name not in ("url", "options"):
            raise ApiError(
                400,
                f"{where}.{shown(name)} is not a field; a target has url and options",
                "remove the field",
                field=f"{where}.{shown(name)}",
            )
    url = item.get("url")
    if not isinstance(url, str) or not url:
        got = "missing" if "url" not in item else f"{_type_name(url)}"
        raise ApiError(
            400,
            f"{where}.url must be a non-empty string (got {got})",
            "give every target an absolute http(s) URL",
            field=f"{where}.url",
        )
    check_text(f"{where}.url", url)
    return Target(url, parse_options(item.get("options", {}), f"{where}.options"))


def parse_options(raw: object, where: str) -> Options:
    """The options object at ``where`` (``targets[i].options``, or a crawl's ``options``)."""
    if not isinstance(raw, dict):
        raise ApiError(
            400,
            f"{where} must be an object (got {_type_name(raw)})",
            'send options as an object, such as {"mode": "markdown"}, or leave them out',
            field=where,
        )
    options = dict(raw)
    for name, value in raw.items():
        types = OPTION_TYPES.get(name)
        if types is None:
            raise ApiError(
                400,
                f"{where}.{shown(name)} is not an option; options: {', '.join(OPTION_TYPES)}",
                "remove the option",
                field=f"{where}.{shown(name)}",
            )
        if int in types and (number := whole(value)) is not None:  # max_age: 60.0 is 60
            value = options[name] = number
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise ApiError(
                400,
                f"{where}.{name} must be {_OPTION_WANTED[name]} (got {_type_name(value)})",
                _option_hint(name),
                field=f"{where}.{name}",
            )
        if isinstance(value, str):
            check_text(f"{where}.{name}", value)
        if isinstance(value, dict):
            _check_headers(value, f"{where}.headers")
        if isinstance(value, list):
            _check_strings(value, f"{where}.{name}")
    return Options(**options)


def _check_strings(values: list[object], where: str) -> None:
    """Refuse an array option (``formats``) that holds anything but strings."""
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ApiError(
                400,
                f"{where}[{i}] must be a string (got {_type_name(value)})",
                'send names as strings, such as ["markdown", "links"]',
                field=f"{where}[{i}]",
            )
        check_text(f"{where}[{i}]", value)


def _check_headers(headers: dict[str, object], where: str) -> None:
    """Refuse headers a target may not send: a 400 naming the header, never its value."""
    for name, value in headers.items():
        check_text(f"{where}.{shown(name)}", name)
        if isinstance(value, str):
            check_text(f"{where}.{shown(name)}", value)
    refusal = header_refusal(headers)
    if refusal is not None:
        name, msg, hint = refusal
        field = where if name == "headers" else f"{where}.{shown(name)}"
        raise ApiError(400, f"{where.removesuffix('.headers')}.{msg}", hint, field=field)


def sealed(caller: str, target: Target) -> Target:
    """``target`` as the store may hold it: its credentials (``Cookie``, ``Authorization``)
    sealed (``trio_batch._headers``: encrypted under the server's secrets key, or a reference
    to this process's memory), where the web fetcher opens them; header names in their
    canonical case."""
    if not target.options.headers:
        return target
    headers = SECRETS.seal(caller, target.options.headers, url=target.url)
    return Target(target.url, dataclasses.replace(target.options, headers=headers))


def check_fields(body: Mapping[str, object], fields: tuple[str, ...]) -> None:
    """A 400 naming the first field of a request ``body`` that is not one of ``fields``, with
    the fields it has: a misspelt field is never silently ignored."""
    for name in body:
        if name not in fields:
            raise ApiError(
                400,
                f"{shown(name)} is not a field; the body has the fields "
                f"{', '.join(fields[:-1])} and {fields[-1]}",
                "remove the field",
                field=shown(name),
            )


def parse_batch(data: object) -> list[Target]:
    """The targets of a submit body ``{"targets": [...]}``."""
    if not isinstance(data, dict):
        raise ApiError(
            400,
            f"the body must be a JSON object with a targets array (got {_type_name(data)})",
            'send {"targets": [{"url": "https://example.org/"}]}',
            field="body",
        )
    check_fields(data, _BATCH_FIELDS)  # the webhook: _webhook_input
    if "targets" not in data:
        raise ApiError(
            400,
            "targets is missing",
            'send {"targets": [{"url": "https://example.org/"}]}',
            field="targets",
        )
    items = data["targets"]
    if not isinstance(items, list):
        raise ApiError(
            400,
            f"targets must be an array (got {_type_name(items)})",
            'send {"targets": ["https://example.org/", {"url": "https://example.org/b"}]}',
            field="targets",
        )
    targets = [parse_target(item, f"targets[{i}]", bare=True) for i, item in enumerate(items)]
    robots = data.get("robots")
    if robots is None:
        return targets
    if not isinstance(robots, bool):
        raise ApiError(
            400,
            f"robots must be true or false (got {_type_name(robots)})",
            "send true to obey each site's robots.txt, false not to",
            field="robots",
        )
    return [
        t
        if t.options.robots is not None
        else Target(t.url, dataclasses.replace(t.options, robots=robots))
        for t in targets
    ]


_BATCH_FIELDS = ("targets", "webhook", "concurrency", "robots")


def whole(value: object) -> int | None:
    """A JSON whole number as an int (``3`` or ``3.0``, as JSON Schema's integer is); None
    for anything else (a boolean, a fraction, a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def parse_concurrency(data: object, most: int, default: int = 1) -> int:
    """The submit body's ``concurrency`` (``default`` when absent): targets of the job at once."""
    raw = data.get("concurrency", default) if isinstance(data, dict) else default
    value = whole(raw)
    if value is None or not 1 <= value <= most:
        raise ApiError(
            400,
            f"concurrency must be a whole number from 1 to {most} (got {shown(json.dumps(raw))})",
            f"send a concurrency from 1 to {most}; the server's operator sets the most with "
            "--max-concurrency",
            field="concurrency",
        )
    return value


def check_target(
    target: Target,
    where: str,
    *,
    precheck: PrecheckFunc,
    check_options: OptionsCheckFunc | None,
) -> None:
    """Run the URL pre-check and the options check; a ``TargetError`` from either is a 400.

    ``where`` empty: the fields are ``url`` and ``options`` themselves (a crawl's body).
    """
    url_field, options_field = (f"{where}.url", f"{where}.options") if where else ("url", "options")
    try:
        precheck(target.url)
    except TargetError as exc:
        raise ApiError(400, f"{url_field}: {exc.msg}", exc.hint, field=url_field) from None
    if check_options is not None:
        try:
            check_options(target.options)
        except TargetError as exc:
            raise ApiError(
                400, f"{options_field}: {exc.msg}", exc.hint, field=options_field
            ) from None


def query_int(request: Request, name: str, default: int | None, lo: int) -> int | None:
    """The whole-number query parameter ``name``, from ``lo`` to ``MAX_INT`` (``default`` when
    it is absent; an empty one is a 400, as the OpenAPI document says)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not lo <= int(raw) <= MAX_INT:
        raise ApiError(
            400,
            f"{name} must be a whole number from {lo} to {MAX_INT} (got {raw[:40]!r})",
            f"send digits only, like {name}={lo}, or leave {name} out",
            field=name,
        )
    return int(raw)


def query_flag(request: Request, name: str) -> bool:
    """The query flag ``name``: ``1``/``true`` or ``0``/``false``/absent (not empty)."""
    raw = request.query_params.get(name, "0").lower()
    if raw in ("1", "true"):
        return True
    if raw in ("0", "false"):
        return False
    raise ApiError(
        400,
        f"{name} must be 1 or 0 (got {raw[:40]!r})",
        f"send {name}=1 to turn it on; leave it out for off",
        field=name,
    )


def query_states(request: Request) -> set[str] | None:
    """The target states listed in ``state`` (comma-separated), or None for all (no ``state``;
    an empty one is a 400, as the OpenAPI document says)."""
    raw = request.query_params.get("state")
    if raw is None:
        return None
    states = {s.strip() for s in raw.split(",")}
    allowed = [s.value for s in TargetState]
    bad = sorted(states.difference(allowed))
    if bad:
        raise ApiError(
            400,
            f"state must be one or more of {', '.join(allowed)}, comma-separated "
            f"(got {bad[0][:40]!r})",
            "for example state=failed, or state=done,failed",
            field="state",
        )
    return states
