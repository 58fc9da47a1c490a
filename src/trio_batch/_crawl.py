"""A crawl: a job whose targets grow by following links (issue 38; SPEC amendment in docs/spec.md).

:class:`CrawlSpec` is what a caller asks for: a start URL, how many pages to store (``limit``,
pages stored ``done``; failed pages are recorded but do not count), how deep to follow links
(``max_depth``: the start page is depth 0), where links may go (``scope``), which paths
(``include``/``exclude``, globs), whether the site's sitemaps seed it, the options every page is
fetched with, and how many pages may be fetched at once. The engine admits it as a job of its
seeds; each page's links are judged by the crawl's rules (``_crawl_rules``) and the ones kept
(:class:`Found`) are admitted in the same store write as the page's outcome, deduplicated by
their canonical form within the job. What is not followed is counted by reason
(:data:`SKIP_REASONS`): nothing is dropped silently.

The engine knows nothing of HTTP: a page's links come in its result's ``meta["links"]`` (the web
fetcher's ``links`` format), its final URL after redirects in ``meta["url"]`` and its
``rel=canonical`` in ``meta["metadata"]["canonical"]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Final, Literal, final

from ._model import JSONValue, Options

CrawlScope = Literal["host", "domain", "prefix"]
SitemapUse = Literal["include", "skip", "only"]

REDIRECT_SCOPE: ContextVar[Callable[[str], bool] | None] = ContextVar(
    "trio_batch_redirect_scope", default=None
)
"""While the engine fetches a crawl's page: whether a URL is in the crawl's scope. A fetch that
follows redirects asks it before each hop and does not follow one that leaves the scope (the web
fetcher answers the redirect itself, its ``Location`` in ``meta["redirect"]``), so a crawl sends
no request off its scope; the engine then drops the page, counted skipped ``scope``."""

SKIP_REASONS: Final = ("depth", "scope", "pattern", "robots", "trap", "limit", "duplicate")
"""Why a URL a crawl found was not fetched, the keys of a crawl's ``skipped`` counts."""

MAX_PATTERNS: Final = 32
"""Most ``include`` or ``exclude`` patterns a crawl may have."""
MAX_PATTERN_CHARS: Final = 200
"""Longest pattern."""
MAX_DEPTH: Final = 64
"""Deepest ``max_depth``."""
CRAWL_WINDOW: Final = 256
"""A crawl's pending targets an engine holds at once (it reads on as they run): the frontier
lives in the store, whatever the crawl's size."""
FRONTIER_FACTOR: Final = 4
"""A crawl admits at most this many times its ``limit`` of targets (at least ``limit + 1000``);
what it finds past that is skipped as ``limit``: a bound on the store, whatever the site."""


@final
@dataclass(frozen=True, slots=True)
class CrawlSpec:
    """What a crawl fetches: see the module's docstring for each field.

    ``prefix`` is the path prefix a ``scope="prefix"`` crawl stays under (empty: the start
    URL's directory). Patterns are globs on a URL's path and query (``*`` any characters but
    ``/``, ``**`` any characters, ``?`` one character but ``/``), matched against the whole of
    the URL's canonical path, and its ``?query`` when it has one (``_crawl_rules``: ``/docs/**``
    also matches ``/docs``); a URL must match one ``include`` (when there are any) and no
    ``exclude``. The start page and the
    sitemaps' URLs obey the scope and patterns too.
    """

    url: str
    limit: int = 100
    max_depth: int = 3
    scope: CrawlScope = "host"
    prefix: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    sitemaps: SitemapUse = "skip"
    options: Options = field(default_factory=Options)
    concurrency: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError(f"CrawlSpec.url must be a non-empty string (got {self.url!r})")
        for name, least, most in (("limit", 1, None), ("max_depth", 0, MAX_DEPTH)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"CrawlSpec.{name} must be an integer >= {least} (got {value!r})")
            if most is not None and value > most:
                raise ValueError(f"CrawlSpec.{name} must be at most {most} (got {value!r})")
        if self.scope not in ("host", "domain", "prefix"):
            raise ValueError(
                f"CrawlSpec.scope must be 'host', 'domain' or 'prefix' (got {self.scope!r})"
            )
        if self.sitemaps not in ("include", "skip", "only"):
            raise ValueError(
                f"CrawlSpec.sitemaps must be 'include', 'skip' or 'only' (got {self.sitemaps!r})"
            )
        if not isinstance(self.prefix, str):
            raise TypeError("CrawlSpec.prefix must be a string")
        for name in ("include", "exclude"):
            patterns = getattr(self, name)
            if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
                raise TypeError(f"CrawlSpec.{name} must be a sequence of strings")
            object.__setattr__(self, name, tuple(patterns))
            if len(patterns) > MAX_PATTERNS:
                raise ValueError(f"CrawlSpec.{name} has {len(patterns)} patterns; at most 32")
            if any(not p or len(p) > MAX_PATTERN_CHARS for p in patterns):
                raise ValueError(f"CrawlSpec.{name} patterns must be 1 to 200 characters long")
        if not isinstance(self.options, Options):
            raise TypeError("CrawlSpec.options must be a trio_batch.Options")
        value = self.concurrency
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"CrawlSpec.concurrency must be an integer >= 1 (got {value!r})")

    @property
    def frontier_cap(self) -> int:
        """Most targets the crawl admits (:data:`FRONTIER_FACTOR`)."""
        return max(self.limit * FRONTIER_FACTOR, self.limit + 1000)

    def to_json(self) -> str:
        """The spec as stored with its job (the options as their own JSON)."""
        data: dict[str, JSONValue] = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("options", "include", "exclude")
        }
        data["include"] = list(self.include)
        data["exclude"] = list(self.exclude)
        data["options"] = self.options.to_json()
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CrawlSpec:
        """The spec :meth:`to_json` stored."""
        data = json.loads(text)
        options = Options.from_json(data.pop("options", {}))
        data["include"] = tuple(data.get("include", ()))
        data["exclude"] = tuple(data.get("exclude", ()))
        return cls(options=options, **data)


@final
@dataclass(frozen=True, slots=True)
class Found:
    """A URL a crawl will fetch: where, under which key it is deduplicated, how deep, and the
    index of the page that found it (-1 for a seed)."""

    url: str
    key: str
    depth: int
    parent: int = -1


@final
@dataclass(frozen=True, slots=True)
class CrawlInfo:
    """A crawl as its job's answer shows it (``crawl``): the spec's bounds, the pages stored
    done, and what was skipped, by reason (every key of :data:`SKIP_REASONS`)."""

    limit: int
    max_depth: int
    done: int
    skipped: Mapping[str, int]

    def to_json(self) -> dict[str, JSONValue]:
        """The answer's ``crawl`` object."""
        return {
            "limit": self.limit,
            "max_depth": self.max_depth,
            "done": self.done,
            "skipped": {reason: int(self.skipped.get(reason, 0)) for reason in SKIP_REASONS},
        }


def crawl_key(caller: str, spec: CrawlSpec, seeds: Sequence[Found]) -> str:
    """A crawl's idempotency key (SPEC §3.1's, for a crawl): the caller, the spec, the seeds."""
    text = "\x00".join([caller, "crawl", spec.to_json(), *(seed.url for seed in seeds)])
    return hashlib.sha256(text.encode()).hexdigest()
