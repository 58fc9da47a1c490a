"""The body of ``POST /v1/crawl`` (issue 38): a :class:`~trio_batch.CrawlSpec` and its webhook.

Each refusal is a 400 naming the field at fault (``limit``, ``include[2]``, ``options.mode``)
with a hint saying what to send instead. The options are a batch target's (``_parse``), the
``concurrency`` and the ``webhook`` a batch's: the same checks, the same words.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Final, TypeVar

from .._crawl import MAX_DEPTH, MAX_PATTERN_CHARS, MAX_PATTERNS, CrawlScope, CrawlSpec, SitemapUse
from .._crawl_rules import CrawlRules
from .._headers import is_secret
from .._model import Target
from ._errors import ApiError
from ._parse import (
    OptionsCheckFunc,
    PrecheckFunc,
    check_fields,
    check_target,
    check_text,
    parse_concurrency,
    parse_options,
    shown,
    whole,
)

CRAWL_FIELDS: Final = (
    "url",
    "limit",
    "max_depth",
    "scope",
    "prefix",
    "include",
    "exclude",
    "sitemaps",
    "concurrency",
    "options",
    "webhook",
)
"""The fields of a ``POST /v1/crawl`` body (the webhook: ``_webhook_input``)."""

SCOPES: Final[tuple[CrawlScope, ...]] = ("host", "domain", "prefix")
SITEMAP_USES: Final[tuple[SitemapUse, ...]] = ("include", "skip", "only")
W = TypeVar("W", bound=str)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CrawlSpec)}
_EXAMPLE = '{"url": "https://example.org/docs/", "limit": 100}'


def parse_crawl(
    body: object,
    *,
    max_pages: int,
    max_concurrency: int,
    default_concurrency: int,
    precheck: PrecheckFunc,
    check_options: OptionsCheckFunc | None,
) -> CrawlSpec:
    """The crawl a ``POST /v1/crawl`` body asks for (its ``webhook`` is read apart).

    ``max_pages`` is the most a ``limit`` may be (``serve --max-crawl-pages``); a body without
    ``limit`` gets ``CrawlSpec``'s (100), or ``max_pages`` if less; one without ``concurrency``
    gets ``default_concurrency``.

    Raises:
        ApiError: 400 naming the field at fault.
    """
    if not isinstance(body, dict):
        raise ApiError(
            400,
            "the body must be a JSON object with a url",
            f"send {_EXAMPLE}",
            field="body",
        )
    check_fields(body, CRAWL_FIELDS)
    url = body.get("url")
    if not isinstance(url, str) or not url:
        raise ApiError(
            400,
            "url must be a non-empty string" + (" (got none)" if "url" not in body else ""),
            f"send the page the crawl starts from, as in {_EXAMPLE}",
            field="url",
        )
    check_text("url", url)
    limit = _whole(
        body,
        "limit",
        min(_default("limit"), max_pages),
        1,
        max_pages,
        f"pages to store; at most {max_pages:,}, the server's max_crawl_pages setting "
        "(serve --max-crawl-pages, or TRIO_BATCH_MAX_CRAWL_PAGES)",
    )
    max_depth = _whole(
        body,
        "max_depth",
        _default("max_depth"),
        0,
        MAX_DEPTH,
        "links followed from the start page (0: the start page alone)",
    )
    scope = _word(body, "scope", SCOPES, "host")
    sitemaps = _word(body, "sitemaps", SITEMAP_USES, "skip")
    prefix = body.get("prefix", "")
    if not isinstance(prefix, str) or len(prefix) > MAX_PATTERN_CHARS:
        raise ApiError(
            400,
            f"prefix must be a path of at most {MAX_PATTERN_CHARS} characters",
            'send a path such as "/docs/", with "scope": "prefix"',
            field="prefix",
        )
    check_text("prefix", prefix)
    if prefix and scope != "prefix":
        raise ApiError(
            400,
            f"prefix is only for scope prefix (the scope is {scope})",
            'send "scope": "prefix" with it, or leave prefix out',
            field="prefix",
        )
    include = _patterns(body, "include")
    exclude = _patterns(body, "exclude")
    options = parse_options(body.get("options", {}), "options")
    for name in options.headers or {}:
        if is_secret(name):  # sealed for one URL (``_headers``): a crawl's pages have others
            raise ApiError(
                400,
                f"options.headers.{shown(name)}: a crawl cannot send credentials (Cookie, "
                "Authorization)",
                "leave the credential out of a crawl, or submit the pages as a batch "
                "(POST /v1/batch), each target with its header",
                field=f"options.headers.{shown(name)}",
            )
    concurrency = parse_concurrency(body, max_concurrency, default_concurrency)
    check_target(Target(url, options), "", precheck=precheck, check_options=check_options)
    spec = CrawlSpec(
        url,
        limit=limit,
        max_depth=max_depth,
        scope=scope,
        prefix=prefix,
        include=include,
        exclude=exclude,
        sitemaps=sitemaps,
        options=options,
        concurrency=concurrency,
    )
    try:
        CrawlRules(spec)
    except ValueError:
        raise ApiError(
            400,
            "url cannot be crawled",
            "send an http or https URL with a host and no user@ part, at most 2,048 characters",
            field="url",
        ) from None
    return spec


def _default(name: str) -> int:
    value = _DEFAULTS[name]
    assert isinstance(value, int)
    return value


def _whole(
    body: dict[str, object], name: str, default: int, least: int, most: int, what: str
) -> int:
    raw = body.get(name, default)
    value = whole(raw)
    if value is None or not least <= value <= most:
        raise ApiError(
            400,
            f"{name} must be a whole number from {least} to {most:,} "
            f"(got {shown(json.dumps(raw))})",
            f"send {name} from {least} to {most:,} ({what}), or leave it out for {default}",
            field=name,
        )
    return value


def _word(body: dict[str, object], name: str, words: tuple[W, ...], default: W) -> W:
    raw = body.get(name, default)
    for word in words:
        if raw == word:
            return word
    got = shown(raw) if isinstance(raw, str) else shown(json.dumps(raw))
    raise ApiError(
        400,
        f"{name} must be one of {', '.join(words)} (got {got})",
        f'send "{name}": "{default}" or another of them, or leave it out for {default}',
        field=name,
    )


def _patterns(body: dict[str, object], name: str) -> tuple[str, ...]:
    raw = body.get(name, [])
    example = '["/docs/**"]' if name == "include" else '["**/print/**"]'
    if not isinstance(raw, list):
        raise ApiError(
            400,
            f"{name} must be an array of path globs",
            f"send globs such as {example}, or leave {name} out",
            field=name,
        )
    if len(raw) > MAX_PATTERNS:
        raise ApiError(
            400,
            f"{name} has {len(raw)} patterns; a crawl may have at most {MAX_PATTERNS}",
            f"merge patterns with ** globs, such as {example}",
            field=name,
        )
    for i, pattern in enumerate(raw):
        if not isinstance(pattern, str) or not 1 <= len(pattern) <= MAX_PATTERN_CHARS:
            raise ApiError(
                400,
                f"{name}[{i}] must be a glob of 1 to {MAX_PATTERN_CHARS} characters",
                f"send globs on the path such as {example} (* within a segment, ** across)",
                field=f"{name}[{i}]",
            )
        check_text(f"{name}[{i}]", pattern)
    return tuple(raw)
